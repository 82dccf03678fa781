"""How sharp is a paired A/A, and which window length buys the most per timed second?

Runs ``--processes`` paired processes of a plan's baseline against itself (the same process the sweep's paired A/A
check runs: ``perftune.engine.specs.paired_spec`` of the baseline with itself, through the real runner), one after
another, with ``--blocks`` ABBA blocks of windows at least ``--window-s`` long (and at least the plan's
``burst.steps`` steps).  For each process: the raw log ratio arm 1 / arm 0 per block.  Then:

- the variance components: block sd within a process, the sd of the process means, and what the blocks alone
  predict for it (the rest is ``tau``, the paired ratio's spread between processes);
- precision per timed second (the process mean's sd times sqrt(timed s)), to compare window lengths at equal cost;
- A/A checks made from consecutive processes (2 and 4 per check, every other one taken as the swapped arm order,
  as the sweep alternates them) with ``perftune.engine.paired.decide_paired`` at the plan's decision settings:
  how many are called faster or slower (false alarms), and their half-widths;
- how many paired processes an A/A check needs for a half-width of ``--target`` (5%): random subsets of k of the
  measured processes (every other one taken as the swapped order), the median half-width and the false alarms for
  each k, at the sweep's prior (``PROCESS_PRIOR_SHARE``) and with no share of the block sd in the prior at all (the
  floor: what the blocks alone allow), and the process wall time that k costs.

Run from the repository root (about 20 s per process on the quickstart, 2 idle cores):

    .venv/bin/python experiments/benchmarks/paired_windows.py --processes 16
    .venv/bin/python experiments/benchmarks/paired_windows.py --processes 8 --blocks 3 --window-s 1.0
    .venv/bin/python experiments/benchmarks/paired_windows.py --rows DIR/rows.json   # summarise a kept --out again

The load average is printed before and after each process; on a shared machine the figures move with it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from perftune.engine.paired import PROCESS_PRIOR_SHARE, PairedRun, decide_paired, paired_run  # noqa: E402
from perftune.engine.plan_load import load_plan  # noqa: E402
from perftune.engine.specs import make_spec, paired_spec  # noqa: E402
from perftune.engine.stats import Policy  # noqa: E402
from perftune.runner import run_trial  # noqa: E402


def measure(plan_path: Path, processes: int, blocks: int, window_s: float, out: Path) -> list[dict]:
    plan = load_plan(plan_path)
    base = make_spec(plan, {}, "baseline", 0, out / "cache")
    rows = []
    for i in range(processes):
        spec = paired_spec(base, base, 1000 + i, blocks, window_s)
        result = run_trial(spec, out / f"p{i}")
        run = paired_run("A", "A'", result) if result.status == "ok" else None
        if run is None:
            print(f"process {i}: {result.status}: {result.reason}", flush=True)
            continue
        d = run.differences
        timed = sum(w.total_ms for w in result.windows) / 1e3
        rows.append({"differences": list(d), "wall_s": result.wall_s, "timed_s": timed,
                     "load": os.getloadavg()[0]})
        sd = statistics.stdev(d)
        print(f"process {i}: arm 1 / arm 0 {run.mean:+.1%} over {len(d)} blocks (block sd {sd:.1%}), "
              f"wall {result.wall_s:.1f} s, timed {timed:.1f} s, load {os.getloadavg()[0]:.2f}", flush=True)
    return rows


def as_check(rows: list[dict]) -> list[PairedRun]:
    """Processes as one A/A check: every other one taken as the swapped arm order, as the sweep alternates them."""
    return [PairedRun("A", "A'", tuple(-x if j % 2 else x for x in row["differences"]), swapped=j % 2 == 1)
            for j, row in enumerate(rows)]


def summarise(rows: list[dict], policy: Policy) -> None:
    means = [statistics.fmean(r["differences"]) for r in rows]
    n = statistics.fmean(len(r["differences"]) for r in rows)
    block_var = statistics.fmean(statistics.variance(r["differences"]) for r in rows)
    spread = statistics.stdev(means)
    predicted = math.sqrt(block_var / n)
    tau = math.sqrt(max(0.0, spread**2 - predicted**2))
    timed = statistics.fmean(r["timed_s"] for r in rows)
    wall = statistics.fmean(r["wall_s"] for r in rows)
    print(f"\n{len(rows)} processes: wall {wall:.1f} s, timed {timed:.1f} s ({timed / wall:.0%}); "
          f"mean of the process means {statistics.fmean(means):+.2%}")
    print(f"block sd {math.sqrt(block_var):.1%}; process means sd {spread:.2%} (the blocks predict "
          f"{predicted:.2%}; tau {tau:.2%}); per sqrt(timed s): {spread * math.sqrt(timed):.1%} "
          f"(blocks {predicted * math.sqrt(timed):.1%})")
    for k in (2, 4):
        checks = [decide_paired(as_check(rows[start:start + k]), policy, looks=1)
                  for start in range(0, len(rows) - k + 1, k)]
        if checks:
            alarms = sum(d.outcome in ("faster", "slower") for d in checks)
            widths = sorted(d.resolution for d in checks)
            print(f"A/A checks of {k} processes: {alarms} of {len(checks)} called faster or slower; half-widths "
                  f"{widths[0]:.1%}-{widths[-1]:.1%} (median {statistics.median(widths):.1%})")


def processes_needed(rows: list[dict], policy: Policy, target: float, subsets: int = 400) -> None:
    """The A/A check's half-width and false alarms for k processes, from random subsets of the measured ones."""
    wall = statistics.median(r["wall_s"] for r in rows)
    print(f"\nA/A checks of k processes (median half-width, called faster or slower) from {subsets} random subsets; "
          f"a process {wall:.1f} s wall (median)")
    for share in (PROCESS_PRIOR_SHARE, 0.0):
        rng, found, line = random.Random(0), None, []
        for k in range(2, min(8, len(rows)) + 1):
            checks = [decide_paired(as_check([rows[i] for i in rng.sample(range(len(rows)), k)]), policy, looks=1,
                                    prior_share=share) for _ in range(subsets)]
            med = statistics.median(d.resolution for d in checks)
            alarms = sum(d.outcome in ("faster", "slower") for d in checks)
            line.append(f"k={k}: ±{med:.1%}, {alarms / subsets:.1%}")
            if found is None and med <= target:
                found = k
        need = f"{found} processes ({found * wall:.0f} s)" if found is not None else f"more than {min(8, len(rows))}"
        label = "the sweep's prior" if share else "no share of the block sd, the floor"
        print(f"  {label} (share {share}): " + "; ".join(line) + f"\n    -> ±{target:.0%} needs {need}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plan", type=Path, default=REPO / "experiments" / "quickstart.yaml")
    ap.add_argument("--processes", type=int, default=16)
    ap.add_argument("--blocks", type=int, default=None, help="default: the plan's decision.paired_blocks")
    ap.add_argument("--window-s", type=float, default=None, help="default: the plan's decision.paired_window_s")
    ap.add_argument("--out", type=Path, default=None, help="keep the processes' folders here (default: a temp dir)")
    ap.add_argument("--rows", type=Path, nargs="+", default=None,
                    help="summarise the rows.json of earlier --out runs instead of measuring")
    ap.add_argument("--target", type=float, default=0.05, help="the A/A half-width to size k for (0.05)")
    args = ap.parse_args()
    plan = load_plan(args.plan)
    d = plan.decision
    blocks = args.blocks or d.paired_blocks
    window_s = args.window_s or d.paired_window_s
    if args.rows:
        rows = [row for f in args.rows for row in json.loads(f.read_text())]
        print(f"{len(rows)} recorded processes from {', '.join(map(str, args.rows))}")
    else:
        print(f"{args.plan}: {args.processes} paired A/A processes, {blocks} blocks of windows >= {window_s} s and "
              f">= {plan.burst.steps} steps; load average {os.getloadavg()}", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            out = args.out or Path(tmp)
            rows = measure(args.plan, args.processes, blocks, window_s, out)
            if args.out:
                (out / "rows.json").write_text(json.dumps(rows))
    if len(rows) < 2:
        print("fewer than 2 processes finished: nothing to summarise")
        return 1
    policy = Policy(confidence=d.confidence, equivalence=d.equivalence, max_runs=d.max_runs)
    summarise(rows, policy)
    processes_needed(rows, policy, args.target)
    print(f"load average at the end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
