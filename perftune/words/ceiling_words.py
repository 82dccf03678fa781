"""A change's ceiling in words: what it could gain at most, and why (``perftune.engine.ceilings``)."""

from __future__ import annotations

from perftune.io.sweep_records import KnobCeiling

#: how the step spends a split, in words
SPLIT_WORDS = {"data": "waits {part} of {step} ms for data", "communication": "communicates {part} of {step} ms"}


def ceiling_text(c: KnobCeiling) -> str:
    """``the step waits 0.2 of 40 ms for data: at most x1.005``."""
    spent = SPLIT_WORDS[c.split].format(part=f"{c.split_ms:.2g}" if c.split_ms < 1 else f"{c.split_ms:.1f}",
                                        step=f"{c.step_ms:.3g}")
    most = f"at most x{c.ceiling:.3f}" if c.ceiling is not None else "no limit (the split is the whole step)"
    return f"the step {spent}: {most}"


def ceiling_line(c: KnobCeiling) -> str:
    """One line of the report's list: the change, where it was judged, its ceiling, and whether it was raced."""
    where = "alone" if c.where == "baseline" else f"on {c.where}"
    return f"{c.label} {where}: {ceiling_text(c)}: {'raced' if c.raced else 'cannot gain, not raced'}"
