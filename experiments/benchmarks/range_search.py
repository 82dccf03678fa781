"""Does the range search find the fastest value, and for how many processes?  (issue 48, item 1)

* **Truth** (``--phase truth``): every value of the range measured exhaustively, interleaved: ``--truth-rounds``
  rounds, each a fresh long process (``--truth-windows`` timed windows, no profile) of every value, in alternating
  order; each value's throughput the geometric mean of its processes, with a 95% interval from the rounds' spread
  of its ratio to the round's mean.  Says whether the curve has an interior optimum (its best value is not at an edge).
* **Search** (``--phase search``): ``--sweeps`` sweeps of one plan whose only variable is the range
  (``kernel_threads: {range: [1, 8]}`` by default), singles only (no stacking).  Per sweep: the value found, its
  true throughput against the truth's best (within 5%?), and the processes the search used (its races, each value's
  first process included) against the exhaustive measurement's (values x rounds).

The workload is the mlp in graph mode at batch 128 (compute-bound, so the kernel threads matter); ``--knob``,
``--lo`` / ``--hi`` and ``--scale log2`` search another numeric knob (``--knob batch_size --lo 16 --hi 2048
--scale log2``: the batch, where a larger one amortises the step's fixed cost until its activations outgrow the
caches).  Figures last, with the load average before and after; exit 2 when a process fails.

    .venv/bin/python experiments/benchmarks/range_search.py --truth-rounds 4 --sweeps 10
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from harness import EXIT_CANNOT_MEASURE, CannotMeasure, loadavg, log, make_plan, out_dir, run_burst

from perftune.engine.sweep import Sweep
from perftune.io.plan import KnobRange
from perftune.io.sweep_records import SweepResult
from perftune.runner import run_trial

#: the mlp's defaults at a batch where the step is compute (the kernel threads' work), graph mode
BASELINE = {"batch_size": 128, "mode": "graph", "num_parallel_workers": 1}
BURST = {"warmup_steps": 3, "steps": 20, "repeats": 3, "profile_steps": 3, "timeout_s": 300}


def plan_fields(knob: str, lo: int, hi: int, max_runs: int = 4, search_steps: int = 6,
                scale: str = "linear") -> dict[str, Any]:
    return {"workload": "mlp", "device": "CPU", "seed": 0, "baseline": BASELINE, "burst": BURST,
            "variables": {knob: {"range": [lo, hi], "scale": scale}},
            "accuracy": {"rel_tolerance": 1000, "samples": max(1024, 2 * hi) if knob == "batch_size" else 1024,
                         "seeds": 1, "verify_multiple": 0},
            "decision": {"baseline_runs": 2, "retry_on_stack": False, "max_runs": max_runs,
                         "search_steps": search_steps}}


class SinglesSweep(Sweep):
    """The sweep's searches and singles only (stacking and leave-one-out not run)."""

    def stack(self, single_trials) -> None:
        pass

    def leave_one_out(self) -> None:
        pass


def truth(work: Path, knob: str, values: list[int], rounds: int, windows: int) -> dict[int, tuple[float, float, float]]:
    """value -> (samples/s, low, high) from interleaved long processes (each round in alternating order)."""
    plan = make_plan(**{**plan_fields(knob, values[0], values[-1]), "variables": {},
                        "burst": {**BURST, "repeats": windows, "profile_steps": 0}})
    logs: dict[int, list[float]] = {v: [] for v in values}
    for r in range(rounds):
        for v in (values if r % 2 == 0 else values[::-1]):
            res = run_burst(plan, {knob: v}, work / "truth" / f"r{r}_{v}", f"+{knob}={v}", replicate=1 + r)
            if res.status != "ok":
                raise CannotMeasure(f"truth {knob}={v}: {res.status}: {res.reason}")
            logs[v].append(math.log(res.samples_per_s))
        log(f"truth round {r + 1}/{rounds}: " + ", ".join(f"{v}: {math.exp(x[-1]):.0f}/s" for v, x in logs.items())
            + f"; load {loadavg()}")
    round_mean = [statistics.mean(logs[v][r] for v in values) for r in range(rounds)]
    out = {}
    for v, xs in logs.items():
        rel = [x - m for x, m in zip(xs, round_mean)]  # the round's level taken out: drift cancels
        half = 2.0 * statistics.stdev(rel) / math.sqrt(len(rel)) if len(rel) > 1 else float("inf")
        centre = statistics.mean(xs)
        out[v] = (math.exp(centre), math.exp(centre - half), math.exp(centre + half))
    (work / "truth.json").write_text(json.dumps({"rounds": rounds, "values": {str(v): t for v, t in out.items()}}))
    return out


def search_processes(result: SweepResult) -> tuple[int, int]:
    """(processes the searches used, processes of the whole sweep), contended ones included."""
    searched = sum(s.processes for s in result.searches)
    return searched, len(result.trials) + len(result.paired)


def searches(work: Path, knob: str, lo: int, hi: int, sweeps: int, max_runs: int, search_steps: int,
             scale: str) -> list[tuple[int, str, int, int]]:
    """Per sweep: (found value, why it stopped, search processes, sweep processes)."""
    plan = make_plan(**plan_fields(knob, lo, hi, max_runs, search_steps, scale))
    rows = []
    for s in range(sweeps):
        result = SinglesSweep(plan, work / f"sweep{s}", run_trial, fresh=True).run()
        record = result.searches[0]
        used, total = search_processes(result)
        rows.append((record.found, record.stopped, used, total))
        log(f"sweep {s + 1}/{sweeps}: tried {record.tried}, found {record.found} ({record.stopped}), {used} search "
            f"processes of {total}; load {loadavg()}")
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--knob", default="kernel_threads")
    parser.add_argument("--lo", type=int, default=1)
    parser.add_argument("--hi", type=int, default=8)
    parser.add_argument("--scale", choices=("linear", "log2"), default="linear")
    parser.add_argument("--truth-rounds", type=int, default=4)
    parser.add_argument("--truth-windows", type=int, default=9)
    parser.add_argument("--sweeps", type=int, default=10)
    parser.add_argument("--max-runs", type=int, default=4, help="decision.max_runs of the searches' races")
    parser.add_argument("--search-steps", type=int, default=6, help="decision.search_steps")
    parser.add_argument("--phase", choices=("truth", "search", "both"), default="both")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    work = out_dir("range_search", args.out)
    values = KnobRange(range=[args.lo, args.hi], scale=args.scale).values()
    before = loadavg()
    try:
        if args.phase == "search" and (work / "truth.json").exists():  # the truth an earlier run measured
            stored = json.loads((work / "truth.json").read_text())
            true = {int(k): tuple(v) for k, v in stored["values"].items()}
            args.truth_rounds = stored["rounds"]
        else:
            true = truth(work, args.knob, values, args.truth_rounds, args.truth_windows) if args.phase != "search" \
                else {}
        rows = searches(work, args.knob, args.lo, args.hi, args.sweeps, args.max_runs, args.search_steps,
                        args.scale) if args.phase != "truth" else []
    except CannotMeasure as exc:
        print(f"cannot measure: {exc}")
        return EXIT_CANNOT_MEASURE
    print(f"\nrange_search ({args.knob} in [{args.lo}, {args.hi}], mlp graph batch 128): load average before {before}, "
          f"after {loadavg()}")
    best = max(true, key=lambda v: true[v][0]) if true else None
    for v, (sps, low, high) in sorted(true.items()):
        mark = "  <- best" if v == best else ""
        print(f"  truth {args.knob}={v}: {sps:.0f} samples/s [{low:.0f}, {high:.0f}]{mark}")
    if best is not None:
        interior = args.lo < best < args.hi
        print(f"  truth's best {best}: {'an interior optimum' if interior else 'at the edge of the range'}; "
              f"exhaustive processes {len(values) * args.truth_rounds} ({len(values)} values x {args.truth_rounds} "
              "rounds)")
    exhaustive = len(values) * args.truth_rounds
    within = 0
    for s, (found, stopped, used, total) in enumerate(rows):
        ratio = true[found][0] / true[best][0] if true and found in true else float("nan")
        ok = ratio >= 0.95
        within += ok
        print(f"  sweep {s + 1}: found {found} ({stopped}), x{ratio:.3f} of the best: "
              f"{'within' if ok else 'NOT within'} 5%; {used} search processes ({used / exhaustive:.0%} of the "
              f"exhaustive {exhaustive}), {total} in the sweep")
    if rows:
        used = [r[2] for r in rows]
        print(f"  within 5% in {within} of {len(rows)} sweeps (target: 9 of 10); search processes median "
              f"{statistics.median(used):g} = {statistics.median(used) / exhaustive:.0%} of the exhaustive "
              "(target: <= 60%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
