"""How steady a user's functional script is without perftune (issue 36's third Done-when line): the model and the
``mindspore.dataset`` pipeline of ``experiments/script_workload/functional_train.py``, trained by a plain loop that
reads every step's loss back, over one epoch; then the same loop fed one batch from memory again and again.  Prints
the median step of each block of 40 steps and the largest over the smallest.  perftune's phases (accuracy window,
warm-up, timed windows) are such blocks, one after another, so where the plain loop drifts more than x1.3 the
phases cannot agree within x1.3 whatever the timing; the plan's model is sized where it does not.

    .venv/bin/python experiments/benchmarks/pipeline_drift.py --layers 4 8
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

SCRIPTS = Path(__file__).resolve().parents[1] / "script_workload"
BLOCK = 40


def step_times(hidden: int, layers: int, batch: int, samples: int, from_memory: bool) -> list[float]:
    """Milliseconds of each step (call to the end of its read-back) over one epoch, the first 5 left out."""
    import mindspore as ms

    sys.path.insert(0, str(SCRIPTS))
    import functional_train as script

    ms.set_context(mode=ms.GRAPH_MODE)
    data = script.pipeline(samples, 0, batch)
    _, _, train_step = script.model_and_step(hidden, layers)

    batches = data.create_tuple_iterator()
    if from_memory:
        first = next(batches)
        batches = (first for _ in range(samples // batch))
    times = []
    for inputs, labels in batches:
        start = time.perf_counter()
        train_step(inputs, labels).asnumpy()
        times.append((time.perf_counter() - start) * 1e3)
    return times[5:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--samples", type=int, default=65536)
    parser.add_argument("--child", nargs=2, metavar=("LAYERS", "SOURCE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        times = step_times(args.hidden, int(args.child[0]), args.batch, args.samples, args.child[1] == "memory")
        blocks = [float(np.median(times[i:i + BLOCK])) for i in range(0, len(times) - BLOCK + 1, BLOCK)]
        print(f"layers {args.child[0]:>2}  {args.child[1]:<8} 40-step medians (ms): "
              f"{' '.join(f'{b:.0f}' for b in blocks)}  drift x{max(blocks) / min(blocks):.2f}", flush=True)
        return
    import subprocess

    print(f"load average before: {os.getloadavg()}")
    for layers in args.layers:
        for source in ("pipeline", "memory"):  # one fresh process each, one after another
            subprocess.run([sys.executable, __file__, "--hidden", str(args.hidden), "--batch", str(args.batch),
                            "--samples", str(args.samples), "--child", str(layers), source], check=True,
                           stderr=subprocess.DEVNULL)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
