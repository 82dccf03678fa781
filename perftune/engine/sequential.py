"""Sequential, three-valued throughput comparisons: faster, slower, equivalent, or (out of budget) undecided.

Why this shape (Chromium Pinpoint's "different / same / unknown", racing in irace):
- The unit is the process: each burst process gives the mean of its windows' log-throughput, because two processes of
  one configuration differ more than the windows inside one do.
- Candidate processes are measured between reference processes (R C R C R ...), so each candidate process is a
  block with the reference processes on either side, and slow drift of the machine cancels within the block:
  ``d = log C - mean(log R_left, log R_right)``.
- The process noise ``sigma`` is one property of the machine for the whole sweep, so it is pooled: successive
  processes of one configuration (the baseline re-measured between candidates, repeated candidates; successive
  differences, so drift does not inflate it) and a prior (``PRIOR_SD`` with ``PRIOR_DF`` pseudo degrees of freedom),
  so two or three processes never give a ten-times-too-wide interval and a larger observed spread still widens it.
  A block's variance is ``sigma^2 (1 + 1/k)`` for ``k`` (1 or 2) neighbouring reference processes.
- A comparison may be looked at after every added process (up to ``max_runs`` per candidate), so each look uses
  Pocock's constant boundary for that many looks (z = 2.361 instead of 1.96 for four looks at 95%): adding processes
  while a comparison is open does not inflate false alarms.
- Across the sweep's one-at-a-time comparisons, Benjamini-Hochberg keeps the false discovery rate at ``1 - confidence``.

Pure functions over measurements: no processes, no clocks (``perftune.engine.race`` schedules, the sweep measures).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Hashable, Literal, Optional, Sequence

import numpy as np
from scipy import stats as sps
from scipy.special import stdtr

Outcome = Literal["faster", "slower", "equivalent", "open"]

#: Prior for the between-process standard deviation of log throughput (measured here with
#: experiments/benchmarks/precision.py: 7.7% [5.3%, 14.1%] over 10 quiet tiny_gpt processes), and its weight.
PRIOR_SD = 0.07
PRIOR_DF = 4

#: Pocock's two-sided critical z for K equally spaced looks at overall alpha = 0.05 (Pocock 1977; Jennison & Turnbull,
#: table 2.1).  Look counts between tabled ones use the next larger (conservative); other confidences, or more looks
#: than tabled, fall back to Bonferroni over the looks.
POCOCK_Z_95 = {1: 1.960, 2: 2.178, 3: 2.289, 4: 2.361, 5: 2.413, 6: 2.453, 7: 2.485, 8: 2.512, 9: 2.535, 10: 2.555,
               15: 2.626, 20: 2.672}


@lru_cache(maxsize=256)
def per_look_alpha(confidence: float, looks: int) -> float:
    """The two-sided alpha of each look so that ``looks`` looks together keep ``1 - confidence``."""
    looks = max(1, int(looks))
    if abs(confidence - 0.95) < 1e-9:
        tabled = min((k for k in POCOCK_Z_95 if k >= looks), default=None)
        if tabled is not None:
            return float(2.0 * sps.norm.sf(POCOCK_Z_95[tabled]))
    return (1.0 - confidence) / looks


@lru_cache(maxsize=4096)
def _t_quantile(q: float, df: float) -> float:
    return float(sps.t.ppf(q, df))


@dataclass(frozen=True)
class ProcessRun:
    """One burst process in the order the sweep measured it: which configuration, its windows' throughputs, and the
    machine that ran it (``"local"`` on one machine; a cluster node under ``--executor ray``)."""

    config: Hashable
    windows: tuple[float, ...]
    node: str = "local"

    @cached_property
    def log_mean(self) -> float:
        return math.fsum(math.log(w) for w in self.windows) / len(self.windows)


@dataclass(frozen=True)
class Noise:
    """Pooled between-process variance of log throughput (``var``), its degrees of freedom, and how many of them
    were observed (the rest are the prior's)."""

    var: float
    df: int
    observed_df: int = 0

    @property
    def sd(self) -> float:
        return math.sqrt(self.var)

    @classmethod
    def pooled(cls, runs: Sequence[ProcessRun], prior_sd: float = PRIOR_SD, prior_df: int = PRIOR_DF) -> "Noise":
        """Successive differences of each configuration's processes on each machine (in measurement order), plus the
        prior: a fast and a slow node are not noise, they are blocked away in ``blocks``."""
        by_config: dict[Hashable, list[float]] = {}
        for run in runs:
            by_config.setdefault((run.config, run.node), []).append(run.log_mean)
        ss, df = 0.0, 0
        for values in by_config.values():
            if len(values) > 1:
                diffs = np.diff(values)
                ss += float(np.sum(diffs**2)) / 2.0
                df += len(diffs)
        return cls((prior_df * prior_sd**2 + ss) / (prior_df + df), prior_df + df, df)


@dataclass(frozen=True)
class Block:
    """One candidate process and the reference processes measured next to it."""

    difference: float  # log candidate - mean log neighbouring references
    neighbours: tuple[int, ...]  # positions (in ``runs``) of its 1 or 2 neighbouring reference processes


def blocks(runs: Sequence[ProcessRun], candidate: Hashable, reference: Hashable) -> list[Block]:
    """Each candidate process with the nearest reference process before and after it (in measurement order) on the
    same machine, so that drift in time and the speed of a node both cancel; a candidate process with no reference
    process on its node gives no block."""
    seq = [(i, r.config, r.log_mean, r.node) for i, r in enumerate(runs) if r.config in (candidate, reference)]
    out = []
    for k, (_, config, value, node) in enumerate(seq):
        if config != candidate:
            continue
        left = next(((i, v) for i, c, v, n in reversed(seq[:k]) if c == reference and n == node), None)
        right = next(((i, v) for i, c, v, n in seq[k + 1:] if c == reference and n == node), None)
        refs = [x for x in (left, right) if x is not None]
        if refs:
            out.append(Block(value - sum(v for _, v in refs) / len(refs), tuple(i for i, _ in refs)))
    return out


@dataclass(frozen=True)
class Decision:
    """A comparison as it stands: the candidate/reference throughput ratio, its interval, and the outcome."""

    outcome: Outcome
    ratio: float  # candidate / reference throughput (> 1: faster)
    ci_low: float
    ci_high: float
    p_value: float  # two-sided, for "no difference", scaled for the looks (x alpha / per-look alpha, capped at 1)
    blocks: int  # candidate processes with a reference neighbour
    reference_runs: int  # reference processes the blocks used (neighbours of a candidate process)
    df: float
    level: float  # the per-look confidence of the interval
    confidence: float  # the overall confidence the looks together keep
    noise_sd: float
    equivalence: float
    looks: int

    @property
    def resolution(self) -> float:
        """The resolution reached: half the interval's width in log terms (about a relative change)."""
        return (math.log(self.ci_high) - math.log(self.ci_low)) / 2


@dataclass(frozen=True)
class Policy:
    """How a comparison is judged and how much it may spend: the plan's ``decision`` section."""

    confidence: float = 0.95
    equivalence: float = 0.03
    max_runs: int = 4  # processes per candidate, the first included; also the number of looks Pocock plans for
    prior_sd: float = PRIOR_SD
    prior_df: int = PRIOR_DF


def decide(runs: Sequence[ProcessRun], candidate: Hashable, reference: Hashable, noise: Noise,
           policy: Policy = Policy(), looks: Optional[int] = None) -> Optional[Decision]:
    """The comparison of ``candidate`` with ``reference`` as it stands; None when no block can be formed yet.

    ``looks`` (default ``policy.max_runs``) is how many looks the boundary is planned for: 1 for a comparison that
    is looked at once (an informational one).
    """
    bl = blocks(runs, candidate, reference)
    if not bl:
        return None
    r = len(bl)
    diff = math.fsum(b.difference for b in bl) / r
    se = math.sqrt(noise.var * sum(1.0 + 1.0 / len(b.neighbours) for b in bl)) / r
    looks = max(1, policy.max_runs if looks is None else looks)
    alpha = per_look_alpha(policy.confidence, looks)
    t_crit = _t_quantile(1.0 - alpha / 2.0, noise.df)
    low, high = math.exp(diff - t_crit * se), math.exp(diff + t_crit * se)
    p_raw = float(2.0 * stdtr(noise.df, -abs(diff) / se)) if se > 0 else (0.0 if diff else 1.0)
    p_value = min(1.0, p_raw * (1.0 - policy.confidence) / alpha)
    margin = math.log1p(policy.equivalence)
    if low > 1.0:
        outcome: Outcome = "faster"
    elif high < 1.0:
        outcome = "slower"
    elif policy.equivalence > 0 and math.log(low) >= -margin and math.log(high) <= margin:
        outcome = "equivalent"
    else:
        outcome = "open"
    reference_runs = len({i for b in bl for i in b.neighbours})
    return Decision(outcome, math.exp(diff), low, high, p_value, r, reference_runs, float(noise.df), 1.0 - alpha,
                    policy.confidence, noise.sd, policy.equivalence, looks)


def runs_needed(noise_sd: float, effect: float, confidence: float = 0.95, max_runs: int = 4,
                df: float = 30.0) -> int:
    """About how many candidate processes (each between two reference ones) resolve a relative ``effect``."""
    alpha = per_look_alpha(confidence, max_runs)
    t = float(sps.t.ppf(1.0 - alpha / 2.0, df))
    effect = max(abs(effect), 1e-3)
    return max(1, math.ceil(1.5 * noise_sd**2 * (t / math.log1p(effect)) ** 2))


def describe(d: Decision, reference: str = "") -> str:
    """The decision in words, with the runs it took and (undecided) what would resolve it."""
    runs = f"{d.blocks} run{'s' if d.blocks != 1 else ''}"
    interval = f"x{d.ratio:.3f} [{d.ci_low:.3f}, {d.ci_high:.3f}]" + (f" vs {reference}" if reference else "")
    if d.outcome == "equivalent":
        return f"{interval} after {runs}: equivalent within ±{d.equivalence:.0%}"
    if d.outcome in ("faster", "slower"):
        return f"{interval} after {runs}: {d.outcome}"
    seen = abs(d.ratio - 1.0)
    target = seen if seen > d.equivalence else d.equivalence  # the change measured, or the margin for "equivalent"
    need = runs_needed(d.noise_sd, target, d.confidence, d.looks, d.df)
    return (f"{interval}: undecided after {runs}: noise {d.noise_sd:.1%} cannot resolve {target:.1%} "
            f"(±{d.resolution:.1%} reached; about {need} runs would: decision.max_runs)")


def benjamini_hochberg(p_values: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Which hypotheses are discoveries at false discovery rate ``alpha`` (Benjamini-Hochberg step-up)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    cutoff = 0
    for rank, i in enumerate(order, start=1):
        if p_values[i] <= alpha * rank / m:
            cutoff = rank
    keep = [False] * m
    for rank, i in enumerate(order, start=1):
        keep[i] = rank <= cutoff
    return keep
