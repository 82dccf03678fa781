"""Benchmark: how precise a perftune throughput figure is, within a process and between processes.

    .venv/bin/python experiments/benchmarks/precision.py                   # tiny_gpt (small), 10 trials
    .venv/bin/python experiments/benchmarks/precision.py --workload mlp --trials 10

Runs ``--trials`` (10) baseline bursts of one small configuration, each in its own process
(``perftune.runner.run_trial``, the plan's default burst: warm-up 3, 3 windows of 30 steps, 5 profiled steps), one after
another, and reports (printed last):

* the coefficient of variation of throughput across processes (each process's median window samples/s; target
  <= 3%);
* the within-process window CV (pooled SD of log window throughput, and the median per-process window CV);
* the between-process SD of log throughput, i.e. the SD of the process means of log window throughput that
  ``stats.Noise.pooled`` estimates from repeated runs: the empirical basis for ``stats.PRIOR_SD`` (the one prior
  of every comparison, 0.07), with a 95% interval; and its part not explained by window noise (var - within/windows);
* 10 A/A comparisons with ``perftune.engine.stats`` (the one noise model, prior and interval of every comparison)
  as ``perftune compare`` makes them (two groups of processes, looked at once): trial i against the pooled
  baseline of trials i+1..i+3 (noise estimated from those three runs plus the prior), at the plan's confidence
  (95%) and min_gain (3%), and also with min_gain 0 (interval excludes 1); plus 10 one-against-one comparisons
  as the sweep's A/A check does (trial i vs trial i+1: the noise is the prior alone).  Target: none significant.
  The comparisons reuse trials, so they are not independent.  The same comparisons are repeated with the
  measured SD as the prior.

Exit status 2 when it cannot measure; 1 with ``--strict`` when a target is missed; else 0.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness as c  # noqa: E402

TARGET_CV = 0.03


def aa_comparisons(procs: list[list[float]], confidence: float, min_gain: float, prior_sd: float | None = None) -> dict:
    from perftune.engine import stats

    prior = stats.PRIOR_SD if prior_sd is None else prior_sd
    strict_policy = stats.Policy(confidence=confidence, equivalence=0.0, max_runs=1)
    gated_policy = stats.Policy(confidence=confidence, equivalence=0.0, max_runs=1, min_gain=min_gain)
    n = len(procs)
    rows = []
    for i in range(n):
        ref_idx = [(i + j) % n for j in (1, 2, 3)]
        ref = stats.process_runs("ref", [procs[j] for j in ref_idx])
        cand = stats.process_runs("cand", [procs[i]])
        noise = stats.Noise.pooled(ref, prior)
        strict = stats.compare(ref, cand, noise, strict_policy)
        gated = stats.compare(ref, cand, noise, gated_policy)
        one_ref = stats.process_runs("ref", [procs[(i + 1) % n]])
        one = stats.compare(one_ref, cand, stats.Noise.pooled(one_ref, prior), gated_policy)
        one_strict = stats.compare(one_ref, cand, stats.Noise.pooled(one_ref, prior), strict_policy)
        rows.append({"i": i, "ref": ref_idx, "pooled": gated, "pooled_strict": strict, "one": one,
                     "one_strict": one_strict})
    return {"rows": rows,
            "pooled_sig": sum(r["pooled"].verdict != "not significant" for r in rows),
            "pooled_strict_sig": sum(r["pooled_strict"].verdict != "not significant" for r in rows),
            "one_sig": sum(r["one"].verdict != "not significant" for r in rows),
            "one_strict_sig": sum(r["one_strict"].verdict != "not significant" for r in rows)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=sorted(c.WORKLOADS), default="tiny_gpt")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--out", help="working folder (default $TMPDIR/perftune_bench/precision)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args(argv)
    if args.trials < 4:
        c.fail("--trials must be >= 4 (each A/A comparison pools three other trials)")
    import numpy as np
    from scipy import stats as sps

    from perftune.engine import stats

    out = c.out_dir("precision", args.out)
    params, batch = c.WORKLOADS[args.workload]
    plan = c.make_plan(workload=args.workload, workload_params=params, baseline={"batch_size": batch})
    load_before = c.loadavg()
    results, loads = [], []
    try:
        for i in range(args.trials):
            loads.append(c.load1())
            trial_dir = out / args.workload / f"trial{i}"
            shutil.rmtree(trial_dir, ignore_errors=True)
            r = c.require_ok(c.run_burst(plan, {}, trial_dir, "precision", replicate=i), f"trial {i + 1}")
            results.append(r)
            c.log(f"  trial {i + 1}/{args.trials}: {r.samples_per_s:.1f} samples/s, windows "
                  f"{[round(w.samples_per_s, 1) for w in r.windows]}, load {loads[-1]}")
    except c.CannotMeasure as exc:
        c.fail(str(exc))
    load_after = c.loadavg()

    procs = [[w.samples_per_s for w in r.windows] for r in results]
    thr = [r.samples_per_s for r in results]
    logs = [np.log(p) for p in procs]
    means = np.array([lg.mean() for lg in logs])
    n = len(means)
    sd_between = float(np.std(means, ddof=1))
    lo = sd_between * math.sqrt((n - 1) / sps.chi2.ppf(0.975, n - 1))
    hi = sd_between * math.sqrt((n - 1) / sps.chi2.ppf(0.025, n - 1))
    within_df = sum(len(lg) - 1 for lg in logs)
    within_var = sum(float(np.sum((lg - lg.mean()) ** 2)) for lg in logs) / max(within_df, 1)
    within_sd = math.sqrt(within_var)
    windows_per_process = float(np.mean([len(p) for p in procs]))
    excess = max(0.0, sd_between**2 - within_var / windows_per_process)
    window_cvs = [c.cv(p) for p in procs]
    decision = plan.decision
    aa = aa_comparisons(procs, decision.confidence, decision.min_gain)
    prior_before = stats.PRIOR_SD
    aa_measured = aa_comparisons(procs, decision.confidence, decision.min_gain, prior_sd=sd_between)
    cv_proc = c.cv(thr)
    rho = float(sps.spearmanr(range(n), thr).statistic) if n > 2 else float("nan")

    lines = ["", "# precision.py figures", f"load average before: {load_before}", f"load average after:  {load_after}",
             f"config: {args.workload} {params or '(defaults)'} batch {batch}, perftune default knobs, burst "
             f"warm-up {plan.burst.warmup_steps}, {plan.burst.repeats} windows x {plan.burst.steps} steps, "
             f"{plan.burst.profile_steps} profiled; {n} trials in separate processes, one after another",
             "  trial  load1  samples/s  windows (samples/s)                window CV   step ms (median)"]
    for i, r in enumerate(results):
        ws = " ".join(f"{w:8.1f}" for w in procs[i])
        lines.append(f"  {i + 1:5d}  {loads[i]:5.2f}  {thr[i]:9.1f}  {ws:<34} {window_cvs[i]:8.1%}   "
                     f"{r.step_ms_median:8.2f}")
    lines += [
        f"throughput across processes: median {c.median(thr):.1f} samples/s, min {min(thr):.1f}, max {max(thr):.1f} "
        f"(max/min {max(thr) / min(thr):.2f}); CV {cv_proc:.1%} (target <= {TARGET_CV:.0%}); "
        f"Spearman rho with trial order {rho:+.2f} (drift)",
        f"within-process window CV: pooled SD of log window throughput {within_sd:.1%} ({within_df} df); "
        f"median per-process window CV {c.median(window_cvs):.1%}",
        f"BETWEEN-PROCESS SD of log throughput (SD of the {n} process means of log window samples/s, what "
        f"Noise.pooled estimates): {sd_between:.4f} = {sd_between:.1%}, 95% interval [{lo:.1%}, {hi:.1%}]; "
        f"stats.PRIOR_SD is {prior_before:.3f}",
        f"  of which not explained by window noise (sqrt(var - within/{windows_per_process:.0f})): "
        f"{math.sqrt(excess):.1%}",
        f"A/A, {n} comparisons as the sweep makes them (trial i vs pooled trials i+1..i+3, noise from those 3 + "
        f"prior {prior_before:.0%}, confidence {decision.confidence:.0%}):",
    ]
    for r in aa["rows"]:
        p, s = r["pooled"], r["one"]
        lines.append(f"  trial {r['i'] + 1:2d} vs {'+'.join(str(j + 1) for j in r['ref']):<8} x{p.ratio:.3f} "
                     f"[{p.ci_low:.3f}, {p.ci_high:.3f}] p={p.p_value:.3f} -> {p.verdict:<16}|  one-vs-one vs "
                     f"{(r['i'] + 1) % n + 1:2d}: x{s.ratio:.3f} [{s.ci_low:.3f}, {s.ci_high:.3f}] -> {s.verdict}")
    lines += [
        f"A/A significant (target 0 of {n}): pooled-baseline {aa['pooled_sig']} at min_gain "
        f"{decision.min_gain:.0%}, {aa['pooled_strict_sig']} at min_gain 0; one-vs-one {aa['one_sig']} at min_gain "
        f"{decision.min_gain:.0%}, {aa['one_strict_sig']} at min_gain 0",
        f"A/A significant with the measured SD {sd_between:.1%} as the prior: pooled-baseline "
        f"{aa_measured['pooled_sig']} (min_gain {decision.min_gain:.0%}) / {aa_measured['pooled_strict_sig']} "
        f"(min_gain 0); one-vs-one {aa_measured['one_sig']} / {aa_measured['one_strict_sig']}",
        f"MEASURED BETWEEN-PROCESS SD (basis for stats.PRIOR_SD): {sd_between:.4f}",
    ]
    print("\n".join(lines), flush=True)
    missed = cv_proc > TARGET_CV or aa["pooled_sig"] > 0
    return 1 if (missed and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())
