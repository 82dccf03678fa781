"""The splits' warnings, intervals and by-time share in words: the one place that words ``Splits.warnings``
(stored as data by ``perftune.profile.splits``), for the run summary and the HTML report."""

from __future__ import annotations

from perftune.io.records import Splits, SplitWarning


def warning_text(w: SplitWarning) -> str:
    """One warning in words, its figures in the units the record keeps (ms per step, factors)."""
    f = w.figures
    if w.kind == "launch_steps":
        return (f"the ops' launches split into {f['launch_steps']:g} steps, not the {f['profiled_steps']:g} "
                "profiled ones: the profile does not cover whole steps")
    if w.kind == "ops_overlap":
        return (f"op time {f['op_ms']:.3f} ms exceeds the profiled steps' own compute {f['profiled_ms']:.3f} ms "
                "(ops overlap, or a collective waits for a peer); squeezed into it")
    if w.kind in ("profiled_slower", "profiled_faster"):
        slower = w.kind == "profiled_slower"
        factor = 1 / f["op_scale"] if slower else f["op_scale"]
        why = ("profiler overhead: every launch is recorded" if slower else
               "the timed steps waited for something the profiled ones did not: contention or an asynchronous queue")
        return (f"op phases scaled by {f['op_scale']:.3f}: the profiled steps' compute {f['profiled_ms']:.3f} ms ran "
                f"x{factor:.2f} {'slower' if slower else 'faster'} than the timed steps' {f['timed_ms']:.3f} ms "
                f"({why})")
    if w.kind == "op_scale_far":
        return (f"profiled and timed steps differ by more than x{f['limit']:.2f}: each phase is only known to lie "
                "in its range; compare phases of two trials by their ranges")
    if w.kind == "ops_exceed_step":
        return (f"op phases scaled by {f['budget_ms'] / f['op_ms']:.3f}: op time {f['op_ms']:.3f} ms > step - data "
                f"{f['budget_ms']:.3f} ms and no profiled step time to tell profiler overhead from overlapping ops")
    return f"{w.kind}: {', '.join(f'{k} {v:g}' for k, v in f.items())}"


def split_notes(s: Splits) -> list[str]:
    """Every note on one trial's splits, in words (results written before ``warnings`` carry a cause in words)."""
    notes = [warning_text(w) for w in s.warnings]
    if not s.warnings and s.op_scale_cause:
        notes.append(f"op phases scaled by {s.op_scale:.3f}: {s.op_scale_cause}")
    if s.by_time_share:
        notes.append(f"{s.by_time_share:.0%} of the step has its phase from where its ops ran in the step (their "
                     "names and types do not say)")
    if s.phase_ranges and any(w.kind == "op_scale_far" for w in s.warnings):
        notes.append("ranges (ms): " + ", ".join(f"{p} {lo:.2f}-{hi:.2f}" for p, (lo, hi) in s.phase_ranges.items()))
    return notes
