"""Noise-aware comparison of throughput measurements.

On a shared machine two processes running the same configuration differ by more than the windows inside one
process do (mindspore-notes.md saw +-10-25%).  So the unit of comparison is the process: each burst contributes the
mean of its windows' log-throughput, and the variance of a process mean is the within-process window variance over
the window count plus a between-process variance, estimated from the configurations that were measured in more than
one process (the baseline, re-measured through the sweep).  The ratio's confidence interval comes from Student's t
with those degrees of freedom: few re-measurements make wide intervals, which is the honest answer on a noisy
machine.  A change counts only when its interval excludes 1 *and* its gain reaches ``min_gain``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Literal, Optional, Sequence

import numpy as np
from scipy import stats as sps

from perftune.io.records import TrialResult

Verdict = Literal["faster", "slower", "not significant"]

#: Prior for the between-process standard deviation of log throughput, and its weight in pseudo degrees of
#: freedom.  Measured here (experiments/benchmarks/precision.py, 10 tiny_gpt processes on a quiet 2-core machine):
#: 7.7% [5.3%, 14.1%]; 10-20% while other jobs shared the machine.  With 2-3 baseline runs alone the estimate has 1-2
#: degrees of freedom and a t-interval ten times as wide as the noise; shrinking towards the prior keeps the interval
#: honest without making every verdict "not significant", and a larger observed spread still pulls it up.
PRIOR_BETWEEN_SD = 0.07
PRIOR_DF = 4


@dataclass(frozen=True)
class Measurement:
    """Per-window throughputs (samples/s) of one configuration, grouped by the process that measured them."""

    processes: tuple[tuple[float, ...], ...]

    @classmethod
    def of(cls, windows_by_process: Sequence[Sequence[float]]) -> "Measurement":
        procs = tuple(tuple(float(v) for v in ws) for ws in windows_by_process if len(ws))
        if not procs:
            raise ValueError("a measurement needs at least one window")
        if any(v <= 0 or not math.isfinite(v) for ws in procs for v in ws):
            raise ValueError("throughputs must be finite numbers > 0")
        return cls(procs)

    def process_means(self) -> np.ndarray:
        return np.array([np.mean(np.log(ws)) for ws in self.processes])

    def within_var(self) -> tuple[float, int]:
        """Pooled within-process variance of log window throughput, and its degrees of freedom."""
        ss, df = 0.0, 0
        for ws in self.processes:
            if len(ws) > 1:
                logs = np.log(ws)
                ss += float(np.sum((logs - logs.mean()) ** 2))
                df += len(ws) - 1
        return (ss / df if df else 0.0), df

    @property
    def windows_per_process(self) -> float:
        return float(np.mean([len(ws) for ws in self.processes]))

    @property
    def median(self) -> float:
        return float(np.median([v for ws in self.processes for v in ws]))


def throughput_windows(result: TrialResult) -> list[float]:
    """Samples per second of each timed window."""
    return [w.samples_per_s for w in result.windows]


def measurement_of(results: Iterable[TrialResult],
                   windows: Callable[[TrialResult], list[float]] = throughput_windows) -> Optional[Measurement]:
    """One configuration's ``Measurement`` from its trials (one process each); None if none of them measured."""
    procs = [windows(r) for r in results if r.status == "ok"]
    procs = [p for p in procs if p]
    return Measurement.of(procs) if procs else None


@dataclass(frozen=True)
class Noise:
    """Between-process variance of log throughput, estimated from repeated configurations."""

    between_var: float
    df: int

    @classmethod
    def estimate(cls, measurements: Sequence[Measurement]) -> "Noise":
        ss, df = 0.0, 0
        for m in measurements:
            means = m.process_means()
            if len(means) > 1:
                ss += float(np.sum((means - means.mean()) ** 2))
                df += len(means) - 1
        var = (PRIOR_DF * PRIOR_BETWEEN_SD**2 + ss) / (PRIOR_DF + df)
        return cls(var, PRIOR_DF + df)


@dataclass(frozen=True)
class Comparison:
    ratio: float  # candidate / reference throughput (>1: faster)
    ci_low: float
    ci_high: float
    p_value: float
    verdict: Verdict
    df: float

    def as_dict(self) -> dict:
        return {"ratio": self.ratio, "ci_low": self.ci_low, "ci_high": self.ci_high, "p_value": self.p_value,
                "verdict": self.verdict, "df": self.df}


def compare(reference: Measurement, candidate: Measurement, noise: Noise, confidence: float = 0.95,
            min_gain: float = 0.0) -> Comparison:
    """Throughput of ``candidate`` relative to ``reference`` with a confidence interval and a verdict."""
    ref_means, cand_means = reference.process_means(), candidate.process_means()
    w_ref, df_ref = reference.within_var()
    w_cand, df_cand = candidate.within_var()
    within = (w_ref * df_ref + w_cand * df_cand) / (df_ref + df_cand) if (df_ref + df_cand) else 0.0
    var_ref = noise.between_var + within / reference.windows_per_process
    var_cand = noise.between_var + within / candidate.windows_per_process
    diff = float(cand_means.mean() - ref_means.mean())
    se = math.sqrt(var_ref / len(ref_means) + var_cand / len(cand_means))
    return comparison_of(diff, se, float(noise.df), confidence, min_gain)


def comparison_of(diff: float, se: float, df: float, confidence: float, min_gain: float) -> Comparison:
    """A difference of log throughputs with its standard error as a ratio, Student's t interval and verdict."""
    t_crit = float(sps.t.ppf(0.5 + confidence / 2, df))
    low, high = math.exp(diff - t_crit * se), math.exp(diff + t_crit * se)
    p_value = float(2 * sps.t.sf(abs(diff) / se, df)) if se > 0 else (0.0 if diff else 1.0)
    ratio = math.exp(diff)
    if low > 1.0 and ratio - 1.0 >= min_gain:
        verdict: Verdict = "faster"
    elif high < 1.0 and 1.0 - ratio >= min_gain:
        verdict = "slower"
    else:
        verdict = "not significant"
    return Comparison(ratio, low, high, p_value, verdict, df)
