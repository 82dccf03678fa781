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
    RankSummary,
    StepRecord,
    TrialResult,
    TrialSpec,
    WindowStats,
)
from perftune.store import write_json_atomic

MSRUN_LOG_DIR = "msrun_logs"  # msrun's --log_dir inside the trial folder: worker_<rank>.log, scheduler.log
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


def read_back(k: dict, network, step_fn, dataset) -> dict[str, Any]:
    """What MindSpore reports after the knobs were applied: the evidence that each one took effect."""
    import mindspore as ms
    import mindspore.dataset as ds
    from mindspore._c_expression import RuntimeConf

    ops_in_pipeline = [type(n).__name__ for n in _walk(dataset)]
    batch_op = next((n for n in _walk(dataset) if type(n).__name__ == "BatchDataset"), None)
    map_op = next((n for n in _walk(dataset) if type(n).__name__ == "MapDataset"), None)
    conf = RuntimeConf.get_instance()
    jit = getattr(step_fn, "jit_config_dict", None) or {}
    return {
        "mode": "graph" if ms.get_context("mode") == ms.GRAPH_MODE else "pynative",
        "jit_level": jit.get("jit_level") if jit else (k["jit_level"] if k["train_step"] == "function" else None),
        "graph_kernel": bool(ms.get_context("enable_graph_kernel")),
        "network_class": type(network).__name__,
        "amp_level": k["amp_level"],
        "recompute_cells": sorted(name for name, cell in network.cells_and_names()
                                  if getattr(cell, "_recompute_cell", None) is not None),
        "train_step": type(step_fn).__name__ if not callable(getattr(step_fn, "__wrapped__", None))
        else "function",
        "grad_accum_micro_batch": int(k["batch_size"]) // int(k["grad_accum_steps"]),
        "loss_scaler": type(getattr(step_fn, "scaler", None)).__name__ if hasattr(step_fn, "scaler") else None,
        "pipeline": " <- ".join(ops_in_pipeline),
        "num_parallel_workers": getattr(batch_op, "num_parallel_workers", None),
        "python_multiprocessing": getattr(map_op, "python_multiprocessing", None) if map_op else None,
        "drop_remainder": getattr(batch_op, "drop_remainder", None),
        "batch_size": batch_op.get_batch_size() if batch_op is not None else None,
        "prefetch_size": ds.config.get_prefetch_size(),
        "kernel_threads_configured": bool(conf.is_op_threads_num_configured()),
        "dispatch_threads_configured": bool(conf.is_dispatch_threads_num_configured()),
    }


def _walk(node):
    while node is not None:
        yield node
        node = node.children[0] if getattr(node, "children", None) else None


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
        # distributed bursts (workers >= 2, under msrun): this process's rank and the world size
        self.rank = 0
        self.world = 1
        self.steps_done = 0
        self.kill_after: Optional[int] = None  # test-only fault injection, see init_distributed

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
        if int(k.get("workers", 1)) >= 2:
            self.result.notes += self.init_distributed()
        else:
            self.result.notes += single_process_notes(k)
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
            # after AMP: O1 rewrites the network into new cell objects, so look the cells up by name in the network
            # that is actually trained (O2/O3 wrap it, hence the suffix match)
            cells = [cell for name, cell in network.cells_and_names()
                     if any(name == n or name.endswith("." + n) for n in workload.recompute_cell_names)]
            if not cells:
                raise KnobRefused(f"recompute=true: workload {workload.name!r} names no recompute cells")
            for cell in cells:
                cell.recompute()
        self.network = network
        net_with_loss = NetWithLoss(network, workload.loss_fn)
        self.net_with_loss = net_with_loss
        optimizer = workload.make_optimizer(network.trainable_params())
        self.learning_rate = _learning_rate(optimizer)
        graph = k["mode"] == "graph"
        reducer = None
        if self.world > 1 and k["parallel_mode"] == "data_parallel":
            from perftune.train_step import make_grad_reducer

            reducer = make_grad_reducer(optimizer, bool(k["gradients_mean"]), self.world)
        # two instances of the same step over the same weights and optimizer: the accuracy phase's computes the
        # gradient norm (for the gate), the timed one leaves it out (it would cost ~20% of a small step on CPU)
        self.accuracy_step_fn = build_train_step(k["train_step"], net_with_loss, optimizer, k["loss_scale"],
                                                 int(k["grad_accum_steps"]), graph, k["jit_level"], reducer)
        self.step_fn = build_train_step(k["train_step"], net_with_loss, optimizer, k["loss_scale"],
                                        int(k["grad_accum_steps"]), graph, k["jit_level"], reducer,
                                        with_norm=False, scaler=self.accuracy_step_fn.scaler)
        self.result.parameter_count = int(sum(int(np.prod(p.shape)) for p in network.trainable_params()))
        self.result.samples_per_step = int(k["batch_size"])
        self.result.tokens_per_sample = workload.tokens_per_sample
        self.result.flops_per_sample = workload.flops_per_sample
        cache = Path(spec.cache_dir) if spec.cache_dir else self.dir / "cache"
        self.cache_dir = cache
        if self.world > 1:  # batch_size is the global batch: each rank reads its shard, batch_size / world rows
            dataset = build_dataset(workload, k, "train", cache, batch_size=int(k["batch_size"]) // self.world,
                                    num_shards=self.world, shard_id=self.rank)
        else:
            dataset = build_dataset(workload, k, "train", cache)
        self.iterator = dataset.create_tuple_iterator(num_epochs=1, do_copy=False)
        self.result.applied = read_back(k, network, self.step_fn, dataset)
        if self.world > 1:
            self.result.applied.update(distributed_read_back(self.rank, self.world, reducer is not None))
        if workload.preprocess is None and k["python_multiprocessing"]:
            self.result.notes.append("python_multiprocessing=true has no effect here: the workload has no Python "
                                     "preprocessing map")

    # -- one step ---------------------------------------------------------------------------------------------
    def step(self, phase: str, window: Optional[int] = None) -> StepRecord:
        if self.kill_after is not None and self.steps_done >= self.kill_after:
            print(f"perftune: fault injection (PERFTUNE_TEST_KILL_RANK): rank {self.rank} exits with code 9 after "
                  f"{self.steps_done} steps", file=sys.stderr, flush=True)
            os._exit(9)
        t0 = time.perf_counter()
        batch = next(self.iterator)
        t1 = time.perf_counter()
        with_norm = phase == "accuracy"
        loss, grad_norm = (self.accuracy_step_fn if with_norm else self.step_fn)(*batch)
        loss_value = float(loss.asnumpy())
        t2 = time.perf_counter()
        self.steps_done += 1
        self.samples_seen += int(batch[0].shape[0]) * self.world  # global samples: every rank took its share
        return StepRecord(
            phase=phase, window=window, step_ms=(t2 - t0) * 1e3, data_wait_ms=(t1 - t0) * 1e3,
            loss=_finite_or_none(loss_value),
            grad_norm=_finite_or_none(float(grad_norm.asnumpy())) if with_norm else None,
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
        summary.profiled_step_ms = float(np.mean([r.step_ms for r in records]))
        if self.result.step_ms_median:
            summary.overhead_ratio = summary.profiled_step_ms / self.result.step_ms_median
        # The splits divide the *unprofiled* timed step (the one throughput comes from): op time per step from the
        # profiled steps, data waiting from the timed steps.  The profiled steps' own data wait is not
        # representative: the pipeline refills its queue while the profiler starts.
        timed = [r for r in self.result.steps if r.phase == "timed"]
        step_ms = float(np.mean([r.step_ms for r in timed]))
        data_ms = float(np.mean([r.data_wait_ms for r in timed]))
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

    # -- distributed (workers >= 2, one process per rank under msrun) ------------------------------------------
    def init_distributed(self) -> list[str]:
        """``communication.init()`` and the parallel context; returns notes.  Called after the device is set."""
        import mindspore as ms
        from mindspore.communication import get_group_size, get_rank, init

        k = self.k
        init()
        self.rank, self.world = int(get_rank()), int(get_group_size())
        env_rank = os.environ.get("RANK_ID", "")
        if env_rank.isdigit() and int(env_rank) != self.rank:
            raise RuntimeError(f"msrun exported RANK_ID={env_rank} but communication.init() gave rank {self.rank}")
        if self.world != int(k["workers"]):
            raise RuntimeError(f"msrun started {self.world} ranks, the trial asks for workers={k['workers']}")
        context = {"parallel_mode": k["parallel_mode"], "gradients_mean": bool(k["gradients_mean"])}
        notes = []
        if k["parallel_mode"] == "auto_parallel":
            context["search_mode"] = k["search_mode"]
        elif k["search_mode"] != knob_registry.KNOBS["search_mode"].default:
            notes.append(f"search_mode={k['search_mode']} has no effect with parallel_mode={k['parallel_mode']} "
                         "(only auto_parallel searches strategies)")
        ms.set_auto_parallel_context(**context)
        # test-only fault injection: PERFTUNE_TEST_KILL_RANK=r PERFTUNE_TEST_KILL_AFTER_STEPS=n makes rank r
        # os._exit(9) before its step n+1 (tests/test_distributed.py checks the launcher's clean-up with it)
        kill_rank = os.environ.get("PERFTUNE_TEST_KILL_RANK")
        if kill_rank is not None and kill_rank.strip() == str(self.rank):
            self.kill_after = int(os.environ.get("PERFTUNE_TEST_KILL_AFTER_STEPS", "0"))
        return notes

    def exchange_ranks(self) -> None:
        """Every rank's summary to every rank (one collective), so each node's trial.json describes all ranks."""
        mine = rank_summary(self.result, self.rank, self.dir)
        self.result.world_size = self.world
        try:
            payloads = all_gather_bytes(mine.model_dump_json().encode(), self.rank, self.world)
            self.result.ranks = [RankSummary.model_validate_json(p) for p in payloads]
        except Exception as exc:  # noqa: BLE001 - the local figures still stand; the launcher says what is missing
            self.result.notes.append(f"rank {self.rank}: could not exchange the rank summaries ({_one_line(exc)})")
            self.result.ranks = [mine]

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
        if self.world > 1:
            self.exchange_ranks()
        self.result.wall_s = time.perf_counter() - started
        return self.result


def single_process_notes(k: dict) -> list[str]:
    """The distributed knobs set away from their defaults in a one-process burst (workers=1) change nothing."""
    return [f"{name}={k[name]} has no effect with workers=1 (one process, no parallel context)"
            for name in ("parallel_mode", "search_mode", "gradients_mean")
            if name in k and k[name] != knob_registry.KNOBS[name].default]


def distributed_read_back(rank: int, world: int, grad_reducer: bool) -> dict[str, Any]:
    import mindspore as ms

    mode = str(ms.get_auto_parallel_context("parallel_mode"))
    out = {
        "rank": rank,
        "world_size": world,
        "parallel_mode": mode,
        "gradients_mean": bool(ms.get_auto_parallel_context("gradients_mean")),
        "grad_reducer": grad_reducer,
    }
    if mode == "auto_parallel":  # the context always holds a search mode; it only means something here
        out["search_mode"] = str(ms.get_auto_parallel_context("search_mode"))
    return out


def rank_summary(result: TrialResult, rank: int, rank_dir: Path) -> RankSummary:
    p = result.profile
    splits = p.splits if p is not None else None
    acc = result.accuracy
    return RankSummary(
        rank=rank,
        host=socket.gethostname(),
        node_rank=_env_int("PERFTUNE_NODE_RANK"),
        pid=os.getpid(),
        result_dir=rank_dir.name,
        log_file=f"{MSRUN_LOG_DIR}/worker_{rank}.log",
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


def all_gather_bytes(payload: bytes, rank: int, world: int) -> list[bytes]:
    """Each rank's ``payload`` to every rank, with AllReduce only: float32 rows, one byte per element (exact; the
    CPU AllReduce kernel takes float32, not int32)."""
    import mindspore as ms
    from mindspore import ops
    from mindspore.communication.management import GlobalComm

    reduce = ops.AllReduce(ops.ReduceOp.SUM, GlobalComm.WORLD_COMM_GROUP)
    lengths = np.zeros((world,), np.float32)
    lengths[rank] = len(payload)  # exact below 2**24 bytes
    lengths = reduce(ms.Tensor(lengths)).asnumpy().astype(np.int64)
    rows = np.zeros((world, int(lengths.max())), np.float32)
    rows[rank, :len(payload)] = np.frombuffer(payload, np.uint8)
    rows = reduce(ms.Tensor(rows)).asnumpy()
    return [rows[r, :int(lengths[r])].astype(np.uint8).tobytes() for r in range(world)]


def _env_int(name: str) -> Optional[int]:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


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


def run_scheduler(spec: TrialSpec) -> None:
    """msrun's scheduler process runs this module too (MS_ROLE=MS_SCHED): it serves the cluster inside init().

    Where several msrun launches share one host as separate "nodes" (the loopback test), every launch thinks it is
    the master; the launcher sets PERFTUNE_SCHEDULER=0 on all but node 0, and those schedulers leave at once.
    """
    if os.environ.get("PERFTUNE_SCHEDULER", "1") == "0":
        os._exit(0)
    import mindspore as ms
    from mindspore.communication import init

    try:
        ms.set_device(spec.device)
        init()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(4)
    os._exit(0)


def main(argv: list[str]) -> int:
    trial_dir = Path(argv[0])
    role = os.environ.get("MS_ROLE")  # set by msrun: MS_SCHED (its scheduler) or MS_WORKER (one rank)
    if role:
        # msrun starts each rank in a session of its own, out of reach of the launcher's process group: die with
        # msrun (PR_SET_PDEATHSIG), and leave now if msrun is already gone
        from perftune.launch import _die_with_parent

        _die_with_parent()
        if os.getppid() == 1:
            os._exit(5)
    spec = TrialSpec.model_validate_json((trial_dir / "spec.json").read_text())
    if role == "MS_SCHED":
        run_scheduler(spec)
    out_dir, log_path = trial_dir, trial_dir / "burst.log"
    if role == "MS_WORKER":  # each rank writes rank_<r>/trial.json (+ rank_<r>/profile); msrun logs worker_<r>.log
        rank = os.environ.get("RANK_ID", f"unknown_{os.getpid()}")
        out_dir = trial_dir / f"rank_{rank}"
        out_dir.mkdir(parents=True, exist_ok=True)
        log_path = trial_dir / MSRUN_LOG_DIR / f"worker_{rank}.log"
    burst = Burst(spec, out_dir)
    try:
        result = burst.run()
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a recorded trial
        traceback.print_exc()
        sys.stderr.flush()
        status, reason = classify_failure(exc, spec)
        cause = first_logged_error(log_path, reason)
        if cause and len(reason) < 200:
            reason = f"{reason} (first error in the log: {cause})"
        result = burst.result
        result.status = status
        result.reason = reason
        try:
            burst.memory()
        except Exception:  # noqa: BLE001
            pass
    write_json_atomic(out_dir / "trial.json", result.model_dump(mode="json"))
    print(json.dumps({"status": result.status, "trial_id": spec.trial_id}))
    sys.stdout.flush()
    # MindSpore's exit handlers can hang or crash after a failure; the result is on disk, leave now.
    os._exit(0 if result.status == "ok" else 3)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
