"""What the sweep reports while it runs (``SweepProgress``); the CLI renders it, a progress bar or plain lines."""

from __future__ import annotations

from typing import Protocol


class SweepProgress(Protocol):
    """What the sweep reports while it runs; the CLI renders it (a progress bar, or plain lines)."""

    def begin(self, total: int) -> None: ...  # trials expected so far
    def start(self, label: str) -> None: ...  # a trial starts
    def done(self, line: str) -> None: ...  # a trial (or a verdict) is done: one line saying what came out
    def grow(self, n: int) -> None: ...  # n more trials than expected (stacking, leave-one-out)
    def end(self) -> None: ...


class SilentProgress:
    """Reports nothing."""

    def begin(self, total: int) -> None: ...
    def start(self, label: str) -> None: ...
    def done(self, line: str) -> None: ...
    def grow(self, n: int) -> None: ...
    def end(self) -> None: ...
