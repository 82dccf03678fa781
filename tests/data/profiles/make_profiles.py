"""Generate the profiler fixtures under tests/data/profiles/<scenario>/ from real MindSpore runs.

    .venv/bin/python tests/data/profiles/make_profiles.py all            # every scenario (about 4 minutes on 2 cores)
    .venv/bin/python tests/data/profiles/make_profiles.py tiny_gpt       # the 16 tiny_gpt ones (about 4 minutes)
    .venv/bin/python tests/data/profiles/make_profiles.py repeats        # the 3 identical PyNative runs (about 1 minute)
    .venv/bin/python tests/data/profiles/make_profiles.py mlp_graph      # one scenario

Scenarios:
  mlp_graph      an MLP trained in GRAPH mode, a few profiled steps
  mlp_pynative   the same in PYNATIVE mode
  dp2_allreduce  two data-parallel workers under msrun (CPU collectives), both ranks profiled
  ascend_layout  written by hand from the documented Ascend columns (profiler-layouts.md): NOT real output
  repeat_pynative_cell_run<1|2|3>
                 three identical runs of tiny_gpt_pynative_cell with MindSpore's default kernel threads: the
                 fixtures of tests/test_split_repeats.py (splits of identical runs agree within the noise)
  tiny_gpt_<mode>_<form>[_recompute|_accum2]
                 the built-in tiny_gpt (d_model 128, 1 layer, seq 64, batch 16) with perftune's own training step
                 (perftune.burst.train_step.build_train_step, form cell or function) in GRAPH or PYNATIVE mode, plain,
                 with its recompute cells recomputed, or with 2 gradient-accumulation micro-batches: the fixtures
                 of tests/test_attribution.py (``all`` makes them too; ``tiny_gpt`` makes only them)
  tiny_gpt_graph_<form>[_recompute]_2layers
                 the same in GRAPH mode with two blocks, as the built-in tiny_gpt has by default: where recompute
                 once counted the function form's whole forward as backward (tests/test_attribution.py)

Each training scenario runs in a fresh process (MindSpore's context is process-global), trains with the same
TrainStep cell form as perftune's burst (the MLPs) or with perftune's own step (tiny_gpt), times every step the way
a burst does (perf_counter around ``next(iterator)`` and around the step including ``loss.asnumpy()``), profiles a
few steps with ``perftune.profile.session.ProfilerSession`` and keeps only the files the parser reads.  The measured step
times go to ``expected.json`` next to the profile, which the tests check the splits against.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

#: files of a CPU profile the parser reads; everything else is pruned from the fixture
KEEP_CPU = (
    "FRAMEWORK/cpu_op_detail_info_{rank}.csv",
    "FRAMEWORK/cpu_op_execute_timestamp_{rank}.txt",
    "FRAMEWORK/cpu_ms_memory_record_{rank}.txt",
    "ASCEND_PROFILER_OUTPUT/trace_view.json",
)
#: the tiny_gpt fixtures keep only what the phase attribution reads (op table and per-launch timestamps): the
#: memory record is not written (profile_memory off) and trace_view.json (370-520 KB here) is left out
KEEP_TIMELINE = KEEP_CPU[:2]
MAX_FILE_BYTES = 300_000

SCENARIOS = {
    "mlp_graph": dict(mode="graph", profiled_steps=8),
    "mlp_pynative": dict(mode="pynative", profiled_steps=4),
    "dp2_allreduce": dict(mode="graph", profiled_steps=6, workers=2),
}
BATCH, IN_DIM, HIDDEN, CLASSES = 64, 256, 512, 16

#: tiny_gpt with one block: ~150 op launches per step, so 5 profiled steps make files of 20-160 KB.  d_model 128,
#: seq 64, batch 16 make the ops long enough (forward ~40 ms) that launch overhead and the machine's 4 ms scheduler
#: stalls do not swamp them (at d_model 64, seq 32, batch 8 the forward was 4-5 ms and a few stalled launches moved
#: it by 20%).  One kernel thread: on 2 shared cores a multi-threaded kernel waits for its slowest thread, and single
#: launches then take a 4 ms scheduler tick (forward 3.3 ms +- 0.1 over 4 runs with one thread, 5.9-14.7 ms with
#: MindSpore's default).
TINY_GPT_PARAMS = {"d_model": 128, "n_layers": 1, "n_heads": 4, "seq_len": 64, "train_samples": 1024,
                   "val_samples": 16}
TINY_GPT_BATCH = 16
TINY_GPT_VARIANTS = {"": dict(recompute=False, grad_accum_steps=1), "_recompute": dict(recompute=True, grad_accum_steps=1),
                     "_accum2": dict(recompute=False, grad_accum_steps=2)}
for _mode in ("graph", "pynative"):
    for _form in ("cell", "function"):
        for _suffix, _variant in TINY_GPT_VARIANTS.items():
            SCENARIOS[f"tiny_gpt_{_mode}_{_form}{_suffix}"] = dict(
                mode=_mode, profiled_steps=5, workload="tiny_gpt", train_step=_form, kernel_threads=1, warmup=10,
                unprofiled=5, **_variant)
#: three identical runs of the PyNative cell step with MindSpore's default kernel threads (the quickstart's baseline
#: setting): the fixtures of tests/test_split_repeats.py, which checks that their splits agree within the noise
REPEAT_SCENARIOS = [f"repeat_pynative_cell_run{i}" for i in (1, 2, 3)]
for _name in REPEAT_SCENARIOS:
    SCENARIOS[_name] = dict(mode="pynative", profiled_steps=5, workload="tiny_gpt", train_step="cell", kernel_threads=0,
                            warmup=10, unprofiled=5, recompute=False, grad_accum_steps=1)
#: two blocks, as the built-in tiny_gpt has by default: with one block the recompute stretch is short enough that
#: the forward evidence outweighs the gradient pieces GRAPH mode runs early; with two the function form's forward
#: was counted as backward (forward 1.9 ms of a 600 ms step in `perftune run`), so these pin it
for _form in ("cell", "function"):
    for _suffix in ("", "_recompute"):
        SCENARIOS[f"tiny_gpt_graph_{_form}{_suffix}_2layers"] = dict(
            mode="graph", profiled_steps=5, workload="tiny_gpt", train_step=_form, kernel_threads=1, warmup=10,
            unprofiled=5, layers=2, **TINY_GPT_VARIANTS[_suffix])
TINY_GPT_SCENARIOS = [name for name in SCENARIOS if name.startswith("tiny_gpt_")]


# ---------------------------------------------------------------------------------------------------------------
# The worker: one training process (or one msrun rank)
# ---------------------------------------------------------------------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    import mindspore as ms
    import numpy as np

    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)
    if args.kernel_threads:
        ms.device_context.cpu.op_tuning.threads_num(args.kernel_threads)
    # Under NumPy 2 the first eager op fails once (NumPy 1.x module warning turned SystemError); absorb it here
    try:
        (ms.Tensor(np.ones(1, np.float32)) + 1).asnumpy()
    except SystemError:
        pass
    (ms.Tensor(np.ones(1, np.float32)) + 1).asnumpy()

    rank, group = 0, 1
    if args.workers > 1:
        from mindspore.communication import get_group_size, get_rank, init

        init()
        rank, group = get_rank(), get_group_size()
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    ms.set_seed(0)

    if args.workload == "tiny_gpt":
        step, it = build_tiny_gpt(args)
    else:
        step, it = build_mlp(group, rank)
    timed_profile(args, step, it, rank)


def build_mlp(group: int, rank: int):
    """The MLP scenarios' own TrainStep (the burst's cell form as it was when they were made) and batches."""
    import mindspore.dataset as ds
    import numpy as np
    from mindspore import nn, ops

    class MLP(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Dense(IN_DIM, HIDDEN)
            self.fc2 = nn.Dense(HIDDEN, HIDDEN)
            self.fc3 = nn.Dense(HIDDEN, CLASSES)
            self.relu = nn.ReLU()

        def construct(self, x):
            return self.fc3(self.relu(self.fc2(self.relu(self.fc1(x)))))

    class NetWithLoss(nn.Cell):
        def __init__(self, network, loss):
            super().__init__(auto_prefix=False)
            self.network = network
            self.loss = loss

        def construct(self, x, y):
            return self.loss(self.network(x), y.reshape(-1))

    class TrainStep(nn.Cell):  # the burst's form: auto_prefix=False, returns (loss, grad_norm)
        def __init__(self, net_with_loss, optimizer):
            super().__init__(auto_prefix=False)
            self.net_with_loss = net_with_loss
            self.optimizer = optimizer
            self.weights = optimizer.parameters
            self.grad = ops.GradOperation(get_by_list=True, sens_param=True)

        def construct(self, x, y):
            loss = self.net_with_loss(x, y)
            grads = self.grad(self.net_with_loss, self.weights)(x, y, ops.ones_like(loss))
            gnorm = ops.sqrt(ops.addn([ops.reduce_sum(ops.square(g)) for g in grads]))
            self.optimizer(grads)
            return loss, gnorm

    class DPTrainStep(TrainStep):  # + the gradient AllReduce of data parallelism
        def __init__(self, net_with_loss, optimizer, degree):
            super().__init__(net_with_loss, optimizer)
            self.grad_reducer = nn.DistributedGradReducer(self.weights, mean=True, degree=degree)

        def construct(self, x, y):
            loss = self.net_with_loss(x, y)
            grads = self.grad(self.net_with_loss, self.weights)(x, y, ops.ones_like(loss))
            grads = self.grad_reducer(grads)
            gnorm = ops.sqrt(ops.addn([ops.reduce_sum(ops.square(g)) for g in grads]))
            self.optimizer(grads)
            return loss, gnorm

    rng = np.random.default_rng(0)
    n = BATCH * 64
    x = rng.standard_normal((n, IN_DIM), dtype=np.float32)
    y = rng.integers(0, CLASSES, size=(n, 1)).astype(np.int32)  # (N, 1): NumPy 2 refuses 1-D columns
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False, num_shards=group if group > 1 else None,
                                 shard_id=rank if group > 1 else None)
    data = data.batch(BATCH, drop_remainder=True).repeat()
    it = data.create_tuple_iterator(output_numpy=False)

    net = MLP()
    opt = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    wl = NetWithLoss(net, nn.CrossEntropyLoss())
    step = DPTrainStep(wl, opt, group) if group > 1 else TrainStep(wl, opt)
    step.set_train()
    return step, it


def build_tiny_gpt(args: argparse.Namespace):
    """tiny_gpt with perftune's own training step, recompute cells chosen the way perftune.burst does."""
    import mindspore.dataset as ds

    from perftune.burst.train_step import NetWithLoss, build_train_step
    from perftune.workloads import resolve

    workload = resolve("tiny_gpt")(dict(TINY_GPT_PARAMS, n_layers=args.layers), 0)
    network = workload.network
    if args.recompute:
        cells = [cell for name, cell in network.cells_and_names()
                 if any(name == n or name.endswith("." + n) for n in workload.recompute_cell_names)]
        assert cells, "tiny_gpt names no recompute cells"
        for cell in cells:
            cell.recompute()
    net_with_loss = NetWithLoss(network, workload.loss_fn)
    optimizer = workload.make_optimizer(network.trainable_params())
    step = build_train_step(args.train_step, net_with_loss, optimizer, "none", args.grad_accum_steps,
                            args.mode == "graph", "O0", with_norm=False)
    data = ds.NumpySlicesDataset(workload.train_columns, shuffle=False)
    data = data.batch(TINY_GPT_BATCH, drop_remainder=True).repeat()
    return step, data.create_tuple_iterator(output_numpy=False)


def timed_profile(args: argparse.Namespace, step, it, rank: int) -> None:
    """Time every step as a burst does, profile ``args.profiled_steps`` of them, write the timing file."""
    from perftune.profile.session import ProfilerSession

    def timed(k: int) -> tuple[list, list, list]:
        steps, waits, losses = [], [], []
        for _ in range(k):
            t0 = time.perf_counter()
            batch = next(it)
            t1 = time.perf_counter()
            loss, _gnorm = step(*batch)
            losses.append(float(loss.asnumpy()))
            t2 = time.perf_counter()
            steps.append((t2 - t0) * 1e3)
            waits.append((t1 - t0) * 1e3)
        return steps, waits, losses

    t = time.perf_counter()
    timed(1)
    compile_ms = (time.perf_counter() - t) * 1e3
    timed(args.warmup_steps)  # warm-up: also drains the batches prefetched during compile
    before, before_waits, _ = timed(args.unprofiled_steps)
    session = ProfilerSession(Path(args.out), profile_memory=args.workload != "tiny_gpt")
    session.start()
    prof_steps, prof_waits, losses = timed(args.profiled_steps)
    analyse_s = session.stop_and_analyse()
    after, after_waits, _ = timed(args.unprofiled_steps)
    timing = {
        "rank": rank,
        "profile_root": session.root.name,
        "profiled_steps": args.profiled_steps,
        "step_ms": statistics.fmean(prof_steps),
        "data_wait_ms": statistics.fmean(prof_waits),
        "profiled_step_ms_list": prof_steps,
        "profiled_data_wait_ms_list": prof_waits,
        "unprofiled_step_ms_median": statistics.median(before + after),
        "unprofiled_step_ms_mean": statistics.fmean(before + after),
        "unprofiled_data_wait_ms_mean": statistics.fmean(before_waits + after_waits),
        "unprofiled_steps": len(before + after),
        "analyse_s": analyse_s,
        "compile_ms": compile_ms,
        "losses": losses,
    }
    Path(args.timing.format(rank=rank)).write_text(json.dumps(timing, indent=1))


# ---------------------------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # msrun starts `python`
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env.setdefault("GLOG_v", "3")  # MindSpore's C++ warnings off; errors still show
    return env


def _prune_into(root: Path, dest: Path, rank: int, keep: tuple = KEEP_CPU) -> list[str]:
    """Copy only the files the parser reads; report what was dropped and why."""
    dropped = []
    for rel in keep:
        src = root / rel.format(rank=rank)
        if not src.is_file():
            dropped.append(f"{rel.format(rank=rank)} (not written)")
            continue
        if src.stat().st_size > MAX_FILE_BYTES:
            dropped.append(f"{rel.format(rank=rank)} ({src.stat().st_size} bytes, over {MAX_FILE_BYTES})")
            continue
        out = dest / root.name / rel.format(rank=rank)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, out)
    return dropped


def run_scenario(name: str) -> None:
    cfg = SCENARIOS[name]
    workers = cfg.get("workers", 1)
    dest = HERE / name
    with tempfile.TemporaryDirectory(prefix=f"perftune_{name}_") as tmp:
        tmp = Path(tmp)
        prof_dir = tmp / "profile"
        worker_args = [
            str(Path(__file__).resolve()), "--as-worker", "--run-mode", cfg["mode"], "--nsteps",
            str(cfg["profiled_steps"]), "--nworkers", str(workers), "--outdir", str(prof_dir),
        ]
        if cfg.get("workload") == "tiny_gpt":
            worker_args += [
                "--workload-name", "tiny_gpt", "--step-form", cfg["train_step"], "--accum",
                str(cfg["grad_accum_steps"]), "--kernel-threads", str(cfg["kernel_threads"]), "--warmup",
                str(cfg["warmup"]), "--unprofiled", str(cfg["unprofiled"]), *(["--recompute-on"] if cfg["recompute"] else []),
            ] + (["--layers", str(cfg["layers"])] if "layers" in cfg else [])
        if workers == 1:
            cmd = [sys.executable, *worker_args, "--timing-file", str(tmp / "timing_rank0.json")]
        else:
            cmd = [
                "msrun", f"--worker_num={workers}", f"--local_worker_num={workers}",
                f"--master_port={_free_port()}", f"--log_dir={tmp / 'msrun_logs'}", "--join=True",
                *worker_args, "--timing-file", str(tmp / "timing_rank{rank}.json"),
            ]
        print(f"[{name}] {' '.join(cmd)}", flush=True)
        t = time.perf_counter()
        proc = subprocess.run(cmd, env=_env(), cwd=tmp, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            logs = "".join(p.read_text()[-3000:] for p in sorted((tmp / "msrun_logs").glob("*.log"))) if workers > 1 else ""
            sys.exit(f"[{name}] failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\n{logs}")
        timings = {}
        for r in range(workers):
            timings[r] = json.loads((tmp / f"timing_rank{r}.json").read_text())
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        dropped = {}
        for r, tm in timings.items():
            keep = KEEP_TIMELINE if cfg.get("workload") == "tiny_gpt" else KEEP_CPU
            dropped[r] = _prune_into(prof_dir / tm["profile_root"], dest, r, keep)

    steps = cfg["profiled_steps"]
    shown_cmd = " ".join(cmd).replace(str(tmp), "<tmp>").replace(sys.executable, ".venv/bin/python")
    shown_cmd = shown_cmd.replace(str(Path(__file__).resolve()), "tests/data/profiles/make_profiles.py")
    shown_cmd = re.sub(r"--master_port=\d+", "--master_port=<free port>", shown_cmd)
    expected = {
        "scenario": name,
        "mode": cfg["mode"],
        "workers": workers,
        "profiled_steps": steps,
        "step_ms": timings[0]["step_ms"],
        "data_wait_ms": timings[0]["data_wait_ms"],
        "ranks": {str(r): tm for r, tm in timings.items()},
        "mindspore_version": _ms_version(),
        "generated_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": wall,
        "command": f".venv/bin/python tests/data/profiles/make_profiles.py {name}",
        "worker_command": shown_cmd,
    }
    if cfg.get("workload") == "tiny_gpt":
        expected["config"] = {
            "workload": "tiny_gpt", "workload_params": dict(TINY_GPT_PARAMS, n_layers=cfg.get("layers", 1)),
            "batch_size": TINY_GPT_BATCH,
            "train_step": cfg["train_step"], "recompute": cfg["recompute"],
            "grad_accum_steps": cfg["grad_accum_steps"], "kernel_threads": cfg["kernel_threads"],
            "loss_scale": "none", "jit_level": "O0", "warmup_steps": cfg["warmup"],
        }
    expected["not_kept"] = {str(r): d for r, d in dropped.items()}
    (dest / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    write_readme(name)
    print(f"[{name}] written to {dest} ({wall:.1f} s)")


def write_readme(name: str) -> None:
    """README.md of a real fixture from its expected.json and the splits the parser gives now (no re-measuring)."""
    from perftune.profile.layouts import load_profile
    from perftune.profile.splits import compute_splits, top_ops

    dest = HERE / name
    exp = json.loads((dest / "expected.json").read_text())
    steps, workers = exp["profiled_steps"], exp["workers"]
    lines = []
    for r, tm in exp["ranks"].items():
        prof = load_profile(dest / tm["profile_root"], rank=int(r))
        if "unprofiled_data_wait_ms_mean" in tm:  # as a burst does: the timed step, the profiled steps' shares
            sp = compute_splits(prof, steps, tm["unprofiled_step_ms_mean"], tm["unprofiled_data_wait_ms_mean"],
                                tm["step_ms"], tm["data_wait_ms"])
        else:
            sp = compute_splits(prof, steps, tm["step_ms"], tm["data_wait_ms"])
        shares = sp.shares
        overhead = tm["step_ms"] / tm["unprofiled_step_ms_median"]
        lines.append(
            f"\n### Rank {r} (`{tm['profile_root']}`)\n\nProfiled step {tm['step_ms']:.3f} ms (of which data wait "
            f"{tm['data_wait_ms']:.3f} ms), mean of {steps} steps; unprofiled median {tm['unprofiled_step_ms_median']:.3f}"
            f" ms over {tm['unprofiled_steps']} steps before and after (ratio {overhead:.2f}); analyse "
            f"{tm['analyse_s']:.2f} s; allocator peak "
            f"{'not recorded' if prof.peak_allocated_bytes is None else f'{prof.peak_allocated_bytes} bytes'}.\n"
        )
        lines.append("| phase | ms/step | share |\n|---|---:|---:|")
        for p in ("data", "forward", "backward", "optimizer", "communication", "other"):
            lines.append(f"| {p} | {getattr(sp, p + '_ms'):.3f} | {shares[p]:.1%} |")
        total = sum(getattr(sp, p + "_ms") for p in ("data", "forward", "backward", "optimizer", "communication", "other"))
        lines.append(f"| **sum** | {total:.3f} | explained {sp.explained_share:.1%} |")
        if sp.recompute_ms is not None:
            lines.append(f"\nOf the backward, recomputed forward ops: {sp.recompute_ms:.3f} ms/step.")
        lines.append(f"\nstep_source: `{sp.step_source}`\n")
        lines.append("Top ops: " + "; ".join(f"`{o.name}` ({o.phase}) {o.total_ms / steps:.3f} ms/step"
                                            for o in top_ops(prof, 5)) + ".")
        if exp.get("not_kept", {}).get(r):
            lines.append(f"\nNot kept: {', '.join(exp['not_kept'][r])}.")
    what = (f"an MLP {IN_DIM}-{HIDDEN}-{HIDDEN}-{CLASSES}, batch {BATCH}, Adam, {exp['mode'].upper()} mode, the burst's "
            "TrainStep cell form")
    kept = "the op table, the per-launch timestamps, the memory record and `trace_view.json`"
    warmup = 20
    cfg = exp.get("config")
    if cfg:
        params = ", ".join(f"{k} {v}" for k, v in cfg["workload_params"].items())
        what = (f"the built-in `{cfg['workload']}` ({params}), batch {cfg['batch_size']}, Adam, {exp['mode'].upper()} "
                f"mode, perftune's own `{cfg['train_step']}` step (`perftune.burst.train_step.build_train_step`, loss_scale "
                f"{cfg['loss_scale']}, no gradient norm, as the burst's timed step), recompute "
                f"{'on (the workload`s recompute cells, chosen as perftune.burst does)' if cfg['recompute'] else 'off'}, "
                f"grad_accum_steps {cfg['grad_accum_steps']}, " + (
                    f"{cfg['kernel_threads']} CPU kernel thread (on 2 shared cores a multi-threaded kernel waits for "
                    "its slowest thread, and single launches then take a 4 ms scheduler tick)" if cfg["kernel_threads"]
                    else "MindSpore's default CPU kernel threads (as a user's first sweep runs)"))
        kept = "the op table and the per-launch timestamps (profile_memory off; `trace_view.json` left out for size)"
        warmup = cfg["warmup_steps"]
    if workers > 1:
        what += f", {workers} workers with DATA_PARALLEL, gradients_mean and nn.DistributedGradReducer"
    adds_up = ("`unprofiled_step_ms_mean` (the unprofiled steps' mean, which includes `unprofiled_data_wait_ms_mean`), "
               "as a burst's splits do: the op phases are their shares of the profiled steps' compute (`step_ms` - "
               "`data_wait_ms`)" if "unprofiled_data_wait_ms_mean" in exp["ranks"]["0"] else
               "`step_ms`, which includes `data_wait_ms`")
    readme = f"""# {name}: real MindSpore {exp['mindspore_version']} CPU profiler output

Produced on a 2-core CPU machine (shared, so step times are noisy) by, from the repository root:

    {exp['command']}

which ran {'msrun' if workers > 1 else 'a fresh process'}:

    {exp['worker_command']}

Workload: {what}.

Steps: 1 compile, {warmup} warm-up, {exp['ranks']['0']['unprofiled_steps'] // 2} unprofiled, {steps} profiled with
`perftune.profile.session.ProfilerSession`, {exp['ranks']['0']['unprofiled_steps'] // 2} unprofiled; each timed as a burst
does (perf_counter around `next(iterator)` and around the step including `loss.asnumpy()`).

`expected.json` holds what the generating process measured for the profiled steps (per rank under `ranks`; the
top-level `step_ms` / `data_wait_ms` are rank 0's): the splits must add up to {adds_up}.  Only files the parser reads are kept, each under {MAX_FILE_BYTES // 1000} KB:
{kept}.

## Splits as the parser gives them (refresh with `make_profiles.py --readme-only {name}`)
""" + "\n".join(lines) + "\n"
    (dest / "README.md").write_text(readme)


def _ms_version() -> str:
    from importlib.metadata import version

    return version("mindspore")


# ---------------------------------------------------------------------------------------------------------------
# The hand-built Ascend layout
# ---------------------------------------------------------------------------------------------------------------

ASCEND_ROOT = "ascendhost_4242_20260101120000000_ascend_ms"
ASCEND_STEPS = 3
#: (scope, op type, duration µs, accelerator core); one launch of each per step
ASCEND_KERNELS = [
    ("Default/network-WithLossCell/_backbone-MLP/fc1-Dense/MatMul-op0", "MatMul", 120.0, "AI_CORE"),
    ("Default/network-WithLossCell/_backbone-MLP/fc1-Dense/BiasAdd-op0", "BiasAdd", 10.0, "AI_VECTOR_CORE"),
    ("Default/network-WithLossCell/_backbone-MLP/relu-ReLU/ReLU-op0", "ReLU", 8.0, "AI_VECTOR_CORE"),
    ("Default/network-WithLossCell/_backbone-MLP/fc2-Dense/MatMul-op1", "MatMul", 40.0, "AI_CORE"),
    ("Default/network-WithLossCell/_loss_fn-CrossEntropyLoss/SoftmaxCrossEntropyWithLogits-op0",
     "SoftmaxCrossEntropyWithLogits", 22.0, "AI_VECTOR_CORE"),
    ("Gradients/Default/network-WithLossCell/_backbone-MLP/fc2-Dense/Grad_MatMul/MatMul-op2", "MatMul", 45.0, "AI_CORE"),
    ("Gradients/Default/network-WithLossCell/_backbone-MLP/fc2-Dense/Grad_MatMul/MatMul-op3", "MatMul", 44.0, "AI_CORE"),
    ("Gradients/Default/network-WithLossCell/_backbone-MLP/relu-ReLU/Grad_ReLU/ReluGrad-op0", "ReluGrad", 9.0,
     "AI_VECTOR_CORE"),
    ("Gradients/Default/network-WithLossCell/_backbone-MLP/fc1-Dense/Grad_MatMul/MatMul-op4", "MatMul", 125.0, "AI_CORE"),
    ("Gradients/Default/network-WithLossCell/_backbone-MLP/fc1-Dense/Grad_BiasAdd/BiasAddGrad-op0", "BiasAddGrad",
     12.0, "AI_VECTOR_CORE"),
    ("hcom_allReduce__428_0_1", "hcom_allReduce_", 150.0, "HCCL"),
    ("Default/optimizer-Adam/Adam-op0", "Adam", 30.0, "AI_VECTOR_CORE"),
    ("Default/optimizer-Adam/Adam-op1", "Adam", 6.0, "AI_VECTOR_CORE"),
    ("Default/optimizer-Adam/AssignAdd-op0", "AssignAdd", 2.0, "AI_VECTOR_CORE"),
]
ASCEND_OVERLAP_US = 90.0  # of the AllReduce's 150 µs, this much runs under the backward MatMul of fc1
ASCEND_FREE_US = 60.0  # device idle per step (host launch gaps)
ASCEND_PREPARING_US = 35.0
ASCEND_DATA_WAIT_MS = 0.05  # host-measured time waiting for the batch (the burst's measure)


def make_ascend_layout() -> None:
    dest = HERE / "ascend_layout"
    if dest.exists():
        shutil.rmtree(dest)
    out = dest / ASCEND_ROOT / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (dest / ASCEND_ROOT / "profiler_info_0.json").write_text(
        json.dumps({"rank_id": 0, "device_id": 0, "note": "hand-built fixture, not real output"}) + "\n"
    )
    # kernel_details.csv: one launch per kernel per step, back to back except the AllReduce, which overlaps
    header = ["Step Id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State", "Accelerator Core",
              "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Dim", "Mix Block Dim"]
    rows = []
    compute_us = sum(d for _, t, d, _ in ASCEND_KERNELS if not t.startswith("hcom"))
    comm_us = sum(d for _, t, d, _ in ASCEND_KERNELS if t.startswith("hcom"))
    step_len = compute_us + (comm_us - ASCEND_OVERLAP_US) + ASCEND_FREE_US
    t0 = 1_767_268_800_000_000.0
    task = 1
    trace = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Ascend Hardware"}}]
    for step in range(1, ASCEND_STEPS + 1):
        t = t0 + (step - 1) * step_len + ASCEND_FREE_US
        for name, typ, dur, core in ASCEND_KERNELS:
            start = t - ASCEND_OVERLAP_US if typ.startswith("hcom") else t
            rows.append([step, 1, task, 2 if typ.startswith("hcom") else 1, name, typ, "dynamic", core,
                         f"{start:.3f}", f"{dur:.3f}", "0.0", 8, 0])
            trace.append({"ph": "X", "name": name, "pid": 1, "tid": 2 if typ.startswith("hcom") else 1,
                          "ts": f"{start:.3f}", "dur": f"{dur:.3f}", "args": {"Type": typ}})
            task += 1
            if not typ.startswith("hcom"):
                t += dur
            else:
                t = start + dur
    bom = "\ufeff"
    with open(out / "kernel_details.csv", "w", encoding="utf-8", newline="") as f:
        f.write(bom + ",".join(header) + "\r\n")
        for r in rows:
            f.write(",".join(str(v) for v in r) + "\r\n")
    st_header = ["Device_id", "Step", "Computing", "Communication(Not Overlapped)", "Overlapped", "Communication",
                 "Free", "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing"]
    with open(out / "step_trace_time.csv", "w", encoding="utf-8", newline="") as f:
        f.write(bom + ",".join(st_header) + "\r\n")
        for step in range(1, ASCEND_STEPS + 1):
            f.write(",".join(str(v) for v in [
                0, step, compute_us, comm_us - ASCEND_OVERLAP_US, ASCEND_OVERLAP_US, comm_us, ASCEND_FREE_US,
                comm_us, 0.0, comm_us - ASCEND_OVERLAP_US, ASCEND_PREPARING_US]) + "\r\n")
    (out / "trace_view.json").write_text(json.dumps(trace))
    step_ms = (step_len + ASCEND_PREPARING_US) / 1000.0 + ASCEND_DATA_WAIT_MS
    expected = {
        "scenario": "ascend_layout",
        "real_output": False,
        "profiled_steps": ASCEND_STEPS,
        "step_ms": step_ms,
        "data_wait_ms": ASCEND_DATA_WAIT_MS,
        "device_computing_us": compute_us,
        "device_communication_not_overlapped_us": comm_us - ASCEND_OVERLAP_US,
        "device_free_us": ASCEND_FREE_US,
        "note": "step_ms is chosen, not measured: device step (Computing + Communication(Not Overlapped) + Free) "
                "+ Preparing + the host's data wait",
    }
    (dest / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    (dest / "README.md").write_text(f"""# ascend_layout: HAND-BUILT, not real profiler output

The Ascend layout cannot be produced on these CPU-only machines.  This folder was written by

    .venv/bin/python tests/data/profiles/make_profiles.py ascend_layout

from the columns documented in `/work/shared/profiler-layouts.md` (MindSpore 2.x docs and source): a
`{ASCEND_ROOT}/` root with `profiler_info_0.json` and `ASCEND_PROFILER_OUTPUT/` holding `kernel_details.csv`
(`Step Id, Model ID, Task ID, Stream ID, Name, Type, OP State, Accelerator Core, Start Time(us), Duration(us),
Wait Time(us), Block Dim, Mix Block Dim`), `step_trace_time.csv` (`Device_id` first, then `Step, Computing,
Communication(Not Overlapped), Overlapped, Communication, Free, Stage, Bubble, Communication(Not Overlapped and
Exclude Receive), Preparing`, µs) and a small `trace_view.json`.  Both CSVs start with a UTF-8 BOM and use CRLF, as
files written on Windows-facing tools do, to check that the parser strips it.

The numbers are made up but consistent: {ASCEND_STEPS} steps of a 2-layer MLP with one fused gradient AllReduce
(`hcom_allReduce_`, {comm_us:.0f} µs, of which {ASCEND_OVERLAP_US:.0f} µs overlap the backward), Computing
{compute_us:.0f} µs, Communication(Not Overlapped) {comm_us - ASCEND_OVERLAP_US:.0f} µs, Free {ASCEND_FREE_US:.0f} µs,
Preparing {ASCEND_PREPARING_US:.0f} µs per step.  `expected.json` gives the step time the splits must add up to:
{step_ms:.3f} ms = device step + Preparing + a host data wait of {ASCEND_DATA_WAIT_MS} ms.
""")
    print(f"[ascend_layout] written to {dest}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", nargs="?", default="all", choices=["all", "tiny_gpt", "repeats", *SCENARIOS, "ascend_layout"])
    # worker options: named so that none is a prefix of an msrun option (msrun parses the script's options too)
    ap.add_argument("--readme-only", action="store_true", help="rewrite the README.md of existing fixtures")
    ap.add_argument("--as-worker", dest="worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--run-mode", dest="mode", default="graph", help=argparse.SUPPRESS)
    ap.add_argument("--nsteps", dest="profiled_steps", type=int, default=8, help=argparse.SUPPRESS)
    ap.add_argument("--unprofiled", dest="unprofiled_steps", type=int, default=15, help=argparse.SUPPRESS)
    ap.add_argument("--nworkers", dest="workers", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--outdir", dest="out", help=argparse.SUPPRESS)
    ap.add_argument("--timing-file", dest="timing", help=argparse.SUPPRESS)
    ap.add_argument("--warmup", dest="warmup_steps", type=int, default=20, help=argparse.SUPPRESS)
    ap.add_argument("--workload-name", dest="workload", default="mlp", help=argparse.SUPPRESS)
    ap.add_argument("--step-form", dest="train_step", default="cell", help=argparse.SUPPRESS)
    ap.add_argument("--recompute-on", dest="recompute", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--accum", dest="grad_accum_steps", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--kernel-threads", dest="kernel_threads", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--layers", dest="layers", type=int, default=TINY_GPT_PARAMS["n_layers"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    names = {"all": [*SCENARIOS, "ascend_layout"], "tiny_gpt": TINY_GPT_SCENARIOS, "repeats": REPEAT_SCENARIOS}.get(args.scenario, [args.scenario])
    if args.readme_only:
        for name in names:
            if name in SCENARIOS:
                write_readme(name)
        return
    for name in names:
        if name == "ascend_layout":
            make_ascend_layout()
        else:
            run_scenario(name)


if __name__ == "__main__":
    main()
