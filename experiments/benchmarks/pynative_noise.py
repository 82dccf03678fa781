"""Where PyNative's window noise comes from (issue 25, item 2): the noise sources tried alone, outside perftune.

A bare 784-256-256-10 ``TrainOneStepCell`` (batch 32, fixed tensors) in PyNative, 0.5 s windows synchronised at
their end, in a fresh process per setting and repeat, settings interleaved: the window sd of log throughput with
nothing changed, the garbage collector off inside windows (collected between), ``set_cpu_affinity(True)``, one
kernel thread, one dispatch thread, the three together (``all1``), and ops run synchronously
(``pynative_synchronize``: no asynchronous dispatch pipeline).  A setting is worth applying only if it moves the sd beyond the spread between
two processes of the same setting.

    .venv/bin/python experiments/benchmarks/pynative_noise.py [--seconds 12] [--repeats 2]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import subprocess
import sys
import time

from harness import loadavg

OPTIONS = ("none", "gc", "affinity", "threads1", "dispatch1", "all1", "sync")


def child(opt: str, seconds: float) -> None:
    import numpy as np
    import mindspore as ms
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=12.0, help="timed seconds per process (12)")
    ap.add_argument("--repeats", type=int, default=2, help="processes per setting, interleaved (2)")
    ap.add_argument("--child", choices=OPTIONS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.seconds)
        return
    print(f"load before: {loadavg()}", flush=True)
    sds: dict[str, list[float]] = {o: [] for o in OPTIONS}
    for _ in range(args.repeats):
        for opt in OPTIONS:
            out = subprocess.run([sys.executable, __file__, "--child", opt, "--seconds", str(args.seconds)],
                                 capture_output=True, text=True, env={**__import__("os").environ, "GLOG_v": "3"})
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
            if not line:
                sys.exit(f"CANNOT MEASURE: the {opt} process printed no result: {out.stderr[-500:]}")
            row = json.loads(line[-1])
            sds[opt].append(row["sd"])
            print(f"{opt}: window sd {row['sd']:.1%} over {row['windows']} windows, "
                  f"{row['steps_per_s']:.0f} steps/s", flush=True)
    print(f"== PyNative window sd by setting (load after: {loadavg()}) ==")
    for opt in OPTIONS:
        print(f"{opt}: " + " / ".join(f"{v:.1%}" for v in sds[opt]))


if __name__ == "__main__":
    main()
