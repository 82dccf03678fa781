"""What a change can gain at most, read from a measured process's own splits, before any process is spent on it.

A change whose effect is confined to one split of the step (``perftune.knobs.Knob.confined``: a data-pipeline knob
to the step's wait for data) can at most remove that split: its ceiling is ``step / (step - split)``.  A ceiling
below ``1 + decision.min_gain`` cannot pay for a race: the change is ``cannot gain`` there, with the ceiling in
words, and tried on the stack once a stack row's own splits raise it (graph mode making the step data-bound).
Changes not confined to a split are always raced.  The same splits order the singles: each group of knobs by the
share of the step it can reach, highest first.

The split is the larger of the burst's timed wait and the profile's (``Splits.data_ms``), so a ceiling is never
lower than either measurement says.  On a CPU a data knob can also free cores for the step (fewer pipeline threads);
the ceiling counts the wait alone, the rule the practitioners' guide gives ("profile first, then tune the phase the
step waits on").
"""

from __future__ import annotations

from typing import Any, Optional

from perftune import knobs
from perftune.io.plan import DecisionRule
from perftune.io.records import TrialResult
from perftune.io.sweep_records import KnobCeiling, OrderRule

#: the groups of ``perftune.knobs`` in the order they are raced when the baseline's splits cannot say
GROUPS = ("compute", "data", "distributed")


def split_ms(result: TrialResult, split: str) -> Optional[float]:
    """The milliseconds of ``split`` in ``result``'s step: the larger of the timed and the profiled measure."""
    splits = result.profile.splits if result.profile is not None else None
    if split == "data":
        measures = [result.data_wait_ms_median, splits.data_ms if splits is not None else None]
    else:
        measures = [splits.communication_ms if splits is not None else None]
    known = [m for m in measures if m is not None]
    return max(known) if known else None


def ceiling(changes: dict[str, Any], result: Optional[TrialResult], where: str = "baseline") -> Optional[KnobCeiling]:
    """The ceiling of ``changes`` on the process ``result`` (None: not confined to one split, or nothing measured)."""
    confined = {knobs.confined(name) for name in changes}
    if len(confined) != 1 or None in confined or result is None or result.status != "ok":
        return None
    split = confined.pop()
    step, part = result.step_ms_median, split_ms(result, split)
    if not step or part is None:
        return None
    top = step / (step - part) if part < step else None
    return KnobCeiling(label=knobs.label_of(changes), changes=dict(changes), split=split, split_ms=part,
                       step_ms=step, ceiling=top, where=where)


def judged(changes: dict[str, Any], on: Optional[TrialResult], where: str,
           decision: DecisionRule) -> Optional[KnobCeiling]:
    """``changes``' ceiling on ``on`` with whether it is raced there (``decision.skip_cannot_gain``, ``min_gain``);
    None for a change not confined to one split (always raced)."""
    c = ceiling(changes, on, where)
    if c is not None:
        c.raced = not decision.skip_cannot_gain or c.ceiling is None or c.ceiling >= 1 + decision.min_gain
    return c


def group_shares(result: Optional[TrialResult]) -> dict[str, float]:
    """The share of ``result``'s step each group of knobs can reach: data its wait for data, distributed its
    communication, compute the rest (empty: nothing measured)."""
    if result is None or result.status != "ok" or not result.step_ms_median:
        return {}
    step = result.step_ms_median
    data, comm = (min(split_ms(result, s) or 0.0, step) for s in ("data", "communication"))
    return {"compute": max(step - data - comm, 0.0) / step, "data": data / step, "distributed": comm / step}


def order_singles(singles: list[dict[str, Any]], first: Optional[TrialResult]) -> tuple[list[dict[str, Any]],
                                                                                        OrderRule]:
    """The singles in the order they are raced, and the rule as data: the built-in knobs by the share of the
    baseline's step their group can reach, highest first; the plan's own knobs after them, in plan order."""
    shares = group_shares(first)
    # a tie goes to data: its share bounds a data knob's gain, while no compute knob removes all of the compute
    ranked = sorted(GROUPS, key=lambda g: (-shares[g], g != "data")) if shares else list(GROUPS)

    def rank(change: dict[str, Any]) -> int:
        name = next(iter(change))
        return ranked.index(knobs.KNOBS[name].group) if name in knobs.KNOBS else len(ranked)

    rule = OrderRule(data_share=shares.get("data"), first=ranked[0], shares=shares, groups=ranked)
    return sorted(singles, key=rank), rule
