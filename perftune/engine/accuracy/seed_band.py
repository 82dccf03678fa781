"""The baseline's seed band: how much each accuracy figure moves from seed to seed, and a candidate judged against it.

A fixed relative tolerance knows nothing of seed noise: on a model whose validation loss varies 0.5% between seeds
a 3% loss passes 5%, on one that varies 8% harmless changes are refused at random.  As MLPerf's reference
convergence points (mlcommons/logging ``rcp_checker.py``: seeded reference runs, a one-sided t-test of the mean)
and Megatron-LM's golden values (tolerances recommended from N repeated runs) do, the baseline's accuracy window
runs with several seeds (initialisation and data order, same data), and a candidate's figure is compared with
their distribution: one-sided (only a worsening counts), a Student-t prediction bound at the plan's confidence,
Bonferroni over the figures judged together (the end metric and the training loss at the curve's checkpoints).
The distance is stated in units of the seed-to-seed standard deviation ("seed spreads").

Three answers per figure, as Pinpoint's same/different/unknown: ``pass`` (within the seed noise and within the
plan's ``rel_tolerance`` of the baseline's own run), ``worse`` (beyond what seed noise explains: refused),
``unseparated`` (beyond the tolerance but within the seed noise: the seeds cannot tell; passed, and said so).
A figure whose spread cannot be measured (one seed, or every seed alike) is ``uncalibrated`` and judged by the
fixed tolerance alone, and said so (``perftune.words.gate_words.judgement_text``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional, Sequence

import numpy as np
from scipy import stats as sps

from perftune.io.accuracy_window import CURVE
from perftune.io.records import Accuracy

#: a worsening below this share of the figure is numerical noise (AMP O1 moved the quickstart's val_loss 0.004%),
#: however tight the seeds are
MIN_REL_WORSENING = 0.002

Outcome = Literal["pass", "worse", "unseparated", "uncalibrated"]


@dataclass(frozen=True)
class Judgement:
    """One figure of a candidate against the baseline's seeds; ``worse`` is True when it refuses the candidate."""

    name: str
    value: float
    mean: float
    sd: float
    n: int
    limit: float  # the worst value seed noise explains at the confidence (the fixed tolerance when uncalibrated)
    tolerance: float
    lower_is_better: bool
    outcome: Outcome
    worse: bool

    @property
    def spreads(self) -> Optional[float]:
        """How much worse than the seeds' mean, in seed-to-seed standard deviations (None: uncalibrated)."""
        if self.outcome == "uncalibrated" or self.sd <= 0:
            return None
        return (self.value - self.mean) / self.sd * (1 if self.lower_is_better else -1)

    @property
    def change(self) -> Optional[float]:
        return self.value / self.mean - 1.0 if self.mean else None


def quantile(confidence: float, figures: int) -> float:
    """One-sided, Bonferroni over ``figures`` judged together."""
    return 1.0 - (1.0 - confidence) / max(figures, 1)


def judge(name: str, value: float, seeds: Sequence[float], tolerance: float, q: float,
          lower_is_better: bool = True) -> Judgement:
    """``value`` against the baseline's ``seeds`` (the plan's own seed first) at one-sided quantile ``q``."""
    vals = np.asarray([v for v in seeds if v is not None and math.isfinite(v)], dtype=float)
    sign = 1.0 if lower_is_better else -1.0
    mean = float(vals.mean()) if len(vals) else float("nan")
    sd = float(vals.std(ddof=1)) if len(vals) >= 2 else 0.0
    n = len(vals)
    scale = abs(mean) if mean else 1.0
    if n < 2 or sd <= 1e-12 * scale:
        reference = float(vals[0]) if n else value
        limit = reference + sign * tolerance * abs(reference)
        worse = sign * (value - limit) > 0
        return Judgement(name, value, reference, 0.0, n, limit, tolerance, lower_is_better, "uncalibrated", worse)
    noise = max(float(sps.t.ppf(q, n - 1)) * sd * math.sqrt(1.0 + 1.0 / n), MIN_REL_WORSENING * scale)
    worsening = sign * (value - mean)
    reference = float(vals[0])  # the baseline's own run (same seed as the candidate): the change's own effect
    if worsening > noise:
        outcome: Outcome = "worse"
    elif sign * (value - reference) > tolerance * abs(reference):
        outcome = "unseparated"
    else:
        outcome = "pass"
    return Judgement(name, value, mean, sd, n, mean + sign * noise, tolerance, lower_is_better, outcome,
                     outcome == "worse")


def curve_points(curve: Sequence[tuple[int, float]], samples: int, checkpoints: int) -> dict[str, float]:
    """The training loss at ``checkpoints`` points of the window, at equal samples seen whatever the batch size:
    checkpoint j is the mean loss of the steps whose samples seen fall in ((j-1)/k, j/k] of the window."""
    out: dict[str, float] = {}
    if checkpoints <= 0 or samples <= 0:
        return out
    for j in range(1, checkpoints + 1):
        lo, hi = samples * (j - 1) / checkpoints, samples * j / checkpoints
        losses = [loss for s, loss in curve if lo < s <= hi and loss is not None and math.isfinite(loss)]
        if losses:
            out[f"{CURVE}{int(round(hi))}"] = float(np.mean(losses))
    return out


def figures(acc: Accuracy, metrics: Sequence[str], checkpoints: int) -> dict[str, float]:
    """The figures of one accuracy window the gate judges: ``metrics`` (of ``ACCURACY_METRICS``), the training loss
    at the checkpoints, and the script's own validation figures (``val:NAME``)."""
    out = {m: float(getattr(acc, m)) for m in metrics if getattr(acc, m, None) is not None}
    out.update(curve_points(acc.loss_curve, acc.samples_seen, checkpoints))
    if acc.val_metrics_samples is not None:
        out.update({f"val:{k}": float(v) for k, v in acc.val_metrics.items()})
    return out


def figure_band(base: Optional[Accuracy], seeds: Sequence[Accuracy], metric: str, tolerance: float,
                confidence: float, checkpoints: int) -> Optional[dict]:
    """What the report's accuracy figure draws of the seed band (``loss_plot`` in the report's figures): every
    seed's training-loss curve, the metric's seed values and the worst value seed noise explains (the gate's limit
    with the Bonferroni of the end metric and the checkpoints).  None without seed runs."""
    runs = [a for a in ([base] if base is not None else []) + list(seeds) if not a.nonfinite]
    values = [getattr(a, metric) for a in runs if getattr(a, metric, None) is not None]
    if base is None or not seeds or len(values) < 2:
        return None
    j = judge(metric, values[0], values, tolerance, quantile(confidence, 1 + checkpoints))
    return {"points": [list(a.loss_curve) for a in runs if a.loss_curve], "values": values,
            "limit": j.limit if j.outcome != "uncalibrated" else None, "mean": j.mean, "sd": j.sd}
