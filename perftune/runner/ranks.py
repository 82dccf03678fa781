"""A distributed trial's result from its ranks' results: the slowest rank sets the pace.

Throughput is *global batch x steps / the slowest rank's window time* per timed window (data parallel steps are
synchronous); step times are the slowest rank's (``straggler_rank``); ``rank_spread`` = (slowest - fastest) /
fastest median step; per-rank splits and top ops are in ``ranks``; the result's ``ProfileSummary.splits`` is the
mean of the ranks' splits (it still adds up); its ``ProfileSummary.communication_share`` is the mean over ranks of
communication / step, flagged above ``COMMUNICATION_FLAG_SHARE``.
"""

from __future__ import annotations

import socket

import numpy as np

from perftune.io.derived import rank_summary, throughput
from perftune.io.files import rank_dir_name, rank_log_name
from perftune.io.records import COMMUNICATION_FLAG_SHARE, Note, RankSummary, Splits, TrialResult, TrialSpec, WindowStats


def aggregate(spec: TrialSpec, local: dict[int, TrialResult], workers: int, nodes: int) -> TrialResult:
    """The trial's result from this node's rank results (each holds every rank's summary, exchanged at the end)."""
    base_rank = min(local)
    base = local[base_rank].model_copy(deep=True)
    ranks = _rank_summaries(base, local, workers)
    batch = int(spec.knobs["batch_size"])
    base.samples_per_step = batch
    _timing(base, ranks, batch)
    _accuracy_and_memory(base, ranks)
    _profile(base, ranks, base_rank)
    base.notes.append(Note(kind="info", text=(
        f"{workers} ranks under msrun on {nodes} node(s): samples/s = global batch {batch} x steps / "
        f"the slowest rank's window time; step times are the slowest rank's (rank {base.straggler_rank}); "
        f"per-rank figures in ranks[]")))
    return base


def _rank_summaries(base: TrialResult, local: dict[int, TrialResult], workers: int) -> list[RankSummary]:
    """Every rank's summary (as exchanged; this node's only where they were not), set on ``base``."""
    ranks = sorted(base.ranks, key=lambda s: s.rank) if base.ranks else []
    if not ranks:
        ranks = [rank_summary(res, r, rank_dir_name(r), rank_log_name(r), host=socket.gethostname())
                 for r, res in sorted(local.items())]
        base.notes.append(Note(kind="warning", text="the ranks did not exchange their summaries: figures cover "
                                                    "this node's ranks only"))
    for s in ranks:  # folders and logs of other machines' ranks are not here
        if s.rank not in local:
            s.result_dir, s.log_file = None, None
    if len(ranks) != workers:
        base.notes.append(Note(kind="warning", text=f"{len(ranks)} of {workers} ranks reported"))
    base.ranks = ranks
    base.world_size = workers
    return ranks


def _timing(base: TrialResult, ranks: list[RankSummary], batch: int) -> None:
    """Throughput per window (the global batch over the slowest rank's time), the slowest rank's step times."""
    n_windows = min(len(s.windows) for s in ranks)
    windows = []
    for w in range(n_windows):
        slowest = max(s.windows[w].total_ms for s in ranks)
        steps = ranks[0].windows[w].steps
        windows.append(WindowStats(steps=steps, total_ms=slowest,
                                   median_step_ms=max(s.windows[w].median_step_ms for s in ranks),
                                   samples_per_s=steps * batch / (slowest / 1e3)))
    base.windows = windows
    if windows:
        base.samples_per_s = throughput(windows)  # batch / mean step, over the slowest rank's windows
        if base.tokens_per_sample:
            base.tokens_per_s = base.samples_per_s * base.tokens_per_sample
    timed = [s for s in ranks if s.step_ms_median is not None]
    if timed:
        slow = max(timed, key=lambda s: s.step_ms_median)
        fast = min(timed, key=lambda s: s.step_ms_median)
        base.straggler_rank = slow.rank
        base.rank_spread = (slow.step_ms_median - fast.step_ms_median) / fast.step_ms_median
        base.step_ms_median, base.step_ms_p10 = slow.step_ms_median, slow.step_ms_p10
        base.step_ms_p90 = slow.step_ms_p90
        base.data_wait_ms_median = slow.data_wait_ms_median
    compiles = [s.compile_ms for s in ranks if s.compile_ms is not None]
    base.compile_ms = max(compiles) if compiles else base.compile_ms


def _accuracy_and_memory(base: TrialResult, ranks: list[RankSummary]) -> None:
    """Each rank saw its share of every global batch: the global training loss is the mean over ranks; memory
    peaks are the largest rank's."""
    if base.accuracy is not None:
        acc = base.accuracy
        if all(s.train_loss is not None for s in ranks):
            acc.train_loss = float(np.mean([s.train_loss for s in ranks]))
        acc.nonfinite = acc.nonfinite or any(s.nonfinite for s in ranks)
        curves = [s.loss_curve for s in ranks]
        if curves and all(len(c) == len(curves[0]) and c for c in curves):
            acc.loss_curve = [(curves[0][i][0], float(np.mean([c[i][1] for c in curves])))
                              for i in range(len(curves[0]))]
    peaks = [s.host_rss_peak_bytes for s in ranks if s.host_rss_peak_bytes]
    base.memory.host_rss_peak_bytes = max(peaks) if peaks else base.memory.host_rss_peak_bytes
    allocs = [s.allocator_peak_bytes for s in ranks if s.allocator_peak_bytes]
    base.memory.allocator_peak_bytes = max(allocs) if allocs else base.memory.allocator_peak_bytes


def _profile(base: TrialResult, ranks: list[RankSummary], base_rank: int) -> None:
    """The profile's paths below the base rank's folder, the ranks' mean splits and communication share."""
    p = base.profile
    if p is None:
        return
    prefix = rank_dir_name(base_rank)
    if p.profile_dir:
        p.profile_dir = f"{prefix}/{p.profile_dir}"
    if p.trace_file:
        p.trace_file = f"{prefix}/{p.trace_file}"
    splits = [s.splits for s in ranks if s.splits is not None]
    if splits and len(splits) == len(ranks):
        p.splits = mean_splits(splits)
    shares = [s.communication_share for s in ranks if s.communication_share is not None]
    if shares:
        p.communication_share = float(np.mean(shares))
        p.communication_flag = p.communication_share > COMMUNICATION_FLAG_SHARE
        if p.communication_flag:
            base.notes.append(Note(kind="warning", text=f"communication is {p.communication_share:.0%} of the "
                                   f"step (mean over ranks), above {COMMUNICATION_FLAG_SHARE:.0%}"))


def mean_splits(splits: list[Splits]) -> Splits:
    """The element-wise mean of the ranks' splits: each rank's add up to its step, so the mean's add up too
    (``recompute_ms``, a part of backward, too, where every rank has it)."""
    fields = ("step_ms", "data_ms", "forward_ms", "backward_ms", "optimizer_ms", "communication_ms", "other_ms",
              "explained_share")
    mean = {f: float(np.mean([getattr(s, f) for s in splits])) for f in fields}
    # recompute is a part of backward: averaged only where every rank could place it (else unknown, not zero)
    recompute = [s.recompute_ms for s in splits]
    mean["recompute_ms"] = float(np.mean(recompute)) if all(r is not None for r in recompute) else None
    source = f"mean over {len(splits)} ranks of each rank's splits (per rank: ranks[].splits); rank 0: " \
             f"{splits[0].step_source}"
    return Splits(**mean, step_source=source)
