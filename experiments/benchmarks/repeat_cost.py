"""What a configuration's processes cost, today's code against another commit's, side by side (issue 38).

For each plan (its baseline), each round runs, for each of the two trees (this working tree, ``new``, and a
``git worktree`` of ``--old``, default the commit before issue 38's work), the configuration's first process and
``--repeats`` repeat processes, as the sweep runs them (``make_spec`` with ``replicate``; in the new tree with the
configuration's compile cache, ``perftune.engine.graph_cache``), the trees' order alternating per round.  Each
process's wall time is measured around ``perftune.runner.run_trial`` (process start, import, build, compile, the
phases, exit).  Prints per plan, tree and kind (first / repeat): the median process wall time, the share of it in
timed windows, ``compile_ms``, the graphs compiled by the steps (new tree only: the old one did not count them),
the warm-up steps, and the repeat processes' throughput over their round's first process (the x0.865 that repeats
without an accuracy window once measured), with the load average before and after.

    .venv/bin/python experiments/benchmarks/repeat_cost.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OLD = "61cf70a"  # main before issue 38's work (2026-12-06)
PLANS = ("experiments/quickstart.yaml", "experiments/tiny_gpt.yaml")

#: one process of a plan's baseline, run by a tree's own perftune; prints its wall time and trial.json's figures
DRIVER = r"""
import json, sys, time
from pathlib import Path
from perftune.engine.plan_load import load_plan
from perftune.engine.specs import make_spec
from perftune.io.files import read_trial
from perftune.runner import run_trial
plan_path, out, replicate, first = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
spec = make_spec(load_plan(plan_path), {}, "baseline", replicate, (out.parent / "cache").resolve())
try:
    from perftune.engine import graph_cache
except ImportError:
    graph_cache = None
if graph_cache is not None:
    spec = graph_cache.with_cache(spec, read_trial(first) if first else None)
started = time.perf_counter()
r = run_trial(spec, out)
wall = time.perf_counter() - started
steps = getattr(r, "compiles", {}) or {}
print(json.dumps({"status": r.status, "reason": r.reason, "wall_s": wall,
                  "timed_s": sum(w.total_ms for w in r.windows) / 1e3, "compile_ms": r.compile_ms,
                  "step_compiles": sum(v for k, v in steps.items() if k in ("accuracy", "warmup", "timed")) if steps
                  else None, "warmup_steps": r.warmup_steps, "samples_per_s": r.samples_per_s,
                  "cache": getattr(r, "compile_cache", None)}))
"""


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def worktree(ref: str, where: Path) -> Path:
    if not (where / "perftune").is_dir():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), ref], check=True,
                       capture_output=True)
    return where


def process(tree: Path, plan: str, out: Path, replicate: int, first: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    run = subprocess.run([sys.executable, "-c", DRIVER, str(ROOT / plan), str(out), str(replicate), first],
                         cwd=tree, env=env, capture_output=True, text=True, timeout=1200)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("{")]
    if run.returncode != 0 or not lines:
        raise SystemExit(f"a process failed (exit {run.returncode}): {run.stderr[-3000:]}")
    row = json.loads(lines[-1])
    if row["status"] != "ok":
        raise SystemExit(f"{plan} replicate {replicate} in {tree}: {row['status']}: {row['reason']}")
    return row


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def summary(rows: list[dict]) -> list[str]:
    lines = []
    for plan in dict.fromkeys(r["plan"] for r in rows):
        for tree in ("old", "new"):
            mine = [r for r in rows if r["plan"] == plan and r["tree"] == tree]
            for kind in ("first", "repeat"):
                k = [r for r in mine if r["kind"] == kind]
                if not k:
                    continue
                lines.append(
                    f"  {Path(plan).stem:<11} {tree:<4} {kind:<6} n={len(k):<2} "
                    f"wall {fmt(median([r['wall_s'] for r in k]), '.1f')} s"
                    f", timed {fmt(median([r['timed_s'] / r['wall_s'] for r in k]), '.0%')}"
                    f", compile {fmt(median([r['compile_ms'] for r in k]), '.0f')} ms"
                    f", step graphs {fmt(median([r['step_compiles'] for r in k]), '.0f')}"
                    f", warm-up {fmt(median([r['warmup_steps'] for r in k]), '.0f')} steps"
                    f", cache {','.join(sorted({str(r['cache']) for r in k}))}")
            ratios = [r["samples_per_s"] / r["first_sps"] for r in mine if r["kind"] == "repeat"]
            if ratios:
                lines.append(f"  {Path(plan).stem:<11} {tree:<4} repeat/first throughput: median "
                             f"x{statistics.median(ratios):.3f} (each: {', '.join(f'{x:.3f}' for x in ratios)})")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", nargs="+", default=list(PLANS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--old", default=OLD, help="the commit to compare with (a git worktree of it)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "perftune_bench" / "repeat_cost")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    trees = {"new": ROOT, "old": worktree(args.old, args.out / f"tree_{args.old}")}
    before, rows = load(), []
    for plan in args.plans:
        for rnd in range(args.rounds):
            for tree in (("old", "new") if rnd % 2 == 0 else ("new", "old")):
                folder = args.out / Path(plan).stem / tree / f"round{rnd}"
                first = process(trees[tree], plan, folder / "p0", 0, "")
                rows.append({**first, "plan": plan, "tree": tree, "kind": "first", "first_sps": first["samples_per_s"]})
                for rep in range(1, args.repeats + 1):
                    row = process(trees[tree], plan, folder / f"p{rep}", rep, str(folder / "p0"))
                    rows.append({**row, "plan": plan, "tree": tree, "kind": "repeat",
                                 "first_sps": first["samples_per_s"]})
                print(f"{plan} round {rnd} {tree}: walls " + ", ".join(
                    f"{r['wall_s']:.1f}" for r in rows[-args.repeats - 1:]) + f" s (load {load()})", flush=True)
    (args.out / "rows.json").write_text(json.dumps(rows, indent=1))
    print(f"\nrepeat_cost: old = {args.old}, new = this tree; load average before {before}, after {load()}")
    print("\n".join(summary(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
