"""Where PyNative's window noise comes from (issue 25, item 2): the noise sources tried alone, outside perftune.

A bare 784-256-256-10 ``TrainOneStepCell`` (batch 32, fixed tensors) in PyNative, 0.5 s windows synchronised at
their end, in a fresh process per setting and repeat, settings interleaved: the window sd of log throughput with
nothing changed, the garbage collector off inside windows (collected between), ``set_cpu_affinity(True)``, one
kernel thread, one dispatch thread, the three together (``all1``), and ops run synchronously
(``pynative_synchronize``: no asynchronous dispatch pipeline).  A setting is worth applying only if it moves the sd
beyond the spread between two processes of the same setting.

    .venv/bin/python experiments/benchmarks/pynative_noise.py [--seconds 12] [--repeats 2]
    .venv/bin/python experiments/benchmarks/pynative_noise.py --between 8 --seconds 4

``--between N``: the spread *between* processes instead (what fresh-process comparisons pay), with Python's hash
seed random in every process (its default, and what perftune's bursts get unless the caller exported a seed)
against fixed (``PYTHONHASHSEED=0``), N processes each, interleaved: the sd of the processes' mean log throughput.
pyperf samples the seed rather than fixing it (its ``doc/cli.rst``: with one process "we get the performance for
one specific case, whereas many parameters are random"); fixing it is worth it only if the spread falls by more
than the estimate's own error, and then it still turns that spread into a bias per configuration.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time

from harness import loadavg

OPTIONS = ("none", "gc", "affinity", "threads1", "dispatch1", "all1", "sync")


def child(opt: str, seconds: float) -> None:
    import mindspore as ms
    import numpy as np
    from mindspore import nn

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    if opt in ("affinity", "all1"):
        ms.runtime.set_cpu_affinity(True)
    if opt in ("threads1", "all1"):
        ms.device_context.cpu.op_tuning.threads_num(1)
    if opt in ("dispatch1", "all1"):
        ms.runtime.dispatch_threads_num(1)
    if opt == "sync":  # every op run before the next is dispatched: no asynchronous pipeline threads racing
        ms.set_context(pynative_synchronize=True)
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(784, 256), nn.ReLU(), nn.Dense(256, 256), nn.ReLU(), nn.Dense(256, 10))
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    train = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    train.set_train()
    x = ms.Tensor(np.random.rand(32, 784).astype(np.float32))
    y = ms.Tensor(np.random.randint(0, 10, 32).astype(np.int32))
    for _ in range(30):
        r = train(x, y)
    r.asnumpy()
    logs = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if opt == "gc":
            gc.collect()
            gc.disable()
        n, w0 = 0, time.perf_counter()
        while time.perf_counter() - w0 < 0.5:
            r = train(x, y)
            n += 1
        r.asnumpy()
        logs.append(math.log(n / (time.perf_counter() - w0)))
        if opt == "gc":
            gc.enable()
    print(json.dumps({"opt": opt, "windows": len(logs), "sd": statistics.stdev(logs),
                      "steps_per_s": math.exp(statistics.mean(logs))}))


def run_child(opt: str, seconds: float, env: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", opt, "--seconds", str(seconds)],
                         capture_output=True, text=True, env={**env, "GLOG_v": "3"})
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not line:
        sys.exit(f"CANNOT MEASURE: the {opt} process printed no result: {out.stderr[-500:]}")
    return json.loads(line[-1])


def between(n: int, seconds: float) -> None:
    """The sd of process means with the hash seed random (default) and fixed, ``n`` processes each, interleaved."""
    base = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    means: dict[str, list[float]] = {"random": [], "fixed": []}
    for i in range(n):
        for mode in means:
            row = run_child("none", seconds, base if mode == "random" else {**base, "PYTHONHASHSEED": "0"})
            means[mode].append(math.log(row["steps_per_s"]))
            print(f"{mode} {i}: {row['steps_per_s']:.1f} steps/s, window sd {row['sd']:.1%}", flush=True)
    print(f"== PyNative between-process sd of log throughput, {n} processes each (load after: {loadavg()}) ==")
    for mode, logs in means.items():
        sd = statistics.stdev(logs)
        # the sd's own standard error, about sd / sqrt(2 (n - 1)): a difference smaller than that is not a finding
        print(f"hash seed {mode}: sd {sd:.1%} (± {sd / math.sqrt(2 * (n - 1)):.1%}), "
              f"mean {math.exp(statistics.fmean(logs)):.1f} steps/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=12.0, help="timed seconds per process (12)")
    ap.add_argument("--repeats", type=int, default=2, help="processes per setting, interleaved (2)")
    ap.add_argument("--between", type=int, default=0, help="processes per hash-seed setting (0: window noise)")
    ap.add_argument("--child", choices=OPTIONS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.seconds)
        return
    print(f"load before: {loadavg()}", flush=True)
    if args.between:
        between(args.between, args.seconds)
        return
    sds: dict[str, list[float]] = {o: [] for o in OPTIONS}
    for _ in range(args.repeats):
        for opt in OPTIONS:
            row = run_child(opt, args.seconds, dict(os.environ))
            sds[opt].append(row["sd"])
            print(f"{opt}: window sd {row['sd']:.1%} over {row['windows']} windows, "
                  f"{row['steps_per_s']:.0f} steps/s", flush=True)
    print(f"== PyNative window sd by setting (load after: {loadavg()}) ==")
    for opt in OPTIONS:
        print(f"{opt}: " + " / ".join(f"{v:.1%}" for v in sds[opt]))


if __name__ == "__main__":
    main()
