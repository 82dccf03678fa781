"""Racing: candidates measured against one reference in interleaved rounds until each is decided or out of budget.

Round 1 measures ``R C1 R C2 R ... Cn R``; every later round measures ``C R`` for each candidate still open, so every
candidate process sits between two reference processes (``perftune.engine.sequential.blocks``).  A candidate leaves
the race when its comparison is decided (faster, slower, equivalent), when ``settled`` says its timing no longer
matters (a known no-op, an accuracy failure: those verdicts do not depend on speed), when one of its processes fails,
after ``policy.max_runs`` processes, or when ``out_of_time`` (the sweep's wall-time budget) stops adding rounds.

The race decides nothing about processes: ``measure(config)`` runs one (re-measuring a contended one is the
caller's business, so a contended process never counts as a look) and returns its ``ProcessRun``, or None when it
failed.  ``runs`` is the sweep's list of every usable process in measurement order, shared with the caller, so the
noise is pooled over the whole sweep and processes measured earlier (the previous stack) count here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable, Optional, Sequence

from perftune.engine.sequential import Decision, Noise, Policy, ProcessRun, decide


def _never(config: Hashable) -> bool:
    return False


def _no_deadline() -> bool:
    return False


@dataclass
class Race:
    """One reference, several candidates; ``run`` returns each candidate's decision (None: never compared)."""

    measure: Callable[[Hashable], Optional[ProcessRun]]
    runs: list[ProcessRun]
    policy: Policy = field(default_factory=Policy)
    out_of_time: Callable[[], bool] = _no_deadline
    settled: Callable[[Hashable], bool] = _never
    processes: dict[Hashable, int] = field(default_factory=dict)  # candidate -> processes it got in this race

    def _run(self, config: Hashable) -> bool:
        run = self.measure(config)
        if run is None:
            return False
        self.runs.append(run)
        return True

    def noise(self) -> Noise:
        return Noise.pooled(self.runs, self.policy.prior_sd, self.policy.prior_df)

    def decide(self, candidate: Hashable, reference: Hashable, noise: Optional[Noise] = None) -> Optional[Decision]:
        return decide(self.runs, candidate, reference, noise or self.noise(), self.policy)

    def run(self, candidates: Sequence[Hashable], reference: Hashable) -> dict[Hashable, Optional[Decision]]:
        self.processes = {c: 0 for c in candidates}
        if not any(r.config == reference for r in self.runs[-1:]):
            self._run(reference)  # a failed reference process: the candidates' blocks use the next one
        pending = list(candidates)
        while pending:
            stopped = set()
            for c in pending:
                if not self._run(c):
                    stopped.add(c)  # a failed process ends this candidate's race; what it measured still counts
                    continue
                self.processes[c] += 1
                self._run(reference)
            if self.out_of_time():
                break
            noise = self.noise()
            decisions = {c: self.decide(c, reference, noise) for c in pending if c not in stopped}
            pending = [c for c, d in decisions.items()
                       if d is not None and d.outcome == "open" and self.processes[c] < self.policy.max_runs
                       and not self.settled(c)]
        noise = self.noise()
        return {c: self.decide(c, reference, noise) for c in candidates}
