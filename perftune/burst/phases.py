"""The phases of one measured training burst (``Burst``), run in its own process by ``perftune.burst.main``.

The phases, in order:

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

import math
import os
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np

from perftune.burst import amp_check, contention
from perftune.burst.collectives import all_gather_bytes, init_distributed, own_summary
from perftune.burst.context import (
    apply_context,
    distributed_read_back,
    environment,
    first_eager_op,
    read_back,
    scale_learning_rate,
    single_process_notes,
)
from perftune.burst.failures import KnobRefused, one_line
from perftune.burst.results import (
    analyse_profile,
    calibrated_window_steps,
    finite_or_none,
    summarize_timed,
    training_accuracy,
    window_stats,
)
from perftune.io.records import (
    Note,
    ProfileSummary,
    RankSummary,
    StepRecord,
    TrialResult,
    TrialSpec,
    failed_result,
)

VAL_BATCH = 64  # the same validation batches for every trial, whatever its batch size


class Burst:
    def __init__(self, spec: TrialSpec, trial_dir: Path):
        self.spec = spec
        self.dir = trial_dir
        self.k = spec.knobs
        self.result = failed_result(spec, "failed", None)  # until run() completes
        self.samples_seen = 0
        self.learning_rate: Optional[float] = None
        # distributed bursts (workers >= 2, under msrun): this process's rank and the world size
        self.rank = 0
        self.world = 1
        self.steps_done = 0
        self.kill_after: Optional[int] = None  # test-only fault injection, see collectives.init_distributed
        self.pending_losses: list = []  # a timed window's loss tensors, read back once at its end

    # -- set-up ---------------------------------------------------------------------------------------------
    def build(self) -> None:
        import mindspore as ms
        import mindspore.dataset as ds

        from perftune.burst.data import build_dataset
        from perftune.burst.train_step import NetWithLoss, build_train_step
        from perftune.workloads import resolve

        spec, k = self.spec, self.k
        self.result.notes += apply_context(spec)
        if int(k["workers"]) >= 2:
            ctx = init_distributed(k)
            self.rank, self.world, self.kill_after = ctx.rank, ctx.world, ctx.kill_after
            self.result.notes += ctx.notes
        else:
            self.result.notes += single_process_notes(k)
        first_eager_op()
        ms.set_seed(spec.seed)
        np.random.seed(spec.seed)
        ds.config.set_seed(spec.seed)
        ds.config.set_prefetch_size(int(k["prefetch_size"]))
        ds.config.set_enable_autotune(bool(k.get("dataset_autotune", False)))
        workload = resolve(spec.workload)(dict(spec.workload_params),
                                            spec.seed if spec.data_seed is None else spec.data_seed)
        workload.check()
        self.workload = workload
        network = workload.network
        # AMP with a forward probe before and after: its effect, not its wrapper, goes into `applied` (issue 14)
        amp_outcome = amp_check.apply_amp(network, k["amp_level"],
                                          amp_check.probe_inputs(workload.train_columns, workload.label_column))
        network = amp_outcome.network
        self.result.notes += amp_outcome.notes
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
        if spec.lr_scale != 1.0:
            self.result.notes.append(scale_learning_rate(optimizer, spec.lr_scale))
        self.learning_rate = _learning_rate(optimizer)
        graph = k["mode"] == "graph"
        reducer = None
        if self.world > 1 and k["parallel_mode"] == "data_parallel":
            from perftune.burst.train_step import make_grad_reducer

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
        self.result.applied["amp_effect"] = amp_outcome.effect
        if self.world > 1:
            self.result.applied.update(distributed_read_back(self.rank, self.world, reducer is not None))
        if workload.preprocess is None and k["python_multiprocessing"]:
            self.result.notes.append(Note(kind="no_effect", knob="python_multiprocessing",
                                          text="python_multiprocessing=true has no effect here: the workload has no "
                                               "Python preprocessing map"))

    # -- one step ---------------------------------------------------------------------------------------------
    def step(self, phase: str, window: Optional[int] = None, sync: bool = True) -> StepRecord:
        """One step.  ``sync=False`` (timed windows) does not read the loss back: the step is only dispatched, as in
        real training on an asynchronous backend; the window reads its losses back once at its end."""
        if self.kill_after is not None and self.steps_done >= self.kill_after:
            if os.environ.get("PERFTUNE_TEST_KILL_SIGNAL") == "1":  # as the OOM killer or a user's kill -9 would
                print(f"perftune: fault injection (PERFTUNE_TEST_KILL_RANK): rank {self.rank} is killed by SIGKILL "
                      f"after {self.steps_done} steps", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            print(f"perftune: fault injection (PERFTUNE_TEST_KILL_RANK): rank {self.rank} exits with code 9 after "
                  f"{self.steps_done} steps", file=sys.stderr, flush=True)
            os._exit(9)
        t0 = time.perf_counter()
        batch = next(self.iterator)
        t1 = time.perf_counter()
        with_norm = phase == "accuracy"
        loss, grad_norm = (self.accuracy_step_fn if with_norm else self.step_fn)(*batch)
        loss_value = float(loss.asnumpy()) if sync else None
        if not sync:
            self.pending_losses.append(loss)
        t2 = time.perf_counter()
        self.steps_done += 1
        self.samples_seen += int(batch[0].shape[0]) * self.world  # global samples: every rank took its share
        return StepRecord(
            phase=phase, window=window, step_ms=(t2 - t0) * 1e3, data_wait_ms=(t1 - t0) * 1e3,
            loss=finite_or_none(loss_value) if loss_value is not None else None,
            grad_norm=finite_or_none(float(grad_norm.asnumpy())) if with_norm else None,
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
        acc = training_accuracy(records, self.samples_seen, self.spec.lr_scale)
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
        from perftune.burst.data import build_dataset

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
        count = self.spec.burst.warmup_steps + drain
        self.result.warmup_steps = count
        self.result.steps += [self.step("warmup") for _ in range(count)]

    def window_steps(self) -> int:
        """Steps per timed window (``burst.min_window_s`` calibrates it from the warm-up steps)."""
        warm = [r.step_ms for r in self.result.steps if r.phase == "warmup"]
        steps, note = calibrated_window_steps(self.spec.burst, warm)
        if note is not None:
            self.result.notes.append(note)
        return steps

    def timed_phase(self) -> None:
        b = self.spec.burst
        per_step = int(self.k["batch_size"])
        steps = self.window_steps()
        all_steps: list[StepRecord] = []
        for w in range(b.repeats):
            # one synchronisation per window (the losses are read back at its end), as training runs; the window's
            # time includes that read-back, each step's time is its host time up to the next step
            self.pending_losses = []
            before = contention.read()
            started = time.perf_counter()
            window = [self.step("timed", w, sync=False) for _ in range(steps)]
            losses = [float(x.asnumpy()) for x in self.pending_losses]
            total = (time.perf_counter() - started) * 1e3
            guard = contention.between(before, contention.read())
            window[-1].step_ms += total - sum(r.step_ms for r in window)  # the read-back belongs to the last step
            for record, value in zip(window, losses):
                record.loss = finite_or_none(value)
            self.result.windows.append(window_stats(window, total, len(window) * per_step, guard))
            all_steps += window
        self.result.steps += all_steps
        summarize_timed(self.result, all_steps, self.workload.tokens_per_sample)

    def profiled_phase(self) -> None:
        n = self.spec.burst.profile_steps
        if n <= 0:
            return
        from perftune.profile.session import ProfilerSession

        summary = ProfileSummary(profiled_steps=n, unprofiled_step_ms=self.result.step_ms_mean)
        self.result.profile = summary
        out = self.dir / "profile"
        try:
            session = ProfilerSession(out, profile_memory=True)
            session.start()
            records = [self.step("profiled") for _ in range(n)]
            summary.analyse_s = session.stop_and_analyse()
        except Exception as exc:  # the speed figures stand without a profile
            summary.error = one_line(exc)
            return
        self.result.steps += records
        analyse_profile(self.result, summary, records, out, self.dir)

    # -- distributed (workers >= 2, one process per rank under msrun) ------------------------------------------

    def exchange_ranks(self) -> None:
        """Every rank's summary to every rank (one collective), so each node's trial.json describes all ranks."""
        mine = own_summary(self.result, self.rank, self.dir)
        self.result.world_size = self.world
        try:
            payloads = all_gather_bytes(mine.model_dump_json().encode(), self.rank, self.world)
            self.result.ranks = [RankSummary.model_validate_json(p) for p in payloads]
        except Exception as exc:  # noqa: BLE001 - the local figures still stand; the launcher says what is missing
            self.result.notes.append(Note(kind="warning", text=f"rank {self.rank}: could not exchange the rank "
                                                               f"summaries ({one_line(exc)})"))
            self.result.ranks = [mine]

    def memory(self) -> None:
        self.result.memory.host_rss_peak_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if self.spec.device != "CPU":
            import mindspore as ms

            try:
                self.result.memory.device_peak_bytes = int(ms.runtime.max_memory_allocated())
            except Exception as exc:  # noqa: BLE001 - memory is a nice-to-have, never a failure
                self.result.notes.append(Note(kind="warning", text=f"device peak memory unavailable: {one_line(exc)}"))

    def run(self) -> TrialResult:
        started = time.perf_counter()
        self.build()
        self.result.environment = environment(self.spec.device, self.k["kernel_threads"] or None)
        # The profile is done once, in a configuration's first process (replicate 0).  The accuracy window runs in
        # every process: a repeat that skipped it was timed after a different history and measured x0.865 of the
        # first process on the PyNative quickstart baseline (README, "What a sweep does").
        repeat = self.spec.replicate > 0
        if repeat:
            self.result.notes.append(Note(kind="info", text=(
                f"repeat process {self.spec.replicate + 1} of this configuration: the profile comes from its first "
                "process; the accuracy window ran too, so that every process is timed after the same history")))
        self.accuracy_phase()
        self.warmup_phase()
        self.timed_phase()
        if not repeat:
            self.profiled_phase()
        self.memory()
        self.result.status = "ok"
        if self.world > 1:
            self.exchange_ranks()
        self.result.wall_s = time.perf_counter() - started
        return self.result


def _learning_rate(optimizer) -> Optional[float]:
    try:
        return float(optimizer.learning_rate.asnumpy())
    except Exception:  # noqa: BLE001 - schedules have no single value
        return None


