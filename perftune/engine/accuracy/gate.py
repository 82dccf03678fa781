"""The accuracy gate's decision on one candidate: a faster change is worth nothing if training got worse.

Both sides were measured at the same number of samples seen, from the same initial weights and data order (the
burst's first phase, ``perftune.burst.meter``), so a difference is the change's doing, not more or less training.
Only a worsening counts: a lower loss is never a rejection.  With the baseline's seed runs (``seeds``), every figure
is judged against their spread (``perftune.engine.accuracy.seed_band``); without them, by the plan's fixed relative
tolerance.  The reasons are worded by ``perftune.words.gate_words``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

from perftune.engine.accuracy import seed_band
from perftune.io.accuracy_window import CURVE
from perftune.io.plan import ACCURACY_METRICS, AccuracyGate
from perftune.io.records import Accuracy
from perftune.words import gate_words as words

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
    #: the updates count when batch sizes differ (``gate_words.updates_clause``): said with every figure stated
    window: str = ""

    def pass_notes(self) -> list[str]:
        """What a passing verdict must add, in words: figures the seeds could not separate from the tolerance, figures
        they could not calibrate (never silently passed; the metrics the baseline cannot judge are ``unjudged``)."""
        return words.pass_notes(self.judgements, self.window) if self.ok else []


def _rel(candidate: Optional[float], baseline: Optional[float]) -> Optional[float]:
    if candidate is None or baseline is None or baseline == 0:
        return None
    return candidate / baseline - 1.0


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
    out: dict[str, str] = {}
    rep_tol = gate.tolerances.get("repetition_rate", DEFAULT_REPETITION_TOLERANCE)
    rep = baseline.repetition_rate
    if rep is not None and rep + rep_tol >= 1.0:
        out["repetition_rate"] = words.repetition_cannot_judge(baseline, rep_tol)
    curve = baseline.loss_curve
    final = baseline.train_loss if baseline.train_loss is not None else (curve[-1][1] if curve else None)
    if len(curve) < 2 or final is None or not (math.isfinite(final) and math.isfinite(curve[0][1])):
        return out
    initial = curve[0][1]
    for metric, tol in {gate.metric: gate.rel_tolerance, **gate.tolerances}.items():
        worse = _no_learning_change(metric, initial, final) if metric != "repetition_rate" else None
        if worse is not None and worse <= tol:
            out[metric] = words.loss_cannot_judge(metric, baseline, initial, final, tol)
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
            return words.script_metric_text(name, b, c, change, tol, lower, candidate.val_metrics_samples)
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
        metric = "train_loss" if name.startswith(CURVE) else name
        tol = gate.tolerances.get(metric, gate.rel_tolerance) if metric in ACCURACY_METRICS else gate.rel_tolerance
        lower = lower_is_better(name[4:]) if name.startswith("val:") else True
        out.append(seed_band.judge(name, mine[name], [b.get(name) for b in band], tol, q, lower))
    return out


def _seed_refusal(judgements: list[seed_band.Judgement], metric: str) -> str:
    """The refusal's reason: the plan's metric first when it is worse (the figure the user named), else the worst
    figure in seed spreads; how many more figures are worse."""
    worse = sorted((j for j in judgements if j.worse), key=lambda j: (j.name != metric, -(j.spreads or 0.0)))
    return words.seed_refusal_text(worse) if worse else ""


def _fixed_refusal(baseline: Accuracy, candidate: Accuracy, gate: AccuracyGate, changes: dict, seeds: bool,
                   updates: str) -> str:
    """Why the plan's fixed tolerances refuse ``candidate`` ("" when they do not): a metric missing, or (without
    seed runs) worse than its tolerance, or the script's own figures worse."""
    for metric, tol in {gate.metric: gate.rel_tolerance, **gate.tolerances}.items():
        if metric == "repetition_rate":
            continue
        change = changes.get(metric)
        if change is None:
            if getattr(baseline, metric) is not None:
                return words.missing_text(metric, updates)
            continue
        if change > tol and not seeds:
            return words.tolerance_text(metric, baseline, candidate, change, tol, updates)
    refused = "" if seeds else _script_metrics(baseline, candidate, gate.rel_tolerance, changes)
    return refused + updates if refused else ""


def check(baseline: Accuracy, candidate: Optional[Accuracy], gate: AccuracyGate, seeds: Sequence[Accuracy] = (),
          confidence: float = 0.95) -> GateResult:
    """``candidate`` against ``baseline`` under the plan's ``gate``; ``seeds``: the baseline's accuracy windows
    with other seeds (``perftune.engine.accuracy.seeds``), which calibrate it at one-sided ``confidence``."""
    if candidate is None:
        return GateResult(False, words.NOT_MEASURED)
    changes = {m: _rel(getattr(candidate, m), getattr(baseline, m)) for m in ACCURACY_METRICS}
    if candidate.repetition_rate is not None and baseline.repetition_rate is not None:
        changes["repetition_rate"] = candidate.repetition_rate - baseline.repetition_rate
    window = words.updates_clause(baseline, candidate)
    if candidate.nonfinite and not baseline.nonfinite:
        return GateResult(False, words.nonfinite_text(window), changes)
    if candidate.samples_seen != baseline.samples_seen:
        return GateResult(False, words.not_comparable_text(baseline, candidate), changes)
    judgements = against_seeds(baseline, candidate, gate, seeds, confidence) if seeds else []
    refused = _seed_refusal(judgements, gate.metric)
    if refused:
        return GateResult(False, refused + window, changes, judgements=judgements)
    refused = _fixed_refusal(baseline, candidate, gate, changes, bool(seeds), window)
    if refused:
        return GateResult(False, refused, changes)
    rep_tol = gate.tolerances.get("repetition_rate", DEFAULT_REPETITION_TOLERANCE)
    rep = changes.get("repetition_rate")
    if rep is not None and rep > rep_tol:
        return GateResult(False, words.repetition_text(baseline, candidate, rep, rep_tol, window), changes)
    if (candidate.max_grad_norm is not None and baseline.max_grad_norm
            and candidate.max_grad_norm > gate.grad_norm_factor * baseline.max_grad_norm):
        return GateResult(False, words.grad_norm_text(baseline, candidate, gate.grad_norm_factor, window), changes)
    return GateResult(True, "", changes, unjudged(baseline, gate), judgements, window=window)
