"""perftune's own workloads as a burst (``Burst``), run in its own process by ``perftune.burst.main``: it builds the
workload, the step and the input pipeline from the knobs, then drives the one phase machine (``meter.Meter``: the
accuracy window, warm-up, drain, timed windows and profiled steps, as a script's burst has them) with its own loop,
and adds what only perftune's own workloads have: the gradient norm of the accuracy steps, its own validation loss
and perplexity, a language model's greedy sample, and the ranks of a distributed burst.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

from perftune.burst import amp_check
from perftune.burst.collectives import agree_max, exchange_ranks, fault_injection, init_distributed
from perftune.burst.context import (
    apply_context,
    distributed_read_back,
    environment,
    first_eager_op,
    learning_rate,
    read_back,
    scale_learning_rate,
    single_process_notes,
)
from perftune.burst.failures import KnobRefused
from perftune.burst.graph_check import check_loaded_graph, seal_folder, use_compile_cache
from perftune.burst.meter import Meter
from perftune.burst.results import read_memory
from perftune.io.derived import failed_result
from perftune.io.records import Accuracy, Note, TrialResult, TrialSpec
from perftune.knobs import model_change

VAL_BATCH = 64  # the same validation batches for every trial, whatever its batch size


class Burst:
    def __init__(self, spec: TrialSpec, trial_dir: Path):
        self.spec = spec
        self.dir = trial_dir
        self.k = spec.knobs
        self.result = failed_result(spec, "failed", None)  # until run() completes
        self.meter: Optional[Meter] = None
        self.learning_rate: Optional[float] = None
        # distributed bursts (workers >= 2, under msrun): this process's rank and the world size
        self.rank = 0
        self.world = 1
        self.steps_done = 0
        self.pair_workload: Any = None  # a paired process of two models: the candidate's workload (arm 1)
        self.kill_after: Optional[int] = None  # test-only fault injection, see collectives.init_distributed

    # -- set-up ---------------------------------------------------------------------------------------------
    def build(self) -> None:
        import mindspore as ms
        import mindspore.dataset as ds

        from perftune.workloads import build as build_workload

        spec, k = self.spec, self.k
        use_compile_cache(spec, self.result)  # before anything compiles
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
        workload = build_workload(spec.workload, dict(spec.workload_params),
                                  spec.seed if spec.data_seed is None else spec.data_seed)
        workload.check()
        self.workload = workload
        self.network, amp_effect = build_network(workload, k, self.result.notes)
        reducer = self.build_steps()
        self.build_pair_model()
        self.result.parameter_count = int(sum(int(np.prod(p.shape)) for p in self.network.trainable_params()))
        self.result.tokens_per_sample = workload.tokens_per_sample
        self.result.flops_per_sample = workload.flops_per_sample
        dataset = self.build_pipelines()
        self.result.applied = read_back(k, self.network, self.step_fn, dataset)
        self.result.applied["amp_effect"] = amp_effect
        if self.world > 1:
            self.result.applied.update(distributed_read_back(self.rank, self.world, reducer is not None))
        if workload.preprocess is None and k["python_multiprocessing"]:
            self.result.notes.append(Note(kind="no_effect", knob="python_multiprocessing",
                                          text="python_multiprocessing=true has no effect here: the workload has no "
                                               "Python preprocessing map"))

    def build_steps(self) -> Any:
        """The step every phase runs; returns the data-parallel gradient reducer (or None)."""
        from perftune.burst.train_step import NetWithLoss, build_train_step

        spec, k = self.spec, self.k
        net_with_loss = NetWithLoss(self.network, self.workload.loss_fn)
        self.net_with_loss = net_with_loss
        optimizer = self.workload.make_optimizer(self.network.trainable_params())
        if spec.lr_scale != 1.0:
            self.result.notes.append(scale_learning_rate(optimizer, spec.lr_scale))
        self.learning_rate = learning_rate(optimizer)
        graph = k["mode"] == "graph"
        reducer = None
        if self.world > 1 and k["parallel_mode"] == "data_parallel":
            from perftune.burst.train_step import make_grad_reducer

            reducer = make_grad_reducer(optimizer, bool(k["gradients_mean"]), self.world)
        # one step, one graph, for every phase: the gradient norm (for the gate) is switched on in the accuracy
        # window only (``TrainStep.norm``, a tensor input of the graph): it would cost ~20% of a small step on CPU
        self.step_fn = build_train_step(k["train_step"], net_with_loss, optimizer, k["loss_scale"],
                                        int(k["grad_accum_steps"]), graph, k["jit_level"], reducer)
        self.arm_steps = [self.step_fn]
        return reducer

    def build_pair_model(self) -> None:
        """A paired process of a model-side change: arm 1's own model and step (``pair_model``)."""
        pair = self.spec.pair
        if pair is not None and model_change(self.k, pair.knobs):
            self.pair_workload, step = pair_model(self.spec, self.result.notes)
            self.arm_steps.append(step)

    def build_pipelines(self) -> Any:
        """The training pipeline (and a paired process's second one); returns the first."""
        from perftune.burst.data import build_dataset

        spec, k = self.spec, self.k
        cache = Path(spec.cache_dir) if spec.cache_dir else self.dir / "cache"
        self.cache_dir = cache
        if self.world > 1:  # batch_size is the global batch: each rank reads its shard, batch_size / world rows
            dataset = build_dataset(self.workload, k, "train", cache, batch_size=int(k["batch_size"]) // self.world,
                                    num_shards=self.world, shard_id=self.rank)
        else:
            dataset = build_dataset(self.workload, k, "train", cache)
        self.iterator = dataset.create_tuple_iterator(num_epochs=1, do_copy=False)
        self.iterators = [self.iterator]
        if spec.pair is not None:  # a paired process: the candidate's pipeline beside the reference's (arm 1)
            self.iterators.append(self.pair_pipeline(cache).create_tuple_iterator(num_epochs=1, do_copy=False))
        return dataset

    # -- the steps: perftune's own loop drives the one phase machine (meter.Meter) ---------------------------------
    def train(self) -> None:
        """Step until the Meter has every phase.  The accuracy window's steps also compute the gradient norm (for
        the gate); the others leave it out, with the same compiled step.  The Meter completes each step (reads its
        loss back) before it times its end, so an asynchronous step is timed as it really runs."""
        meter = self.meter
        meter.start()
        while not meter.done:
            fault_injection(self.kill_after, self.steps_done, self.rank)
            batch = next(self.iterators[meter.arm])
            meter.begin()
            step = self.arm_steps[min(meter.arm, len(self.arm_steps) - 1)]  # two models: the arm's own
            step.norm = meter.phase == "accuracy"
            loss, grad_norm = step(*batch)
            self.steps_done += 1
            meter.end(loss, int(batch[0].shape[0]) * self.world, grad_norm=grad_norm)  # global samples
            if self.steps_done <= 2:  # a graph from the compile cache must be this one
                check_loaded_graph(self.spec, self.result, self.steps_done)

    def pair_pipeline(self, cache: Path):
        """The candidate's pipeline of a paired process over the same data: its knobs, and its workload's
        parameters where they differ (only data parameters may: ``perftune.engine.paired``)."""
        from perftune.burst.data import build_dataset
        from perftune.workloads import resolve

        pair, spec = self.spec.pair, self.spec
        workload = self.pair_workload or self.workload
        if workload is self.workload and dict(pair.workload_params) != dict(spec.workload_params):
            workload = resolve(spec.workload)(dict(pair.workload_params),
                                              spec.seed if spec.data_seed is None else spec.data_seed)
        return build_dataset(workload, pair.knobs, "train", cache)

    def accuracy_end(self, acc: Accuracy) -> None:
        """The Meter's hook at the accuracy window's end: validation loss / perplexity and, for language models, a
        greedy sample's repetition rate (not timed)."""
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

    # -- distributed (workers >= 2, one process per rank under msrun) ------------------------------------------

    def memory(self) -> None:
        read_memory(self.result, self.spec.device)

    def run(self) -> TrialResult:
        started = time.perf_counter()
        self.build()
        self.result.environment = environment(self.spec.device, self.k["kernel_threads"] or None)
        agree = (lambda v: agree_max(v, self.rank, self.world)) if self.world > 1 else None
        self.meter = Meter(self.spec, self.dir, self.result, grad_norms=True, agree=agree)  # phases, repeat rule
        self.meter.accuracy_end = self.accuracy_end
        self.meter.learning_rate = self.learning_rate
        self.train()
        seal_folder(self.spec, self.result)  # a first process: the digests of the graphs it compiled
        self.result.status = "ok"
        if self.world > 1:
            exchange_ranks(self.result, self.rank, self.world, self.dir)
        self.result.wall_s = time.perf_counter() - started
        return self.result


def build_network(workload: Any, k: dict, notes: list[Note]) -> tuple[Any, Any]:
    """The workload's network with AMP and recompute applied under knobs ``k``, and AMP's measured effect (its
    notes go to ``notes``)."""
    network = workload.network
    # AMP with a forward probe before and after: its effect, not its wrapper, goes into `applied` (a wrapper
    # MindSpore accepts may change nothing)
    amp_outcome = amp_check.apply_amp(network, k["amp_level"],
                                      amp_check.probe_inputs(workload.train_columns, workload.label_column))
    network = amp_outcome.network
    notes += amp_outcome.notes
    if k["recompute"]:
        # after AMP: O1 rewrites the network into new cell objects, so look the cells up by name in the network
        # that is actually trained (O2/O3 wrap it, hence the suffix match)
        cells = [cell for name, cell in network.cells_and_names()
                 if any(name == n or name.endswith("." + n) for n in workload.recompute_cell_names)]
        if not cells:
            raise KnobRefused(f"recompute=true: workload {workload.name!r} names no recompute cells")
        for cell in cells:
            cell.recompute()
    return network, amp_outcome.effect


def pair_model(spec: TrialSpec, notes: list[Note]) -> tuple[Any, Any]:
    """A paired process of a model-side change (``knobs.model_change``): the candidate's own workload and
    step (arm 1), its network built from the same seed as the candidate's own fresh process builds it, to be fed by
    its own pipeline (``Burst.pair_pipeline``).  The learning rate is the workload's: the windows compare speed, and
    this model's accuracy is never read."""
    import mindspore as ms

    from perftune.burst.train_step import NetWithLoss, build_train_step
    from perftune.workloads import build as build_workload

    pair, k = spec.pair, spec.pair.knobs
    ms.set_seed(spec.seed)
    np.random.seed(spec.seed)
    workload = build_workload(spec.workload, dict(pair.workload_params),
                              spec.seed if spec.data_seed is None else spec.data_seed)
    network, _ = build_network(workload, k, notes)
    step = build_train_step(k["train_step"], NetWithLoss(network, workload.loss_fn),
                            workload.make_optimizer(network.trainable_params()), k["loss_scale"],
                            int(k["grad_accum_steps"]), k["mode"] == "graph", k["jit_level"], with_norm=False)
    return workload, step
