"""A change's peak memory against its reference's, with its interval: the memory half of a verdict.

A memory-saving change (recompute, gradient accumulation) is often slower: its speed verdict alone ("undecided
x1.20 slower") hides what it is for.  So every comparison also carries the peak-memory ratio of the same two
configurations, over the processes each was measured in, by ``perftune.engine.stats``'s one model: each process
gives the log of its peak (a ``ProcessRun`` of one value), the noise between processes is pooled over every
configuration of the sweep and shrunk towards ``MEMORY_PRIOR_SD`` (peaks vary far less between processes than
throughput does), and ``stats.compare`` gives the ratio and its interval, looked at once.

The measure is the device peak where every process of both sides has one (GPU, Ascend), else the host RSS peak
(``ru_maxrss``; on CPU the memory ``burst.memory_limit_mb`` bounds, which the kernel charges somewhat below the RSS:
shared library pages are charged to whoever loaded them first).  Under ``burst.memory_limit_mb`` the comparison
also says how much memory the change frees against the limit: what decides whether a larger batch fits.
"""

from __future__ import annotations

import math
from typing import Hashable, Mapping, Optional, Sequence

from perftune.engine.stats import Noise, Policy, ProcessRun, compare
from perftune.io.plan import Plan
from perftune.io.records import TrialResult
from perftune.io.sweep_records import ComparisonRecord, MemoryComparison, SweepTrial

#: prior sd of log peak memory between two processes of one configuration (a process's peak moves by about 1-2%
#: with allocator and page-cache timing), with ``stats.PRIOR_DF`` pseudo degrees of freedom
MEMORY_PRIOR_SD = 0.02
MB = 2**20


def peak(result: TrialResult, measure: str) -> Optional[int]:
    """The process's peak in bytes by ``measure`` (None: not measured or not ok)."""
    if result.status != "ok":
        return None
    value = result.memory.device_peak_bytes if measure == "device" else result.memory.host_rss_peak_bytes
    return value if value and value > 0 else None


def measure_of(results: Sequence[TrialResult]) -> str:
    """``device`` where every process has a device peak, else ``host_rss``."""
    ok = [r for r in results if r.status == "ok"]
    return "device" if ok and all(peak(r, "device") for r in ok) else "host_rss"


def memory_runs(of: Mapping[Hashable, Sequence[SweepTrial]], measure: str) -> list[ProcessRun]:
    """Every measured process of the sweep as a ``ProcessRun`` of its one peak, in measurement order per
    configuration (what the pooled noise takes)."""
    runs = []
    for key, trials in of.items():
        for t in trials:
            value = peak(t.result, measure)
            if value is not None and not t.excluded:
                runs.append(ProcessRun(key, (float(value),)))
    return runs


def memory_comparison(of: Mapping[Hashable, Sequence[SweepTrial]], candidate: Hashable, reference: Hashable,
                      confidence: float, limit_mb: Optional[float] = None) -> Optional[MemoryComparison]:
    """``candidate``'s peak memory against ``reference``'s (the processes in ``of``, by configuration); None where
    either side has no measured peak."""
    sides = [t.result for key in (candidate, reference) for t in of.get(key, [])]
    measure = measure_of(sides)
    runs = memory_runs(of, measure)
    cand = [r for r in runs if r.config == candidate]
    ref = [r for r in runs if r.config == reference]
    if not cand or not ref:
        return None
    noise = Noise.pooled(runs, prior_sd=MEMORY_PRIOR_SD)
    d = compare(ref, cand, noise, Policy(confidence=confidence, equivalence=0.0, max_runs=1))  # looked at once
    cand_mb = math.exp(sum(r.log_mean for r in cand) / len(cand)) / MB
    ref_mb = math.exp(sum(r.log_mean for r in ref) / len(ref)) / MB
    return MemoryComparison(measure=measure, ratio=d.ratio, ci_low=d.ci_low, ci_high=d.ci_high,
                            processes=len(cand), reference_processes=len(ref), candidate_mb=cand_mb,
                            reference_mb=ref_mb, limit_mb=limit_mb,
                            frees_mb=ref_mb - cand_mb if limit_mb is not None else None)


def with_memory(c: Optional[ComparisonRecord], of: Mapping[Hashable, Sequence[SweepTrial]], candidate: Hashable,
                reference: Hashable, plan: Plan) -> Optional[ComparisonRecord]:
    """``c`` with the same two configurations' peak memory compared (at the plan's confidence, and against its
    ``burst.memory_limit_mb``); None stays None."""
    if c is not None:
        c.memory = memory_comparison(of, candidate, reference, plan.decision.confidence, plan.burst.memory_limit_mb)
    return c
