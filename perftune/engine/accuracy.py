"""The accuracy gate: a faster change is worth nothing if training got worse.

Both sides were measured at the same number of samples seen, from the same initial weights and data order (see
``perftune/burst/phases.py``), so a difference is the change's doing, not more or less training.  Only a worsening
counts: a lower loss is never a rejection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from perftune.io.plan import ACCURACY_METRICS, AccuracyGate
from perftune.io.records import Accuracy

DEFAULT_REPETITION_TOLERANCE = 0.10  # absolute increase in the share of repeated 3-grams


@dataclass
class GateResult:
    ok: bool
    reason: str = ""
    changes: dict = field(default_factory=dict)  # metric -> relative change (candidate / baseline - 1)


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


def check(baseline: Accuracy, candidate: Optional[Accuracy], gate: AccuracyGate) -> GateResult:
    """``candidate`` against ``baseline`` under the plan's ``gate``."""
    if candidate is None:
        return GateResult(False, "no accuracy was measured")
    changes = {m: _rel(getattr(candidate, m), getattr(baseline, m)) for m in ACCURACY_METRICS}
    if candidate.repetition_rate is not None and baseline.repetition_rate is not None:
        changes["repetition_rate"] = candidate.repetition_rate - baseline.repetition_rate
    if candidate.nonfinite and not baseline.nonfinite:
        return GateResult(False, "NaN/Inf in the loss or gradients", changes)
    if candidate.samples_seen != baseline.samples_seen:
        return GateResult(False, f"measured after {candidate.samples_seen} samples, the baseline after "
                                 f"{baseline.samples_seen}: not comparable", changes)
    tolerances = {gate.metric: gate.rel_tolerance, **gate.tolerances}
    for metric, tol in tolerances.items():
        if metric == "repetition_rate":
            continue
        change = changes.get(metric)
        if change is None:
            if getattr(baseline, metric) is not None:
                return GateResult(False, f"{metric} is missing", changes)
            continue
        if change > tol:
            return GateResult(False, f"{metric} {getattr(candidate, metric):.4g} vs baseline "
                                     f"{getattr(baseline, metric):.4g}: +{change:.1%} (tolerance {tol:.1%})"
                                     f"{_window(baseline, candidate)}", changes)
    rep_tol = gate.tolerances.get("repetition_rate", DEFAULT_REPETITION_TOLERANCE)
    rep = changes.get("repetition_rate")
    if rep is not None and rep > rep_tol:
        return GateResult(False, f"repetition rate of a greedy sample {candidate.repetition_rate:.2f} vs "
                                 f"{baseline.repetition_rate:.2f} (+{rep:.2f}, tolerance {rep_tol:.2f})", changes)
    if (candidate.max_grad_norm is not None and baseline.max_grad_norm
            and candidate.max_grad_norm > gate.grad_norm_factor * baseline.max_grad_norm):
        return GateResult(False, f"gradient norm blew up: max {candidate.max_grad_norm:.3g} vs baseline "
                                 f"{baseline.max_grad_norm:.3g} (limit x{gate.grad_norm_factor:g})", changes)
    return GateResult(True, "", changes)
