"""Benchmark: perftune's step time against a plain loop synchronised every step (issue 36).

    .venv/bin/python experiments/benchmarks/step_fidelity.py                      # 8 configurations, 2 rounds
    .venv/bin/python experiments/benchmarks/step_fidelity.py --workloads tiny_gpt --modes graph --rounds 3

For each configuration (workload x step form x mode: ``tiny_gpt`` (the small one of ``harness.SMALL_GPT``) and
``mlp``, ``train_step`` function and cell, graph and PyNative), fresh processes in alternating order, round by round:

* a perftune burst (``python -m perftune.burst``, profiler included) of the configuration;
* the plain loop of ``sync_loop.py`` on the same step and pipeline, after as many untimed steps, its windows as
  long as the burst's, under each read-back policy (``--policies``: ``0`` every step, ``k`` a lag of k steps,
  ``window`` once per window).

Figures per configuration (medians over rounds): perftune's samples/s over the plain loop's read back every step
(target within 10%), each other policy's over that one (which policy a timed window must follow to match it), and
the burst's phase medians (accuracy, warm-up, timed, profiled) with their largest ratio (target within x1.3).
Exit status 2 when it cannot measure; else 0 (targets missed are reported, ``--strict`` makes them 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness as c  # noqa: E402

TARGET_RATE = 0.10  # perftune's samples/s within 10% of the synchronised loop's
TARGET_PHASES = 1.3  # every phase's median step within x1.3 of the others


def configuration(workload: str, form: str, mode: str):
    params, batch = c.WORKLOADS[workload]
    plan = c.make_plan(workload=workload, workload_params=params,
                       baseline={"batch_size": batch, "train_step": form, "mode": mode},
                       burst={"warmup_steps": 3, "steps": 10, "repeats": 3, "profile_steps": 3,
                              "min_window_s": 0.5, "timeout_s": 900})
    return plan, params, batch


def one_round(workload: str, form: str, mode: str, policies: list[str], index: int, out: Path,
              window_steps: int) -> dict:
    from perftune import knobs as knob_registry
    from perftune.engine.plan_load import accuracy_samples

    plan, params, batch = configuration(workload, form, mode)
    knobs = knob_registry.effective(plan.baseline)
    answer: dict = {}

    def burst() -> None:
        result = c.require_ok(c.run_burst(plan, knobs, out / f"{workload}-{form}-{mode}-{index}"), "burst")
        answer["perftune"] = result.samples_per_s
        answer["phases"] = result.phase_agreement.medians_ms if result.phase_agreement else {}
        answer["window_steps"] = result.windows[0].steps

    def plain() -> None:
        untimed = -(-accuracy_samples(plan) // batch) + plan.burst.warmup_steps + int(knobs["prefetch_size"]) + 2
        got = c.run_child("sync_loop", {"workload": workload, "workload_params": params, "seed": plan.seed,
                                        "knobs": knobs, "untimed_steps": untimed,
                                        "steps": answer.get("window_steps", window_steps),
                                        "rounds": plan.burst.repeats * len(policies), "policies": policies})
        answer["plain"] = got["samples_per_s"]

    for part in (burst, plain) if index % 2 == 0 else (plain, burst):
        part()
    answer["load"] = c.loadavg()
    c.log(f"  {workload} {form} {mode} round {index}: perftune {answer['perftune']:.1f}, "
          f"plain {answer['plain']} samples/s")
    return answer


def summarise(name: str, rounds: list[dict], policies: list[str]) -> dict:
    ref = policies[0]
    perftune = c.median([r["perftune"] / r["plain"][ref] for r in rounds])
    others = {p: c.median([r["plain"][p] / r["plain"][ref] for r in rounds]) for p in policies[1:]}
    spread = []
    for r in rounds:
        medians = list(r["phases"].values())
        spread.append(max(medians) / min(medians) if medians else float("nan"))
    phases = {p: c.median([r["phases"][p] for r in rounds if p in r["phases"]])
              for p in ("accuracy", "warmup", "timed", "profiled") if any(p in r["phases"] for r in rounds)}
    return {"configuration": name, "perftune_over_sync": perftune, "policy_over_sync": others,
            "phase_medians_ms": phases, "phase_ratio": max(spread), "loads": [r["load"] for r in rounds]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="tiny_gpt,mlp")
    ap.add_argument("--forms", default="function,cell")
    ap.add_argument("--modes", default="graph,pynative")
    ap.add_argument("--policies", default="0,1,window", help="read-back policies of the plain loop; the first is "
                                                             "the reference (0: every step)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("--json", default=None, help="write the figures here too")
    ap.add_argument("--strict", action="store_true")
    args = ap.parse_args()
    out = c.out_dir("step_fidelity", args.out)
    policies = args.policies.split(",")
    c.log(f"load before: {c.loadavg()}")
    figures, missed = [], []
    try:
        for workload in args.workloads.split(","):
            for form in args.forms.split(","):
                for mode in args.modes.split(","):
                    name = f"{workload} {form} {mode}"
                    rounds = [one_round(workload, form, mode, policies, i, out, 10) for i in range(args.rounds)]
                    fig = summarise(name, rounds, policies)
                    figures.append(fig)
                    c.log(json.dumps(fig))
                    if abs(fig["perftune_over_sync"] - 1) > TARGET_RATE or fig["phase_ratio"] > TARGET_PHASES:
                        missed.append(name)
    except c.CannotMeasure as exc:
        c.fail(str(exc))
    print(f"load after: {c.loadavg()}")
    print(f"{'configuration':<24} {'perftune/sync':>13} " + " ".join(f"{'lag ' + p + '/sync':>14}"
                                                                     for p in policies[1:])
          + f" {'phases max/min':>14}  phase medians ms")
    for f in figures:
        print(f"{f['configuration']:<24} {f['perftune_over_sync']:>13.3f} "
              + " ".join(f"{f['policy_over_sync'][p]:>14.3f}" for p in policies[1:])
              + f" {f['phase_ratio']:>14.2f}  "
              + ", ".join(f"{k} {v:.1f}" for k, v in f["phase_medians_ms"].items()))
    print(f"targets: perftune within {TARGET_RATE:.0%} of the loop synchronised every step, phases within "
          f"x{TARGET_PHASES}: " + ("all met" if not missed else "missed by " + "; ".join(missed)))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    sys.exit(1 if missed and args.strict else 0)


if __name__ == "__main__":
    main()
