"""The machine's float32 matmul peak for the benchmarks' MFU figures: MindSpore's is ``perftune peak``'s own
measurement (``perftune.peak_probe.measure_peak``), NumPy's (its BLAS) a cross-check.  Run in a fresh process by
``children.py peak``; MFU itself is ``perftune.report.efficiency``'s."""

from __future__ import annotations

import statistics
import time


def matmul_peak_numpy(n: int = 2048, repeats: int = 7) -> dict:
    """Best and median float32 FLOP/s of an n x n x n matmul in NumPy (its BLAS), after one warm-up."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    flops = 2.0 * n**3
    return {"n": n, "best_flops_per_s": flops / min(times), "median_flops_per_s": flops / statistics.median(times)}


def matmul_peak_mindspore(n: int = 2048, repeats: int = 7) -> dict:
    """Best and median float32 FLOP/s of an n x n x n ``ops.MatMul`` in MindSpore: ``perftune peak``'s own
    measurement (``perftune.peak_probe.measure_peak``), ``repeats`` calls after a warm-up."""
    from perftune.peak_probe import measure_peak

    r = measure_peak("CPU", n, seconds=0.0, min_repeats=repeats)
    return {"n": n, "best_flops_per_s": r.flops_per_s, "median_flops_per_s": r.median_flops_per_s}
