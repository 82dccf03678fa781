"""The one statistics engine: the noise model, its prior, and the interval and verdict of a throughput comparison.

Every comparison perftune makes goes through here: the sweep's sequential races (``sequential.py`` forms blocks in
time, ``R C R``), the node-blocked comparison of a cluster sweep (``blocked.py`` forms blocks by node) and
``perftune compare`` (OLD vs NEW, looked at once).  They differ only in how they pair processes; the model is one:
- The unit is the process: each burst process gives the mean of its windows' log-throughput (two processes of one
  configuration differ more than the windows inside one do, so the window spread is inside the process noise).
- The process noise ``sigma`` is one property of the machine, pooled over every configuration measured in more than
  one process, from successive differences in measurement order (so slow drift does not inflate it) and per node (a
  fast and a slow node are not noise), shrunk towards a prior (``PRIOR_SD`` with ``PRIOR_DF`` pseudo degrees of
  freedom): two or three processes never give a ten-times-too-wide interval, and a larger observed spread still
  widens it.
- An estimate (a difference of log throughputs and its standard error) becomes a ratio, a Student-t interval at the
  per-look level (Pocock's constant boundary when a comparison may be looked at after every added process), a
  p-value, and an outcome: faster, slower, equivalent (inside ``±equivalence``), or open.  Looked at once (compare,
  a node row), faster or slower count only beyond ``min_gain``; otherwise it is "not significant".

Pure functions over measurements: no processes, no clocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Callable, Hashable, Iterable, Literal, Optional, Sequence

import numpy as np
from scipy import stats as sps
from scipy.special import stdtr

from perftune.io.records import TrialResult
from perftune.io.sweep_records import ComparisonVerdict, Design

#: where a comparison's interval lies at one look (its verdict, once decided, is ``ComparisonVerdict``)
IntervalOutcome = Literal["faster", "slower", "equivalent", "open"]

#: Prior for the between-process standard deviation of log throughput, and its weight in pseudo degrees of freedom
#: (measured: experiments/benchmarks/README.md, "The engine's constants").  The one prior of every comparison.
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
    if looks == 1:
        return 1.0 - confidence
    if abs(confidence - 0.95) < 1e-9:
        tabled = min((k for k in POCOCK_Z_95 if k >= looks), default=None)
        if tabled is not None:
            return float(2.0 * sps.norm.sf(POCOCK_Z_95[tabled]))
    return (1.0 - confidence) / looks


@lru_cache(maxsize=4096)
def t_quantile(q: float, df: float) -> float:
    return float(sps.t.ppf(q, df))


@dataclass(frozen=True)
class ProcessRun:
    """One burst process in the order it was measured: which configuration, its windows' throughputs, the machine that
    ran it (``"local"`` on one machine; a cluster node under ``--executor ray``), whether its windows were measured
    while other processes used the cores (used all the same), and how many contended processes of its configuration
    were measured again in its place before it."""

    config: Hashable
    windows: tuple[float, ...]
    node: str = "local"
    contended: bool = False
    remeasured: int = 0

    @cached_property
    def log_mean(self) -> float:
        return math.fsum(math.log(w) for w in self.windows) / len(self.windows)


def process_runs(config: Hashable, windows_by_process: Iterable[Sequence[float]],
                 node: str = "local") -> list[ProcessRun]:
    """``ProcessRun`` records of one configuration from its processes' window throughputs (finite numbers > 0)."""
    out = [ProcessRun(config, tuple(float(v) for v in ws), node) for ws in windows_by_process if len(ws)]
    if any(v <= 0 or not math.isfinite(v) for r in out for v in r.windows):
        raise ValueError("throughputs must be finite numbers > 0")
    return out


def throughput_windows(result: TrialResult) -> list[float]:
    """Samples per second of each timed window."""
    return [w.samples_per_s for w in result.windows]


def runs_of(config: Hashable, results: Iterable[TrialResult], node: str = "local",
            windows: Callable[[TrialResult], list[float]] = throughput_windows) -> list[ProcessRun]:
    """One configuration's usable processes (status ok, with windows), in the order given."""
    return process_runs(config, [windows(r) for r in results if r.status == "ok"], node)


def centre(runs: Sequence[ProcessRun]) -> float:
    """The mean of the processes' log throughputs (what a comparison's ratio is a difference of)."""
    return math.fsum(r.log_mean for r in runs) / len(runs)


def level_interval(runs: Sequence[ProcessRun], noise: Noise, confidence: float = 0.95) -> tuple[float, float, float]:
    """One configuration's throughput, geometric mean of its processes, and its ``confidence`` interval from the
    pooled process noise: (low, mid, high) in samples/s (a level, not a comparison: a search's curve)."""
    mid = centre(runs)
    half = t_quantile(1.0 - (1.0 - confidence) / 2.0, noise.df) * noise.sd / math.sqrt(len(runs))
    return math.exp(mid - half), math.exp(mid), math.exp(mid + half)


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
    def pooled(cls, runs: Sequence[ProcessRun], prior_sd: float = PRIOR_SD, prior_df: int = PRIOR_DF) -> Noise:
        """Successive differences of each configuration's processes on each machine (in measurement order), plus the
        prior: a fast and a slow node are not noise, they are blocked away by the comparisons."""
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
class Policy:
    """How a comparison is judged and how much it may spend: the plan's ``decision`` section."""

    confidence: float = 0.95
    equivalence: float = 0.03
    max_runs: int = 4  # processes per candidate, the first included; also the number of looks Pocock plans for
    min_gain: float = 0.0  # looked at once: a faster or slower change smaller than this is "not significant"


#: one look, no equivalence margin: ``perftune compare`` and the node rows
ONCE = Policy(equivalence=0.0, max_runs=1)


def below_min_gain(ratio: float, min_gain: float) -> bool:
    """A change too small to count, however sure the interval is of it."""
    return abs(ratio - 1.0) < min_gain


@dataclass(frozen=True)
class Interval:
    """The one interval of a comparison and where it lies (``interval``): what the fresh-process and the paired
    models share once each has its difference, standard error and degrees of freedom."""

    outcome: IntervalOutcome
    ratio: float  # candidate / reference throughput (> 1: faster)
    ci_low: float
    ci_high: float
    p_value: float  # two-sided, for "no difference", scaled for the looks (x alpha / per-look alpha, capped at 1)
    df: float
    level: float  # the per-look confidence of the interval
    looks: int


def interval(diff: float, se: float, df: float, policy: Policy, looks: int) -> Interval:
    """The one interval and outcome: ``diff`` (log candidate - log reference) with standard error ``se`` and ``df``
    degrees of freedom, Student-t at the per-look level of Pocock's boundary for ``looks`` looks."""
    looks = max(1, looks)
    alpha = per_look_alpha(policy.confidence, looks)
    t_crit = t_quantile(1.0 - alpha / 2.0, df)
    low, high = math.exp(diff - t_crit * se), math.exp(diff + t_crit * se)
    p_raw = float(2.0 * stdtr(df, -abs(diff) / se)) if se > 0 else (0.0 if diff else 1.0)
    p_value = min(1.0, p_raw * (1.0 - policy.confidence) / alpha)
    margin = math.log1p(policy.equivalence)
    if low > 1.0:
        outcome: IntervalOutcome = "faster"
    elif high < 1.0:
        outcome = "slower"
    elif policy.equivalence > 0 and math.log(low) >= -margin and math.log(high) <= margin:
        outcome = "equivalent"
    else:
        outcome = "open"
    return Interval(outcome, math.exp(diff), low, high, p_value, float(df), 1.0 - alpha, looks)


def blocks_interval(differences: Sequence[float], confidence: float = 0.95) -> Optional[Interval]:
    """One paired process's own interval, from its blocks' log differences alone (looked at once, no equivalence
    margin): what a table shows beside each paired process.  None without two blocks."""
    n = len(differences)
    if n < 2:
        return None
    mean = math.fsum(differences) / n
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in differences) / (n - 1))
    return interval(mean, sd / math.sqrt(n), n - 1, Policy(confidence=confidence, equivalence=0.0, max_runs=1), 1)


@dataclass(frozen=True)
class PairedFacts:
    """What only a paired comparison has (``perftune.engine.paired``): its processes' ABBA blocks and the two
    variance components its interval rests on."""

    blocks: int  # the ABBA blocks of all its processes
    block_sd: float  # sd of one block's difference, within a process
    process_sd: float  # sd of the paired ratio between processes


@dataclass(frozen=True)
class Decision:
    """A comparison as it stands: the candidate/reference throughput ratio, its interval, and the outcome."""

    outcome: IntervalOutcome
    ratio: float  # candidate / reference throughput (> 1: faster)
    ci_low: float
    ci_high: float
    p_value: float  # two-sided, for "no difference", scaled for the looks (x alpha / per-look alpha, capped at 1)
    blocks: int  # candidate processes the comparison used (paired: its paired processes)
    reference_runs: int  # reference processes the comparison used
    df: float
    level: float  # the per-look confidence of the interval
    confidence: float  # the overall confidence the looks together keep
    noise_sd: float  # one process's sd (paired: of one paired process's mean difference)
    equivalence: float
    looks: int
    min_gain: float = 0.0
    contended: int = 0  # processes used although measured under contention
    remeasured: int = 0  # contended processes of either side measured again instead of being used
    paired: Optional[PairedFacts] = None  # both sides in one process, alternating windows; None: own processes
    futile: bool = False  # open, and stopped before its budget: the rest was unlikely to decide it (``sequential``)

    @classmethod
    def of(cls, iv: Interval, policy: Policy, *, blocks: int, reference_runs: int, noise_sd: float,
           contended: int = 0, remeasured: int = 0, paired: Optional[PairedFacts] = None) -> Decision:
        return cls(iv.outcome, iv.ratio, iv.ci_low, iv.ci_high, iv.p_value, blocks, reference_runs, iv.df, iv.level,
                   policy.confidence, noise_sd, policy.equivalence, iv.looks, policy.min_gain, contended, remeasured,
                   paired)

    @property
    def design(self) -> Design:
        return "paired" if self.paired is not None else "processes"

    @property
    def resolution(self) -> float:
        """The resolution reached: half the interval's width in log terms (about a relative change)."""
        return (math.log(self.ci_high) - math.log(self.ci_low)) / 2

    @property
    def verdict(self) -> ComparisonVerdict:
        """The answer of a comparison looked at once: faster or slower beyond ``min_gain``, else not significant."""
        if self.outcome in ("faster", "slower") and not below_min_gain(self.ratio, self.min_gain):
            return self.outcome  # type: ignore[return-value]
        return "not significant"


def estimate(diff: float, se: float, noise: Noise, policy: Policy, looks: int, candidate: Sequence[ProcessRun],
             reference: Sequence[ProcessRun]) -> Decision:
    """The fresh-process model's decision: ``interval`` under the pooled noise's degrees of freedom; ``candidate``
    and ``reference``: the processes of each side it used."""
    used = [*candidate, *reference]
    return Decision.of(interval(diff, se, noise.df, policy, looks), policy, blocks=len(candidate),
                       reference_runs=len(reference), noise_sd=noise.sd, contended=sum(r.contended for r in used),
                       remeasured=sum(r.remeasured for r in used))


def unpaired(reference: Sequence[ProcessRun], candidate: Sequence[ProcessRun], noise: Noise) -> tuple[float, float]:
    """The difference of the two sides' mean log throughput and its variance (processes independent)."""
    return centre(candidate) - centre(reference), noise.var * (1.0 / len(reference) + 1.0 / len(candidate))


def compare(reference: Sequence[ProcessRun], candidate: Sequence[ProcessRun], noise: Noise,
            policy: Policy = ONCE) -> Decision:
    """Candidate vs reference as two independent groups of processes, looked at once (``perftune compare``)."""
    diff, var = unpaired(reference, candidate, noise)
    return estimate(diff, math.sqrt(var), noise, policy, 1, candidate, reference)


def runs_needed(noise_sd: float, effect: float, confidence: float = 0.95, max_runs: int = 4,
                df: float = 30.0, per_block: float = 1.5) -> int:
    """About how many candidate processes resolve a relative ``effect``: ``per_block`` is one block's variance in
    units of ``noise_sd**2`` (1.5 for a candidate process between two reference ones; 1 for a paired process, whose
    ``noise_sd`` is already its own)."""
    alpha = per_look_alpha(confidence, max_runs)
    t = float(sps.t.ppf(1.0 - alpha / 2.0, df))
    effect = max(abs(effect), 1e-3)
    return max(1, math.ceil(per_block * noise_sd**2 * (t / math.log1p(effect)) ** 2))


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
