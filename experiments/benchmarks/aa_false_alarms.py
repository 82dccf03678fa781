"""How often does ``perftune compare`` cry wolf, and how small a slow-down does it catch?

1. A/A: ``--pairs`` pairs of real sweeps of the same plan (experiments/ci/tiny.yaml: baseline only, 2 processes
   per sweep), run back to back and compared with ``perftune compare``.  Every ``slower`` verdict is a false alarm
   (the CI check would fail for nothing); ``faster`` is the other false positive.
2. Detection: the same plan made data-bound with ``workload_params.preprocess_ms`` (a real per-sample sleep in the
   dataset map, 1 worker: the step waits for its batch) at a base value, and at the base value raised by each
   ``--sizes`` percent (about that much slower steps).  Each size is run ``--tries`` times against a fresh base
   sweep, and reported with how often compare says ``slower`` at the default 5% threshold (and, from the same runs,
   how often the interval alone excludes 1).

Run from the repository root (about 8 minutes on 2 cores):

    .venv/bin/python experiments/benchmarks/aa_false_alarms.py

The figures come last.  The exit status is non-zero when a sweep or a comparison could not be made.  On a shared
machine the figures are noisy: other processes change the speed between runs, which is the very noise the
comparison has to live with.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from perftune.compare import run_compare  # noqa: E402
from perftune.errors import UserError  # noqa: E402

CI_PLAN = REPO / "experiments" / "ci" / "tiny.yaml"


class CannotMeasure(Exception):
    pass


def sweep(plan: dict, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    plan_path = folder / f"{name}.yaml"
    plan_path.write_text(yaml.safe_dump(plan, sort_keys=False))
    out = folder / name
    cmd = [sys.executable, "-m", "perftune.cli", "sweep", str(plan_path), "--out", str(out), "--no-progress",
           "--no-report"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=folder)
    if proc.returncode != 0:
        raise CannotMeasure(f"sweep {name} exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
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
    ap.add_argument("--sizes", default="2,5,10,20", help="intended slow-downs in percent (default 2,5,10,20)")
    ap.add_argument("--base-preprocess-ms", type=float, default=0.5,
                    help="per-sample sleep of the data-bound base (default 0.5 ms: ~18 ms per batch of 32)")
    ap.add_argument("--workdir", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    args = ap.parse_args(argv)
    sizes = [float(s) for s in args.sizes.split(",") if s.strip()]
    work = args.workdir or Path(tempfile.mkdtemp(prefix="perftune-aa-"))
    plan = yaml.safe_load(CI_PLAN.read_text())
    started = time.perf_counter()
    print(f"runs in {work}; plan {CI_PLAN.relative_to(REPO)} (baseline_runs {plan['decision']['baseline_runs']})",
          flush=True)
    try:
        # 1. A/A
        aa = []
        for i in range(args.pairs):
            a = sweep(plan, work / "aa", f"pair{i}_a")
            b = sweep(plan, work / "aa", f"pair{i}_b")
            report, tp = compare(a, b)
            aa.append(tp)
            print(f"A/A {i + 1}/{args.pairs}: x{tp.ratio:.3f} [{tp.ci_low:.3f}, {tp.ci_high:.3f}] {tp.verdict} "
                  f"(noise {report.noise.between_sd:.1%}, exit {report.exit_code})", flush=True)
        # 2. detection on a data-bound variant
        base_plan = copy.deepcopy(plan)
        base_plan["workload_params"]["preprocess_ms"] = args.base_preprocess_ms
        base_plan["accuracy"] = {"samples": 320}  # the accuracy phase is not what is measured here: keep it short
        detect: dict[float, list] = {s: [] for s in sizes}
        for t in range(args.tries):
            base = sweep(base_plan, work / "detect", f"try{t}_base")
            order = sizes[t % len(sizes):] + sizes[: t % len(sizes)]  # rotate: drift does not favour one size
            for size in order:
                slow_plan = copy.deepcopy(base_plan)
                slow_plan["workload_params"]["preprocess_ms"] = round(args.base_preprocess_ms * (1 + size / 100), 6)
                slow = sweep(slow_plan, work / "detect", f"try{t}_slow{size:g}")
                _, tp = compare(base, slow)
                _, tp0 = compare(base, slow, threshold=0.0)
                detect[size].append((tp, tp0))
                print(f"slow-down {size:g}% try {t + 1}/{args.tries}: x{tp.ratio:.3f} [{tp.ci_low:.3f}, "
                      f"{tp.ci_high:.3f}] {tp.verdict}", flush=True)
    except CannotMeasure as exc:
        print(f"cannot measure: {exc}", file=sys.stderr)
        return 1
    wall = time.perf_counter() - started

    def pct(x: float) -> str:
        return f"{x:.0%}"

    slower = sum(tp.verdict == "slower" for tp in aa)
    faster = sum(tp.verdict == "faster" for tp in aa)
    half_widths = [(tp.ci_high / tp.ci_low) ** 0.5 - 1 for tp in aa]
    print()
    print("== figures ==")
    print(f"A/A false alarms (verdict slower, exit 1): {slower}/{len(aa)} ({pct(slower / len(aa))}); "
          f"'faster': {faster}/{len(aa)}; median |ratio - 1| {statistics.median(abs(tp.ratio - 1) for tp in aa):.1%}; "
          f"median 95% interval half-width ±{statistics.median(half_widths):.1%}")
    reliable = None
    for size in sizes:
        rows = detect[size]
        n_slower = sum(tp.verdict == "slower" for tp, _ in rows)
        n_sig = sum(tp0.verdict == "slower" for _, tp0 in rows)
        measured = statistics.median(1 - tp.ratio for tp, _ in rows)
        print(f"intended slow-down {size:g}%: measured {measured:+.1%} less throughput (median), said 'slower' "
              f"{n_slower}/{len(rows)} at threshold 5% (interval excludes 1: {n_sig}/{len(rows)})")
        if reliable is None and n_slower == len(rows):
            reliable = size
    print(f"smallest slow-down flagged in {args.tries}/{args.tries} tries: "
          + (f"{reliable:g}%" if reliable is not None else f"none up to {max(sizes):g}%"))
    print(f"wall time {wall:.0f} s; shared machine: these figures move from run to run")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
