"""Paired windows in one process: a data-pipeline change compared without the noise between processes.

Why: two processes of one configuration differ by 9-24% on these machines (start-up, memory layout, where the threads
land), while windows inside one process agree to a few percent, and 87-92% of a fresh process is fixed cost.  A change
that touches only the data pipeline (``Knob.pairable``, or a workload's ``DATA_PARAMS``) can be measured inside one
process instead: the model is built and compiled once, two pipelines (reference A, candidate B) feed it, and the timed
windows alternate in ABBA / BAAB blocks (``burst.arms.pair_schedule``), each switch preceded by an untimed drain of the
new pipeline's queue (``burst.drain``).  Each block gives one paired difference ``mean log B - mean log A``; linear
drift cancels within a block, and whatever slows the process slows both arms.  A model-side change
(``Knob.model_pairable``: AMP level, loss scale, batch size, gradient accumulation, recompute, train step, jit level) is
paired too, with two models: each arm builds its own network, optimizer and step from the same seed and is fed by its
own pipeline, where both fit in memory (``fits_twice``): one process, so one noise, for changes a pipeline cannot carry.
Knobs that change process-wide state (mode, graph kernel, threads, distributed) stay fresh-process comparisons
(``sequential.py``): MindSpore holds them once per process.  The designs answer the same question, "is B faster than A",
and a benchmark (``experiments/benchmarks/verdicts.py``) checks that they agree.

The model of a paired difference: ``d_jk = mu + u_j + e_jk`` for block ``k`` of process ``j``: ``e`` the window
noise left after pairing (``sigma``, pooled within processes), ``u`` what differs between processes in the
*ratio* (``tau``: small, as both arms share the process, but not zero).  Each is shrunk towards a prior, as the
process noise is (``stats.Noise``), so one process never gives a too-narrow interval; the interval is Student-t
with Welch-Satterthwaite degrees of freedom, at the per-look level of Pocock's boundary (``stats.estimate``).

Pure functions over measurements: no processes, no clocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Hashable, Optional, Sequence

from perftune import knobs
from perftune.engine.stats import Decision, PairedFacts, Policy, interval
from perftune.io.records import TrialResult, TrialSpec
from perftune.io.sweep_records import PairedProcess
from perftune.words.format import speed_text
from perftune.workloads import DATA_PARAMS

#: prior sd of one block's paired difference (log), and its pseudo degrees of freedom (where these constants come
#: from: experiments/benchmarks/README.md, "The engine's constants")
BLOCK_PRIOR_SD = 0.03
BLOCK_PRIOR_DF = 2
#: prior sd of the paired ratio between processes of one arm order (``tau``), and its pseudo degrees of freedom:
#: the larger of ``PROCESS_PRIOR_SD`` and ``PROCESS_PRIOR_SHARE`` x the block sd: a noisier process's ratio also
#: moves more between processes
PROCESS_PRIOR_SD = 0.01
PROCESS_PRIOR_SHARE = 0.4
PROCESS_PRIOR_DF = 4
#: two models may share a process where their first processes' peak memory together is at most this share of what
#: the machine has available
MEMORY_SHARE = 0.7
#: the arm effect: two pipelines of one configuration in one process differ by about this much (arm 1 slower,
#: whichever was built first and whichever arm the schedule starts with).  Processes alternate the arm order
#: (``counterbalanced``); with both orders measured the effect cancels, with one only it is an unknown bias of this
#: size, added to the variance
ARM_EFFECT_SD = 0.015


def differing(reference: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(reference) | set(candidate) if reference.get(k) != candidate.get(k))


def pairable_change(reference: dict[str, Any], candidate: dict[str, Any], workload: str,
                    ref_params: Optional[dict] = None, cand_params: Optional[dict] = None) -> Optional[str]:
    """Why ``candidate`` can be compared with ``reference`` in one process (a short text), or None: every knob that
    differs is ``pairable`` (a pipeline's own argument) or ``model_pairable`` (one model's own objects: two models
    then share the process), and every workload parameter that differs is one of the workload's data parameters."""
    differ = differing(reference, candidate)
    ref_params, cand_params = ref_params or {}, cand_params or {}
    params = sorted(k for k in set(ref_params) | set(cand_params) if ref_params.get(k) != cand_params.get(k))
    if not differ and not params:
        return "the same configuration (an A/A check)"
    if not all(knobs.pairable(k) or knobs.model_pairable(k) for k in differ):
        return None
    if params and not set(params) <= set(DATA_PARAMS.get(workload, ())):
        return None
    if knobs.model_change(reference, candidate):
        return "two models in one process (" + ", ".join(differ + params) + ")"
    return "only the data pipeline differs (" + ", ".join(differ + params) + ")"


def fits_twice(reference: Optional[TrialResult], candidate: Optional[TrialResult],
               available_bytes: Optional[int]) -> bool:
    """Whether both models fit one process: their first processes' peak host memory together within
    ``MEMORY_SHARE`` of ``available_bytes`` (``available_memory``); never off CPU (a device's capacity is not known
    to perftune) nor without both first processes' memory."""
    if reference is None or candidate is None or reference.device != "CPU":
        return False
    peaks = [r.memory.host_rss_peak_bytes for r in (reference, candidate)]
    return available_bytes is not None and None not in peaks and sum(peaks) <= MEMORY_SHARE * available_bytes


def pairing(reference: TrialSpec, candidate: TrialSpec, reference_first: Optional[TrialResult],
            candidate_first: Optional[TrialResult]) -> Optional[str]:
    """Why two configurations (their first processes' specs) can share a paired process, or None: never a script
    or a distributed burst; two models only where both fit (``fits_twice``, from their finished first processes)."""
    if reference.script is not None or int(reference.knobs["workers"]) > 1 or int(candidate.knobs["workers"]) > 1:
        return None
    why = pairable_change(reference.knobs, candidate.knobs, reference.workload, reference.workload_params,
                          candidate.workload_params)
    if why is None or not knobs.model_change(reference.knobs, candidate.knobs):
        return why
    return why if fits_twice(reference_first, candidate_first, available_memory()) else None


def available_memory() -> Optional[int]:
    """The machine's available memory in bytes (``MemAvailable``, Linux), or None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass(frozen=True)
class PairedRun:
    """One paired process: each block's ``mean log B - mean log A`` (candidate over reference throughput), and
    whether it ran the candidate as arm 0 (``swapped``)."""

    reference: Hashable
    candidate: Hashable
    differences: tuple[float, ...]
    node: str = "local"
    contended: int = 0  # contended windows
    windows: int = 0
    swapped: bool = False

    @property
    def mean(self) -> float:
        return math.fsum(self.differences) / len(self.differences)


def paired_run(reference: Hashable, candidate: Hashable, result: TrialResult, node: str = "local",
               swapped: bool = False) -> Optional[PairedRun]:
    """A paired process's blocks from its windows (in order, four per block); None when it has no whole block.
    ``swapped``: the process ran the candidate as arm 0 (``counterbalanced``), so its differences change sign."""
    windows = [w for w in result.windows if w.samples_per_s > 0]
    differences = []
    for start in range(0, len(windows) - 3, 4):
        block = windows[start:start + 4]
        logs = {arm: [math.log(w.samples_per_s) for w in block if w.arm == arm] for arm in (0, 1)}
        if logs[0] and logs[1]:
            d = sum(logs[1]) / len(logs[1]) - sum(logs[0]) / len(logs[0])
            differences.append(-d if swapped else d)
    if not differences:
        return None
    return PairedRun(reference, candidate, tuple(differences), node, sum(w.contended for w in result.windows),
                     len(windows), swapped)


def counterbalanced(replicate: int) -> bool:
    """Whether paired process ``replicate`` runs the candidate as arm 0: every other one (``ARM_EFFECT_SD``)."""
    return replicate % 2 == 1


@dataclass(frozen=True)
class PairedNoise:
    """The variance components of paired differences: within a process (per block), between processes of one arm
    order, and the arm effect (cancelled when both orders were measured), with their degrees of freedom."""

    block_var: float
    block_df: int
    process_var: float
    process_df: int
    blocks_per_process: float

    @property
    def block_sd(self) -> float:
        return math.sqrt(self.block_var)

    @property
    def process_sd(self) -> float:
        return math.sqrt(self.process_var)


def orders(runs: Sequence[PairedRun]) -> list[list[PairedRun]]:
    """The runs by arm order (one or two groups)."""
    return [g for g in ([r for r in runs if not r.swapped], [r for r in runs if r.swapped]) if g]


def paired_noise(runs: Sequence[PairedRun], prior_share: float = PROCESS_PRIOR_SHARE) -> PairedNoise:
    """Pooled within-process block variance and the between-process variance within an arm order, each shrunk to
    its prior (the latter's scaled with the block sd: ``prior_share``, ``PROCESS_PRIOR_SHARE`` but where a
    benchmark weighs another)."""
    ss, df = 0.0, 0
    for r in runs:
        m = r.mean
        ss += math.fsum((d - m) ** 2 for d in r.differences)
        df += len(r.differences) - 1
    block_var = (BLOCK_PRIOR_DF * BLOCK_PRIOR_SD**2 + ss) / (BLOCK_PRIOR_DF + df)
    n = sum(len(r.differences) for r in runs) / len(runs) if runs else 1.0
    observed, pdf = 0.0, 0
    for group in orders(runs):
        if len(group) > 1:
            means = [r.mean for r in group]
            centre = math.fsum(means) / len(means)
            spread = math.fsum((m - centre) ** 2 for m in means)
            observed += max(0.0, spread - (len(means) - 1) * block_var / n)
            pdf += len(means) - 1
    prior_sd = max(PROCESS_PRIOR_SD, prior_share * math.sqrt(block_var))
    process_var = (PROCESS_PRIOR_DF * prior_sd**2 + observed) / (PROCESS_PRIOR_DF + pdf)
    return PairedNoise(block_var, BLOCK_PRIOR_DF + df, process_var, PROCESS_PRIOR_DF + pdf, n)


def decide_paired(runs: Sequence[PairedRun], policy: Policy, looks: Optional[int] = None,
                  prior_share: float = PROCESS_PRIOR_SHARE) -> Optional[Decision]:
    """The comparison from ``runs`` (one candidate's paired processes against one reference); None without any.

    With both arm orders: the mean of the two orders' means (the arm effect cancels), variance
    ``(tau^2 + sigma^2 / n) / 4 x (1 / P_0 + 1 / P_1)``; with one order: its mean, variance
    ``(tau^2 + sigma^2 / n) / P + ARM_EFFECT_SD^2`` (the uncancelled arm effect).  Welch-Satterthwaite df."""
    if not runs:
        return None
    noise = paired_noise(runs, prior_share)
    groups = orders(runs)
    unit = noise.block_var / noise.blocks_per_process + noise.process_var  # one process mean's variance
    if len(groups) == 2:
        diff = sum(math.fsum(r.mean for r in g) / len(g) for g in groups) / 2
        scale = (1 / len(groups[0]) + 1 / len(groups[1])) / 4
        bias = 0.0
    else:
        diff = math.fsum(r.mean for r in runs) / len(runs)
        scale, bias = 1 / len(runs), ARM_EFFECT_SD**2
    a = noise.block_var / noise.blocks_per_process * scale
    b = noise.process_var * scale
    var = a + b + bias
    # the bias is a prior's: its df is the block prior's (few), so one process never looks sharper than it is
    df = var**2 / (a**2 / noise.block_df + b**2 / noise.process_df + bias**2 / BLOCK_PRIOR_DF)
    # the t quantile's df as the fresh model's noise gives it: whole degrees of freedom, at least one
    iv = interval(diff, math.sqrt(var), max(1, int(df)), policy, policy.max_runs if looks is None else looks)
    facts = PairedFacts(blocks=sum(len(r.differences) for r in runs), block_sd=noise.block_sd,
                        process_sd=noise.process_sd)
    return Decision.of(iv, policy, blocks=len(runs), reference_runs=len(runs), noise_sd=math.sqrt(unit),
                       contended=sum(r.contended > 0 for r in runs), paired=facts)


def paired_record(spec: TrialSpec, result: TrialResult, run: Optional[PairedRun], reference: str, candidate: str,
                  reused: bool) -> PairedProcess:
    """A paired process as ``results.json`` records it (``reference`` and ``candidate``: the configurations' labels)."""
    return PairedProcess(
        trial_id=spec.trial_id, reference=reference, candidate=candidate, replicate=spec.replicate,
        swapped=counterbalanced(spec.replicate), status=result.status,
        reason=result.reason or ("" if run else "no whole ABBA block"), windows=len(result.windows),
        differences=list(run.differences) if run else [], contended_windows=result.contended_windows,
        wall_s=result.wall_s, timed_s=sum(w.total_ms for w in result.windows) / 1e3, reused=reused)


def paired_line(label: str, record: PairedProcess, run: Optional[PairedRun]) -> str:
    """The progress line of a finished paired process."""
    if run is None:
        return f"  {label}: {record.status}: {record.reason}"
    return (f"  {label}: {speed_text(math.exp(run.mean), digits=3)} over {len(run.differences)} blocks"
            + (" (reused)" if record.reused else ""))
