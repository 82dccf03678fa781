"""The accuracy gate: a faster change is worth nothing if training got worse.

Both sides were measured at the same number of samples seen, from the same initial weights and data order (see
``perftune/burst/phases.py``), so a difference is the change's doing, not more or less training.  Only a worsening
counts: a lower loss is never a rejection.  With the baseline's seed runs (``seeds``), every figure is judged
against their spread (``perftune.engine.seed_band``); without them, by the plan's fixed relative tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

from perftune.engine import seed_band
from perftune.io.plan import ACCURACY_METRICS, AccuracyGate
from perftune.io.records import Accuracy

DEFAULT_REPETITION_TOLERANCE = 0.10  # absolute increase in the share of repeated 3-grams
#: a script metric whose name holds one of these is better when lower
LOWER_IS_BETTER = ("loss", "error", "err", "perplexity", "mse", "mae", "rmse", "wer", "cer")


@dataclass
class GateResult:
    ok: bool
    reason: str = ""
    changes: dict = field(default_factory=dict)  # metric -> relative change (candidate / baseline - 1)
    #: metrics that passed only because the baseline cannot judge them at this burst length (``unjudged``)
    unjudged: dict[str, str] = field(default_factory=dict)  # metric -> why it cannot judge
    #: each figure against the baseline's seeds (empty: no seed runs, the fixed tolerance judged)
    judgements: list[seed_band.Judgement] = field(default_factory=list)
    #: the updates count when batch sizes differ (``_window``): said with every figure the verdict states
    window: str = ""

    def pass_notes(self) -> list[str]:
        """What a passing verdict must add, in words: figures the seeds could not separate from the tolerance, figures
        they could not calibrate (never silently passed; the metrics the baseline cannot judge are ``unjudged``)."""
        if not self.ok:
            return []
        notes = [j.describe() for j in self.judgements if j.outcome == "unseparated"]
        uncalibrated = [seed_band.label(j.name) for j in self.judgements if j.outcome == "uncalibrated"]
        if uncalibrated:
            notes.append(f"uncalibrated (no seed spread): {', '.join(uncalibrated)}, judged by the fixed tolerance")
        return [n + self.window for n in notes]


def _rel(candidate: Optional[float], baseline: Optional[float]) -> Optional[float]:
    if candidate is None or baseline is None or baseline == 0:
        return None
    return candidate / baseline - 1.0


def _window(baseline: Accuracy, candidate: Accuracy) -> str:
    """Say what was compared when the updates differ: equal samples seen, but fewer or more optimizer updates."""
    if candidate.updates is None or baseline.updates is None or candidate.updates == baseline.updates:
        return ""
    rule = f", learning rate x{candidate.lr_scale:.3g}" if candidate.lr_scale != 1.0 else ", same learning rate"
    return (f"; compared at {candidate.samples_seen} samples seen: {candidate.updates} optimizer updates vs the "
            f"baseline's {baseline.updates}{rule}")


def _no_learning_change(metric: str, initial: float, final: float) -> Optional[float]:
    """How much worse than ``final`` a trial that learnt nothing (stayed at the ``initial`` loss) would measure."""
    if metric == "perplexity":
        return math.exp(min(initial - final, 700.0)) - 1.0
    return initial / final - 1.0 if final > 0 else None


def unjudged(baseline: Accuracy, gate: AccuracyGate) -> dict[str, str]:
    """Metric -> why it cannot judge against this ``baseline``, in one line (empty: every metric can).

    A metric cannot judge when no candidate could fail it: the baseline's greedy sample already repeats so much
    that the allowed increase is above the largest possible rate (1.0), or the baseline's training loss fell so
    little from its initial value over the accuracy window that a trial that learnt nothing at all would still be
    within the tolerance.  Both come from a burst too short for the model to get past its first plateau; more
    samples before the measurement (plan field ``accuracy.samples``) is what makes them judge.
    """
    more = f"raise accuracy.samples (now {baseline.samples_seen} samples seen) so that the baseline trains further"
    out: dict[str, str] = {}
    rep_tol = gate.tolerances.get("repetition_rate", DEFAULT_REPETITION_TOLERANCE)
    rep = baseline.repetition_rate
    if rep is not None and rep + rep_tol >= 1.0:
        out["repetition_rate"] = (
            f"repetition_rate cannot judge at this burst length: the baseline's greedy sample already repeats "
            f"{rep:.2f} of its 3-grams, so no trial can exceed it by the tolerance +{rep_tol:.2f}; {more}")
    curve = baseline.loss_curve
    final = baseline.train_loss if baseline.train_loss is not None else (curve[-1][1] if curve else None)
    if len(curve) < 2 or final is None or not (math.isfinite(final) and math.isfinite(curve[0][1])):
        return out
    initial = curve[0][1]
    for metric, tol in {gate.metric: gate.rel_tolerance, **gate.tolerances}.items():
        worse = _no_learning_change(metric, initial, final) if metric != "repetition_rate" else None
        if worse is not None and worse <= tol:
            out[metric] = (
                f"{metric} cannot judge at this burst length: the baseline's training loss went from {initial:.4g} to "
                f"{final:.4g} ({final / initial - 1:+.1%}) over {baseline.samples_seen} samples, so a trial that "
                f"learnt nothing would still be within the {tol:.1%} tolerance; {more}")
    return out


def lower_is_better(name: str) -> bool:
    """A script's own metric: losses and errors should fall, everything else (accuracy, F1, top-k) rise."""
    lowered = name.lower()
    return any(word in lowered for word in LOWER_IS_BETTER)


def _script_metrics(baseline: Accuracy, candidate: Accuracy, tol: float, changes: dict) -> str:
    """Why the script's own validation figures refuse ``candidate`` ("" when they do not): each figure both trials
    have, measured at equal samples seen, may worsen by at most ``tol`` (relative).  Adds their changes as
    ``val:NAME``."""
    if candidate.val_metrics_samples != baseline.val_metrics_samples:
        return ""
    for name in sorted(set(baseline.val_metrics) & set(candidate.val_metrics)):
        b, c = baseline.val_metrics[name], candidate.val_metrics[name]
        change = _rel(c, b)
        changes[f"val:{name}"] = change
        if change is None:
            continue
        lower = lower_is_better(name)
        if (change if lower else -change) > tol:
            return (f"the script's {name} {c:.4g} vs baseline {b:.4g}: {change:+.1%} (tolerance {tol:.1%} "
                    f"{'up' if lower else 'down'}, at {candidate.val_metrics_samples} samples seen)")
    return ""


def against_seeds(baseline: Accuracy, candidate: Accuracy, gate: AccuracyGate, seeds: Sequence[Accuracy],
                  confidence: float) -> list[seed_band.Judgement]:
    """Every figure both ``candidate`` and the baseline have, against the baseline's seeds (``baseline`` first)."""
    metrics = [m for m in {gate.metric: 0, **gate.tolerances} if m != "repetition_rate"]
    band = [seed_band.figures(a, metrics, gate.checkpoints) for a in [baseline, *seeds]
            if a.samples_seen == baseline.samples_seen and not a.nonfinite]
    mine = seed_band.figures(candidate, metrics, gate.checkpoints)
    if candidate.val_metrics_samples != baseline.val_metrics_samples:
        mine = {k: v for k, v in mine.items() if not k.startswith("val:")}
    names = [k for k in mine if band and k in band[0]]
    q = seed_band.quantile(confidence, len(names))
    out = []
    for name in names:
        metric = "train_loss" if name.startswith(seed_band.CURVE) else name
        tol = gate.tolerances.get(metric, gate.rel_tolerance) if metric in ACCURACY_METRICS else gate.rel_tolerance
        lower = lower_is_better(name[4:]) if name.startswith("val:") else True
        out.append(seed_band.judge(name, mine[name], [b.get(name) for b in band], tol, q, lower))
    return out


def _seed_refusal(judgements: list[seed_band.Judgement], metric: str) -> str:
    """The refusal's reason: the plan's metric first when it is worse (the figure the user named), else the worst
    figure in seed spreads; how many more figures are worse."""
    worse = sorted((j for j in judgements if j.worse), key=lambda j: (j.name != metric, -(j.spreads or 0.0)))
    if not worse:
        return ""
    more = f"; {len(worse) - 1} more figure(s) worse" if len(worse) > 1 else ""
    return worse[0].describe() + more


def check(baseline: Accuracy, candidate: Optional[Accuracy], gate: AccuracyGate, seeds: Sequence[Accuracy] = (),
          confidence: float = 0.95) -> GateResult:
    """``candidate`` against ``baseline`` under the plan's ``gate``; ``seeds``: the baseline's accuracy windows
    with other seeds (``perftune.engine.seed_runs``), which calibrate it at one-sided ``confidence``."""
    if candidate is None:
        return GateResult(False, "no accuracy was measured")
    changes = {m: _rel(getattr(candidate, m), getattr(baseline, m)) for m in ACCURACY_METRICS}
    if candidate.repetition_rate is not None and baseline.repetition_rate is not None:
        changes["repetition_rate"] = candidate.repetition_rate - baseline.repetition_rate
    if candidate.nonfinite and not baseline.nonfinite:
        return GateResult(False, f"NaN/Inf in the loss or gradients{_window(baseline, candidate)}", changes)
    if candidate.samples_seen != baseline.samples_seen:
        return GateResult(False, f"measured after {candidate.samples_seen} samples, the baseline after "
                                 f"{baseline.samples_seen}: not comparable", changes)
    judgements = against_seeds(baseline, candidate, gate, seeds, confidence) if seeds else []
    refused = _seed_refusal(judgements, gate.metric)
    if refused:
        return GateResult(False, refused + _window(baseline, candidate), changes, judgements=judgements)
    tolerances = {gate.metric: gate.rel_tolerance, **gate.tolerances}
    for metric, tol in tolerances.items():
        if metric == "repetition_rate":
            continue
        change = changes.get(metric)
        if change is None:
            if getattr(baseline, metric) is not None:
                return GateResult(False, f"{metric} is missing{_window(baseline, candidate)}", changes)
            continue
        if change > tol and not seeds:
            return GateResult(False, f"{metric} {getattr(candidate, metric):.4g} vs baseline "
                                     f"{getattr(baseline, metric):.4g}: +{change:.1%} (tolerance {tol:.1%})"
                                     f"{_window(baseline, candidate)}", changes)
    refused = "" if seeds else _script_metrics(baseline, candidate, gate.rel_tolerance, changes)
    if refused:
        return GateResult(False, refused + _window(baseline, candidate), changes)
    rep_tol = gate.tolerances.get("repetition_rate", DEFAULT_REPETITION_TOLERANCE)
    rep = changes.get("repetition_rate")
    window = _window(baseline, candidate)
    if rep is not None and rep > rep_tol:
        return GateResult(False, f"repetition rate of a greedy sample {candidate.repetition_rate:.2f} vs "
                                 f"{baseline.repetition_rate:.2f} (+{rep:.2f}, tolerance {rep_tol:.2f}){window}",
                          changes)
    if (candidate.max_grad_norm is not None and baseline.max_grad_norm
            and candidate.max_grad_norm > gate.grad_norm_factor * baseline.max_grad_norm):
        return GateResult(False, f"gradient norm blew up: max {candidate.max_grad_norm:.3g} vs baseline "
                                 f"{baseline.max_grad_norm:.3g} (limit x{gate.grad_norm_factor:g}){window}", changes)
    return GateResult(True, "", changes, unjudged(baseline, gate), judgements, window=window)
