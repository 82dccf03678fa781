"""What the sweep reports while it runs (``SweepProgress``); the CLI renders it, a progress bar or plain lines."""

from __future__ import annotations

from typing import Protocol

from perftune.io.sweep_records import SweepTrial
from perftune.words import lm
from perftune.words.reasons import process_flags


class SweepProgress(Protocol):
    """What the sweep reports while it runs; the CLI renders it (a progress bar, or plain lines)."""

    def begin(self, total: int) -> None: ...  # trials expected so far
    def start(self, label: str) -> None: ...  # a trial starts
    def done(self, line: str) -> None: ...  # a trial (or a verdict) is done: one line saying what came out
    def grow(self, n: int) -> None: ...  # n more trials than expected (stacking, leave-one-out)
    def bound(self, most: int) -> None: ...  # the most lines the sweep may give (``most_lines``)
    def end(self) -> None: ...


class SilentProgress:
    """Reports nothing."""

    def begin(self, total: int) -> None: ...
    def start(self, label: str) -> None: ...
    def done(self, line: str) -> None: ...
    def grow(self, n: int) -> None: ...
    def bound(self, most: int) -> None: ...
    def end(self) -> None: ...


def most_lines(singles: int, max_runs: int, seeds: int = 1) -> int:
    """The most progress lines a sweep of ``singles`` changes may give, so that a progress display can say how long
    the races may still run instead of "none left" once the lines expected without extra rounds are done: the
    accuracy gate's seed runs and their line, the baseline, R C1 R C2 R ... with a verdict each, every race run to
    ``max_runs`` (a candidate and a reference process per extra round), the paired A/A check, every change stacked
    (its process, its verdict, its extra rounds), and a leave-one-out process per change.  An upper bound for races
    that decide early and changes that are not stacked; not for contended processes measured again or the probes
    that size the accuracy window, which come on top."""
    rounds = 2 * (max(max_runs, 1) - 1)
    return seeds + 1 + singles * (3 + rounds) + max_runs + singles * (2 + rounds) + singles


def process_line(trial: SweepTrial) -> str:
    """A finished process's progress line: what it measured, or why it failed."""
    r = trial.result
    what = lm.progress_text(r) if r.status == "ok" and r.samples_per_s else f"{trial.verdict}: {trial.reason}"
    run = f" (run {trial.replicate + 1})" if trial.replicate else ""
    return f"  {trial.label}{run}: {what}{process_flags(trial)}"
