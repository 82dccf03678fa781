"""A comparison's peak memory in words (``MemoryComparison``): beside the speed in every reason and table."""

from __future__ import annotations

from perftune.io.sweep_records import MemoryComparison

MEASURE = {"device": "device", "host_rss": "host"}


def memory_ratio_text(m: MemoryComparison) -> str:
    """``x0.70 (0.66-0.74)``: candidate / reference peak with its interval (a table cell)."""
    return f"x{m.ratio:.2f} ({m.ci_low:.2f}-{m.ci_high:.2f})"


def limit_text(m: MemoryComparison) -> str:
    """Under ``burst.memory_limit_mb``: what the change frees or takes against the limit ("" without one)."""
    if m.limit_mb is None or m.frees_mb is None:
        return ""
    figures = f"peak {m.candidate_mb:.0f} vs {m.reference_mb:.0f} MB, burst.memory_limit_mb={m.limit_mb:g}"
    if m.ci_high < 1.0:
        return f"frees {m.frees_mb:.0f} MB against the memory limit ({figures}): room for a larger batch"
    if m.ci_low > 1.0:
        return f"takes {-m.frees_mb:.0f} MB more of the memory limit ({figures})"
    return f"frees no measurable memory against the limit ({figures})"


def memory_text(m: MemoryComparison) -> str:
    """``peak host memory x0.70 (0.66-0.74)``, and under a memory limit what it frees against it."""
    text = f"peak {MEASURE[m.measure]} memory {memory_ratio_text(m)}"
    extra = limit_text(m)
    return f"{text}; {extra}" if extra else text
