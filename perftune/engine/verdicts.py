"""A trial's verdict from its comparison, what the burst said about its knobs, and the accuracy gate.

The precedence is the point: evidence that does not depend on timing outranks timing, which noise can fake.
1. no comparison at all (nothing measured): ``failed``;
2. a known no-op (``perftune.engine.noop``): ``no effect``, however fast it timed;
3. the comparison: ``faster`` by at least ``min_gain`` and a discovery across the sweep (Benjamini-Hochberg) is
   ``kept``; ``slower`` likewise is ``slower``; a significant change that is too small or not a discovery is
   ``not significant``; ``equivalent``; an open comparison at the budget is ``undecided``;
4. an accuracy failure is the verdict whatever the speed (the speed verdict stays in the reason).
"""

from __future__ import annotations

from typing import Optional

from perftune.engine.accuracy.gate import GateResult
from perftune.engine.stats import Decision, below_min_gain, runs_needed
from perftune.io.sweep_records import ComparisonRecord, Why
from perftune.words.reasons import comparison_text

#: verdicts that the accuracy gate overrides (a faster change that breaks accuracy is handled where it is kept)
GATE_OVERRIDES = ("not significant", "slower", "no effect", "equivalent", "undecided")


def record(d: Decision, reference: str, *, final: bool = True) -> ComparisonRecord:
    """``d`` as stored in results.json.  ``final``: an open comparison is out of budget (``undecided``); otherwise
    (informational comparisons, looked at once) it is ``not significant``."""
    if final:
        verdict = d.outcome if d.outcome != "open" else "undecided"
    else:  # looked at once: faster or slower only beyond the policy's min_gain
        verdict = "equivalent" if d.outcome == "equivalent" else d.verdict
    seen = abs(d.ratio - 1.0)
    target = seen if seen > d.equivalence else d.equivalence  # the change measured, or the margin for "equivalent"
    paired = d.design == "paired"
    c = ComparisonRecord(reference=reference, ratio=d.ratio, ci_low=d.ci_low, ci_high=d.ci_high,
                         p_value=d.p_value, verdict=verdict, df=d.df, processes=d.blocks,
                         reference_processes=d.reference_runs, noise_sd=d.noise_sd, resolution=d.resolution,
                         contended=d.contended + d.remeasured, remeasured=d.remeasured, equivalence=d.equivalence,
                         runs_needed=runs_needed(d.noise_sd, target, d.confidence, d.looks, d.df,
                                                 per_block=1.0 if paired else 1.5)
                         if verdict == "undecided" else None,
                         design="paired" if paired else None, paired_blocks=d.paired.blocks if d.paired else None,
                         block_sd=d.paired.block_sd if d.paired else None,
                         process_sd=d.paired.process_sd if d.paired else None,
                         futile=d.futile and verdict == "undecided")
    c.reason = comparison_text(c)
    return c


def speed_verdict(c: ComparisonRecord, min_gain: float, discovered: bool, family: str,
                  which: str = "vs_baseline") -> tuple[str, Why]:
    """The verdict the timing alone gives, and why (``family`` names the multiplicity rule; ``which``: the trial's
    field holding ``c``)."""
    if c.verdict in ("faster", "slower"):
        if below_min_gain(c.ratio, min_gain):
            return "not significant", Why(comparison=which, below_min_gain=min_gain)
        if not discovered:
            return "not significant", Why(comparison=which, not_discovered=family)
        return ("kept" if c.verdict == "faster" else "slower"), Why(comparison=which)
    return c.verdict, Why(comparison=which)  # equivalent / undecided / not significant


def verdict(c: Optional[ComparisonRecord], no_effect: list[str], gate: Optional[GateResult], *, min_gain: float,
            discovered: bool = True, family: str = "the sweep", which: str = "vs_baseline") -> tuple[str, Why]:
    """(verdict, why) of a measured trial; see the module docstring for the order."""
    if c is None:
        return "failed", Why(failure="no throughput to compare")
    if no_effect:  # before the timing: a known no-op that timed faster is noise, never a win
        name, why = "no effect", Why(no_effect=no_effect[0])
    else:
        name, why = speed_verdict(c, min_gain, discovered, family, which)
    if gate is not None and not gate.ok and (name == "kept" or name in GATE_OVERRIDES):
        # an accuracy failure is never hidden behind a speed verdict: it is the verdict, the speed is the reason
        return "accuracy rejected", why.model_copy(update={"accuracy": gate.reason, "speed": name})
    return name, why
