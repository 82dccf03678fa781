"""Benchmark: model FLOPs utilisation (MFU) of perftune's workloads on this CPU.

    .venv/bin/python experiments/benchmarks/mfu.py
    .venv/bin/python experiments/benchmarks/mfu.py --n 2048 --steps 20

1. The machine's float32 matmul peak, measured in a fresh process: an n x n x n ``ops.MatMul`` in MindSpore
   (PyNative, synced) and ``a @ b`` in NumPy as a cross-check; best of ``--repeats`` after a warm-up, measured
   before the first burst and again after each one, so every burst is bracketed by two peak measurements (the
   machine is shared: the load moves the peak, and MFU is reported against the bracketing peaks as well as
   against the best peak seen).
2. One perftune burst (``perftune.runner.run_trial``) per configuration: mlp (defaults, batch 32) and tiny_gpt
   (d=64, seq 64, batch 16), each in graph and pynative mode (cell step), short bursts without profiling.
3. Per configuration: model FLOPs per step (``Workload.flops_per_sample`` x batch, as the trial records it),
   achieved FLOP/s (flops_per_sample x samples/s) and MFU against the MindSpore peak (and the NumPy peak).

MFU is ``perftune.report.efficiency.trial_mfu(trial, peak)``, the report's own; the peaks come from
``children.py peak``.
Exit status 2 when it cannot measure; else 0.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness as c  # noqa: E402

from perftune.report.efficiency import trial_mfu  # noqa: E402

CONFIGS = [("mlp", "graph"), ("mlp", "pynative"), ("tiny_gpt", "graph"), ("tiny_gpt", "pynative")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2048, help="matmul size for the peak")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20, help="steps per timed window (3 windows)")
    ap.add_argument("--out", help="working folder (default $TMPDIR/perftune_bench/mfu)")
    args = ap.parse_args(argv)
    out = c.out_dir("mfu", args.out)
    load_before = c.loadavg()
    try:
        peaks = [c.run_child("peak", {"n": args.n, "repeats": args.repeats})]
        trials = []
        for name, mode in CONFIGS:
            params, batch = c.WORKLOADS[name]
            plan = c.make_plan(workload=name, workload_params=params,
                               baseline={"batch_size": batch, "prefetch_size": 2},
                               burst={"warmup_steps": 2, "steps": args.steps, "repeats": 3, "profile_steps": 0})
            trial_dir = out / f"{name}-{mode}"
            shutil.rmtree(trial_dir, ignore_errors=True)
            r = c.require_ok(c.run_burst(plan, {"mode": mode}, trial_dir, f"mfu {name} {mode}"), f"{name} {mode}")
            if not r.flops_per_sample:
                raise c.CannotMeasure(f"{name}: the trial records no flops_per_sample")
            trials.append((name, mode, batch, r))
            peaks.append(c.run_child("peak", {"n": args.n, "repeats": args.repeats}))
            c.log(f"  {name} {mode}: {r.samples_per_s:.1f} samples/s; peak after "
                  f"{peaks[-1]['mindspore']['best_flops_per_s'] / 1e9:.1f} GFLOP/s")
    except c.CannotMeasure as exc:
        c.fail(str(exc))
    load_after = c.loadavg()

    ms_peak = max(p["mindspore"]["best_flops_per_s"] for p in peaks)
    np_peak = max(p["numpy"]["best_flops_per_s"] for p in peaks)
    g = 1e9
    lines = ["", "# mfu.py figures", f"load average before: {load_before}", f"load average after:  {load_after}",
             f"float32 matmul peak, n={args.n} (GFLOP/s; best / median of {args.repeats}):"]
    whens = ["start"] + [f"after {n} {m}" for n, m, _, _ in trials]
    for when, p in zip(whens, peaks):
        lines.append(f"  {when:<24} MindSpore {p['mindspore']['best_flops_per_s'] / g:7.1f} / "
                     f"{p['mindspore']['median_flops_per_s'] / g:7.1f}    "
                     f"NumPy {p['numpy']['best_flops_per_s'] / g:7.1f} / "
                     f"{p['numpy']['median_flops_per_s'] / g:7.1f}")
    lines.append(f"  peak used: MindSpore best {ms_peak / g:.1f} GFLOP/s (NumPy best {np_peak / g:.1f}, "
                 f"MindSpore/NumPy {ms_peak / np_peak:.2f})")
    lines.append("  MFU columns: against the best MindSpore peak seen, the best NumPy peak seen, and the mean of the "
                 "two MindSpore peaks measured just before and just after that burst")
    lines.append("  config              batch  params   MFLOP/sample  GFLOP/step  samples/s  step ms   "
                 "GFLOP/s   MFU(MS best)  MFU(NumPy best)  MFU(bracketing)")
    for i, (name, mode, batch, r) in enumerate(trials):
        achieved = r.flops_per_sample * r.samples_per_s
        bracket = (peaks[i]["mindspore"]["best_flops_per_s"] + peaks[i + 1]["mindspore"]["best_flops_per_s"]) / 2
        lines.append(
            f"  {name + ' ' + mode:<19} {batch:5d} {r.parameter_count or 0:8d} {r.flops_per_sample / 1e6:13.2f} "
            f"{r.flops_per_sample * batch / g:11.3f} {r.samples_per_s:10.1f} {r.step_ms_median:8.2f} "
            f"{achieved / g:8.2f} {trial_mfu(r, ms_peak):12.1%} {trial_mfu(r, np_peak):15.1%} "
            f"{trial_mfu(r, bracket):15.1%}")
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
