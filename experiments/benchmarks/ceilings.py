"""Ceilings from the splits: what skipping the changes that cannot gain saves, and what it costs in verdicts.

Each plan is swept twice per round by this tree, with ``decision.skip_cannot_gain`` true (``skip``) and false
(``race``: every change raced alone, as before ceilings), the two alternating, each in a fresh folder.  Printed per
sweep, with the load average before and after: the wall time, the processes (paired ones included) and their
seconds, each change's verdict alone and on the stack, and the ceilings recorded; then, per plan, whether every
change that the racing sweep found to help (``kept`` alone or on the stack) is also kept by the skipping one.

    .venv/bin/python experiments/benchmarks/ceilings.py
    .venv/bin/python experiments/benchmarks/ceilings.py --plans experiments/quickstart.yaml --rounds 2

Plans: the quickstart (an eager baseline that hardly waits for data; graph mode makes the step data-bound) and
``plans/compute_bound.yaml`` (a wide MLP in graph mode: no stack ever waits for data).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from repeat_cost import ROOT, load

PLANS = ["experiments/quickstart.yaml", "experiments/benchmarks/plans/compute_bound.yaml"]


def sweep(plan: dict, out: Path) -> tuple[float, str, str]:
    """One ``perftune sweep`` of ``plan`` (written beside ``out``); its wall time and the load before and after."""
    path = out.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    before, started = load(), time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "perftune.cli", "sweep", str(path), "--out", str(out),
                          "--no-progress"], cwd=ROOT, capture_output=True, text=True, timeout=7200)
    if run.returncode != 0:
        raise SystemExit(f"the sweep {path} failed (exit {run.returncode}): {run.stderr[-3000:]}")
    return time.perf_counter() - started, before, load()


def figures(out: Path) -> dict:
    data = json.loads((out / "results.json").read_text())
    trials, paired = data["trials"], data.get("paired", [])
    walls = [t["result"].get("wall_s") or 0.0 for t in trials] + [p.get("wall_s") or 0.0 for p in paired]
    alone = {t["label"]: t["verdict"] for t in trials if t["kind"] == "single"}
    stacked = {s["label"]: ("kept" if s["kept"] else "dropped") for s in data.get("stack", [])[1:]}
    kept = {k for k, v in alone.items() if v == "kept"}
    kept |= {s["label"].split()[-1] for s in data.get("stack", [])[1:] if s["kept"]}
    ceilings = [f"{c['label']} on {c['where']}: x{c['ceiling']:.3f} {'raced' if c['raced'] else 'cannot gain'}"
                if c.get("ceiling") else f"{c['label']} on {c['where']}: no limit" for c in data.get("ceilings", [])]
    return {"processes": len(walls), "process_s": sum(walls), "alone": alone, "stacked": stacked, "kept": kept,
            "ceilings": ceilings, "best": data.get("best_label")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", nargs="+", default=PLANS)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "perftune_bench" / "ceilings")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summary = []
    for plan_path in args.plans:
        plan = yaml.safe_load((ROOT / plan_path).read_text())
        kept: dict[str, set] = {"skip": set(), "race": set()}
        for rnd in range(args.rounds):
            for arm in (("skip", "race") if rnd % 2 == 0 else ("race", "skip")):
                out = args.out / f"{plan['name']}_{arm}_{rnd}"
                shutil.rmtree(out, ignore_errors=True)
                variant = {**plan, "decision": {**plan.get("decision", {}), "skip_cannot_gain": arm == "skip"}}
                wall, before, after = sweep(variant, out)
                f = figures(out)
                kept[arm] |= f["kept"]
                print(f"{plan['name']} {arm} round {rnd}: sweep {wall:.0f} s (load {before} -> {after}); "
                      f"{f['processes']} processes, {f['process_s']:.0f} s; best {f['best']}", flush=True)
                print(f"  alone: {f['alone']}\n  stack: {f['stacked']}\n  ceilings: {f['ceilings']}", flush=True)
        missed = kept["race"] - kept["skip"]
        summary.append(f"{plan['name']}: kept when racing every change {sorted(kept['race'])}, when skipping "
                       f"{sorted(kept['skip'])}: {'none missed' if not missed else 'MISSED ' + str(sorted(missed))}")
    print("\n".join(["", "ceilings:"] + summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
