"""Does ``kernel_threads`` (``mindspore.device_context.cpu.op_tuning.threads_num``) change a CPU step here, without
perftune in the way?  One configuration per process (the thread pool is set once per process): a plain
``TrainOneStepCell`` on an MLP (1024 -> 1024 x 2 -> 8, batch 128) or a small conv net (3 convolutions, 16x16 images,
batch 8), graph mode, the median of ``--steps`` synchronised steps after 2 warm-up steps.  Run it in a loop over the
thread counts, several rounds, on an idle machine (the benchmarks README's range-search row):

    for r in 1 2; do for t in 1 2 3 4 6 8; do
        .venv/bin/python experiments/benchmarks/kernel_threads_probe.py mlp $t; done; done
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("net", choices=("mlp", "conv"))
    parser.add_argument("threads", type=int, help="op_tuning.threads_num; 0 leaves MindSpore's default")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()

    import mindspore as ms
    import numpy as np
    from mindspore import nn

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    if args.threads:
        ms.device_context.cpu.op_tuning.threads_num(args.threads)
    rng = np.random.default_rng(0)
    if args.net == "mlp":
        net = nn.SequentialCell(nn.Dense(1024, 1024), nn.ReLU(), nn.Dense(1024, 1024), nn.ReLU(), nn.Dense(1024, 8))
        x = rng.random((128, 1024), dtype=np.float32)
        y = rng.integers(0, 8, 128).astype(np.int32)
    else:
        net = nn.SequentialCell(nn.Conv2d(3, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3),
                                nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dense(64, 8))
        x = rng.random((8, 3, 16, 16), dtype=np.float32)
        y = rng.integers(0, 8, 8).astype(np.int32)
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    step = nn.TrainOneStepCell(loss, nn.SGD(net.trainable_params(), 0.01))
    x, y = ms.Tensor(x), ms.Tensor(y)
    for _ in range(2):
        step(x, y).asnumpy()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step(x, y).asnumpy()
        times.append(time.perf_counter() - start)
    print(f"{args.net} threads={args.threads or 'default'} step_ms_median={statistics.median(times) * 1e3:.2f}")


if __name__ == "__main__":
    main()
