"""Which changes are tried in what order: the singles by the baseline's bottleneck, the stack by measured gain."""

from __future__ import annotations

from typing import Any, Optional

from perftune import knobs
from perftune.io.records import DATA_BOUND_SHARE, TrialResult
from perftune.io.sweep_records import OrderRule, SweepTrial


def singles_by_bottleneck(singles: list[dict[str, Any]],
                          first: Optional[TrialResult]) -> tuple[list[dict[str, Any]], OrderRule]:
    """The singles in the order they are raced, and the rule as data: if the baseline's first process waited for
    data at least ``DATA_BOUND_SHARE`` of the step, the data-pipeline knobs first, else the compute knobs (then the
    rest in plan order)."""
    data_share = None
    if first is not None and first.status == "ok" and first.step_ms_median:
        data_share = (first.data_wait_ms_median or 0) / first.step_ms_median
    data_bound = data_share is not None and data_share >= DATA_BOUND_SHARE
    group = knobs.in_group("data" if data_bound else "compute")
    rule = OrderRule(data_share=data_share, threshold=DATA_BOUND_SHARE, first="data" if data_bound else "compute")
    return sorted(singles, key=lambda c: 0 if next(iter(c)) in group else 1), rule


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
