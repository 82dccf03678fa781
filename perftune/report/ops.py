"""Top operators per trial, one row per operator type (``Default/Conv2D-op9`` and ``Conv2D-op12`` are one
``Conv2D`` row), with calls and time per step: what a reader compares between trials."""

from __future__ import annotations

from perftune.io.records import ProfileSummary, TopOpType
from perftune.profile.splits import op_type_of


def _from_instances(profile: ProfileSummary) -> list[TopOpType]:
    """Results written before ``top_op_types`` existed: aggregate the stored top instances (a partial view)."""
    steps = max(profile.profiled_steps, 1)
    by_type: dict[str, dict] = {}
    for op in profile.top_ops:
        row = by_type.setdefault(op_type_of(op.name, op.op_type), {"calls": 0, "ms": 0.0, "share": 0.0, "phases": {}})
        row["calls"] += op.count
        row["ms"] += op.total_ms
        row["share"] += op.share
        row["phases"][op.phase] = row["phases"].get(op.phase, 0.0) + op.total_ms
    out = [TopOpType(op_type=t, phases=sorted(r["phases"], key=lambda p: -r["phases"][p]),
                     calls_per_step=r["calls"] / steps, ms_per_step=r["ms"] / steps, share=r["share"])
           for t, r in by_type.items()]
    return sorted(out, key=lambda t: -t.ms_per_step)


def top_op_rows(profile: ProfileSummary, n: int) -> tuple[list[dict], str]:
    """(rows for the report's table, where they come from)."""
    if profile.top_op_types:
        types, source = profile.top_op_types, "every op of the profiled steps"
    else:
        types, source = _from_instances(profile), "the trial's top op instances only (results from an older perftune)"
    rows = [{"op_type": t.op_type, "phases": ", ".join(t.phases), "calls": f"{t.calls_per_step:g}",
             "ms_per_step": f"{t.ms_per_step:.3f}", "share": f"{t.share:.1%}"} for t in types[:n]]
    return rows, source
