"""Every process of a comparison in the tables: a candidate's repeat processes and its paired processes
each on their own line under its first process, contended processes marked, and a reference row that is never a
process the sweep did not use.  Why: the tables showed each configuration's first process only, so a verdict sat
beside one number while the processes that decided it were in a chart at best.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

from perftune.engine.stats import blocks_interval
from perftune.io.sweep_records import PairedProcess, SweepTrial


def contention_mark(trial: SweepTrial) -> str:
    """`` [contended, not used]`` / `` [contended: 2 of 4 windows]`` / ``""``: on every line that shows the process."""
    if trial.excluded:
        return " [contended, not used]"
    r = trial.result
    if r.contended_windows:
        return f" [contended: {r.contended_windows} of {len(r.windows)} windows]"
    return ""


def used_process(trial: Optional[SweepTrial], trials: Sequence[SweepTrial]) -> Optional[SweepTrial]:
    """``trial``, or when the sweep did not use it (contended, measured again) the first used process of the same
    configuration: the reference row of a table is a process that counted."""
    if trial is None or not trial.excluded:
        return trial
    return next((t for t in trials if t.label == trial.label and not t.excluded and t.result.status == "ok"), trial)


def paired_ratio(process: PairedProcess, confidence: float = 0.95) -> tuple[Optional[float], Optional[float],
                                                                           Optional[float]]:
    """One paired process's own estimate: the candidate's throughput over the reference's (exp of the mean block
    difference) with the interval of its blocks (``stats.blocks_interval``); (None, None, None) without a block."""
    d = process.differences
    iv = blocks_interval(d, confidence)
    if iv is None:
        return (math.exp(d[0]), None, None) if d else (None, None, None)
    return iv.ratio, iv.ci_low, iv.ci_high


def paired_row(process: PairedProcess, confidence: float = 0.95) -> dict:
    """A table row for one paired process of ``process.candidate`` against ``process.reference``."""
    ratio, low, high = paired_ratio(process, confidence)
    contended = f" [contended: {process.contended_windows} of {process.windows} windows]" \
        if process.contended_windows else ""
    if process.status != "ok":
        reason = f"paired process failed: {process.reason}"
    else:
        reason = (f"paired with {process.reference} in one process ({len(process.differences)} ABBA blocks); "
                  "its own interval, from its blocks")
    return {"configuration": f"{process.candidate} (paired run {process.replicate + 1})",
            "contended": contended.strip(" []") or None,
            "verdict": "paired", "speedup": ratio, "speedup_ci_low": low, "speedup_ci_high": high,
            "reason": reason, "trial_id": process.trial_id}
