"""Benchmark: does perftune's sweep find what an exhaustive grid finds, with fewer trials?

    .venv/bin/python experiments/benchmarks/search_quality.py            # 24-config grid, 3 re-measure rounds
    .venv/bin/python experiments/benchmarks/search_quality.py --quick    # 16-config grid, shorter bursts, 2 rounds

Workload: ``tiny_gpt`` (2 blocks, d=64, seq 64), short bursts (warm-up 1, 3 windows of 10 steps, no profiled
steps, prefetch 2), accuracy measured at 256 samples (a multiple of every batch size, so every trial is judged at
the same point).  ``--quick``: batch_size 32 dropped, windows of 8 steps, accuracy at 128 samples.  Knob space:

    mode: graph | pynative      train_step: cell | function      batch_size: 8 | 16 | 32
    num_parallel_workers: 1 | 2

A deliberately naive baseline: pynative, function step, batch 8, 1 worker.

1. grid: every configuration once, each a fresh burst; its best = the highest throughput among the configurations
   whose accuracy passes the plan's gate against the naive baseline (val_loss within 5%, no NaN, grad norm);
2. sweep: ``perftune.commands.sweep`` on the plan (baseline + one knob at a time + stacking + leave-one-out);
3. re-measure side by side: the sweep's best, the grid's best and the naive baseline, interleaved, ``--rounds``
   times (fresh processes), compared with ``perftune.engine.stats``.

Figures (printed last): the best configuration each found; sweep-best / grid-best throughput (target >= 0.95);
trials used by the sweep against the grid's (target <= 1/3); the sweep-best's speedup over the naive baseline
(target >= 2x) and its accuracy change (within the gate's tolerance).

Exit status 2 when it cannot measure; 1 with ``--strict`` when a target is missed; else 0.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness as c  # noqa: E402

NAIVE = {"mode": "pynative", "train_step": "function", "batch_size": 8, "num_parallel_workers": 1}
SPACE = {"mode": ["graph", "pynative"], "train_step": ["cell", "function"], "batch_size": [8, 16, 32],
         "num_parallel_workers": [1, 2]}
BURST = {"warmup_steps": 1, "steps": 10, "repeats": 3, "profile_steps": 0, "timeout_s": 300}
ACCURACY_SAMPLES = 256
QUICK_BURST = {**BURST, "steps": 8}
QUICK_ACCURACY_SAMPLES = 128
TARGET_RATIO, TARGET_TRIAL_SHARE, TARGET_SPEEDUP = 0.95, 1 / 3, 2.0


def label(config: dict) -> str:
    return " ".join(f"{k}={config[k]}" for k in SPACE)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="batch_size 8|16 only (16 configs), 2 rounds")
    ap.add_argument("--rounds", type=int, help="re-measure rounds (default 3, --quick 2)")
    ap.add_argument("--out", help="working folder (default $TMPDIR/perftune_bench/search_quality)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args(argv)
    space = dict(SPACE)
    if args.quick:
        space["batch_size"] = [8, 16]
    rounds = args.rounds or (2 if args.quick else 3)
    out = c.out_dir("search_quality", args.out)
    load_before = c.loadavg()
    started = time.perf_counter()
    burst, samples = (QUICK_BURST, QUICK_ACCURACY_SAMPLES) if args.quick else (BURST, ACCURACY_SAMPLES)
    try:
        lines, missed = run(space, rounds, out, burst, samples)
    except c.CannotMeasure as exc:
        c.fail(str(exc))
    wall = time.perf_counter() - started
    print("\n".join(["", "# search_quality.py figures", f"load average before: {load_before}",
                     f"load average after:  {c.loadavg()}", f"wall time {wall / 60:.1f} min"] + lines
                    + [f"targets missed: {', '.join(missed) if missed else 'none'}"]), flush=True)
    return 1 if (missed and args.strict) else 0


def run(space: dict, rounds: int, out: Path, burst: dict, samples: int) -> tuple[list[str], list[str]]:
    from perftune.cli import SweepProgressDisplay
    from perftune.commands import sweep as run_sweep
    from perftune.engine import stats
    from perftune.engine.accuracy import gate
    from perftune.words.rules import order_rule_text

    params = c.SMALL_GPT
    plan = c.make_plan(
        name="search-quality", workload="tiny_gpt", workload_params=params, burst=burst,
        baseline={**NAIVE, "prefetch_size": 2},
        variables={k: [v for v in vs if v != NAIVE[k]] for k, vs in space.items()},
        accuracy={"samples": samples},
    )
    cache = (out / "cache").resolve()

    # -- 1. the grid ------------------------------------------------------------------------------------------------
    configs = [dict(zip(space, values)) for values in itertools.product(*space.values())]
    grid = []
    grid_started = time.perf_counter()
    for i, config in enumerate(configs):
        trial_dir = out / "grid" / f"{i:02d}"
        shutil.rmtree(trial_dir, ignore_errors=True)
        r = c.run_burst(plan, config, trial_dir, label(config), cache_dir=cache)
        grid.append((config, r))
        what = f"{r.samples_per_s:.1f} samples/s" if r.status == "ok" else f"{r.status}: {r.reason}"
        c.log(f"  grid {i + 1}/{len(configs)} {label(config)}: {what}")
    grid_wall = time.perf_counter() - grid_started
    naive_r = next(r for cfg, r in grid if cfg == NAIVE)
    c.require_ok(naive_r, "the naive baseline in the grid")
    base_acc = naive_r.accuracy
    ok = []
    for config, r in grid:
        if r.status != "ok" or not r.samples_per_s:
            continue
        g = gate.check(base_acc, r.accuracy, plan.accuracy)
        ok.append((config, r, g))
    passing = [t for t in ok if t[2].ok]
    if not passing:
        raise c.CannotMeasure("no grid configuration passed the accuracy gate")
    grid_best_cfg, grid_best_r, _ = max(passing, key=lambda t: t[1].samples_per_s)
    fastest_cfg, fastest_r, fastest_g = max(ok, key=lambda t: t[1].samples_per_s)

    # -- 2. the sweep -----------------------------------------------------------------------------------------------
    sweep_started = time.perf_counter()
    result = run_sweep(plan, out / "sweep", fresh=True, progress=SweepProgressDisplay(),
                       command="perftune sweep (search_quality.py)")
    sweep_wall = time.perf_counter() - sweep_started
    if result.best_trial_id is None:
        raise c.CannotMeasure("the sweep named no best configuration")
    ran = [t for t in result.trials if not t.reused]
    before_loo = [t for t in ran if t.kind != "leave_one_out"]
    best_trial = next(t for t in result.trials if t.trial_id == result.best_trial_id)
    sweep_best_cfg = {k: best_trial.result.knobs[k] for k in space}

    # -- 3. re-measure side by side ----------------------------------------------------------------------------
    sides = {"sweep best": sweep_best_cfg, "grid best": grid_best_cfg, "naive": dict(NAIVE)}
    same = sweep_best_cfg == grid_best_cfg
    if same:
        del sides["grid best"]
    measured: dict[str, list] = {k: [] for k in sides}
    for rnd in range(rounds):
        for name, config in sides.items():
            trial_dir = out / "remeasure" / f"r{rnd}-{name.replace(' ', '_')}"
            shutil.rmtree(trial_dir, ignore_errors=True)
            r = c.require_ok(c.run_burst(plan, config, trial_dir, f"remeasure {name}", replicate=100 + rnd,
                                         cache_dir=cache), f"re-measure {name} round {rnd + 1}")
            measured[name].append(r)
            c.log(f"  re-measure round {rnd + 1} {name}: {r.samples_per_s:.1f} samples/s")
    if same:
        measured["grid best"] = measured["sweep best"]

    def meas(name):
        return stats.runs_of(name, measured[name])

    noise = stats.Noise.pooled([r for n in sides for r in meas(n)])
    once = stats.Policy(confidence=plan.decision.confidence, equivalence=0.0, max_runs=1)
    vs_grid = stats.compare(meas("grid best"), meas("sweep best"), noise, once)
    vs_naive = stats.compare(meas("naive"), meas("sweep best"), noise, once)
    grid_vs_naive = stats.compare(meas("naive"), meas("grid best"), noise, once)
    per_round_grid = [a.samples_per_s / b.samples_per_s for a, b in zip(measured["sweep best"], measured["grid best"])]
    per_round_naive = [a.samples_per_s / b.samples_per_s for a, b in zip(measured["sweep best"], measured["naive"])]
    acc = gate.check(measured["naive"][0].accuracy, measured["sweep best"][0].accuracy, plan.accuracy)
    acc_g = gate.check(measured["naive"][0].accuracy, measured["grid best"][0].accuracy, plan.accuracy)

    # -- figures -----------------------------------------------------------------------------------------------------
    n_grid = len(configs)
    n_singles = sum(len(v) for v in plan.variables.values())
    floor = plan.decision.baseline_runs + n_singles
    lines = [
        f"workload tiny_gpt {params}; burst {burst}; accuracy at {samples} samples, gate "
        f"{plan.accuracy.metric} within {plan.accuracy.rel_tolerance:.0%}; naive baseline: {label(NAIVE)}",
        f"grid: {n_grid} configurations, {grid_wall / 60:.1f} min; single-process throughput, fastest first:",
    ]
    for config, r, g in sorted(ok, key=lambda t: -t[1].samples_per_s):
        vl = r.accuracy.val_loss if r.accuracy else None
        lines.append(f"  {label(config):<68} {r.samples_per_s:8.1f} samples/s  val_loss "
                     f"{vl if vl is None else round(vl, 4)}  {'ok' if g.ok else 'REJECTED: ' + g.reason}")
    for config, r in grid:
        if r.status != "ok":
            lines.append(f"  {label(config):<68} {r.status}: {r.reason}")
    if fastest_cfg != grid_best_cfg:
        lines.append(f"  (fastest overall, rejected by the accuracy gate: {label(fastest_cfg)})")
    lines.append(f"sweep: {len(ran)} trials run ({len(before_loo)} before leave-one-out), {sweep_wall / 60:.1f} min; "
                 f"order rule: {order_rule_text(result.order_rule)}")
    for t in result.trials:
        lines.append(f"  {t.kind:<14} {t.label:<55} {t.verdict:<16} {t.reason[:110]}")
    lines.append(f"  best: {result.best_label}; sweep's own figure vs baseline: "
                 + (f"x{result.best_vs_baseline.ratio:.2f} [{result.best_vs_baseline.ci_low:.2f}, "
                    f"{result.best_vs_baseline.ci_high:.2f}]" if result.best_vs_baseline else "n/a"))
    lines.append(f"re-measured side by side, {rounds} interleaved rounds (fresh processes), samples/s per round:")
    for name in sides:
        lines.append(f"  {name:<11} {label(sides[name]):<68} "
                     + " ".join(f"{r.samples_per_s:8.1f}" for r in measured[name]))
    lines += [
        f"BEST FOUND: sweep {label(sweep_best_cfg)} | grid {label(grid_best_cfg)}"
        + (" (the same configuration)" if same else ""),
        f"sweep-best / grid-best throughput: x{vs_grid.ratio:.3f} [{vs_grid.ci_low:.3f}, {vs_grid.ci_high:.3f}] "
        f"(per round {', '.join(f'{x:.3f}' for x in per_round_grid)})"
        + (" - identical configurations, 1 by construction" if same else "") + f"   target >= {TARGET_RATIO}",
        f"trials: sweep {len(ran)} vs grid {n_grid} = {len(ran) / n_grid:.0%} ({len(before_loo)} = "
        f"{len(before_loo) / n_grid:.0%} without leave-one-out; {sum(t.kind == 'baseline' for t in ran)} of them "
        f"baseline repeats)   target <= {TARGET_TRIAL_SHARE:.0%}",
        f"  floor for this space: {plan.decision.baseline_runs} baseline runs + {n_singles} singles = {floor} trials "
        f"before any stacking ({floor / n_grid:.0%} of the grid); 1/3 is reachable only from a grid of "
        f">= {3 * floor} configurations (e.g. 4 knobs x 3 values = 81: floor {plan.decision.baseline_runs + 8})",
        f"sweep-best speedup over the naive baseline: x{vs_naive.ratio:.2f} [{vs_naive.ci_low:.2f}, "
        f"{vs_naive.ci_high:.2f}] (per round {', '.join(f'{x:.2f}' for x in per_round_naive)}); grid-best "
        f"x{grid_vs_naive.ratio:.2f}   target >= {TARGET_SPEEDUP:.0f}x",
        f"sweep-best accuracy vs naive: {plan.accuracy.metric} change "
        f"{(acc.changes.get(plan.accuracy.metric) or 0):+.2%} -> "
        f"{'within tolerance' if acc.ok else 'OUT: ' + acc.reason}; "
        f"grid-best {(acc_g.changes.get(plan.accuracy.metric) or 0):+.2%} -> "
        f"{'within tolerance' if acc_g.ok else 'OUT: ' + acc_g.reason}",
    ]
    missed = []
    if vs_grid.ratio < TARGET_RATIO:
        missed.append("sweep-best/grid-best ratio")
    if len(ran) / n_grid > TARGET_TRIAL_SHARE:
        missed.append("trial share")
    if vs_naive.ratio < TARGET_SPEEDUP:
        missed.append("speedup over naive")
    if not acc.ok:
        missed.append("accuracy")
    return lines, missed


if __name__ == "__main__":
    sys.exit(main())
