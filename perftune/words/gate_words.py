"""The accuracy gate's judgement of one candidate in words: each figure against the baseline's seeds, why a candidate
is refused, which metrics cannot judge, and what a pass must add.

The engine (``perftune.engine.accuracy.gate``) decides from the figures and takes its reasons from here, so a
verdict, the summary and the report say one thing one way.
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence

from perftune.io.accuracy_window import CURVE
from perftune.io.records import Accuracy


class Judged(Protocol):
    """One figure judged against the baseline's seeds (``perftune.engine.accuracy.seed_band.Judgement``)."""

    @property
    def name(self) -> str: ...
    @property
    def value(self) -> float: ...
    @property
    def mean(self) -> float: ...
    @property
    def sd(self) -> float: ...
    @property
    def n(self) -> int: ...
    @property
    def limit(self) -> float: ...
    @property
    def tolerance(self) -> float: ...
    @property
    def outcome(self) -> str: ...
    @property
    def spreads(self) -> Optional[float]: ...  # seed spreads worse (None: uncalibrated)
    @property
    def change(self) -> Optional[float]: ...  # relative to the seeds' mean


def figure_label(name: str) -> str:
    """``train_loss@640`` as ``training loss at 640 samples``; any other figure by its name."""
    return f"training loss at {name[len(CURVE):]} samples" if name.startswith(CURVE) else name


def judgement_text(j: Judged) -> str:
    """The figure, the baseline's band and the answer in one clause."""
    what = figure_label(j.name)
    rel = f"{j.change:+.1%}" if j.change is not None else "n/a"
    if j.outcome == "uncalibrated":
        return (f"{what} {j.value:.4g} vs baseline {j.mean:.4g}: {rel} (uncalibrated: its seed spread could "
                f"not be measured{identical_seeds_text(j.n)}, judged by the {j.tolerance:.1%} tolerance alone)")
    band = f"baseline seeds {j.mean:.4g} +- {j.sd:.2g} (sd of {j.n})"
    z = j.spreads or 0.0
    head = f"{what} {j.value:.4g} vs {band}: {rel}, {abs(z):.1f} seed spreads {'worse' if z > 0 else 'better'}"
    if j.outcome == "worse":
        return f"{head} (seed noise explains up to {j.limit:.4g})"
    if j.outcome == "unseparated":
        return (f"{head}: beyond the {j.tolerance:.1%} tolerance of the baseline's own run but within seed "
                f"noise (up to "
                f"{j.limit:.4g}); the seeds cannot separate it (more accuracy.seeds would)")
    return head


def identical_seeds_text(n: int) -> str:
    """Why ``n`` >= 2 seed runs without spread happen and what fixes it (empty for one seed run)."""
    if n < 2:
        return ""
    return (f": the {n} seed runs trained identically; does the workload seed MindSpore itself? build() must not call "
            "mindspore.set_seed (its seed argument is the data seed, the same in every run): perftune seeds "
            "MindSpore and NumPy for each run itself (a script gets each run's seed through workload.seed_arg)")


def seed_refusal_text(worse: Sequence[Judged]) -> str:
    """A refusal by the seeds: the first of ``worse`` (the figure to name), and how many more are worse."""
    more = f"; {len(worse) - 1} more figure(s) worse" if len(worse) > 1 else ""
    return judgement_text(worse[0]) + more


def pass_notes(judgements: Sequence[Judged], updates: str) -> list[str]:
    """What a passing verdict must add: figures the seeds could not separate from the tolerance, figures they could
    not calibrate (never silently passed); ``updates``: ``updates_clause``, said with every figure."""
    notes = [judgement_text(j) for j in judgements if j.outcome == "unseparated"]
    uncalibrated = [figure_label(j.name) for j in judgements if j.outcome == "uncalibrated"]
    if uncalibrated:
        runs = max((j.n for j in judgements if j.outcome == "uncalibrated"), default=0)
        notes.append(f"uncalibrated (no seed spread{identical_seeds_text(runs)}): {', '.join(uncalibrated)}, judged "
                     "by the fixed tolerance")
    return [n + updates for n in notes]


def updates_clause(baseline: Accuracy, candidate: Accuracy) -> str:
    """What was compared when the updates differ: equal samples seen, but fewer or more optimizer updates."""
    if candidate.updates is None or baseline.updates is None or candidate.updates == baseline.updates:
        return ""
    rule = f", learning rate x{candidate.lr_scale:.3g}" if candidate.lr_scale != 1.0 else ", same learning rate"
    return (f"; compared at {candidate.samples_seen} samples seen: {candidate.updates} optimizer updates vs the "
            f"baseline's {baseline.updates}{rule}")


NOT_MEASURED = "no accuracy was measured"


def nonfinite_text(updates: str) -> str:
    return f"NaN/Inf in the loss or gradients{updates}"


def not_comparable_text(baseline: Accuracy, candidate: Accuracy) -> str:
    return (f"measured after {candidate.samples_seen} samples, the baseline after {baseline.samples_seen}: not "
            "comparable")


def missing_text(metric: str, updates: str) -> str:
    return f"{metric} is missing{updates}"


def tolerance_text(metric: str, baseline: Accuracy, candidate: Accuracy, change: float, tol: float,
                   updates: str) -> str:
    """A figure worse than the plan's fixed relative tolerance (no seed runs)."""
    return (f"{metric} {getattr(candidate, metric):.4g} vs baseline {getattr(baseline, metric):.4g}: +{change:.1%} "
            f"(tolerance {tol:.1%}){updates}")


def script_metric_text(name: str, baseline: float, candidate: float, change: float, tol: float, lower: bool,
                       samples: Optional[int]) -> str:
    """A script's own validation figure worse than the tolerance, in its own direction."""
    return (f"the script's {name} {candidate:.4g} vs baseline {baseline:.4g}: {change:+.1%} (tolerance {tol:.1%} "
            f"{'up' if lower else 'down'}, at {samples} samples seen)")


def repetition_text(baseline: Accuracy, candidate: Accuracy, rise: float, tol: float, updates: str) -> str:
    return (f"repetition rate of a greedy sample {candidate.repetition_rate:.2f} vs {baseline.repetition_rate:.2f} "
            f"(+{rise:.2f}, tolerance {tol:.2f}){updates}")


def grad_norm_text(baseline: Accuracy, candidate: Accuracy, factor: float, updates: str) -> str:
    return (f"gradient norm blew up: max {candidate.max_grad_norm:.3g} vs baseline {baseline.max_grad_norm:.3g} "
            f"(limit x{factor:g}){updates}")


def _train_further(baseline: Accuracy) -> str:
    return (f"raise accuracy.samples (now {baseline.samples_seen} samples seen) so that the baseline trains "
            "further")


def repetition_cannot_judge(baseline: Accuracy, tol: float) -> str:
    """The baseline's greedy sample repeats so much that no trial can exceed it by the tolerance."""
    return (f"repetition_rate cannot judge at this burst length: the baseline's greedy sample already repeats "
            f"{baseline.repetition_rate:.2f} of its 3-grams, so no trial can exceed it by the tolerance +{tol:.2f}; "
            f"{_train_further(baseline)}")


def loss_cannot_judge(metric: str, baseline: Accuracy, initial: float, final: float, tol: float) -> str:
    """The baseline's loss fell so little that a trial that learnt nothing would pass."""
    return (f"{metric} cannot judge at this burst length: the baseline's training loss went from {initial:.4g} to "
            f"{final:.4g} ({final / initial - 1:+.1%}) over {baseline.samples_seen} samples, so a trial that "
            f"learnt nothing would still be within the {tol:.1%} tolerance; {_train_further(baseline)}")
