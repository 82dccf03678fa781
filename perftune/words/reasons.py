"""Decisions in words: the one renderer of a comparison, a verdict's reason and a comparison's contention, from the
records' fields (``ComparisonRecord``, ``Why``).  The sweep's progress lines and stored ``reason`` texts, the report,
the tables and the summary all call it, so they say the same thing, in the one ratio convention
(``format.speed_text``), and nothing reads perftune's own prose back.
"""

from __future__ import annotations

from typing import Optional

from perftune.io.records import PhaseAgreement
from perftune.io.sweep_records import ComparisonRecord, SweepTrial, Why
from perftune.words.format import speed_text
from perftune.words.memory_words import memory_text


def ratio_text(c: ComparisonRecord) -> str:
    """``x1.77 slower [1.36, 2.29]``: the comparison's throughput ratio and interval."""
    return speed_text(c.ratio, c.ci_low, c.ci_high)


def _runs(n: Optional[int], c: Optional[ComparisonRecord] = None) -> str:
    if n is None:
        return ""
    if c is not None and c.design == "paired":
        return (f" after {n} paired run{'s' if n != 1 else ''} ({c.paired_blocks} ABBA blocks of windows, both "
                "pipelines in one process)")
    return f" after {n} run{'s' if n != 1 else ''}"


def comparison_text(c: ComparisonRecord) -> str:
    """The comparison in words, with the runs it took and (undecided) what would resolve it."""
    head = f"{ratio_text(c)} vs {c.reference}"
    if c.verdict == "equivalent":
        margin = f" within ±{c.equivalence:.0%}" if c.equivalence is not None else ""
        return f"{head}{_runs(c.processes, c)}: equivalent{margin}"
    if c.verdict in ("faster", "slower"):
        return f"{head}{_runs(c.processes, c)}: {c.verdict}"
    if c.verdict == "not significant":
        return f"{head}: the interval includes 1" if c.ci_low <= 1 <= c.ci_high else f"{head}: not significant"
    text = f"{head}: undecided{_runs(c.processes, c)}"
    if c.noise_sd is None or c.resolution is None or c.runs_needed is None:
        return text
    seen = abs(c.ratio - 1.0)
    margin = c.equivalence or 0.0
    target = seen if seen > margin else margin  # the change measured, or the margin for "equivalent"
    if c.futile:
        return (f"{text}, stopped early: the rest of decision.max_runs was unlikely to decide it (noise "
                f"{c.noise_sd:.1%} cannot resolve {target:.1%}; ±{c.resolution:.1%} reached; about {c.runs_needed} "
                "runs would)")
    return (f"{text}: noise {c.noise_sd:.1%} cannot resolve {target:.1%} (±{c.resolution:.1%} reached; about "
            f"{c.runs_needed} runs would: decision.max_runs)")


def contention_text(c: ComparisonRecord) -> str:
    """How many of the comparison's processes were contended: measured again, or used all the same."""
    if not c.contended:
        return ""
    if c.remeasured is None:  # written before results schema 4
        return f"; {c.contended} processes of either configuration in the sweep contended"
    used = c.contended - c.remeasured
    parts = ([f"{used} of them measured under contention"] if used else []) + \
        ([f"{c.remeasured} contended process{'es' if c.remeasured != 1 else ''} measured again, not used"]
         if c.remeasured else [])
    return "; " + "; ".join(parts)


def _speed(t: SweepTrial, w: Why) -> str:
    """What the timing alone says (or the known no-op that outranks it)."""
    if w.no_effect:
        return w.no_effect
    c = getattr(t, w.comparison) if w.comparison else None
    if c is None:
        return ""
    text = comparison_text(c)
    if w.below_min_gain is not None:
        text += f", but the change {c.ratio - 1.0:+.1%} is below min_gain {w.below_min_gain:.0%}"
    if w.not_discovered:
        text += f", but not a discovery across {w.not_discovered}"
    return text


def _core(t: SweepTrial, w: Why) -> str:
    if w.legacy:
        return "".join(p.text if p.ratio is None else speed_text(p.ratio, p.ci_low, p.ci_high) for p in w.legacy)
    if w.failure:
        return ("the baseline itself failed: " if w.stopped_sweep else "") + w.failure
    if w.removed is not None:
        c = t.vs_previous
        return f"removing {w.removed} from the final stack: final is {ratio_text(c)} of this" if c else ""
    if w.accuracy:
        c = getattr(t, w.comparison) if w.comparison else None
        if w.speed == "kept" and c is not None:
            return f"{speed_text(c.ratio)} but {w.accuracy}"
        return f"{w.accuracy}; speed: {w.speed} ({_speed(t, w)})"
    return _speed(t, w)


def reason_text(t: SweepTrial) -> str:
    """A trial's reason, from its ``why`` (a trial that decided nothing, or a bare failure: its ``reason``)."""
    w = t.why
    if w is None:
        return t.reason
    text = _core(t, w)
    decided = getattr(t, w.comparison) if w.comparison and not w.legacy else None
    text += f"; {memory_text(decided.memory)}" if decided is not None and decided.memory is not None else ""
    text += "".join(f"; {n}" for n in w.gate_notes)
    text += f"; warning: {w.other_model}" if w.other_model else ""
    if w.unjudged:
        text += (f"; not judged at this burst length: {', '.join(w.unjudged)} (the baseline cannot tell; raise "
                 "accuracy.samples)")
    return f"{w.before}: {text}" if w.before else text


def stack_reason(kept: bool, t: Optional[SweepTrial], written: str = "") -> str:
    """A stack row's reason: its trial's, with the verdict in front where the row was not kept (``written``: the
    row's stored text, for a row without its trial)."""
    if t is None:
        return written
    if kept or t.verdict == "dropped":  # a dropped row's reason already starts with the verdict it had
        return reason_text(t)
    return f"{t.verdict}: {reason_text(t)}"


def decision_line(t: SweepTrial) -> Optional[str]:
    """A comparison's line in the summary: the processes it used, contention, the verdict and its reason."""
    c = t.vs_previous if t.kind == "stack" else t.vs_baseline
    if t.kind not in ("single", "stack") or c is None or c.processes is None:
        return None
    used = (f"{c.processes} paired processes with {c.reference}" if c.design == "paired" else
            f"{c.processes} + {c.reference_processes} processes vs {c.reference}")
    return f"{t.label}: {t.verdict} ({used}{contention_text(c)}): {reason_text(t)}"


def process_flags(trial: SweepTrial) -> str:
    """What a process's progress line adds after its figures: left out, reused, its node, phases that disagree
    (such a process is used all the same, never silently)."""
    r = trial.result
    flags = ((f" ({trial.excluded})" if trial.excluded else "") + (" (reused)" if trial.reused else "")
             + (f" [on {r.node.host}]" if r.node is not None else ""))
    agreement = r.phase_agreement
    if agreement is not None and not agreement.agree:
        flags += f" (phases disagree: {phase_gap_text(agreement)}; its figures are suspect)"
    return flags


def phase_gap_text(agreement: PhaseAgreement) -> str:
    """``the accuracy steps x2.42 faster than the timed ones``: the worst phase's gap, in its direction (its
    ``ratio`` is always >= 1; the medians say which side), as the trial's own note (``burst/agreement.py``) says it."""
    worst = agreement.worst_phase
    mine, timed = agreement.medians_ms.get(worst or ""), agreement.medians_ms.get("timed")
    side = "" if mine is None or timed is None else (" faster" if mine < timed else " slower")
    return f"the {worst} steps x{agreement.ratio:.2f}{side} than the timed ones"
