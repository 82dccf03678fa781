"""Does ``until: fits`` find the largest batch that fits under ``burst.memory_limit_mb``, every time?  (issue 48)

* **Truth**: every power of two of the range run ``--truth-runs`` times as one short burst under the memory limit
  (graph mode, the wide MLP of ``tests/test_range_sweep.py``); the true largest fitting batch is the largest power
  of two whose every run was ``ok`` with every smaller one ``ok`` too.  A size that fits in some runs and not in
  others is reported: the limit sits on it, and no search can find it every time.
* **Search**: ``--sweeps`` sweeps whose only variable is ``batch_size: {range: [lo, hi], scale: log2, until: fits}``
  (searches and singles, no stacking; the speed search below the largest fit is one step, as the fits part is what
  this measures).  Per sweep: the largest fit it found, the OOM trials it recorded, whether the sweep completed.

Figures last, with the load average before and after; exit 2 where no memory cgroup can be used.

    .venv/bin/python experiments/benchmarks/fits_search.py --sweeps 10 --truth-runs 2 --out DIR
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import EXIT_CANNOT_MEASURE, loadavg, log, make_plan, out_dir, run_burst
from range_search import SinglesSweep

from perftune.io.plan import KnobRange
from perftune.runner import memcg, run_trial

#: the wide MLP whose activations grow with the batch (``tests/test_memory_limit.py`` measured it: 540 MB charged at
#: batch 64, 725 MB at 4096)
WIDE_MLP = {"in_dim": 1024, "hidden": 2048, "layers": 2, "classes": 8, "train_samples": 8192, "val_samples": 128}


def plan_fields(lo: int, hi: int, limit_mb: int, fits: bool) -> dict:
    variables = {"batch_size": {"range": [lo, hi], "scale": "log2", "until": "fits"}} if fits else {}
    return {"workload": "mlp", "workload_params": WIDE_MLP, "device": "CPU", "seed": 0,
            "baseline": {"batch_size": lo, "mode": "graph", "prefetch_size": 2},
            "burst": {"warmup_steps": 1, "steps": 4, "repeats": 2, "profile_steps": 0, "timeout_s": 300,
                      "memory_limit_mb": limit_mb},
            "variables": variables,
            "accuracy": {"samples": 2 * hi, "seeds": 1, "rel_tolerance": 1000, "verify_multiple": 0},
            "decision": {"baseline_runs": 1, "max_runs": 1, "search_steps": 1, "retry_on_stack": False,
                         "remeasure_contended": 0}}


def truth(work: Path, values: list[int], runs: int, limit_mb: int) -> dict[int, list[str]]:
    """batch -> the statuses of its runs under the limit."""
    plan = make_plan(**plan_fields(values[0], values[-1], limit_mb, fits=False))
    out: dict[int, list[str]] = {v: [] for v in values}
    for r in range(runs):
        for v in values:
            res = run_burst(plan, {"batch_size": v}, work / "truth" / f"r{r}_{v}", f"+batch_size={v}", replicate=r)
            out[v].append(res.status)
        log(f"truth run {r + 1}/{runs}: " + ", ".join(f"{v}: {s[-1]}" for v, s in out.items()) + f"; load {loadavg()}")
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lo", type=int, default=256)
    parser.add_argument("--hi", type=int, default=8192)
    parser.add_argument("--limit-mb", type=int, default=600)
    parser.add_argument("--truth-runs", type=int, default=2)
    parser.add_argument("--sweeps", type=int, default=10)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if memcg.memory_parent()[0] is None:
        print("cannot measure: no memory cgroup can be used here")
        return EXIT_CANNOT_MEASURE
    work = out_dir("fits_search", args.out)
    values = KnobRange(range=[args.lo, args.hi], scale="log2").values()
    before = loadavg()
    statuses = truth(work, values, args.truth_runs, args.limit_mb)
    largest = None
    for v in values:
        if any(s != "ok" for s in statuses[v]):
            break
        largest = v
    rows = []
    plan = make_plan(**plan_fields(args.lo, args.hi, args.limit_mb, fits=True))
    for s in range(args.sweeps):
        result = SinglesSweep(plan, work / f"sweep{s}", run_trial, fresh=True).run()
        record = result.searches[0]
        ooms = [t for t in result.trials if t.verdict == "oom"]
        rows.append((record.largest_fit, len(ooms), result.status, [(f.value, f.status) for f in record.fits]))
        log(f"sweep {s + 1}/{args.sweeps}: largest fit {record.largest_fit}, fits {rows[-1][3]}, {len(ooms)} oom "
            f"trial(s), {result.status}; load {loadavg()}")
    print(f"\nfits_search (batch_size {args.lo}-{args.hi} log2 under {args.limit_mb} MB, wide mlp graph): load "
          f"average before {before}, after {loadavg()}")
    for v in values:
        print(f"  truth batch {v}: {', '.join(statuses[v])}")
    mixed = [v for v in values if len(set(statuses[v])) > 1]
    print(f"  true largest fitting power of two: {largest}" + (f"; sizes that fit only sometimes: {mixed}"
                                                               if mixed else ""))
    found = sum(r[0] == largest for r in rows)
    for s, (fit, ooms, status, fits) in enumerate(rows):
        right = "right" if fit == largest else "WRONG"
        print(f"  sweep {s + 1}: largest fit {fit} ({right}; {fits}), {ooms} oom trial(s) recorded, sweep {status}")
    if rows:
        print(f"  found the true largest in {found} of {len(rows)} sweeps (target: 10 of 10); every sweep complete: "
              f"{all(r[2] == 'complete' for r in rows)}; every sweep recorded its oom: {all(r[1] >= 1 for r in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
