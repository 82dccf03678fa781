"""Number formatting shared by the tables, the HTML report and the command summaries."""

from __future__ import annotations

from typing import Any

import pandas as pd


def is_missing(value: Any) -> bool:
    """None or NaN (pandas writes a missing number as NaN)."""
    return value is None or (pd.api.types.is_scalar(value) and bool(pd.isna(value)))


def num(value: Any, fmt: str = ".1f", missing: str = "") -> str:
    """``value`` formatted with ``fmt``, or ``missing`` where there is no value."""
    return missing if is_missing(value) else format(value, fmt)


def mb(value: Any) -> str:
    """Bytes as megabytes (``n/a`` for none or zero)."""
    return f"{value / 2**20:.1f} MB" if value else "n/a"
