"""A whole sweep's cost, this tree's code against another commit's, side by side (issue 38).

Runs ``perftune sweep PLAN`` with each tree's own perftune (this working tree, ``new``, and a ``git worktree`` of
``--old``), the trees alternating, ``--rounds`` times per plan, each sweep in a fresh folder.  Prints per plan and
tree, from each sweep's ``results.json``: the sweep's wall time; the process wall time (every process, paired ones
included) and how much of it was timed windows; the comparisons decided (any verdict but ``undecided``) and the
process wall time per decided comparison; the fresh A/A check (``aa_check``, a baseline repeat against the first
baseline run) and the paired A/A check (``aa_paired``) as their intervals' half-widths; the median timed share of
the first processes, the repeat processes and the paired processes, and the graphs the steps compiled per process
(new tree: counted).  The load average before and after each sweep is printed beside it.

    .venv/bin/python experiments/benchmarks/sweep_cost.py --plans experiments/quickstart.yaml --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from repeat_cost import OLD, ROOT, load, worktree

SWEEP = "import sys; from perftune.cli import main; sys.argv[0] = 'perftune'; main()"


def sweep(tree: Path, plan: str, out: Path) -> tuple[float, str, str]:
    """One sweep by ``tree``'s perftune; its wall time and the load average before and after."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    before, started = load(), time.perf_counter()
    run = subprocess.run([sys.executable, "-c", SWEEP, "sweep", str(ROOT / plan), "--out", str(out)], cwd=tree,
                         env=env, capture_output=True, text=True, timeout=7200)
    wall = time.perf_counter() - started
    if run.returncode != 0:
        raise SystemExit(f"the sweep of {plan} by {tree} failed (exit {run.returncode}): {run.stderr[-3000:]}")
    return wall, before, load()


def figures(out: Path) -> dict:
    """What one sweep's results.json says about its cost and its A/A checks (read as JSON: either tree's schema)."""
    data = json.loads((out / "results.json").read_text())
    trials, paired = data["trials"], data.get("paired", [])
    walls = [t["result"].get("wall_s") or 0.0 for t in trials] + [p.get("wall_s") or 0.0 for p in paired]
    timed = [sum(w["total_ms"] for w in t["result"]["windows"]) / 1e3 for t in trials] + \
        [p.get("timed_s") or 0.0 for p in paired]
    comps = [t["vs_baseline"] for t in trials if t["kind"] == "single" and t.get("vs_baseline")]
    decided = [c for c in comps if c["verdict"] != "undecided"]

    def share(rows: list[tuple[float, float]]) -> float | None:
        rows = [(t, w) for t, w in rows if w]
        return statistics.median(t / w for t, w in rows) if rows else None

    firsts = [(sum(w["total_ms"] for w in t["result"]["windows"]) / 1e3, t["result"].get("wall_s"))
              for t in trials if t["replicate"] == 0 and t["result"]["status"] == "ok"]
    repeats = [(sum(w["total_ms"] for w in t["result"]["windows"]) / 1e3, t["result"].get("wall_s"))
               for t in trials if t["replicate"] > 0 and t["result"]["status"] == "ok"]
    graphs = [sum(v for k, v in (t["result"].get("compiles") or {}).items()
                  if k in ("accuracy", "warmup", "timed", "profiled"))
              for t in trials if t["result"].get("compiles")]

    def half(check: dict | None) -> float | None:
        return None if not check else (check["ci_high"] - check["ci_low"]) / 2 / check["ratio"]

    return {"processes": len(walls), "process_s": sum(walls), "timed_s": sum(timed), "comparisons": len(comps),
            "decided": len(decided), "per_decided_s": sum(walls) / max(1, len(decided)),
            "aa_fresh": half(data.get("aa_check")), "aa_fresh_verdict": (data.get("aa_check") or {}).get("verdict"),
            "aa_paired": half(data.get("aa_paired")),
            "aa_paired_verdict": (data.get("aa_paired") or {}).get("verdict"),
            "first_timed": share(firsts), "repeat_timed": share(repeats),
            "paired_timed": share([(p.get("timed_s") or 0.0, p.get("wall_s")) for p in paired]),
            "graphs_per_process": statistics.median(graphs) if graphs else None}


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def line(plan: str, tree: str, wall: float, before: str, after: str, f: dict) -> str:
    def half(v: float | None) -> str:
        return "-" if v is None else f"+-{v:.1%}"

    return (f"  {Path(plan).stem:<10} {tree:<3} sweep {wall:.0f} s (load {before} -> {after}); {f['processes']} "
            f"processes, {f['process_s']:.0f} s, {pct(f['timed_s'] / f['process_s'] if f['process_s'] else None)} "
            f"timed; {f['decided']} of {f['comparisons']} comparisons decided, {f['per_decided_s']:.0f} s of processes "
            f"per decided comparison; A/A fresh {half(f['aa_fresh'])} ({f['aa_fresh_verdict']}), paired "
            f"{half(f['aa_paired'])} ({f['aa_paired_verdict']}); timed share first {pct(f['first_timed'])}, repeat "
            f"{pct(f['repeat_timed'])}, paired {pct(f['paired_timed'])}; step graphs per process "
            f"{f['graphs_per_process'] if f['graphs_per_process'] is not None else '-'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", nargs="+", default=["experiments/quickstart.yaml"])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--old", default=OLD)
    parser.add_argument("--trees", default="old,new", help="which trees run (old,new | new | old)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "perftune_bench" / "sweep_cost")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    names = args.trees.split(",")
    trees = {"new": ROOT, **({"old": worktree(args.old, args.out / f"tree_{args.old}")} if "old" in names else {})}
    lines = []
    for plan in args.plans:
        for rnd in range(args.rounds):
            for tree in (names if rnd % 2 == 0 else list(reversed(names))):
                out = args.out / Path(plan).stem / f"{tree}_{rnd}"
                shutil.rmtree(out, ignore_errors=True)  # this benchmark's own folder: a fresh sweep, not a resume
                wall, before, after = sweep(trees[tree], plan, out)
                lines.append(line(plan, tree, wall, before, after, figures(out)))
                print(lines[-1], flush=True)
    print(f"\nsweep_cost: old = {args.old}, new = this tree")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
