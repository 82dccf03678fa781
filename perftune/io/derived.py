"""What is derived from the typed records rather than stored as typed: THE throughput of a trial, the result of a
trial that measured nothing, one rank's summary.  Kept apart from ``records`` so that module holds only the records."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from perftune.io.records import RankSummary, TrialResult, TrialSpec, TrialStatus, WindowStats


def throughput(windows: list[WindowStats]) -> Optional[float]:
    """THE samples/s of a trial: every sample its timed windows took over their summed time, i.e. batch / mean step
    (``TrialResult.step_ms_mean``).  Not the median of the windows' throughputs: that is another number (2.451 vs
    8 / 3511.6 ms = 2.278 on one trial); the windows' own figures stay for the statistics."""
    total_ms = sum(w.total_ms for w in windows)
    if total_ms <= 0:
        return None
    return sum(w.samples_per_s * w.total_ms for w in windows) / total_ms  # each window: samples x 1e3


def failed_result(spec: TrialSpec, status: TrialStatus, reason: Optional[str], **fields: Any) -> TrialResult:
    """The result of a trial that measured nothing: what was asked (from ``spec``), the status and why."""
    return TrialResult(trial_id=spec.trial_id, status=status, reason=reason, workload=spec.workload,
                       device=spec.device, knobs=spec.knobs, burst=spec.burst, **fields)


def rank_summary(result: TrialResult, rank: int, result_dir: Optional[str], log_file: Optional[str],
                 host: Optional[str] = None, node_rank: Optional[int] = None,
                 pid: Optional[int] = None) -> RankSummary:
    """One rank's ``RankSummary`` from its own ``TrialResult``."""
    p = result.profile
    splits = p.splits if p is not None else None
    acc = result.accuracy
    return RankSummary(
        rank=rank, host=host, node_rank=node_rank, pid=pid, result_dir=result_dir, log_file=log_file,
        status=result.status,
        samples_per_s=result.samples_per_s,
        step_ms_median=result.step_ms_median,
        step_ms_p10=result.step_ms_p10,
        step_ms_p90=result.step_ms_p90,
        data_wait_ms_median=result.data_wait_ms_median,
        compile_ms=result.compile_ms,
        windows=list(result.windows),
        train_loss=acc.train_loss if acc else None,
        nonfinite=bool(acc.nonfinite) if acc else False,
        loss_curve=list(acc.loss_curve) if acc else [],
        splits=splits,
        top_ops=list(p.top_ops) if p is not None else [],
        communication_share=(splits.communication_ms / splits.step_ms) if splits and splits.step_ms else None,
        profile_error=p.error if p is not None else None,
        host_rss_peak_bytes=result.memory.host_rss_peak_bytes,
        allocator_peak_bytes=result.memory.allocator_peak_bytes,
    )


def _differ(stored: float, derived: float) -> bool:
    return abs(stored - derived) > 1e-9 * max(abs(stored), abs(derived))


def derived_mismatch(result: TrialResult) -> Optional[str]:
    """Why a result's stored throughput is not what its windows give, or None (a figure edited in a file whose
    every other field is intact).  Recomputed from the windows: ``throughput``, or the median of the windows'
    figures that older files stored (a paired process: its reference arm's windows, arm 0);
    tokens/s is samples/s x tokens per sample."""
    stored = result.samples_per_s
    if result.status != "ok" or not result.windows or stored is None:
        return None
    own = [w for w in result.windows if w.arm == 0] or list(result.windows)
    figures = sorted(w.samples_per_s for w in own)
    mid = len(figures) // 2
    median = figures[mid] if len(figures) % 2 else (figures[mid - 1] + figures[mid]) / 2
    derived = throughput(own)
    if derived is not None and _differ(stored, derived) and _differ(stored, median):
        return (f"trial {result.trial_id} stores samples_per_s {stored:.6g}, its timed windows give {derived:.6g}: "
                "the file was edited or corrupted")
    if result.tokens_per_s is not None and result.tokens_per_sample and \
            _differ(result.tokens_per_s, stored * result.tokens_per_sample):
        return (f"trial {result.trial_id} stores tokens_per_s {result.tokens_per_s:.6g}, its samples/s give "
                f"{stored * result.tokens_per_sample:.6g}: the file was edited or corrupted")
    return None


#: the phases whose steps run the training step: its compiles, as against the build's and the validation's
STEP_PHASES = ("accuracy", "warmup", "timed", "profiled")


def step_compiles(result: TrialResult) -> dict[str, int]:
    """``result.compiles`` of the training step's phases (one graph per model: every phase runs the same graph)."""
    return {k: v for k, v in result.compiles.items() if k in STEP_PHASES}


#: divergence (``loss_rise``): the last quarter's median training loss above this many times the first steps'
DIVERGED_FACTOR = 2.0
DIVERGED_HEAD_STEPS = 3  # the first steps' median: of this many updates (one odd first update does not move it)
DIVERGED_MIN_STEPS = 8  # fewer finite losses than this: too few for the rule


def loss_rise(losses: Sequence[float]) -> Optional[tuple[float, float]]:
    """(first steps' median, last quarter's median) of an accuracy window's finite training losses where training
    diverged, else None.  The rule: with at least ``DIVERGED_MIN_STEPS`` losses, the median of the last quarter of
    them is above ``DIVERGED_FACTOR`` x the median of the first ``DIVERGED_HEAD_STEPS`` (a positive one).  Medians,
    so one spike at either end decides nothing."""
    if len(losses) < DIVERGED_MIN_STEPS:
        return None
    head = float(np.median(losses[:DIVERGED_HEAD_STEPS]))
    tail = float(np.median(losses[-max(len(losses) // 4, 1):]))
    return (head, tail) if head > 0 and tail > DIVERGED_FACTOR * head else None
