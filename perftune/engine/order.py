"""Which changes the stack tries, in what order: by measured gain (the singles' order: ``ceilings.py``)."""

from __future__ import annotations

from perftune import knobs
from perftune.io.sweep_records import SweepTrial


def stack_candidates(single_trials: list[SweepTrial], retry_on_stack: bool) -> list[SweepTrial]:
    """Best value of each knob: kept ones by gain, then (``decision.retry_on_stack``) the undecided ones.

    A change that did nothing against a compute-bound baseline can matter once the stack has moved the bottleneck
    (more data workers only help after graph mode made the step fast), so those (not significant, equivalent,
    undecided) are tried on top of the stack too, and so is a data-pipeline change (``Knob.retry_when_slower``)
    that was slower: against a compute-bound baseline its extra threads only take cores from the step (the
    quickstart's 2 workers, x1.12 slower in PyNative, decided by paired processes, x2.1 faster on top of graph mode).
    Other slower changes, accuracy-rejected, failed and no-effect ones are not retried.
    """
    allowed = ("kept", "not significant", "equivalent", "undecided") if retry_on_stack else ("kept",)
    best: dict[str, SweepTrial] = {}
    for t in single_trials:
        knob = next(iter(t.changes), None)
        retried = retry_on_stack and t.verdict == "slower" and knob is not None and knobs.retry_when_slower(knob)
        if (t.verdict not in allowed and not retried) or t.vs_baseline is None:
            continue
        rank = (t.verdict == "kept", t.vs_baseline.ratio)
        if knob not in best or rank > (best[knob].verdict == "kept", best[knob].vs_baseline.ratio):
            best[knob] = t
    return sorted(best.values(), key=lambda t: (t.verdict != "kept", -t.vs_baseline.ratio))
