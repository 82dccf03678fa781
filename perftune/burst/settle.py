"""Warm-up to steady state: how a repeat process knows its steps have settled.

A configuration's first process warms up in its accuracy window (56 steps on the quickstart) and its fixed warm-up;
a repeat process has no accuracy window (the gate reads the first process's), so it warms up until its step time
stops moving instead of for a fixed count: a repeat that skipped the window with 3 warm-up steps measured x0.865 of
first processes (README, "What a sweep does").  The rule is the one benchmark harnesses use to end warm-up
(Barrett et al., "Virtual machine warmup blows hot and cold", 2017, compare successive segments; JMH and pyperf
leave it to fixed counts): consecutive blocks of steps, each at least ``BLOCK_S`` and ``BLOCK_STEPS`` steps; the
warm-up has settled when the last two blocks' median step times are within ``TOLERANCE`` of each other, and it
ends anyway after ``MAX_S``, ``MAX_STEPS``, or as many samples as the first process trained before its timed steps
(its accuracy window and warm-up: a repeat never needs more steps than the first process, which matters to a script
with a fixed number of epochs) (a note says so).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Optional

from perftune.io.records import Note, StepRecord, TrialSpec

#: the shortest block: a block's median over fewer steps moved by a 4 ms scheduler tick on these machines
BLOCK_STEPS = 5
BLOCK_S = 0.25
MAX_BLOCK_STEPS = 200  # sub-millisecond steps: a block of 200 steps is long enough
#: two blocks within 5% of each other: the window-to-window spread of a settled process here is 3-8%
TOLERANCE = 0.05
#: the longest a repeat's warm-up may take (seconds of steps, or steps), settled or not
MAX_S = 10.0
MAX_STEPS = 2000


@dataclass(frozen=True)
class Settling:
    """Where the warm-up stands: ``done`` once settled or out of time (``settled`` says which)."""

    done: bool
    settled: bool
    block: int  # steps per block
    change: Optional[float]  # the last block's median over the one before, less 1


def block_steps(times_ms: list[float]) -> int:
    """Steps per block: at least ``BLOCK_STEPS`` and ``BLOCK_S`` of the latest steps' median time."""
    recent = statistics.median(times_ms[-BLOCK_STEPS:])
    if recent <= 0:
        return BLOCK_STEPS
    return min(MAX_BLOCK_STEPS, max(BLOCK_STEPS, math.ceil(BLOCK_S * 1e3 / recent)))


def settling(times_ms: list[float], spent: bool = False) -> Settling:
    """The warm-up steps so far (their times, in order) judged by the rule above; ``spent``: the warm-up has had
    as many samples as the first process's untimed steps, and ends (unsettled) if it has not settled."""
    if not times_ms:
        return Settling(False, False, BLOCK_STEPS, None)
    block = block_steps(times_ms)
    change = None
    if len(times_ms) >= 2 * block:
        before = statistics.median(times_ms[-2 * block:-block])
        last = statistics.median(times_ms[-block:])
        change = last / before - 1.0 if before > 0 else None
        if abs(last - before) <= TOLERANCE * before:
            return Settling(True, True, block, change)
    return Settling(spent or sum(times_ms) >= MAX_S * 1e3 or len(times_ms) >= MAX_STEPS, False, block, change)


def note(state: Settling, steps: int) -> Note:
    """How a repeat's warm-up ended: settled (info) or at its limit (warning)."""
    change = f"{state.change:+.1%}" if state.change is not None else "not measured"
    if state.settled:
        return Note(kind="info", text=f"warm-up settled after {steps} steps: the last two blocks of {state.block} "
                                      f"steps within {TOLERANCE:.0%} of each other ({change})")
    return Note(kind="warning", text=f"warm-up did not settle within {steps} steps (at most {MAX_S:.0f} s, "
                                     f"{MAX_STEPS} steps, or the first process's untimed samples; the last two "
                                     f"blocks of {state.block} steps {change} apart): the timed windows may include "
                                     "a process still warming up")


class RepeatWarmup:
    """The ``Meter``'s warm-up in a repeat process: it skips the accuracy window and warms up until its step time
    settles, for at most the first process's untimed samples (its accuracy window and warm-up steps).  ``on``: not
    in a first or a paired process, nor on a distributed burst (``agree``), whose ranks must take the same
    decisions."""

    def __init__(self, spec: TrialSpec, agree: Optional[Callable[[int], int]] = None):
        self.spec = spec
        self.on = spec.replicate > 0 and spec.pair is None and agree is None
        self.steps: list[StepRecord] = []  # the settled warm-up's steps after the compile, once it ended

    def state(self, in_phase: list[StepRecord], records: list[StepRecord], samples_seen: int) -> Settling:
        """The warm-up's steps so far (``in_phase``) judged for a steady state; the process's first step (its
        compile, ``records[0]``) left out; out of budget past the first process's untimed samples."""
        per_step = in_phase[-1].samples_seen // len(in_phase) if in_phase else 0
        budget = self.spec.accuracy_samples + self.spec.burst.warmup_steps * per_step
        return settling([r.step_ms for r in in_phase if r is not records[0]],
                        spent=bool(in_phase) and samples_seen >= budget)

    def end(self, in_phase: list[StepRecord], records: list[StepRecord], samples_seen: int) -> Note:
        """The warm-up is over: its steps kept (the drain counts them) and how it ended, as a note."""
        self.steps = [r for r in in_phase if r is not records[0]]
        return note(self.state(in_phase, records, samples_seen), len(in_phase))
