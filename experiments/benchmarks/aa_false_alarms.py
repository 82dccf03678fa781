"""How often does ``perftune compare`` cry wolf, and how small a slow-down does it catch?

The protocol is the CI workflow's (experiments/ci/perftune-compare.yml): the plan experiments/ci/tiny.yaml
(baseline only, one process per sweep) swept in 2 rounds of A, B (A B A B), one sweep folder per side and round,
then ``perftune compare A/ B/`` (each side pools its 2 processes).

1. A/A: ``--pairs`` such comparisons of the plan with itself.  Every ``slower`` verdict is a false alarm (the CI
   check would fail for nothing); ``faster`` is the other false positive.
2. Detection: the same plan made data-bound with ``workload_params.preprocess_ms`` (a real per-sample sleep in the
   dataset map, 1 worker: the step waits for its batch) at a base value, and the base value raised by each of
   ``--sizes`` percent (about that much slower steps).  Each try runs 2 rounds of base and every size, in a
   rotated order (so every variant has 2 processes, one per round), and compares each size with the base.
   Reported: how often compare says ``slower`` at the default 5% threshold, and (same runs) how often the
   interval alone excludes 1.

Run from the repository root (about 9 minutes on 2 idle cores: 76 bursts of a few seconds):

    .venv/bin/python experiments/benchmarks/aa_false_alarms.py

The figures come last.  The exit status is non-zero when a sweep or a comparison could not be made.  On a shared
machine the figures are noisy: other processes change the speed between runs, which is the very noise the
comparison has to live with.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from perftune.compare.run import run_compare  # noqa: E402
from perftune.errors import UserError  # noqa: E402

CI_PLAN = REPO / "experiments" / "ci" / "tiny.yaml"


class CannotMeasure(Exception):
    pass


def sweep(plan: dict, side: Path, round_: int) -> Path:
    """One real sweep of ``plan`` into ``side/<round>``: what ``perftune sweep PLAN --out side/<round>`` runs (each
    burst in a fresh process), called in this process to spare the CLI's start-up per sweep."""
    from perftune.commands import sweep as run_sweep
    from perftune.engine.plan_load import load_plan

    side.mkdir(parents=True, exist_ok=True)
    plan_path = side / "plan.yaml"
    plan_path.write_text(yaml.safe_dump(plan, sort_keys=False))
    out = side / str(round_)
    try:
        result = run_sweep(load_plan(plan_path), out, plan_path)
    except UserError as exc:
        raise CannotMeasure(f"sweep {out}: {exc}") from None
    failed = [t for t in result.trials if t.result.status != "ok"]
    if failed:
        raise CannotMeasure(f"sweep {out}: {failed[0].result.status}: {failed[0].result.reason}")
    return out


def compare(old: Path, new: Path, threshold: float = 0.05):
    try:
        report = run_compare(old, new, threshold=threshold)
    except UserError as exc:
        raise CannotMeasure(f"compare {old.name} {new.name}: {exc}") from None
    (cc,) = report.configurations
    if "throughput" not in cc.metrics:
        raise CannotMeasure(f"compare {old.name} {new.name}: {cc.verdict}")
    return report, cc.metrics["throughput"]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=10, help="A/A comparisons (default 10)")
    ap.add_argument("--tries", type=int, default=3, help="tries per slow-down size (default 3)")
    ap.add_argument("--sizes", default="2,5,10,20,40", help="intended slow-downs in percent (default 2,5,10,20,40)")
    ap.add_argument("--base-preprocess-ms", type=float, default=0.5,
                    help="per-sample sleep of the data-bound base (default 0.5 ms: ~18 ms per batch of 32)")
    ap.add_argument("--workdir", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    args = ap.parse_args(argv)
    sizes = [float(s) for s in args.sizes.split(",") if s.strip()]
    work = args.workdir or Path(tempfile.mkdtemp(prefix="perftune-aa-"))
    plan = yaml.safe_load(CI_PLAN.read_text())
    started = time.perf_counter()
    print(f"runs in {work}; plan {CI_PLAN.relative_to(REPO)}; 2 rounds per side, A B A B", flush=True)
    try:
        # 1. A/A
        aa, aa_noise = [], []
        for i in range(args.pairs):
            a, b = work / "aa" / f"pair{i}" / "a", work / "aa" / f"pair{i}" / "b"
            for side, round_ in ((a, 1), (b, 1), (a, 2), (b, 2)):
                sweep(plan, side, round_)
            report, tp = compare(a, b)
            aa.append(tp)
            aa_noise.append(report.noise.between_sd)
            print(f"A/A {i + 1}/{args.pairs}: x{tp.ratio:.3f} [{tp.ci_low:.3f}, {tp.ci_high:.3f}] {tp.verdict} "
                  f"(noise {report.noise.between_sd:.1%}, exit {report.exit_code})", flush=True)
        # 2. detection on a data-bound variant
        base_plan = copy.deepcopy(plan)
        base_plan["workload_params"]["preprocess_ms"] = args.base_preprocess_ms
        base_plan["accuracy"] = {"samples": 320}  # the accuracy phase is not what is measured here: keep it short
        detect: dict[float, list] = {s: [] for s in sizes}
        for t in range(args.tries):
            folder = work / "detect" / f"try{t}"
            order = sizes[t % len(sizes):] + sizes[: t % len(sizes)]
            plans = {None: base_plan}
            for size in sizes:
                plans[size] = copy.deepcopy(base_plan)
                plans[size]["workload_params"]["preprocess_ms"] = round(args.base_preprocess_ms * (1 + size / 100), 6)
            for round_ in (1, 2):  # round robin, as A B A B: each variant once per round
                for size in [None] + order:
                    sweep(plans[size], folder / ("base" if size is None else f"slow{size:g}"), round_)
            for size in sizes:
                _, tp = compare(folder / "base", folder / f"slow{size:g}")
                _, tp0 = compare(folder / "base", folder / f"slow{size:g}", threshold=0.0)
                detect[size].append((tp, tp0))
                print(f"slow-down {size:g}% try {t + 1}/{args.tries}: x{tp.ratio:.3f} [{tp.ci_low:.3f}, "
                      f"{tp.ci_high:.3f}] {tp.verdict}", flush=True)
    except CannotMeasure as exc:
        print(f"cannot measure: {exc}", file=sys.stderr)
        return 1
    wall = time.perf_counter() - started

    print()
    print("== figures ==")
    if aa:
        slower = sum(tp.verdict == "slower" for tp in aa)
        faster = sum(tp.verdict == "faster" for tp in aa)
        spans = [(tp.ci_low / tp.ratio, tp.ci_high / tp.ratio) for tp in aa]
        print(f"A/A false alarms (verdict slower, exit 1): {slower}/{len(aa)}; 'faster': {faster}/{len(aa)}; "
              f"by symmetry the one-sided false-alarm rate is about {(slower + faster) / (2 * len(aa)):.0%} "
              f"({slower + faster} of {2 * len(aa)} chances)")
        lo, hi = statistics.median(x for x, _ in spans), statistics.median(y for _, y in spans)
        print(f"A/A spread: median |ratio - 1| {statistics.median(abs(tp.ratio - 1) for tp in aa):.1%}; median 95% "
              f"interval x{lo:.2f} to x{hi:.2f} of the measured ratio; median between-process noise estimate "
              f"{statistics.median(aa_noise):.1%}")
    if args.tries:
        flagged_all = []
        for size in sizes:
            rows = detect[size]
            n_slower = sum(tp.verdict == "slower" for tp, _ in rows)
            n_sig = sum(tp0.verdict == "slower" for _, tp0 in rows)
            measured = statistics.median(1 - tp.ratio for tp, _ in rows)
            print(f"intended slow-down {size:g}%: measured {measured:+.1%} less throughput (median), said 'slower' "
                  f"{n_slower}/{len(rows)} at threshold 5% (interval excludes 1: {n_sig}/{len(rows)})")
            flagged_all.append((size, n_slower == len(rows)))
        reliable = None
        for size, ok in sorted(flagged_all, reverse=True):  # the smallest size from which every larger one is caught
            if not ok:
                break
            reliable = size
        print(f"smallest slow-down flagged in {args.tries}/{args.tries} tries (and every larger one): "
              + (f"{reliable:g}%" if reliable is not None else f"none up to {max(sizes):g}%"))
    print(f"wall time {wall:.0f} s; shared machine: these figures move from run to run")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
