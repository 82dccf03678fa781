"""One measured training burst, in its own process: ``python -m perftune.burst TRIAL_DIR``.

Reads ``TRIAL_DIR/spec.json``, writes ``TRIAL_DIR/trial.json`` (atomically) whatever happens.  The phases, in order:

1. accuracy: from the initial weights, train on the fixed data order until ``accuracy_samples`` samples have been
   seen (the first step is the graph compile, reported as ``compile_ms``), then validation loss / perplexity and,
   for language models, a greedy sample's repetition rate.  Every trial is judged at the same number of samples.
2. warm-up: ``warmup_steps`` plus enough steps to drain the batches the pipeline prefetched meanwhile, so that a
   data stall cannot hide behind a full queue.
3. timed: ``repeats`` windows of ``steps`` unprofiled steps; each step records its wall time and the time it
   waited for its batch.
4. profiled: ``profile_steps`` more steps under ``mindspore.Profiler``, parsed into time splits, so the profiler's
   own overhead never enters the speed figures (it is reported separately).
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import socket
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import numpy as np

from perftune import __version__, knobs as knob_registry
from perftune.records import (
    Accuracy,
    Environment,
    Memory,
    ProfileSummary,
    StepRecord,
    TrialResult,
    TrialSpec,
    WindowStats,
)
from perftune.store import write_json_atomic

LOSS_TAIL_STEPS = 5  # the training loss at N samples is the mean of this many last steps
VAL_BATCH = 64  # the same validation batches for every trial, whatever its batch size


class KnobRefused(Exception):
    """A knob value that this backend cannot run; becomes status 'unsupported'."""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> Optional[str]:
    import subprocess

    try:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        if out.returncode:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def environment(device: str, kernel_threads: Optional[int]) -> Environment:
    import mindspore as ms

    return Environment(
        perftune_version=__version__,
        mindspore_version=ms.__version__,
        python_version=platform.python_version(),
        device=device,
        host=socket.gethostname(),
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count() or 1,
        kernel_threads=kernel_threads,
        git_commit=git_commit(),
        utc_time=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def apply_context(spec: TrialSpec) -> list[str]:
    """Process-wide settings: device, mode, compile level, fusion, threads.  Returns notes for the trial."""
    import mindspore as ms

    k = spec.knobs
    notes = knob_registry.no_effect_notes(k, spec.device)
    ms.set_device(spec.device)
    ms.set_context(mode=ms.GRAPH_MODE if k["mode"] == "graph" else ms.PYNATIVE_MODE)
    if k["mode"] == "pynative":
        for name in ("jit_level", "graph_kernel"):
            if k[name] != knob_registry.KNOBS[name].default:
                notes.append(f"{name}={k[name]} has no effect in pynative mode (nothing is compiled)")
    if k["graph_kernel"] != "off":
        flags = {"on": "", "O1": "--opt_level=1", "O2": "--opt_level=2"}[k["graph_kernel"]]
        ms.set_context(enable_graph_kernel=True, graph_kernel_flags=flags)
    if k["kernel_threads"]:
        if spec.device == "CPU":
            ms.device_context.cpu.op_tuning.threads_num(int(k["kernel_threads"]))
        else:
            notes.append(f"kernel_threads={k['kernel_threads']} sets CPU kernel threads only; no effect on "
                         f"{spec.device} kernels")
    if k["dispatch_threads"]:
        ms.runtime.dispatch_threads_num(int(k["dispatch_threads"]))
    if k["dataset_sink_mode"] and spec.device != "CPU":
        raise KnobRefused("dataset_sink_mode=true: perftune's burst does not implement device sinking yet "
                          "(its step timing needs one host round trip per step)")
    return notes


def first_eager_op() -> None:
    """Under NumPy 2 the first eager op raises (see mindspore-notes.md); take that hit outside the step."""
    import mindspore as ms

    try:
        (ms.Tensor(np.ones(1, np.float32)) + 1).asnumpy()
    except SystemError:
        pass


class Burst:
    def __init__(self, spec: TrialSpec, trial_dir: Path):
        self.spec = spec
        self.dir = trial_dir
        self.k = spec.knobs
        self.result = TrialResult(
            trial_id=spec.trial_id, status="failed", workload=spec.workload, device=spec.device,
            knobs=spec.knobs, burst=spec.burst,
        )
        self.samples_seen = 0
        self.learning_rate: Optional[float] = None

    # -- set-up ---------------------------------------------------------------------------------------------
    def build(self) -> None:
        import mindspore as ms
        import mindspore.dataset as ds
        from mindspore import amp

        from perftune.data import build_dataset
        from perftune.train_step import NetWithLoss, build_train_step
        from perftune.workloads import resolve

        spec, k = self.spec, self.k
        self.result.notes += apply_context(spec)
        first_eager_op()
        ms.set_seed(spec.seed)
        np.random.seed(spec.seed)
        ds.config.set_seed(spec.seed)
        ds.config.set_prefetch_size(int(k["prefetch_size"]))
        workload = resolve(spec.workload)(dict(spec.workload_params), spec.seed)
        workload.check()
        self.workload = workload
        network = workload.network
        if k["amp_level"] != "O0":
            network = amp.auto_mixed_precision(network, k["amp_level"])
        if k["recompute"]:
            if not workload.recompute_cells:
                raise KnobRefused(f"recompute=true: workload {workload.name!r} names no recompute cells")
            for cell in workload.recompute_cells:
                cell.recompute()
        self.network = network
        net_with_loss = NetWithLoss(network, workload.loss_fn)
        self.net_with_loss = net_with_loss
        optimizer = workload.make_optimizer(network.trainable_params())
        self.learning_rate = _learning_rate(optimizer)
        graph = k["mode"] == "graph"
        self.step_fn = build_train_step(k["train_step"], net_with_loss, optimizer, k["loss_scale"],
                                        int(k["grad_accum_steps"]), graph, k["jit_level"])
        self.result.parameter_count = int(sum(int(np.prod(p.shape)) for p in network.trainable_params()))
        self.result.samples_per_step = int(k["batch_size"])
        self.result.tokens_per_sample = workload.tokens_per_sample
        self.result.flops_per_sample = workload.flops_per_sample
        cache = Path(spec.cache_dir) if spec.cache_dir else self.dir / "cache"
        self.cache_dir = cache
        dataset = build_dataset(workload, k, "train", cache)
        self.iterator = dataset.create_tuple_iterator(num_epochs=1, do_copy=False)

    # -- one step ---------------------------------------------------------------------------------------------
    def step(self, phase: str, window: Optional[int] = None) -> StepRecord:
        t0 = time.perf_counter()
        batch = next(self.iterator)
        t1 = time.perf_counter()
        loss, grad_norm = self.step_fn(*batch)
        loss_value = float(loss.asnumpy())
        t2 = time.perf_counter()
        self.samples_seen += int(batch[0].shape[0])
        return StepRecord(
            phase=phase, window=window, step_ms=(t2 - t0) * 1e3, data_wait_ms=(t1 - t0) * 1e3,
            loss=_finite_or_none(loss_value), grad_norm=_finite_or_none(float(grad_norm.asnumpy())),
            learning_rate=self.learning_rate, samples_seen=self.samples_seen,
        )

    # -- phases -----------------------------------------------------------------------------------------------
    def accuracy_phase(self) -> None:
        target = self.spec.accuracy_samples
        records = []
        while self.samples_seen < target:
            records.append(self.step("accuracy"))
        self.result.compile_ms = records[0].step_ms if records else None
        self.result.steps += records
        losses = [r.loss for r in records]
        norms = [r.grad_norm for r in records]
        nonfinite = any(v is None for v in losses) or any(v is None for v in norms)
        tail = [v for v in losses[-LOSS_TAIL_STEPS:] if v is not None]
        acc = Accuracy(
            samples_seen=self.samples_seen,
            train_loss=float(np.mean(tail)) if tail and not nonfinite else None,
            max_grad_norm=max((v for v in norms if v is not None), default=None),
            final_grad_norm=norms[-1] if norms else None,
            nonfinite=nonfinite,
            loss_curve=[(r.samples_seen, r.loss) for r in records if r.loss is not None],
        )
        val = self.validation_loss()
        if val is None or not math.isfinite(val):
            acc.nonfinite = True
        else:
            acc.val_loss = val
            acc.perplexity = math.exp(min(val, 700.0))
        if self.workload.generate is not None:
            ids = self.workload.generate(self.network, 64)
            from perftune.workloads.base import repetition_rate

            acc.repetition_rate = repetition_rate(list(ids))
            if self.workload.decode is not None:
                acc.sample_text = self.workload.decode(list(ids))
        self.result.accuracy = acc

    def validation_loss(self) -> Optional[float]:
        from perftune.data import build_dataset

        self.network.set_train(False)
        val_rows = len(next(iter(self.workload.val_columns.values())))
        dataset = build_dataset(self.workload, {**self.k, "dataset_format": "numpy"}, "val", None, repeat=False,
                                batch_size=min(VAL_BATCH, val_rows))
        losses = []
        for batch in dataset.create_tuple_iterator(num_epochs=1):
            losses.append(float(self.net_with_loss(*batch).asnumpy()))
        self.network.set_train(True)
        return float(np.mean(losses)) if losses else None

    def warmup_phase(self) -> None:
        drain = int(self.k["prefetch_size"]) + 2  # batches the queue may have filled while we compiled/validated
        count = int(self.spec.burst["warmup_steps"]) + drain
        self.result.warmup_steps = count
        self.result.steps += [self.step("warmup") for _ in range(count)]

    def timed_phase(self) -> None:
        b = self.spec.burst
        per_step = int(self.k["batch_size"])
        all_steps: list[StepRecord] = []
        for w in range(int(b["repeats"])):
            window = [self.step("timed", w) for _ in range(int(b["steps"]))]
            total = sum(r.step_ms for r in window)
            self.result.windows.append(WindowStats(
                steps=len(window), total_ms=total, median_step_ms=float(np.median([r.step_ms for r in window])),
                samples_per_s=len(window) * per_step / (total / 1e3),
            ))
            all_steps += window
        self.result.steps += all_steps
        times = np.array([r.step_ms for r in all_steps])
        self.result.samples_per_s = float(np.median([w.samples_per_s for w in self.result.windows]))
        if self.workload.tokens_per_sample:
            self.result.tokens_per_s = self.result.samples_per_s * self.workload.tokens_per_sample
        self.result.step_ms_median = float(np.median(times))
        self.result.step_ms_p10 = float(np.percentile(times, 10))
        self.result.step_ms_p90 = float(np.percentile(times, 90))
        self.result.data_wait_ms_median = float(np.median([r.data_wait_ms for r in all_steps]))

    def profiled_phase(self) -> None:
        n = int(self.spec.burst["profile_steps"])
        if n <= 0:
            return
        from perftune import profiling

        summary = ProfileSummary(profiled_steps=n, unprofiled_step_ms=self.result.step_ms_median)
        self.result.profile = summary
        out = self.dir / "profile"
        try:
            session = profiling.ProfilerSession(out, profile_memory=True)
            session.start()
            records = [self.step("profiled") for _ in range(n)]
            summary.analyse_s = session.stop_and_analyse()
        except Exception as exc:  # the speed figures stand without a profile
            summary.error = _one_line(exc)
            return
        self.result.steps += records
        step_ms = float(np.mean([r.step_ms for r in records]))
        data_ms = float(np.mean([r.data_wait_ms for r in records]))
        summary.profiled_step_ms = step_ms
        if self.result.step_ms_median:
            summary.overhead_ratio = step_ms / self.result.step_ms_median
        try:
            data = profiling.load_profile(out)
            summary.layout = data.layout
            summary.profile_dir = os.path.relpath(data.root, self.dir)
            if data.trace_file is not None:
                summary.trace_file = os.path.relpath(data.trace_file, self.dir)
            summary.splits = profiling.compute_splits(data, n, step_ms, data_ms)
            summary.top_ops = profiling.top_ops(data, 10)
            summary.peak_allocated_bytes = data.peak_allocated_bytes
            self.result.memory.allocator_peak_bytes = data.peak_allocated_bytes
        except Exception as exc:
            summary.error = _one_line(exc)

    def memory(self) -> None:
        self.result.memory.host_rss_peak_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if self.spec.device != "CPU":
            import mindspore as ms

            try:
                self.result.memory.device_peak_bytes = int(ms.runtime.max_memory_allocated())
            except Exception as exc:  # noqa: BLE001 - memory is a nice-to-have, never a failure
                self.result.notes.append(f"device peak memory unavailable: {_one_line(exc)}")

    def run(self) -> TrialResult:
        started = time.perf_counter()
        self.build()
        self.result.environment = environment(self.spec.device, self.k["kernel_threads"] or None)
        self.accuracy_phase()
        self.warmup_phase()
        self.timed_phase()
        self.profiled_phase()
        self.memory()
        self.result.status = "ok"
        self.result.wall_s = time.perf_counter() - started
        return self.result


def _learning_rate(optimizer) -> Optional[float]:
    try:
        return float(optimizer.learning_rate.asnumpy())
    except Exception:  # noqa: BLE001 - schedules have no single value
        return None


def _finite_or_none(value: float) -> Optional[float]:
    return value if math.isfinite(value) else None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = next((line.strip() for line in text.splitlines() if line.strip() and not line.startswith("---")), "")
    return f"{type(exc).__name__}: {first}"[:500]


def classify_failure(exc: BaseException, spec: TrialSpec) -> tuple[str, str]:
    """(status, reason) for an exception raised inside the burst."""
    reason = _one_line(exc)
    text = str(exc).lower()
    if isinstance(exc, MemoryError) or "out of memory" in text or "memory not enough" in text or \
            "allocate memory failed" in text:
        return "oom", reason
    if isinstance(exc, KnobRefused):
        return "unsupported", str(exc)
    refused = [f"{n}={v}" for n, v in spec.knobs.items()
               if n in knob_registry.KNOBS and knob_registry.KNOBS[n].known_refusal(v, spec.device)]
    if refused:
        return "unsupported", f"{', '.join(refused)} is not supported on {spec.device}: MindSpore says {reason}"
    if "num_parallel_workers exceeds" in text:
        return "unsupported", f"num_parallel_workers={spec.knobs['num_parallel_workers']}: MindSpore says {reason}"
    return "failed", reason


def first_logged_error(log_path: Path, reason: str) -> Optional[str]:
    """MindSpore's exception is sometimes a bare "Response is empty."; the real cause is an earlier log line."""
    import re

    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        m = re.match(r"^\s*(\w+(Error|Exception)): (.+)$", line)
        if m and m.group(0).strip() not in reason and "Traceback" not in line:
            return m.group(0).strip()[:300]
    return None


def main(argv: list[str]) -> int:
    trial_dir = Path(argv[0])
    spec = TrialSpec.model_validate_json((trial_dir / "spec.json").read_text())
    burst = Burst(spec, trial_dir)
    try:
        result = burst.run()
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a recorded trial
        traceback.print_exc()
        sys.stderr.flush()
        status, reason = classify_failure(exc, spec)
        cause = first_logged_error(trial_dir / "burst.log", reason)
        if cause and len(reason) < 200:
            reason = f"{reason} (first error in the log: {cause})"
        result = burst.result
        result.status = status
        result.reason = reason
        try:
            burst.memory()
        except Exception:  # noqa: BLE001
            pass
    write_json_atomic(trial_dir / "trial.json", result.model_dump(mode="json"))
    print(json.dumps({"status": result.status, "trial_id": spec.trial_id}))
    sys.stdout.flush()
    # MindSpore's exit handlers can hang or crash after a failure; the result is on disk, leave now.
    os._exit(0 if result.status == "ok" else 3)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
