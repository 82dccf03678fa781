"""The sweep's wall-time cap (``decision.budget_s``): no process starts that would end past it.

A cap checked only between rounds let a sweep with ``budget_s: 480`` run 556 s: the last round, the stack and
leave-one-out all started inside the budget and ended far past it.  Here every process asks first: the time spent so
far plus the length of a process of its kind (the median of those measured so far in this run; a paired process
measures two pipelines, so it is estimated from paired ones once there are any) must fit the budget.  The accuracy
gate's seed runs ask too (a window run, estimated from the window's sizing); the sizing probes and the sweep's first
baseline process always run (a sweep without them says nothing), a process an earlier run finished is reused
whatever is left, and a cluster's lanes are held to it between rounds (a round is planned whole).  What the cap left
unmeasured is kept by label, so the sweep's record and summary can say it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence, TypeVar

from perftune.io.files import TRIAL_NAME
from perftune.io.plan import Plan
from perftune.io.records import TrialResult, TrialSpec

T = TypeVar("T")


class BudgetSpent(Exception):
    """A process the budget has no room for: not started."""


@dataclass
class Budget:
    """``budget_s``: None, no cap.  ``lengths``: wall seconds of this run's measured processes by kind
    (``single``, ``paired``); reused ones cost nothing and are not counted."""

    budget_s: Optional[float]
    started: float = field(default_factory=time.perf_counter)
    lengths: dict[str, list[float]] = field(default_factory=dict)
    left_unmeasured: list[str] = field(default_factory=list)
    spent: bool = False  # a process (or a phase) was refused: no later one starts either

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def note(self, kind: str, wall_s: float) -> None:
        self.lengths.setdefault(kind, []).append(wall_s)

    def estimate(self, kind: str = "single") -> float:
        """A process's expected length: the median of this kind's so far, else of any kind's, else 0."""
        same = self.lengths.get(kind) or [s for v in self.lengths.values() for s in v]
        return statistics.median(same) if same else 0.0

    def fits(self, kind: str = "single", processes: float = 1.0) -> bool:
        """Whether ``processes`` more of ``kind`` would end within the budget (always, without one)."""
        if self.budget_s is None:
            return True
        return not self.spent and self.elapsed() + processes * self.estimate(kind) <= self.budget_s

    def claim(self, label: str, kind: str = "single") -> None:
        """Before a process starts: ``BudgetSpent`` (and ``label`` kept as left unmeasured) when it does not fit."""
        if not self.fits(kind):
            self.refuse(label)
            raise BudgetSpent(label)

    def claim_new(self, spec: TrialSpec, trials_dir: Path, kind: str) -> None:
        """``claim`` for ``spec``'s process, unless an earlier run finished it (reused whatever is left)."""
        if not (trials_dir / spec.trial_id / TRIAL_NAME).exists():
            self.claim(spec.label, kind)

    def timed(self, run_or_reuse: Callable[..., tuple[TrialResult, bool]], spec: TrialSpec, kind: str,
              lane: Optional[int] = None) -> tuple[TrialResult, bool]:
        """``run_or_reuse(spec, lane)``, a measured process's wall time noted for the estimates."""
        start = time.perf_counter()
        result, found = run_or_reuse(spec, lane)
        if not found:
            self.note(kind, time.perf_counter() - start)
        return result, found

    def refuse(self, what: str) -> None:
        """``what`` (a process or a phase) left unmeasured by the budget; nothing starts after it."""
        self.spent = True
        if what not in self.left_unmeasured:
            self.left_unmeasured.append(what)

    def room(self, label: str, seconds: float) -> bool:
        """Whether a run of about ``seconds`` (one not measured like the sweep's processes: an accuracy window of the
        baseline with another seed) ends within the budget; ``label`` kept as left unmeasured when not."""
        if self.budget_s is None or (not self.spent and self.elapsed() + seconds <= self.budget_s):
            return True
        if label not in self.left_unmeasured:  # the sweep's own (shorter) processes may still fit
            self.left_unmeasured.append(label)
        return False

    def reserve(self, what: str, processes: float) -> None:
        """A phase of ``processes`` process lengths refused up front when the budget has no room for it all."""
        if processes and not self.fits("single", processes):
            self.refuse(what)


def spend_or_none(work: Callable[[], T]) -> Optional[T]:
    """``work()``, or None when the budget refused one of its processes (what it measured before stays)."""
    try:
        return work()
    except BudgetSpent:
        return None


def stack_check_runs(plan: Plan, stack: Sequence) -> float:
    """The stack check's length in process lengths: the baseline's seeds and the stack, each ``verify_multiple``
    windows long (0: no check, nothing kept to check)."""
    gate = plan.accuracy
    if gate.verify_multiple <= 0 or len(stack) < 2:
        return 0.0
    return (gate.seeds + 1) * max(1.0, gate.verify_multiple)
