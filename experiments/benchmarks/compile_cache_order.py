"""Whether MindSpore's compile cache can serve one configuration's later processes (issue 38, "compiled graphs
reused"): two ``@ms.jit`` functions of the same input, ``f(x) = 2x`` and ``g(x) = x + 1``, compiled in different
orders by fresh processes that share one ``MS_COMPILER_CACHE_PATH``.  A cache keyed on the graph gives every
process the right answers; one keyed on the order of compiles hands a process the graph that another process
compiled first at that position.  Prints each process's answers, then whether any was wrong; exits 2 when a child
process fails.

Then a training step in each of the two forms perftune's ``train_step`` knob compares (``nn.TrainOneStepCell`` and
an ``@ms.jit`` function around ``value_and_grad`` over the closure's parameters, Adam, a 32-64-10 MLP), each in a
cold process and then a warm one over its own cache folder: the warm process's first three losses must be the cold
one's (same seed, same batch), or the cache served a graph that trains differently.

    .venv/bin/python experiments/benchmarks/compile_cache_order.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

EXPECTED = {"f": 6.0, "g": 4.0}
#: the orders of compiles, one fresh process each, in this sequence over one cache folder
SEQUENCES = (("f", "g"), ("g",), ("g", "f"), ("f",))


def child(names: list[str]) -> None:
    import mindspore as ms
    import numpy as np

    ms.set_context(mode=ms.GRAPH_MODE)

    @ms.jit
    def f(x):
        return x * 2.0

    @ms.jit
    def g(x):
        return x + 1.0

    x = ms.Tensor(np.full((2, 2), 3.0, np.float32))
    for name in names:
        print(f"{name}={float({'f': f, 'g': g}[name](x).asnumpy()[0, 0])}", flush=True)


def child_step(form: str) -> None:
    import mindspore as ms
    import numpy as np
    from mindspore import nn

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(32, 64), nn.ReLU(), nn.Dense(64, 10))
    loss_fn = nn.CrossEntropyLoss()
    opt = nn.Adam(net.trainable_params(), 1e-2)
    if form == "cell":
        step = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), opt)
        step.set_train()
    else:
        def forward(x, y):
            return loss_fn(net(x), y)

        grad_fn = ms.value_and_grad(forward, None, opt.parameters)

        @ms.jit
        def step(x, y):
            loss, grads = grad_fn(x, y)
            opt(grads)
            return loss
    rng = np.random.default_rng(0)
    x = ms.Tensor(rng.standard_normal((16, 32)).astype(np.float32))
    y = ms.Tensor(rng.integers(0, 10, 16).astype(np.int32))
    print(" ".join(f"{float(step(x, y).asnumpy()):.6f}" for _ in range(3)), flush=True)


def train_steps() -> tuple[list[str], int]:
    """Each step form cold then warm over its own cache folder: the rows, and how many forms trained differently
    (or -1 when a child failed)."""
    rows, wrong = [], 0
    for form in ("cell", "function"):
        with tempfile.TemporaryDirectory(prefix="perftune_cache_step_") as cache:
            env = dict(os.environ, MS_COMPILER_CACHE_ENABLE="1", MS_COMPILER_CACHE_PATH=cache)
            losses = []
            for _ in ("cold", "warm"):
                run = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child-step", form], env=env,
                                     capture_output=True, text=True, timeout=300, cwd=cache)
                if run.returncode != 0 or not run.stdout.strip():
                    print(f"child --child-step {form} failed (exit {run.returncode}): {run.stderr[-2000:]}")
                    return rows, -1
                losses.append(run.stdout.split()[-3:])
        same = losses[0] == losses[1]
        wrong += not same
        rows.append(f"  train step {form:<8} cold losses {' '.join(losses[0])}, warm {' '.join(losses[1])}"
                    + ("" if same else "  DIFFERENT"))
    return rows, wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--child-step", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return 0
    if args.child_step is not None:
        child_step(args.child_step)
        return 0
    wrong = 0
    with tempfile.TemporaryDirectory(prefix="perftune_cache_order_") as cache:
        env = dict(os.environ, MS_COMPILER_CACHE_ENABLE="1", MS_COMPILER_CACHE_PATH=cache)
        rows = []
        for names in SEQUENCES:
            run = subprocess.run([sys.executable, __file__, "--child", *names], env=env, capture_output=True,
                                 text=True, timeout=300)
            answers = dict(line.split("=") for line in run.stdout.split() if "=" in line)
            if run.returncode != 0 or set(answers) != set(names):
                print(f"child {' '.join(names)} failed (exit {run.returncode}): {run.stderr[-2000:]}")
                return 2
            bad = [n for n in names if float(answers[n]) != EXPECTED[n]]
            wrong += bool(bad)
            rows.append(f"  compiles {' then '.join(names):<10} " + ", ".join(
                f"{n}(3) = {float(answers[n]):g} (expected {EXPECTED[n]:g})" for n in names)
                + ("  WRONG" if bad else ""))
        files = sorted(p.name for p in Path(cache).rglob("*") if p.is_file())
    print(f"one cache folder, {len(SEQUENCES)} fresh processes in turn; its files: {', '.join(files)}")
    print("\n".join(rows))
    print(f"{wrong} of {len(SEQUENCES)} processes got a wrong answer: "
          + ("the cache is keyed on the order of compiles, not on the graph" if wrong else "keyed on the graph"))
    rows, different = train_steps()
    if different < 0:
        return 2
    print("\n".join(rows))
    print(f"{different} of 2 step forms trained differently from the cache")
    return 0


if __name__ == "__main__":
    sys.exit(main())
