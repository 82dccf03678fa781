"""Whether MindSpore's compile cache can serve one configuration's later processes (issue 38, "compiled graphs
reused"): two ``@ms.jit`` functions of the same input, ``f(x) = 2x`` and ``g(x) = x + 1``, compiled in different
orders by fresh processes that share one ``MS_COMPILER_CACHE_PATH``.  A cache keyed on the graph gives every
process the right answers; one keyed on the order of compiles hands a process the graph that another process
compiled first at that position.  Prints each process's answers, then whether any was wrong; exits 2 when a child
process fails.

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
