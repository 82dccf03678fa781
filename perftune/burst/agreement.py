"""Phases that must agree, checked: the accuracy window's steps, the warm-up's steady steps, the timed steps and the
profiled steps run the same computation, so their median compute times (a step less its wait for its batch) should
agree, within the profiler's overhead, and the accuracy window (a first process's first steps, settling, with the
gradient norm besides: its later half is judged) and the profiled steps (the profiler's overhead) within their own
allowances on the slow side (``SETTLING_LIMIT``, ``PROFILED_LIMIT``). The
wait itself may differ: a queue refilled during validation or the profiler's start feeds a data-bound step at once,
and so may the compute: steps fed from a full queue run while the pipeline rests, where the timed steps of a
data-bound step share the cores (and the GIL) with the pipeline refilling it (``QUEUE_FED_LIMIT``).
Where one does not, the steps were not timed alike (an asynchronous step timed from its dispatch once made the untimed
phases x600 faster than the timed ones) or the machine changed between phases; the trial says so in words (a warning
note) and as data (``TrialResult.phase_agreement``).  The machine changing is told apart where it can be: each phase's
others' share of the cores is read as the timed windows' contention guard reads it (``PhaseLoad``), and a phase that
ran while others used the cores (or against contended timed steps) is not held against the trial's figures: an info
note says so instead of a warning (under a test suite's second worker, a script's accuracy window ran x3.3 slower
than its uncontended timed steps)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from perftune.burst import contention
from perftune.io.records import Note, PhaseAgreement, StepRecord

#: phases whose medians differ from the timed steps' by more than this (or the timed steps' own p90/p10 spread,
#: where wider) disagree.  The accuracy step also computes the gradient norm (up to +20% on a small CPU step) and
#: the profiler adds up to +15% to a 3 ms step: both stay inside it.  A spread wider than ``MAX_LIMIT`` (compute of
#: a fraction of a millisecond beside the wait for data) does not widen it further: x600 is caught whatever the noise
AGREE_LIMIT = 1.3
MAX_LIMIT = 3.0
#: the warm-up's first steps, left out of its steady median (they took batches queued meanwhile, or compiled).  The
#: rest (warm-up and drain) all count: a median of only its last few steps is noise on a small machine (measured:
#: experiments/benchmarks/README.md, "The burst's constants")
WARMUP_SKIPPED_STEPS = 3
#: how much slower than the timed steps the accuracy window may run: it is a first process's first steps after the
#: compile (caches, allocator and queues still settling) and computes the gradient norm besides.  On an idle machine
#: the quickstart's graph first processes ran their window at x1.40-1.69 the timed steps' median (4-7 ms steps,
#: 9 steps after the compile), so x1.3 flagged healthy runs; faster is held to the common limit: a step timed from
#: its dispatch makes the untimed phases faster, never slower
SETTLING_LIMIT = 2.0
#: how much slower than the timed steps the profiled steps may run: the profiler's collection slows a step, more where
#: data workers share the cores (the quickstart's 6.5 ms graph step with 2 workers and MindRecord profiled x1.59
#: slower on an idle 2-core machine).  That overhead is the profile's own figure (``Splits.op_scale``: the op times
#: are carried to the timed step, and the profile warns past x1.25); faster is held to the common limit
PROFILED_LIMIT = 2.0
#: how much faster than data-bound timed steps a phase fed from a full queue may run: its steps took batches queued
#: while the step was not asking (the profiler's start, validation), so the pipeline rested beside them, where the
#: timed steps computed while it refilled the queue.  The quickstart's graph step (one Python map worker, 2 cores)
#: computed 3.1-3.3 ms on profiled steps fed from the queue (0.2 ms wait) against 4.3 ms in timed steps waiting
#: 17 ms, and its accuracy window's own queue-fed first steps ran x1.35 faster than its later data-bound ones; a step
#: timed from its dispatch (x600) is still caught
QUEUE_FED_LIMIT = 2.0
#: the timed steps are data-bound where their median wait is at least this share of their median step, and a phase
#: was fed from a queue where its median wait is at most this share of theirs
DATA_BOUND_SHARE = 0.25
QUEUE_FED_SHARE = 0.25
#: how far a phase that ran while others used the cores (or against contended timed steps) may be from the timed
#: steps before it is judged all the same: others' work slows a phase (a script's accuracy window ran x3.3 slower
#: beside a test suite's second worker), never x600 (a step timed from its dispatch)
CONTENDED_LIMIT = 5.0


def compute_ms(record: StepRecord) -> float:
    """A step's time less its wait for its batch: the part every phase computes alike."""
    return max(record.step_ms - record.data_wait_ms, 0.0)


def settled(steps: list[StepRecord]) -> list[StepRecord]:
    """A phase's steps less its first ``WARMUP_SKIPPED_STEPS`` (only its first where that would leave fewer than
    two): the compile or the queued batches, not the computation the phases share."""
    return steps[WARMUP_SKIPPED_STEPS:] if len(steps) > WARMUP_SKIPPED_STEPS + 1 else steps[1:]


def later_half(steps: list[StepRecord]) -> list[StepRecord]:
    """The accuracy window less its compile and its first half: a first process's first steps settle for a while
    (the quickstart's graph window of 56 steps ran its first 33 at x3 its last ones, under load)."""
    steps = steps[1:]
    return steps[len(steps) // 2:] if len(steps) >= 4 else steps


def phase_limit(phase: str, median: float, centre: float, limit: float, queue_fed: bool = False) -> float:
    """The ratio a phase may be from the timed steps: the accuracy window, still settling, may be slower by up to
    ``SETTLING_LIMIT``, the profiled steps by ``PROFILED_LIMIT``; a phase fed from a full queue (``queue_fed``)
    faster than data-bound timed steps by ``QUEUE_FED_LIMIT``; every other phase and direction by ``limit``."""
    if median > centre:
        allowance = {"accuracy": SETTLING_LIMIT, "profiled": PROFILED_LIMIT}.get(phase)
    else:
        allowance = QUEUE_FED_LIMIT if queue_fed else None
    return max(limit, allowance) if allowance else limit


def phase_steps(records: list[StepRecord], timed: list[StepRecord]) -> dict[str, list[StepRecord]]:
    """Each phase's completed steps that are compared: the accuracy window's later half (``later_half``), the
    warm-up/drain steps before the first timed step less their first steps (``settled``; a paired process's first
    window is arm A's, so they are all its reference's), ``timed`` (a paired process's arm A), the profiled steps
    without the first (it starts the profiler); a phase of fewer than two steps is left out."""
    first_timed = next((i for i, r in enumerate(records) if r.phase == "timed"), len(records))
    warmup = [r for r in records[:first_timed] if r.phase == "warmup"]
    groups = {
        "accuracy": later_half([r for r in records if r.phase == "accuracy"]),
        "warmup": settled(warmup),
        "timed": timed,
        "profiled": [r for r in records if r.phase == "profiled"][1:],
    }
    return {name: rs for name, rs in groups.items() if len(rs) >= 2}


def phase_medians(records: list[StepRecord], timed: list[StepRecord]) -> dict[str, float]:
    """Median compute time (ms, ``compute_ms``) of each phase's compared steps (``phase_steps``)."""
    return medians_of(phase_steps(records, timed))


def medians_of(groups: dict[str, list[StepRecord]]) -> dict[str, float]:
    """Each group's median ``compute_ms``: the steps grouped once serve both the medians and the queue test."""
    return {name: float(np.median([compute_ms(r) for r in rs])) for name, rs in groups.items()}


def queue_fed_phases(groups: dict[str, list[StepRecord]]) -> set[str]:
    """The phases fed from a full queue beside data-bound timed steps (``DATA_BOUND_SHARE``, ``QUEUE_FED_SHARE``):
    their pipeline rested while they computed, the timed steps' did not."""
    timed = groups.get("timed")
    if not timed:
        return set()
    wait = float(np.median([r.data_wait_ms for r in timed]))
    if wait < DATA_BOUND_SHARE * float(np.median([r.step_ms for r in timed])):
        return set()
    return {p for p, rs in groups.items()
            if p != "timed" and float(np.median([r.data_wait_ms for r in rs])) <= QUEUE_FED_SHARE * wait}


#: a phase shorter than this has no reading: the kernel counts CPU time in 10 ms ticks per core
MIN_PHASE_S = 0.25


class PhaseLoad:
    """Others' share of the cores during each phase (``contention.between`` from one phase change to the next; a
    phase entered twice, warm-up and drain, keeps its busiest part)."""

    def __init__(self, first: str) -> None:
        self.shares: dict[str, float] = {}
        self.phase = first
        self.reading = contention.read()

    def mark(self, phase: str) -> None:
        """``phase`` begins now (the previous one ends)."""
        now = contention.read()
        if now.wall_s - self.reading.wall_s >= MIN_PHASE_S:
            share = contention.between(self.reading, now).others_cpu_share
            if share is not None:
                self.shares[self.phase] = max(min(share, 1.0), self.shares.get(self.phase, 0.0))
        self.phase, self.reading = phase, now


def check_phases(records: list[StepRecord], timed: list[StepRecord],
                 others: Optional[dict[str, float]] = None) -> tuple[Optional[PhaseAgreement], Optional[Note]]:
    """The agreement record, and a warning note where a phase disagrees with the timed steps; ``others``: each
    phase's others' share of the cores (``PhaseLoad``): a contended phase's gap is an info note, not a warning."""
    groups = phase_steps(records, timed)
    medians = medians_of(groups)
    fed = queue_fed_phases(groups)
    centre = medians.get("timed")
    if centre is None or centre <= 0 or len(medians) < 2:
        return None, None
    others = {p: s for p, s in (others or {}).items() if p in medians}
    busy = {p for p, s in others.items() if s > contention.CONTENDED_SHARE}
    times = [compute_ms(r) for r in timed]
    spread = float(np.percentile(times, 90) / max(np.percentile(times, 10), 1e-9))
    limit = min(max(AGREE_LIMIT, spread), MAX_LIMIT)
    ratios = {p: max(m / centre, centre / max(m, 1e-9)) for p, m in medians.items() if p != "timed"}
    limits = {p: phase_limit(p, medians[p], centre, limit, p in fed) for p in ratios}
    judged = [p for p in ratios if (p not in busy and "timed" not in busy) or ratios[p] > CONTENDED_LIMIT]
    worst = max(judged or ratios, key=lambda p: ratios[p] / limits[p])  # the furthest past its allowance
    record = PhaseAgreement(medians_ms=medians, worst_phase=worst, ratio=ratios[worst], limit=limits[worst],
                            agree=all(ratios[p] <= limits[p] for p in judged), others_share=others)
    if record.agree:
        excused = [p for p in ratios if p not in judged and ratios[p] > limits[p]]
        return record, (busy_note(excused[0], medians, centre, ratios[excused[0]], others) if excused else None)
    side = "faster" if medians[worst] < centre else "slower"
    return record, Note(kind="warning", text=(
        f"phases disagree: the {worst} steps' median compute {medians[worst]:.1f} ms (a step less its wait for data) "
        f"is x{ratios[worst]:.2f} {side} than the timed steps' {centre:.1f} ms (allowed x{limits[worst]:.2f}); the "
        "same computation was timed differently (a step timed before its work ended, a different graph, or the machine "
        "changed between phases), so this trial's figures are suspect"))


def busy_note(phase: str, medians: dict[str, float], centre: float, ratio: float, others: dict[str, float]) -> Note:
    """A phase's gap (``ratio``, >= 1, as ``check_phases`` measured it) where it (or the timed steps) ran while other
    processes used the cores: the machine's doing."""
    busiest = max(("timed", phase), key=lambda p: others.get(p, 0.0))
    side = "faster" if medians[phase] < centre else "slower"
    return Note(kind="info", text=(
        f"the {phase} steps' median compute {medians[phase]:.1f} ms ran x{ratio:.2f} {side} than the timed steps' "
        f"{centre:.1f} ms while other processes used {others[busiest]:.0%} of the cores during the {busiest} "
        "steps: the machine changed between phases, not the timing (the timed windows' own contention is judged "
        "window by window)"))
