"""The accuracy gate's "cannot judge" lines for the summary and the report: the metrics that passed only because
the baseline itself was degenerate at this burst length (``perftune.engine.accuracy.gate.unjudged``)."""

from __future__ import annotations

from typing import Optional

from perftune.engine.accuracy.gate import unjudged
from perftune.io.sweep_records import SweepResult, SweepTrial


def _first_ok_baseline(result: SweepResult) -> Optional[SweepTrial]:
    return next((t for t in result.trials if t.kind == "baseline" and t.result.status == "ok"), None)


def gate_cannot_judge(result: SweepResult) -> list[str]:
    """Why the gate's metrics cannot judge against this sweep's baseline (empty when they all can)."""
    base = _first_ok_baseline(result)
    if base is None or base.result.accuracy is None:
        return []
    return list(unjudged(base.result.accuracy, result.plan.accuracy).values())
