"""Shared helpers for the benchmarks in this folder (not part of perftune's API; see README.md here).

Three kinds of things live here:

* helpers for the parent scripts: plans, running perftune bursts, load average, figures, failure exit;
* ``mfu()`` / ``trial_mfu()`` (from ``perftune.report.efficiency``) and ``matmul_peak_*()`` (MindSpore's is
  ``perftune peak``'s ``perftune.peak_probe.measure_peak``; NumPy's is a cross-check): model FLOPs utilisation;
* child-process entries (``python experiments/benchmarks/_common.py plain|peak|instrumented ...``): a plain,
  hand-written MindSpore training loop, the matmul peak, and a perftune burst with a timer around each of its
  stages.  Every measurement runs in a fresh process, as perftune's own bursts do (MindSpore's context is
  process-global, and the spread that matters is the one between processes).

Every child prints one JSON line last on stdout; ``run_child`` reads it back.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
HERE = Path(__file__).resolve().parent
EXIT_CANNOT_MEASURE = 2

#: a small but real tiny_gpt (2 blocks, d=64, seq 64: about 0.1 M parameters): a burst takes seconds on 2 cores
SMALL_GPT = {"d_model": 64, "n_layers": 2, "n_heads": 4, "seq_len": 64, "train_samples": 2048, "val_samples": 64,
             "corpus_bytes": 300_000}
#: the mlp workload's defaults (256-512-512-16, 0.4 M parameters)
SMALL_MLP: dict = {}
WORKLOADS = {"tiny_gpt": (SMALL_GPT, 16), "mlp": (SMALL_MLP, 32)}  # name -> (params, batch size)


# ---------------------------------------------------------------------------------------------------------------
# Parent-side helpers
# ---------------------------------------------------------------------------------------------------------------


class CannotMeasure(Exception):
    """The benchmark could not produce its figures (a burst failed, a child died ...): exit status 2."""


def fail(message: str) -> None:
    print(f"CANNOT MEASURE: {message}", flush=True)
    sys.exit(EXIT_CANNOT_MEASURE)


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unavailable"


def load1() -> Optional[float]:
    try:
        return float(loadavg().split()[0])
    except (ValueError, IndexError):
        return None


def out_dir(name: str, given: Optional[str]) -> Path:
    path = Path(given) if given else Path(tempfile.gettempdir()) / "perftune_bench" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_plan(**fields):
    """A validated perftune ``Plan`` (name defaults to 'bench')."""
    from perftune.engine.plan_load import parse_plan

    data = {"name": "bench", **fields}
    return parse_plan(data, "benchmark plan")


def run_burst(plan, knobs: dict, trial_dir: Path, label: str = "trial", replicate: int = 0,
              cache_dir: Optional[Path] = None):
    """One perftune burst (``perftune.runner.run_trial``: a fresh ``python -m perftune.burst`` process)."""
    from perftune.engine.specs import make_spec
    from perftune.runner import run_trial

    spec = make_spec(plan, knobs, label, replicate, cache_dir)
    return run_trial(spec, trial_dir)


def require_ok(result, what: str):
    if result.status != "ok":
        tail = (result.log_tail or "").splitlines()[-5:]
        raise CannotMeasure(f"{what}: status {result.status}: {result.reason}\n    " + "\n    ".join(tail))
    return result


def phase_seconds(result) -> dict[str, float]:
    """Seconds spent in the steps of each burst phase (accuracy includes the first, compiling step)."""
    out = {"accuracy": 0.0, "warmup": 0.0, "timed": 0.0, "profiled": 0.0}
    for s in result.steps:
        out[s.phase] = out.get(s.phase, 0.0) + s.step_ms / 1e3
    return out


def phase_counts(result) -> dict[str, int]:
    out = {"accuracy": 0, "warmup": 0, "timed": 0, "profiled": 0}
    for s in result.steps:
        out[s.phase] = out.get(s.phase, 0) + 1
    return out


def fixed_cost(result) -> dict[str, float]:
    """A trial's wall time split into the timed windows (what it is for) and everything else (its fixed cost).

    From ``trial.json`` alone: ``wall_s`` is the launcher's (process start to exit), the steps carry their phase.
    ``rest_s`` is what no step covers: process start, imports, building the workload and the dataset, validation
    and the greedy sample, profile parsing, writing the result.
    """
    ph = phase_seconds(result)
    wall = float(result.wall_s or 0.0)
    compile_s = (result.compile_ms or 0.0) / 1e3
    analyse = float(result.profile.analyse_s or 0.0) if result.profile else 0.0
    steps_total = sum(ph.values())
    fixed = wall - ph["timed"]
    return {
        "wall_s": wall,
        "timed_s": ph["timed"],
        "fixed_s": fixed,
        "fixed_share": fixed / wall if wall else float("nan"),
        "compile_s": compile_s,
        "accuracy_steps_s": ph["accuracy"] - compile_s,
        "warmup_s": ph["warmup"],
        "profiled_steps_s": ph["profiled"],
        "analyse_s": analyse,
        "rest_s": wall - steps_total - analyse,
    }


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def geomean(values: Sequence[float]) -> float:
    return float(math.exp(sum(math.log(v) for v in values) / len(values)))


def cv(values: Sequence[float]) -> float:
    """Coefficient of variation (sample SD / mean)."""
    if len(values) < 2:
        return float("nan")
    return float(statistics.stdev(values) / statistics.mean(values))


def run_child(command: str, args: dict, timeout_s: float = 600, cwd: Optional[Path] = None) -> dict:
    """Run ``_common.py COMMAND`` in a fresh interpreter; return its JSON answer (last stdout line).

    ``launch_time`` (``time.time()`` just before the start) goes along, so the child can say how long the
    interpreter took to reach its first line."""
    payload = json.dumps({**args, "launch_time": time.time()})
    env = dict(os.environ)
    env.setdefault("GLOG_v", "2")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    started = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, str(HERE / "_common.py"), command, payload], capture_output=True,
                              text=True, timeout=timeout_s, env=env, cwd=str(cwd) if cwd else None,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise CannotMeasure(f"child '{command}' ran past {timeout_s:g} s") from None
    wall = time.perf_counter() - started
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        tail = "\n    ".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise CannotMeasure(f"child '{command}' exited {proc.returncode}:\n    {tail}")
    answer = json.loads(lines[-1])
    answer["wall_s"] = wall
    return answer


# ---------------------------------------------------------------------------------------------------------------
# MFU: model FLOPs utilisation (perftune's own: perftune/report/efficiency.py, perftune/peak_probe.py)
# ---------------------------------------------------------------------------------------------------------------


def mfu(flops_per_sample: float, samples_per_s: float, peak_flops_per_s: float) -> float:
    """``perftune.report.efficiency.mfu`` (imported here, not at the top: the children stay as light as before)."""
    from perftune.report.efficiency import mfu as report_mfu

    return report_mfu(flops_per_sample, samples_per_s, peak_flops_per_s)


def trial_mfu(trial: Any, peak_flops_per_s: float) -> Optional[float]:
    """``perftune.report.efficiency.trial_mfu``: MFU of a ``TrialResult`` or a trial.json dict, None if unknown."""
    from perftune.report.efficiency import trial_mfu as report_trial_mfu

    return report_trial_mfu(trial, peak_flops_per_s)


def matmul_peak_numpy(n: int = 2048, repeats: int = 7) -> dict:
    """Best and median float32 FLOP/s of an n x n x n matmul in NumPy (its BLAS), after one warm-up."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    flops = 2.0 * n**3
    return {"n": n, "best_flops_per_s": flops / min(times), "median_flops_per_s": flops / median(times)}


def matmul_peak_mindspore(n: int = 2048, repeats: int = 7) -> dict:
    """Best and median float32 FLOP/s of an n x n x n ``ops.MatMul`` in MindSpore: ``perftune peak``'s own
    measurement (``perftune.peak_probe.measure_peak``), ``repeats`` calls after a warm-up."""
    from perftune.peak_probe import measure_peak

    r = measure_peak("CPU", n, seconds=0.0, min_repeats=repeats)
    return {"n": n, "best_flops_per_s": r.flops_per_s, "median_flops_per_s": r.median_flops_per_s}


# ---------------------------------------------------------------------------------------------------------------
# Child: a plain, hand-written MindSpore training loop (no perftune harness)
# ---------------------------------------------------------------------------------------------------------------


def child_plain(args: dict) -> dict:
    """The same workload and knobs as a perftune burst, trained by the loop a user would write by hand.

    ``form``: ``trainonestep`` = ``nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt)``; ``celltrainstep`` =
    perftune's own ``CellTrainStep`` (loss scaler, finiteness check; without the gradient norm where the class
    has ``with_norm``, as the burst's timed step) without the harness.
    The loop syncs on the loss every step (``loss.asnumpy()``, as a loop that logs its loss does), runs one
    compiling step and ``warmup_steps`` more untimed (the caller passes as many as the burst runs before its
    windows), then times ``repeats`` windows of ``steps`` steps exactly as the burst's timed phase does.
    """
    entered = time.time()
    t_import = time.perf_counter()
    import numpy as np

    import mindspore as ms
    import mindspore.dataset as ds
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
    else:
        import inspect

        from perftune.burst.train_step import CellTrainStep, NetWithLoss, make_scaler

        extra = {}
        if "with_norm" in inspect.signature(CellTrainStep).parameters:
            extra["with_norm"] = False  # the step the burst times leaves the gradient norm out
        step = CellTrainStep(NetWithLoss(net, workload.loss_fn), optimizer, make_scaler(k["loss_scale"]),
                             int(k["grad_accum_steps"]), **extra)
    step.set_train()
    if k["mode"] == "graph":
        step.set_jit_config(ms.JitConfig(jit_level=k["jit_level"]))
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
    """Run ``perftune.burst.phases.Burst`` on ``args['trial_dir']/spec.json`` with each stage timed.

    Wraps the Burst methods by name (those that exist in this version of phases.py), the workload's ``generate``
    and the ``environment`` it calls (git calls).  Writes ``trial.json`` as the burst would."""
    entered = time.time()
    timings: dict[str, float] = {"process_start_s": entered - float(args["launch_time"])}
    t0 = time.perf_counter()
    import numpy  # noqa: F401

    from perftune.burst import phases as burst_mod
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


CHILDREN = {"plain": child_plain, "instrumented": child_instrumented, "peak": child_peak}


def _child_main(argv: list[str]) -> None:
    command, payload = argv[0], json.loads(argv[1])
    answer = CHILDREN[command](payload)
    print(json.dumps(answer), flush=True)
    # MindSpore's exit handlers can be slow or hang (see perftune/burst/main.py); the answer is out, leave now
    os._exit(0)


if __name__ == "__main__":
    _child_main(sys.argv[1:])
