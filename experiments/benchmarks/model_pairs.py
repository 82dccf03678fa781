"""Do paired verdicts on model-side knobs agree with the truth?  (issue 38: two models in one process)

* **Truth**: each change's throughput ratio against the baseline from long fresh processes (``--truth-rounds``
  interleaved rounds, baseline and every change in each, 4x the plan's windows, no profile), pooled per
  configuration (the geometric mean of its processes), with a 95% interval from the rounds' spread.
* **Paired verdicts**: ``--sweeps`` real sweeps (``perftune.engine.sweep.Sweep``, singles only: no stacking) of the
  same changes; a model-side change is decided by paired processes, two models in one process, where both fit.

Agreement counts the decided comparisons (``faster``, ``slower``, ``equivalent``) that match the truth: ``faster``
where the true ratio's interval lies above 1, ``slower`` below 1, ``equivalent`` where it lies within the plan's
equivalence margin; a wrong sign is ``faster`` against a true slowdown or the reverse.  Works on the mlp in graph
mode (``--workload tiny_gpt`` for the small transformer).  The accuracy gate is loosened (the changes are judged on
speed here).  Figures last, with the load average; exit 2 when a process fails.

    .venv/bin/python experiments/benchmarks/model_pairs.py --sweeps 2 --truth-rounds 3
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from harness import EXIT_CANNOT_MEASURE, SMALL_GPT, CannotMeasure, loadavg, log, make_plan, out_dir, run_burst

from perftune.engine.sweep import Sweep
from perftune.runner import run_trial

#: the changes, each alone against the baseline: every model-side knob the mlp has (it names no recompute cells)
CHANGES: list[dict[str, Any]] = [{"train_step": "function"}, {"batch_size": 64}, {"amp_level": "O1"},
                                 {"grad_accum_steps": 2}, {"loss_scale": "dynamic"}]
BASE = {"mlp": ({}, {"batch_size": 32, "mode": "graph", "train_step": "cell"}),
        "tiny_gpt": (SMALL_GPT, {"batch_size": 16, "mode": "graph", "train_step": "cell"})}


def plan_fields(workload: str) -> dict:
    params, baseline = BASE[workload]
    return {"workload": workload, "workload_params": params, "device": "CPU", "seed": 0, "baseline": baseline,
            "variables": {k: [v] for change in CHANGES for k, v in change.items()},
            "accuracy": {"rel_tolerance": 1000, "samples": 256, "seeds": 1, "verify_multiple": 0},
            "decision": {"baseline_runs": 2, "retry_on_stack": False}}


def label(change: dict) -> str:
    return " ".join(f"+{k}={v}" for k, v in change.items())


class SinglesSweep(Sweep):
    """The sweep's singles phase only: every change raced against the baseline (stacking and leave-one-out not run)."""

    def stack(self, single_trials) -> None:
        pass

    def leave_one_out(self) -> None:
        pass


def truth(work: Path, workload: str, rounds: int) -> dict[str, tuple[float, float, float]]:
    """label -> (ratio, low, high) against the baseline from interleaved long processes."""
    fields = plan_fields(workload)
    plan = make_plan(**{**fields, "burst": {"repeats": 12, "profile_steps": 0}})
    configs = [{}] + CHANGES
    logs: dict[str, list[float]] = {label(c) or "baseline": [] for c in configs}
    for r in range(rounds):
        for i, c in (list(enumerate(configs)) if r % 2 == 0 else list(enumerate(configs))[::-1]):
            name = label(c) or "baseline"
            res = run_burst(plan, c, work / "truth" / f"r{r}_c{i}", name, replicate=1 + r)
            if res.status != "ok":
                raise CannotMeasure(f"truth {name}: {res.status}: {res.reason}")
            logs[name].append(math.log(res.samples_per_s))
        log(f"truth round {r + 1}/{rounds}: " + ", ".join(f"{n}: {math.exp(v[-1]):.0f}/s" for n, v in logs.items())
            + f", load {loadavg()}")
    base = logs.pop("baseline")
    out = {}
    for name, values in logs.items():
        diffs = [v - b for v, b in zip(values, base)]  # paired by round (interleaved)
        mean = statistics.mean(diffs)
        half = 2.0 * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else float("inf")
        out[name] = (math.exp(mean), math.exp(mean - half), math.exp(mean + half))
    return out


def agrees(verdict: str, truth_: tuple[float, float, float], margin: float) -> str:
    """``agree``, ``wrong sign``, ``disagree`` (a decided verdict the truth does not support) or ``undecided``."""
    _, low, high = truth_
    if verdict == "faster":
        return "agree" if low > 1 else ("wrong sign" if high < 1 else "disagree")
    if verdict == "slower":
        return "agree" if high < 1 else ("wrong sign" if low > 1 else "disagree")
    if verdict == "equivalent":
        return "agree" if low > 1 - margin and high < 1 + margin else "disagree"
    return "undecided"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(BASE), default="mlp")
    parser.add_argument("--sweeps", type=int, default=2)
    parser.add_argument("--truth-rounds", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    work = out_dir("model_pairs", args.out)
    before = loadavg()
    try:
        true = truth(work, args.workload, args.truth_rounds)
        plan = make_plan(**plan_fields(args.workload))
        rows = []
        for s in range(args.sweeps):
            result = SinglesSweep(plan, work / f"sweep{s}", run_trial, fresh=True).run()
            for t in result.trials:
                if t.kind != "single" or t.replicate or t.vs_baseline is None:
                    continue
                c = t.vs_baseline
                rows.append((s, t.label, c.verdict, c.design, c.processes, c.ratio, c.ci_low, c.ci_high))
                log(f"sweep {s + 1}/{args.sweeps}: {t.label}: {c.verdict} x{c.ratio:.3f} [{c.ci_low:.3f}, "
                    f"{c.ci_high:.3f}] ({c.design or 'fresh'}, {c.processes} process(es)); load {loadavg()}")
    except CannotMeasure as exc:
        print(f"cannot measure: {exc}")
        return EXIT_CANNOT_MEASURE
    margin = plan.decision.equivalence
    print(f"\nmodel_pairs ({args.workload}, graph): load average before {before}, after {loadavg()}")
    for name, (ratio, low, high) in true.items():
        print(f"  truth {name:<24} x{ratio:.3f} [{low:.3f}, {high:.3f}] ({args.truth_rounds} interleaved rounds)")
    outcomes = []
    for s, name, verdict, design, processes, ratio, low, high in rows:
        outcome = agrees(verdict, true[name], margin)
        outcomes.append((outcome, design))
        print(f"  sweep {s + 1} {name:<24} {verdict:<15} x{ratio:.3f} [{low:.3f}, {high:.3f}] "
              f"{design or 'fresh'} x{processes}: {outcome}")
    paired = [o for o, d in outcomes if d == "paired"]
    decided = [o for o in paired if o != "undecided"]
    print(f"  paired comparisons: {len(paired)}; decided {len(decided)}; agree {decided.count('agree')}, "
          f"disagree {decided.count('disagree')}, wrong sign {decided.count('wrong sign')} "
          "(target: 9 of 10 decided agree, never the wrong sign)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
