"""From step records to a trial's figures, for the one phase machine (``meter.Meter``) whichever route drives it:
perftune's own step loop (``own_workload.Burst``), a script's ``Model.train`` or custom loop, ``perftune.Callback``."""

from __future__ import annotations

import math
import os
import resource
from collections import Counter
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from perftune.burst import contention
from perftune.burst.failures import one_line
from perftune.io.derived import loss_rise, throughput
from perftune.io.plan import BurstSettings
from perftune.io.records import Accuracy, Note, ProfileSummary, StepRecord, TrialResult, TrialSpec, WindowStats
from perftune.knobs import model_change
from perftune.words.lm import diverged_text, nonfinite_loss_text

LOSS_TAIL_STEPS = 5  # the training loss at N samples is the mean of this many last steps


def finite_or_none(value: float) -> Optional[float]:
    return value if math.isfinite(value) else None


def figure(value: Any) -> tuple[bool, Optional[float]]:
    """(is it one number, its value or None where NaN/Inf) of a Tensor, a NumPy value or a number."""
    try:
        number = float(value.asnumpy()) if hasattr(value, "asnumpy") else float(value)
    except (TypeError, ValueError):  # None, a string, an array of several values
        return False, None
    return True, finite_or_none(number)


def loss_value(loss: Any) -> Optional[float]:
    """A step's loss as a float: a Tensor, a NumPy value, a number, or a tuple/list whose first item is the loss
    (``Model.train``'s ``net_outputs`` with loss scaling is ``(loss, overflow, scale)``)."""
    if isinstance(loss, (tuple, list)):
        loss = loss[0] if loss else None
    return figure(loss)[1]


def read_memory(result: TrialResult, device: str) -> None:
    """The process's host peak (``ru_maxrss``) and, off CPU, the device allocator's peak (0 on CPU: not read)."""
    result.memory.host_rss_peak_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if device == "CPU":
        return
    import mindspore as ms

    try:
        result.memory.device_peak_bytes = int(ms.runtime.max_memory_allocated())
    except Exception as exc:  # noqa: BLE001 - memory is a nice-to-have, never a failure
        result.notes.append(Note(kind="warning", text=f"device peak memory unavailable: {one_line(exc)}"))


def training_accuracy(records: list[StepRecord], samples_seen: int, lr_scale: float,
                      with_norms: bool = True) -> Accuracy:
    """The accuracy window's training-loss figures (validation is the caller's).  ``with_norms``: the steps
    measured their gradient norm (a missing one then means NaN/Inf); a script's steps do not."""
    losses = [r.loss for r in records]
    norms = [r.grad_norm for r in records]
    nonfinite = any(v is None for v in losses) or (with_norms and any(v is None for v in norms))
    tail = [v for v in losses[-LOSS_TAIL_STEPS:] if v is not None]
    return Accuracy(
        samples_seen=samples_seen,
        updates=len(records),
        lr_scale=lr_scale,
        train_loss=float(np.mean(tail)) if tail and not nonfinite else None,
        max_grad_norm=max((v for v in norms if v is not None), default=None),
        final_grad_norm=norms[-1] if norms else None,
        nonfinite=nonfinite,
        loss_curve=[(r.samples_seen, r.loss) for r in records if r.loss is not None],
    )


def divergence_note(records: list[StepRecord]) -> Optional[Note]:
    """A warning where the accuracy window's training loss diverged (``io.derived.loss_rise``'s rule, or a loss that
    became NaN/Inf after finite ones), else None; the gate's verdicts are unchanged.  A window with no loss at all (a
    script reporting none) says nothing."""
    losses = [r.loss for r in records]
    finite = [v for v in losses if v is not None]
    if not finite:
        return None
    first_finite = next(i for i, v in enumerate(losses) if v is not None)
    bad = next((i for i, v in enumerate(losses) if v is None and i > first_finite), None)
    if bad is not None:
        return Note(kind="warning", text=nonfinite_loss_text(bad + 1, len(losses), losses[bad - 1]))
    rise = loss_rise(finite)
    return Note(kind="warning", text=diverged_text(*rise, len(losses))) if rise else None


#: a timed window takes at most this many times ``burst.steps`` steps, however short the steps are
MAX_WINDOW_FACTOR = 100


def calibrated_window_steps(burst: BurstSettings, warm_ms: list[float]) -> tuple[int, Optional[Note]]:
    """Steps per timed window: ``burst.steps``, or more where ``burst.min_window_s`` asks for longer windows.

    As pyperf and timeit calibrate their loops: the step time is the median of the warm-up steps after the
    first (which compiled), and the window gets enough steps to last ``min_window_s`` (at most
    ``MAX_WINDOW_FACTOR`` x ``steps``).
    """
    warm = warm_ms[1:]
    if not burst.min_window_s or not warm:
        return burst.steps, None
    per_step_ms = max(float(np.median(warm)), 1e-3)
    steps = min(max(burst.steps, math.ceil(burst.min_window_s * 1e3 / per_step_ms)), MAX_WINDOW_FACTOR * burst.steps)
    if steps == burst.steps:
        return steps, None
    return steps, Note(kind="info", text=(
        f"timed windows calibrated to {steps} steps (warm-up step {per_step_ms:.1f} ms, "
        f"burst.min_window_s={burst.min_window_s:g}; burst.steps={burst.steps} is the minimum)"))


def window_stats(window: list[StepRecord], total_ms: float, samples: int,
                 guard: contention.Contention) -> WindowStats:
    """One timed window; ``samples``: all samples its steps took."""
    return WindowStats(
        steps=len(window), total_ms=total_ms, median_step_ms=float(np.median([r.step_ms for r in window])),
        samples_per_s=samples / (total_ms / 1e3), others_cpu_share=guard.others_cpu_share,
        steal_share=guard.steal_share, load_avg_1m=guard.load_avg_1m, contended=guard.contended,
    )


def summarize_timed(result: TrialResult, timed: list[StepRecord], tokens_per_sample: Optional[int],
                    windows: Optional[list[WindowStats]] = None) -> None:
    """Throughput and step-time figures of the timed windows (``result.windows`` already filled; ``windows``: the
    ones the figures describe, default all)."""
    result.contended_windows = sum(w.contended for w in result.windows)
    if result.contended_windows:
        shares = [w.others_cpu_share for w in result.windows if w.contended]
        result.notes.append(Note(kind="warning", text=(
            f"contention: {result.contended_windows} of {len(result.windows)} timed windows ran while "
            f"other processes used up to {max(shares):.0%} of the machine (flag above "
            f"{contention.CONTENDED_SHARE:.0%}); their throughput is less trustworthy")))
    if not timed:
        return
    times = np.array([r.step_ms for r in timed])
    # batch / mean step, not a median of window figures
    result.samples_per_s = throughput(result.windows if windows is None else windows)
    if tokens_per_sample and result.samples_per_s:
        result.tokens_per_s = result.samples_per_s * tokens_per_sample
    result.step_ms_median = float(np.median(times))
    result.step_ms_p10 = float(np.percentile(times, 10))
    result.step_ms_p90 = float(np.percentile(times, 90))
    result.data_wait_ms_median = float(np.median([r.data_wait_ms for r in timed]))


def analyse_profile(result: TrialResult, summary: ProfileSummary, records: list[StepRecord], out: Path,
                    trial_dir: Path) -> None:
    """Fill ``summary`` from the profile in ``out`` of the profiled ``records``.

    The splits divide the *unprofiled* timed mean step (the one throughput comes from): data waiting from the timed
    steps (the profiled steps' own is not representative: the pipeline refills its queue while the profiler
    starts), the op phases as their shares of the profiled steps' compute time, carried to the timed step.
    """
    from perftune.profile.layouts import load_profile
    from perftune.profile.splits import compute_splits, top_op_types, top_ops

    summary.profiled_step_ms = float(np.mean([r.step_ms for r in records]))
    if result.step_ms_mean:
        summary.overhead_ratio = summary.profiled_step_ms / result.step_ms_mean
    # the timed mean step is divided (what throughput and the phases add up to); the op phases are their shares of
    # the profiled steps' own compute time (compute_splits: the profiler slows every launch)
    step_ms, data_ms = result.step_ms_mean, result.data_wait_ms_mean  # the timed steps' (their steps add up)
    profiled_data_ms = float(np.mean([r.data_wait_ms for r in records]))
    try:
        data = load_profile(out)
        summary.layout = data.layout
        summary.profile_dir = os.path.relpath(data.root, trial_dir)
        if data.trace_file is not None:
            summary.trace_file = os.path.relpath(data.trace_file, trial_dir)
        summary.splits = compute_splits(data, len(records), step_ms, data_ms, summary.profiled_step_ms,
                                        profiled_data_ms)
        summary.top_ops = top_ops(data, 10)
        summary.top_op_types = top_op_types(data, len(records), 10)
        summary.peak_allocated_bytes = data.peak_allocated_bytes
        result.memory.allocator_peak_bytes = data.peak_allocated_bytes
    except Exception as exc:
        summary.error = one_line(exc)


def process_notes(spec: TrialSpec, windows: int) -> list[Note]:
    """What kind of process this is, for a person reading the trial."""
    if spec.pair is not None:
        return [Note(kind="info", text=(
            f"paired process: {spec.pair.reference_label} (arm A) and {spec.pair.label} (arm B) "
            + ("trained two models, each fed by its own pipeline" if model_change(spec.knobs, spec.pair.knobs)
               else "fed one model from two pipelines")
            + f", {windows} timed windows in ABBA/BAAB order; the throughput figures "
            "are arm A's, the comparison is the sweep's"))]
    if spec.replicate > 0:
        return [Note(kind="info", text=(
            f"repeat process {spec.replicate + 1} of this configuration: the profile and the accuracy window come "
            "from its first process; this one warmed up until its step time settled"))]
    return []


def finish_notes(batch_sizes: Counter, sink_steps: int, records: Sequence[StepRecord] = ()) -> list[Note]:
    """How the figures were made where the steps were unusual: batches of several sizes, dataset sinking; and a
    training loss that diverged in the accuracy window (``divergence_note`` on ``records``' accuracy steps)."""
    diverged = divergence_note([r for r in records if r.phase == "accuracy"])
    notes = [diverged] if diverged is not None else []
    if len(batch_sizes) > 1:
        notes.append(Note(kind="info", text=(
            f"the batches had {len(batch_sizes)} sizes ({', '.join(str(b) for b in sorted(batch_sizes))}); "
            "throughput counts the samples taken")))
    if sink_steps:
        notes.append(Note(kind="info", knob="dataset_sink_mode", text=(
            f"dataset_sink_mode: MindSpore reported {sink_steps} steps in sinks, one callback per sink; "
            "each step's time is its sink's time over the sink's steps")))
    return notes
