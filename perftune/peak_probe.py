"""``perftune peak``: this machine's peak matmul FLOP/s, measured once with MindSpore and cached.

How: an ``n x n x n`` float32 ``ops.MatMul`` in PyNative mode on the plan's device, synchronised after every call
(``asnumpy`` of one element; at n = 2048 that costs well under 1% of a call); one warm-up call, then calls for about
``seconds`` (at least ``MIN_REPEATS``); the best call is the peak (2 n^3 FLOPs / its time), the median is kept
beside it.  The machine is shared, so the best call is the closest to what the hardware can do.  It runs with
MindSpore's default kernel threads, as a burst does unless the ``kernel_threads`` knob sets them.

Measuring takes seconds and sets MindSpore's process-global context, so it never runs implicitly (not inside a
sweep, not inside a report): only ``perftune peak``, whose result later reports read from the cache.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version

from perftune.compat import first_eager_op
from perftune.errors import UserError
from perftune.io.peak_cache import PeakRecord, read_peak, write_peak

DEFAULT_SIZE = 2048
DEFAULT_SECONDS = 2.0
MIN_REPEATS = 3


def mindspore_version() -> str:
    """The installed MindSpore's version, without importing it (seconds) where the package metadata says it."""
    try:
        return version("mindspore")
    except PackageNotFoundError:
        import mindspore

        return mindspore.__version__


def measure_peak(device: str = "CPU", size: int = DEFAULT_SIZE, seconds: float = DEFAULT_SECONDS,
                 min_repeats: int = MIN_REPEATS) -> PeakRecord:
    """Time float32 ``ops.MatMul`` calls of ``size`` cubed in MindSpore (see the module docstring): at least
    ``min_repeats`` calls, and more until ``seconds`` have passed."""
    import mindspore as ms
    import numpy as np
    from mindspore import ops

    if size < 16:
        raise UserError(f"--size {size}: too small to measure a peak (at least 16; default {DEFAULT_SIZE})")
    try:
        ms.set_device(device)
        ms.set_context(mode=ms.PYNATIVE_MODE)
        first_eager_op()  # NumPy 2: the first eager op of a process may raise and prints a known warning
        (ms.Tensor(np.ones(1, np.float32)) + 1).asnumpy()
    except (RuntimeError, ValueError, TypeError) as exc:
        reason = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        reason = reason if len(reason) <= 160 else reason[:160].rsplit(" ", 1)[0] + " ..."
        raise UserError(f"--device {device}: MindSpore cannot run on it here ({reason})") from None
    rng = np.random.default_rng(0)
    a = ms.Tensor(rng.standard_normal((size, size), dtype=np.float32))
    b = ms.Tensor(rng.standard_normal((size, size), dtype=np.float32))
    matmul = ops.MatMul()
    matmul(a, b)[0, 0].asnumpy()  # warm-up: kernel selection and allocation
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_repeats or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        matmul(a, b)[0, 0].asnumpy()
        times.append(time.perf_counter() - t0)
    flops = 2.0 * size**3
    return PeakRecord(
        host=socket.gethostname(), device=device, mindspore_version=ms.__version__,
        flops_per_s=flops / min(times), median_flops_per_s=flops / statistics.median(times),
        method=f"MindSpore ops.MatMul {size}x{size}x{size} float32, PyNative, synchronised per call; "
               f"best of {len(times)} calls after one warm-up",
        size=size, repeats=len(times), seconds=sum(times), load_avg_1m=os.getloadavg()[0],
        measured_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def machine_peak(device: str = "CPU", refresh: bool = False, size: int = DEFAULT_SIZE,
                 seconds: float = DEFAULT_SECONDS) -> tuple[PeakRecord, bool]:
    """This machine's cached peak for ``device``, measured (and cached) when missing or ``refresh``;
    returns the record and whether it was measured now."""
    if not refresh:
        cached = read_peak(socket.gethostname(), device, mindspore_version())
        if cached is not None:
            return cached, False
    record = measure_peak(device, size, seconds)
    write_peak(record)
    return record, True
