"""The arms of a paired process and the drains of prefetched batches, as one policy: which pipeline feeds the next
step, when an arm must be switched in by untimed steps, and when a drain has spent the queue.

A paired process (``spec.pair``: ``perftune.engine.paired``) has two arms, the reference's pipeline (0) and the
candidate's (1), feeding one model.  Its timed windows alternate ABBA / BAAB (``pair_schedule``); before a window
whose arm differs from the last step's, the new arm is switched in by untimed steps: its warm-up the first time,
then a drain of what its pipeline prefetched meanwhile (``burst.drain``), so a full queue does not flatter it.  An
arm whose capped drain never found its queue empty drains one queue's worth at later switches (``drained_once``).
A process that is not paired has one arm (0) and one drain, after its warm-up.
"""

from __future__ import annotations

from typing import Callable, Optional

from perftune.burst.drain import DRAIN_CAP_FACTOR, DRAIN_S, drain_done, queued_batches, waited
from perftune.io.records import StepRecord, TrialSpec


def pair_schedule(blocks: int) -> list[int]:
    """Each timed window's arm in a paired process (0: reference, 1: candidate): ABBA, BAAB, ABBA, ..., so that
    linear drift and the window's place after a switch cancel within each block and across blocks."""
    out: list[int] = []
    for b in range(blocks):
        out += [0, 1, 1, 0] if b % 2 == 0 else [1, 0, 0, 1]
    return out


class Arms:
    """Which arm feeds the next step, and the untimed steps that switch one in (warm-up, then drain)."""

    def __init__(self, spec: TrialSpec, agree: Optional[Callable[[int], int]] = None):
        self.spec = spec
        #: a distributed burst's ranks drain their cap, the same on every rank (every step is a collective)
        self.agree = agree
        #: each timed window's arm: ABBA/BAAB in a paired process, arm 0 for every window otherwise
        self.schedule = pair_schedule(spec.pair.blocks) if spec.pair is not None else [0] * spec.burst.repeats
        self.arm = 0  # the arm whose pipeline feeds the next step
        self.switching = False  # untimed steps switching the next window's arm in (warm-up, then drain)
        self.switch_steps: list[StepRecord] = []
        self.warmed = {0}
        self.never_dry: set[int] = set()  # arms whose capped drain never found the queue empty
        self.drain_cap = 0

    def begin_drain(self) -> None:
        """A drain begins (the warm-up's, or a switch's): its step cap is read now."""
        self.drain_cap = self.new_drain_cap()

    def new_drain_cap(self) -> int:
        """One queue's worth for an arm whose queue never ran dry (``never_dry``), else ``DRAIN_CAP_FACTOR`` of
        them; read as the drain begins, since a script may change its prefetch size."""
        if self.spec.burst.drain_s == 0:
            return 0
        factor = 1 if self.arm in self.never_dry and self.agree is None else DRAIN_CAP_FACTOR
        return factor * (queued_batches() + 2)

    def drain_over(self, steps: list[StepRecord]) -> bool:
        """The drain's rule (``drain_done``); on a distributed burst, the cap alone (the same on every rank)."""
        if self.agree is not None:
            return len(steps) >= self.drain_cap
        bound = self.spec.burst.drain_s
        return drain_done(steps, self.drain_cap, DRAIN_S if bound is None else bound)

    def drained_once(self, steps: list[StepRecord]) -> None:
        """After a drain: an arm whose whole capped drain found its batch ready every step is fed faster than it
        trains, so its queue is full in the timed windows too and a later drain needs only the queue's worth.  In
        PyNative the quickstart's 12 switches drained 16 steps each, half of a paired process, for nothing."""
        if steps and len(steps) >= self.drain_cap and not any(waited(r) for r in steps):
            self.never_dry.add(self.arm)

    def switch_for(self, window: int) -> bool:
        """Before timed window ``window``: start switching its arm in where the last steps were the other arm's
        (or the arm never ran).  Returns whether a switch began."""
        arm = self.schedule[window]
        if arm == self.arm and arm in self.warmed:
            return False
        self.arm, self.switching, self.switch_steps = arm, True, []
        self.begin_drain()
        return True

    def switch_warm(self) -> int:
        """The switch's warm-up steps: the arm's first time only."""
        return 0 if self.arm in self.warmed else max(1, self.spec.burst.warmup_steps)

    def switch_done(self) -> bool:
        """After each step of a switch: its warm-up (the arm's first time) and then its drain are done; the arm is
        then warm and the switch over."""
        if not self.switching:
            return False
        warm = self.switch_warm()
        if len(self.switch_steps) < warm or not self.drain_over(self.switch_steps[warm:]):
            return False
        self.drained_once(self.switch_steps[warm:])
        self.switching = False
        self.warmed.add(self.arm)
        return True
