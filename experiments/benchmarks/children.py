"""The benchmarks' child processes: ``python experiments/benchmarks/children.py COMMAND JSON`` (``plain``,
``instrumented``, ``peak``, ``sync_loop``).

``plain``: a hand-written MindSpore training loop (no perftune harness) on a perftune workload; ``instrumented``: a
perftune burst with a timer around each of its stages; ``peak``: the matmul peak.  Every measurement runs in a fresh
process, as perftune's own bursts do.  Each child prints one JSON line last on stdout; ``harness.run_child`` reads it
back.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from harness import phase_seconds  # importing harness also puts the repository on sys.path
from matmul_peak import matmul_peak_mindspore, matmul_peak_numpy
from sync_loop import child_sync_loop


def child_plain(args: dict) -> dict:
    """The same workload and knobs as a perftune burst, trained by the loop a user would write by hand.

    ``form``: ``trainonestep`` = ``nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt)``; ``celltrainstep`` =
    perftune's own ``CellTrainStep`` (loss scaler, finiteness check; the gradient norm switched off, as in the
    burst's timed steps) without the harness.
    The loop syncs on the loss every step (``loss.asnumpy()``, as a loop that logs its loss does), runs one
    compiling step and ``warmup_steps`` more untimed (the caller passes as many as the burst runs before its
    windows), then times ``repeats`` windows of ``steps`` steps exactly as the burst's timed phase does.
    """
    entered = time.time()
    t_import = time.perf_counter()
    import mindspore as ms
    import mindspore.dataset as ds
    import numpy as np
    from mindspore import nn

    from perftune.workloads import resolve

    import_s = time.perf_counter() - t_import
    k = args["knobs"]
    t_build = time.perf_counter()
    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE if k["mode"] == "graph" else ms.PYNATIVE_MODE)
    try:
        (ms.Tensor(np.ones(1, np.float32)) + 1).asnumpy()
    except SystemError:
        pass
    seed = int(args.get("seed", 0))
    ms.set_seed(seed)
    np.random.seed(seed)
    ds.config.set_seed(seed)
    ds.config.set_prefetch_size(int(k["prefetch_size"]))
    workload = resolve(args["workload"])(dict(args.get("workload_params") or {}), seed)
    net = workload.network
    optimizer = workload.make_optimizer(net.trainable_params())
    if args["form"] == "trainonestep":
        if len(workload.input_columns) != 1:
            raise ValueError("nn.WithLossCell takes one input column")
        step = nn.TrainOneStepCell(nn.WithLossCell(net, workload.loss_fn), optimizer)
        step.set_train()
        if k["mode"] == "graph":
            step.set_jit_config(ms.JitConfig(jit_level=k["jit_level"]))
    else:
        from perftune.burst.train_step import NetWithLoss, build_train_step

        # the step the burst times: perftune's CellTrainStep, its gradient norm switched off
        step = build_train_step("cell", NetWithLoss(net, workload.loss_fn), optimizer, k["loss_scale"],
                                int(k["grad_accum_steps"]), k["mode"] == "graph", k["jit_level"], with_norm=False)
    columns = workload.train_columns
    workers = int(k["num_parallel_workers"])
    dataset = ds.NumpySlicesDataset(tuple(columns.values()), column_names=list(columns), shuffle=False)
    dataset = dataset.batch(int(k["batch_size"]), drop_remainder=True, num_parallel_workers=workers).repeat()
    iterator = dataset.create_tuple_iterator(num_epochs=1, do_copy=False)
    build_s = time.perf_counter() - t_build

    def one_step() -> tuple[float, float]:
        t0 = time.perf_counter()
        batch = next(iterator)
        t1 = time.perf_counter()
        out = step(*batch)
        loss = out[0] if isinstance(out, tuple) else out
        loss.asnumpy()
        t2 = time.perf_counter()
        return (t2 - t0) * 1e3, (t1 - t0) * 1e3

    compile_ms = one_step()[0]
    t_warm = time.perf_counter()
    for _ in range(int(args["warmup_steps"])):
        one_step()
    warmup_s = time.perf_counter() - t_warm
    windows, step_ms = [], []
    batch_size = int(k["batch_size"])
    for _ in range(int(args["repeats"])):
        times = [one_step()[0] for _ in range(int(args["steps"]))]
        windows.append(len(times) * batch_size / (sum(times) / 1e3))
        step_ms += times
    return {
        "form": args["form"],
        "process_start_s": entered - float(args["launch_time"]),
        "import_s": import_s,
        "build_s": build_s,
        "compile_ms": compile_ms,
        "warmup_s": warmup_s,
        "timed_s": sum(step_ms) / 1e3,
        "step_ms_median": float(np.median(step_ms)),
        "samples_per_s": float(np.median(windows)),
        "windows": windows,
        "flops_per_sample": workload.flops_per_sample,
    }


# ---------------------------------------------------------------------------------------------------------------
# Child: perftune's burst with a timer around each stage (same code path as ``python -m perftune.burst``)
# ---------------------------------------------------------------------------------------------------------------


def child_instrumented(args: dict) -> dict:
    """Run ``perftune.burst.own_workload.Burst`` on ``args['trial_dir']/spec.json`` with each stage timed.

    Wraps the Burst methods by name (those that exist in this version of own_workload.py), the workload's ``generate``
    and the ``environment`` it calls (git calls).  Writes ``trial.json`` as the burst would."""
    entered = time.time()
    timings: dict[str, float] = {"process_start_s": entered - float(args["launch_time"])}
    t0 = time.perf_counter()
    import numpy  # noqa: F401

    from perftune.burst import own_workload as burst_mod
    from perftune.io.files import read_spec
    from perftune.io.store import write_json_atomic

    timings["import_perftune_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    import mindspore  # noqa: F401  (burst.build would import it; time it on its own)

    timings["import_mindspore_s"] = time.perf_counter() - t0

    def timed(name, fn):
        def wrapper(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                timings[name] = timings.get(name, 0.0) + time.perf_counter() - t
        return wrapper

    cls = burst_mod.Burst
    for name in ("build", "accuracy_phase", "validation_loss", "warmup_phase", "timed_phase", "profiled_phase",
                 "memory"):
        if hasattr(cls, name):
            setattr(cls, name, timed(name + "_s", getattr(cls, name)))
    burst_mod.environment = timed("environment_s", burst_mod.environment)
    original_build = cls.build

    def build_and_wrap_generate(self, *a, **kw):
        out = original_build(self, *a, **kw)
        if getattr(self.workload, "generate", None) is not None:
            self.workload.generate = timed("generate_s", self.workload.generate)
        return out

    cls.build = build_and_wrap_generate
    from perftune.profile import layouts

    layouts.load_profile = timed("profile_parse_s", layouts.load_profile)  # phases imports it when it profiles
    trial_dir = Path(args["trial_dir"])
    spec = read_spec(trial_dir)
    os.chdir(trial_dir)
    t0 = time.perf_counter()
    b = cls(spec, trial_dir)
    result = b.run()
    timings["run_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    write_json_atomic(trial_dir / "trial.json", result.model_dump(mode="json"))
    timings["write_json_s"] = time.perf_counter() - t0
    timings["analyse_s"] = float(result.profile.analyse_s or 0.0) if result.profile else 0.0
    timings["compile_s"] = (result.compile_ms or 0.0) / 1e3
    ph = phase_seconds(result)
    timings.update({f"{k}_steps_s": v for k, v in ph.items()})
    warm = [st.step_ms / 1e3 for st in result.steps if st.phase == "warmup"]
    timings["warmup_first_step_s"] = warm[0] if warm else 0.0
    timings["warmup_steps"] = len(warm)
    timings["since_launch_s"] = time.time() - float(args["launch_time"])
    return {"status": result.status, "timings": timings, "samples_per_s": result.samples_per_s,
            "step_ms_median": result.step_ms_median}


def child_peak(args: dict) -> dict:
    out = {}
    if args.get("mindspore", True):
        out["mindspore"] = matmul_peak_mindspore(int(args.get("n", 2048)), int(args.get("repeats", 7)))
    if args.get("numpy", True):
        out["numpy"] = matmul_peak_numpy(int(args.get("n", 2048)), int(args.get("repeats", 7)))
    return out


CHILDREN = {"plain": child_plain, "instrumented": child_instrumented, "peak": child_peak,
            "sync_loop": child_sync_loop}


def child_main(argv: list[str]) -> None:
    command, payload = argv[0], json.loads(argv[1])
    answer = CHILDREN[command](payload)
    print(json.dumps(answer), flush=True)
    # MindSpore's exit handlers can be slow or hang (see perftune/burst/main.py); the answer is out, leave now
    os._exit(0)


if __name__ == "__main__":
    child_main(sys.argv[1:])
