"""The timed windows of a burst: how many steps each takes, and its figures once it closes.

A fresh process's windows take ``burst.steps`` steps, or more where ``burst.min_window_s`` asks for longer ones
(calibrated from the warm-up's completed steps, as pyperf and timeit calibrate their loops); a paired process's
windows close by time as they run (at least ``burst.steps`` steps *and* ``pair.min_window_s``): a calibration read
off queue-fed warm-up steps once made 2.6 s windows of 0.5.
"""

from __future__ import annotations

from typing import Callable, Optional

from perftune.burst import contention
from perftune.burst.results import MAX_WINDOW_FACTOR, calibrated_window_steps, window_stats
from perftune.io.records import Note, StepRecord, TrialSpec, WindowStats

#: the warm-up and drain steps the window calibration reads: the last ones (the first took batches the pipeline had
#: queued during compile, 5x faster than a data-bound step: windows calibrated on them lasted 3 s, not 0.5)
CALIBRATE_FROM = 3


class TimedWindows:
    """The open timed window's running figures and the rule that closes it."""

    def __init__(self, spec: TrialSpec, agree: Optional[Callable[[int], int]] = None):
        self.spec = spec
        self.agree = agree  # a distributed burst's ranks take the longest calibrated window
        self.index = 0  # the open window's number
        self.elapsed_ms = 0.0  # the open window's steps so far (a running sum: ``full`` reads it per step)
        self.samples = 0  # the open window's samples so far
        self.steps = spec.burst.steps  # steps per window, calibrated on entering the timed phase
        self.reading: Optional[contention.Reading] = None  # the machine's counters as the window opened
        self.by_time_ms = (max(spec.burst.min_window_s or 0.0, spec.pair.min_window_s) * 1e3
                           if spec.pair is not None and agree is None else None)

    def open(self) -> None:
        """A window opens: the contention guard's counters are read now."""
        self.reading = contention.read()

    def add(self, step_ms: float, samples: int) -> None:
        self.elapsed_ms += step_ms
        self.samples += samples

    def full(self, steps: int) -> bool:
        """A window closes at its calibrated steps; a paired process's at ``burst.steps`` steps and its minimum
        time (at most ``MAX_WINDOW_FACTOR`` x ``burst.steps`` steps however short they are)."""
        if self.by_time_ms is None:
            return steps >= self.steps
        least = self.spec.burst.steps
        return steps >= MAX_WINDOW_FACTOR * least or (steps >= least and self.elapsed_ms >= self.by_time_ms)

    def calibrate(self, warm: list[StepRecord]) -> Optional[Note]:
        """``burst.min_window_s``: as many steps per window as that takes, from the warm-up's and the drain's
        last completed steps (``results.calibrated_window_steps``); a paired process closes its windows by time."""
        if self.by_time_ms is not None:
            return None
        times = [r.step_ms for r in warm]
        if len(times) > CALIBRATE_FROM + 1:  # the drain's last steps: the pipeline's own rate, not its queue's
            times = times[:1] + times[-CALIBRATE_FROM:]
        self.steps, note = calibrated_window_steps(self.spec.burst, times)
        if self.agree is not None:  # each rank timed its own warm-up: the ranks take the longest window
            self.steps = self.agree(self.steps)
        return note

    def close(self, window: list[StepRecord], arm: int) -> WindowStats:
        """The window's figures (its steps add up to its time), and the next window's numbering."""
        guard = contention.between(self.reading, contention.read())
        stats = window_stats(window, sum(r.step_ms for r in window), self.samples, guard)
        stats.arm = arm
        self.index += 1
        self.elapsed_ms, self.samples = 0.0, 0
        return stats
