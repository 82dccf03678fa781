"""Known no-ops: a change the burst itself says did nothing is never a win, whatever its timing says.

On a noisy machine a knob that MindSpore accepts and ignores (``dataset_sink_mode`` on CPU) can time "faster" by
chance; recommending it would be a false result that perftune had the evidence to avoid.  Two kinds of evidence:
the burst's notes ("... has no effect ...") and its read-back of what MindSpore reports after applying the knobs
(``TrialResult.applied``), for the knobs whose read-back is the value itself.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from perftune import knobs
from perftune.io.records import TrialResult

#: knob -> the read-back ``applied[knob]`` expected for a requested value (only knobs read back as the value itself;
#: a read-back that is absent or None says nothing)
READ_BACK: dict[str, Callable[[Any], Any]] = {
    "mode": lambda v: v,
    "jit_level": lambda v: v,
    "graph_kernel": lambda v: v != "off",
    "num_parallel_workers": lambda v: v,
    "prefetch_size": lambda v: v,
    "python_multiprocessing": lambda v: v,
    "drop_remainder": lambda v: v,
    "parallel_mode": lambda v: v,
    "gradients_mean": lambda v: v,
    "search_mode": lambda v: v,
}


def no_effect_reasons(changes: dict[str, Any], result: TrialResult) -> list[str]:
    """Why some of ``changes`` cannot have changed anything in ``result``; empty when nothing says so."""
    reasons = [n.text for n in result.notes if n.kind == "no_effect" and n.knob in changes]
    for knob, value in changes.items():
        expect = READ_BACK.get(knob)
        seen = result.applied.get(knob)
        if expect is not None and seen is not None and seen != expect(value):
            reasons.append(f"{knob}={_fmt(value)} was not applied: MindSpore reports {knob}={_fmt(seen)} after "
                           f"the burst set it")
    return reasons


def model_mismatch(changes: dict[str, Any], result: TrialResult, reference: Optional[TrialResult]) -> str:
    """Why the trial is not the model its label says, or "": a change of built-in knobs alone (none of which changes
    the network's parameters) whose trial counts other parameters than its reference (a ``value_map`` that swaps
    whole config files runs another model under the knob's name)."""
    if reference is None or not changes or not all(k in knobs.KNOBS for k in changes):
        return ""
    ours, theirs = result.parameter_count, reference.parameter_count
    if ours is None or theirs is None or ours == theirs:
        return ""
    return (f"the model differs: {ours:,} parameters against the reference's {theirs:,}, yet "
            f"{', '.join(sorted(changes))} should not change the model (does a value_map hand the script another "
            "model's config?)")


def _fmt(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)
