"""Number formatting shared by the tables, the HTML report and the command summaries."""

from __future__ import annotations

import math
from typing import Any, Optional


def is_missing(value: Any) -> bool:
    """None or NaN (pandas writes a missing number as NaN).  pandas is imported only for what is neither (its NA,
    NaT, NumPy scalars): every burst process imports this module, and pandas was 0.17 s of each one's start."""
    if value is None:
        return True
    if isinstance(value, (bool, int, str)):
        return False
    if isinstance(value, float):
        return math.isnan(value)
    import pandas as pd

    return bool(pd.api.types.is_scalar(value) and pd.isna(value))


def num(value: Any, fmt: str = ".1f", missing: str = "") -> str:
    """``value`` formatted with ``fmt``, or ``missing`` where there is no value."""
    return missing if is_missing(value) else format(value, fmt)


def rate(value: Any, missing: str = "") -> str:
    """A throughput with three significant digits at least: ``1,234``, ``45.6``, ``0.730`` (one decimal would print
    a ResNet-18 on CPU at 0.73 samples/s as ``0.7``)."""
    if is_missing(value):
        return missing
    v = abs(value)
    return format(value, ",.0f" if v >= 100 else ".1f" if v >= 10 else ".2f" if v >= 1 else ".3g")


def mb(value: Any) -> str:
    """Bytes as megabytes (``n/a`` for none or zero)."""
    return f"{value / 2**20:.1f} MB" if value else "n/a"


def speed_text(factor: Any, low: Any = None, high: Any = None, digits: int = 2) -> str:
    """The one ratio convention of every output: a speed factor (new speed / old speed, > 1 is faster) as
    ``x1.23 faster`` or ``x1.10 slower``, with its interval in the same direction (``x1.10 slower [0.98, 1.25]``:
    between 0.98 and 1.25 times as slow).  A time ratio goes through :func:`time_ratio_text`."""
    if is_missing(factor) or factor <= 0:
        return ""
    has_interval = not (is_missing(low) or is_missing(high)) and low > 0 and high > 0
    if format(factor, f".{digits}f") == format(1.0, f".{digits}f"):
        text = f"x{1.0:.{digits}f} (no change)"
        lo, hi = (low, high) if has_interval else (None, None)
    elif factor >= 1:
        text = f"x{factor:.{digits}f} faster"
        lo, hi = (low, high) if has_interval else (None, None)
    else:
        text = f"x{1 / factor:.{digits}f} slower"
        lo, hi = (1 / high, 1 / low) if has_interval else (None, None)
    return text + (f" [{lo:.{digits}f}, {hi:.{digits}f}]" if has_interval else "")


def time_ratio_text(ratio: Any, low: Any = None, high: Any = None, digits: int = 2) -> str:
    """A time ratio (new time / old time, < 1 is faster) in the convention of :func:`speed_text`."""
    if is_missing(ratio) or ratio <= 0:
        return ""
    has_interval = not (is_missing(low) or is_missing(high)) and low > 0 and high > 0
    return speed_text(1 / ratio, 1 / high if has_interval else None, 1 / low if has_interval else None, digits)


def duration_text(seconds: Optional[float], whole_seconds: bool = False) -> str:
    """A duration as every output writes it: ``1 h 05 min``, ``3 min 07 s``, ``4.2 s`` (``whole_seconds``: ``4 s``,
    for an estimate whose tenths mean nothing)."""
    if seconds is None:
        return "unknown"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, rest = divmod(minutes, 60)
    if hours:
        return f"{hours} h {rest:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s" if whole_seconds else f"{seconds:.1f} s"


def step_text(mean: Any, median: Any = None, fmt: str = ".2f") -> str:
    """The step time as every output states it: the mean (what throughput and the splits add up to), the median
    beside it."""
    if is_missing(mean):
        return num(median, fmt) + (" (median)" if not is_missing(median) else "")
    return format(mean, fmt) + (f" (median {format(median, fmt)})" if not is_missing(median) else "")


def verdict_counts(verdicts: list[str]) -> list[tuple[str, int]]:
    """(verdict, trials) in order of first appearance, in the words the tables use: nothing lumped together."""
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v] = counts.get(v, 0) + 1
    return list(counts.items())


def validation_figures(acc: Any) -> Optional[str]:
    """A script's own validation figures in one line (``accuracy 0.812, loss 0.53``); None without any."""
    if acc is None or not acc.val_metrics:
        return None
    return ", ".join(f"{name} {value:.4g}" for name, value in sorted(acc.val_metrics.items()))


#: what a process that carries no decision of its own is counted as (its verdict is only "measured")
PROCESS_WORDS = {"repeat": "repeat", "leave_one_out": "leave-one-out", "search": "searched"}


def count_word(kind: str, verdict: str) -> str:
    """A trial's word in the counts: its verdict, or what it is for where its verdict says only "measured" (a
    candidate's repeat process, a leave-one-out row), so that "15 measured" does not read as 15 configurations."""
    return PROCESS_WORDS.get(kind, verdict) if verdict == "measured" else verdict

