"""Benchmark: how long parsing a profile takes, and whether its memory grows with the profile's length.

    .venv/bin/python experiments/benchmarks/profile_parse.py                 # reuse or make the profiles, measure
    .venv/bin/python experiments/benchmarks/profile_parse.py --regenerate    # profile again first (~1 min)

Profiles ``--steps`` (200) steps, and half as many, of a small decoder-only Transformer LM (the repository's
``tiny_gpt`` workload when it imports, else a small LM defined here) in GRAPH mode on CPU, in the burst's
TrainStep cell form, with ``perftune.profile.session.ProfilerSession``; the two profiles are cached under ``--cache``
(default ``$TMPDIR/perftune_bench/profile_parse``) and reused while MindSpore's version and the settings match.

Then, for each profile, a fresh Python process times ``load_profile`` + ``compute_splits`` (median of
``--repeats`` runs, after one untimed run that warms the page cache) and measures memory in a separate run: the
tracemalloc peak (Python allocations, NumPy and pandas buffers included) and the growth of the process's peak RSS
over what the imports took.  Target: under 1 s for 200 profiled steps, and memory that does not grow with the
profile's length (ratio 200/100 near 1).  Exit status 2 when it cannot measure; 1 when ``--strict`` and a target is
missed; else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

LM = {"d_model": 128, "n_layers": 2, "n_heads": 4, "seq_len": 32, "train_samples": 512, "val_samples": 16,
      "corpus_bytes": 200_000}
BATCH = 4
TARGET_S = 1.0


# ---------------------------------------------------------------------------------------------------------------
# Generation (a fresh process: MindSpore's context is process-global)
# ---------------------------------------------------------------------------------------------------------------


def _workload():
    """(network, loss_fn, optimizer factory, tokens, labels, source) from tiny_gpt, or from the fallback LM."""
    import numpy as np

    try:
        from perftune.workloads.tiny_gpt import build

        w = build(dict(LM), 0)
        return w.network, w.loss_fn, w.make_optimizer, w.train_columns["tokens"], w.train_columns["labels"], "tiny_gpt"
    except ImportError:
        pass
    import mindspore as ms
    from mindspore import nn, ops

    d, t, v = LM["d_model"], LM["seq_len"], 256

    class Block(nn.Cell):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm((d,)), nn.LayerNorm((d,))
            self.qkv, self.proj = nn.Dense(d, 3 * d), nn.Dense(d, d)
            self.fc, self.fc_proj, self.gelu = nn.Dense(d, 4 * d), nn.Dense(4 * d, d), nn.GELU()
            self.mask = ms.Tensor(np.triu(np.full((t, t), -1e9, np.float32), k=1))
            self.softmax = ops.Softmax(-1)

        def construct(self, x):
            q, k, vv = ops.split(self.qkv(self.ln1(x)), d, -1)
            att = self.softmax(ops.matmul(q, k.transpose(0, 2, 1)) / (d ** 0.5) + self.mask)
            x = x + self.proj(ops.matmul(att, vv))
            return x + self.fc_proj(self.gelu(self.fc(self.ln2(x))))

    class LMNet(nn.Cell):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(v, d)
            self.blocks = nn.SequentialCell([Block() for _ in range(LM["n_layers"])])
            self.head = nn.Dense(d, v)

        def construct(self, tokens):
            return self.head(self.blocks(self.wte(tokens)))

    class LMLoss(nn.Cell):
        def __init__(self):
            super().__init__()
            self.ce = nn.CrossEntropyLoss()

        def construct(self, logits, labels):
            return self.ce(logits.reshape(-1, v), labels.reshape(-1))

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, v, (LM["train_samples"], t + 1)).astype(np.int32)
    return (LMNet(), LMLoss(), lambda p: nn.Adam(p, 1e-3), tokens[:, :-1].copy(), tokens[:, 1:].copy(), "fallback LM")


def generate(cache: Path, steps: int) -> None:
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops

    from perftune.profile.session import ProfilerSession

    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:  # NumPy 2: the first eager op can fail once
        (ms.Tensor(np.ones(1, np.float32)) + 1).asnumpy()
    except SystemError:
        pass
    ms.set_seed(0)
    network, loss_fn, make_opt, tokens, labels, source = _workload()

    class NetWithLoss(nn.Cell):
        def __init__(self, network, loss):
            super().__init__(auto_prefix=False)
            self.network = network
            self.loss = loss

        def construct(self, x, y):
            return self.loss(self.network(x), y)

    class TrainStep(nn.Cell):  # the burst's cell form
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

    step = TrainStep(NetWithLoss(network, loss_fn), make_opt(network.trainable_params()))
    step.set_train()
    n = len(tokens) // BATCH

    def batches():
        i = 0
        while True:
            j = (i % n) * BATCH
            yield ms.Tensor(tokens[j:j + BATCH]), ms.Tensor(labels[j:j + BATCH])
            i += 1

    it = batches()

    def timed(k):
        st, dw = [], []
        for _ in range(k):
            t0 = time.perf_counter()
            x, y = next(it)
            t1 = time.perf_counter()
            loss, _ = step(x, y)
            loss.asnumpy()
            t2 = time.perf_counter()
            st.append((t2 - t0) * 1e3)
            dw.append((t1 - t0) * 1e3)
        return st, dw

    timed(5)  # compile + warm-up
    meta = {"source": source, "lm": LM, "batch": BATCH, "mindspore": ms.__version__, "profiles": {}}
    for k in (steps // 2, steps):
        out = cache / f"steps_{k}"
        session = ProfilerSession(out)
        session.start()
        st, dw = timed(k)
        analyse_s = session.stop_and_analyse()
        meta["profiles"][str(k)] = {"dir": out.name, "step_ms": statistics.fmean(st),
                                    "data_wait_ms": statistics.fmean(dw), "analyse_s": analyse_s}
        print(f"  profiled {k} steps: {statistics.fmean(st):.1f} ms/step, analyse {analyse_s:.2f} s", flush=True)
    (cache / "meta.json").write_text(json.dumps(meta, indent=1))
    sys.stdout.flush()
    os._exit(0)  # MindSpore's exit handlers can be slow; the profiles are written


# ---------------------------------------------------------------------------------------------------------------
# Measurement (a fresh process per profile)
# ---------------------------------------------------------------------------------------------------------------


def measure(folder: Path, steps: int, step_ms: float, data_ms: float, repeats: int, what: str) -> None:
    import tracemalloc

    from perftune.profile.layouts import load_profile
    from perftune.profile.splits import compute_splits

    def once():
        prof = load_profile(folder)
        return prof, compute_splits(prof, steps, step_ms, data_ms)

    if what == "time":
        once()  # page cache, lazy imports inside pandas
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            prof, sp = once()
            times.append(time.perf_counter() - t)
        launches = int(prof.ops["count"].sum())
        print(json.dumps({"median_s": statistics.median(times), "min_s": min(times), "launches": launches,
                          "ops_rows": len(prof.ops), "explained_share": sp.explained_share}))
    else:
        import pandas  # noqa: F401  (imports are not the parser's memory)

        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tracemalloc.start()
        once()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"tracemalloc_peak_bytes": peak, "rss_growth_bytes": (rss1 - rss0) * 1024}))


def _child(args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "GLOG_v": "3"})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _provenance() -> str:
    """UTC time, commit (with a dirty flag) and load average: timings on a shared machine mean little without them."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                timeout=10).stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True,
                               timeout=10).stdout.strip()
        commit += " (dirty)" if dirty else ""
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    try:
        load = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        load = ["?"]
    return f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, commit {commit}, load average {' '.join(load)}"


def cannot_measure(message: str) -> int:
    print(f"CANNOT MEASURE: {message}", flush=True)
    return 2


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "perftune_bench" / "profile_parse")
    ap.add_argument("--regenerate", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--generate", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--what", default="time", help=argparse.SUPPRESS)
    ap.add_argument("--step-ms", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--data-ms", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generate:
        generate(args.cache, args.steps)
        return 0
    if args.measure:
        measure(args.measure, args.steps, args.step_ms, args.data_ms, args.repeats, args.what)
        return 0

    half, full = args.steps // 2, args.steps
    meta_path = args.cache / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else None
    try:
        from importlib.metadata import version

        ms_version = version("mindspore")
    except Exception:  # noqa: BLE001
        ms_version = None
    stale = (meta is None or args.regenerate or set(meta["profiles"]) != {str(half), str(full)}
             or meta.get("lm") != LM or (ms_version and meta.get("mindspore") != ms_version))
    if stale:
        if ms_version is None:
            return cannot_measure(f"no cached profiles in {args.cache} and MindSpore is not installed")
        print(f"profiling {half} and {full} steps of an LM into {args.cache} ...", flush=True)
        import shutil

        if args.cache.exists():
            shutil.rmtree(args.cache)
        args.cache.mkdir(parents=True)
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--generate", "--cache", str(args.cache),
                               "--steps", str(full)], cwd=REPO, env={**os.environ, "GLOG_v": "3"},
                              capture_output=True, text=True)
        print(proc.stdout, end="")
        if proc.returncode != 0 or not meta_path.is_file():
            return cannot_measure(f"profiling failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        print(f"  done in {time.perf_counter() - t:.1f} s")
        meta = json.loads(meta_path.read_text())

    rows = {}
    try:
        for k in (half, full):
            p = meta["profiles"][str(k)]
            folder = args.cache / p["dir"]
            common = ["--measure", str(folder), "--steps", str(k), "--step-ms", str(p["step_ms"]),
                      "--data-ms", str(p["data_wait_ms"]), "--repeats", str(args.repeats)]
            rows[k] = {**_child(common + ["--what", "time"]), **_child(common + ["--what", "memory"]),
                       "bytes": _size(folder), "analyse_s": p["analyse_s"], "step_ms": p["step_ms"]}
    except (RuntimeError, KeyError, json.JSONDecodeError) as e:
        return cannot_measure(str(e))

    a, b = rows[half], rows[full]
    mb = 1 / 2**20

    def line(label, key, scale=1.0, fmt="{:.3f}"):
        va, vb = a[key] * scale, b[key] * scale
        ratio = f"{vb / va:.2f}" if va else "-"
        print(f"{label:<30}{fmt.format(va):>14}{fmt.format(vb):>14}{ratio:>10}")

    print(f"\nload_profile + compute_splits on CPU profiles of {meta['source']} "
          f"(d={LM['d_model']}, {LM['n_layers']} layers, seq {LM['seq_len']}, batch {BATCH}), "
          f"MindSpore {meta['mindspore']}, {os.cpu_count()} CPUs")
    print(_provenance())
    print(f"{'':<30}{f'{half} steps':>14}{f'{full} steps':>14}{'ratio':>10}")
    line("profile size (MB)", "bytes", mb, "{:.2f}")
    line("op launches", "launches", 1, "{:.0f}")
    line("ops rows", "ops_rows", 1, "{:.0f}")
    line("profiled step (ms)", "step_ms", 1, "{:.1f}")
    line("profiler analyse (s)", "analyse_s", 1, "{:.2f}")
    line("parse time, median (s)", "median_s")
    line("parse time, best (s)", "min_s")
    line("tracemalloc peak (MB)", "tracemalloc_peak_bytes", mb, "{:.2f}")
    line("peak RSS growth (MB)", "rss_growth_bytes", mb, "{:.2f}")
    time_ok = b["median_s"] < TARGET_S
    mem_ratio = b["tracemalloc_peak_bytes"] / a["tracemalloc_peak_bytes"]
    mem_ok = mem_ratio < 1.25
    print(f"\ntarget parse < {TARGET_S:.0f} s at {full} steps: {'PASS' if time_ok else 'MISS'} ({b['median_s']:.3f} s)")
    print(f"target memory flat in the profile's length: {'PASS' if mem_ok else 'MISS'} "
          f"(tracemalloc peak ratio {mem_ratio:.2f} for {b['bytes'] / a['bytes']:.2f}x the bytes)")
    return 1 if args.strict and not (time_ok and mem_ok) else 0


if __name__ == "__main__":
    sys.exit(main())
