"""Racing: candidates measured against one reference in interleaved rounds until each is decided or out of budget.

Round 1 measures ``R C1 R C2 R ... Cn R``; every later round measures ``C R`` for each candidate still open, so every
candidate process sits between two reference processes (``perftune.engine.sequential.blocks``).  A candidate leaves
the race when its comparison is decided (faster, slower, equivalent), when ``timing_moot`` says its timing no longer
matters (a known no-op, an accuracy failure: those verdicts do not depend on speed), when one of its processes fails,
after ``policy.max_runs`` processes, when the rest of that budget is unlikely to decide it (``sequential.futile``:
it ends ``undecided``, marked ``futile``), or when ``out_of_time`` (the sweep's wall-time budget) stops adding rounds.
A ``faster``/``slower`` comparison that the sweep's Benjamini-Hochberg step could still demote stays in the race while
it has budget (``undiscovered``).  These rules are one function, ``Race.goes_on``, for the race on one machine
and on lanes alike.

The race decides nothing about processes: ``measure(config)`` runs one (re-measuring a contended one is the
caller's business, so a contended process never counts as a look) and returns its ``ProcessRun``, or None when it
failed.  ``runs`` is the sweep's list of every usable process in measurement order, shared with the caller, so the
noise is pooled over the whole sweep and processes measured earlier (the previous stack) count here too.

Lanes (a Ray cluster: one lane per node, ``Lanes``): each round is planned whole, then measured with the lanes side
by side.  A lane runs its share of the round's candidate processes as ``[R] C R C R ...`` on its node (the leading
R only when that node's last process was not the reference), so every candidate process still sits between
reference processes *of its own node* and ``blocks`` pairs them as in one process.  Lanes a round would leave idle
get more processes of the open candidates (up to ``policy.max_runs``), so a cluster resolves a comparison in fewer
rounds rather than waiting.  The round's outcomes are appended to ``runs`` in lane order once all lanes are done, so
the decisions are the same whichever lane finished first, and a resumed sweep plans the same rounds.

Paired processes (``paired.py``): a candidate that differs from the reference only in its data pipeline
(``pairable``) gets, after its first process (which has the profile and the accuracy window), paired processes
instead of ``C R``: one process measures both pipelines in alternating windows, and its comparison is decided from
the paired processes alone (``paired.decide_paired``), a look per process as before, and never before both arm
orders were measured (``one_order``: at least two paired processes, even past ``max_runs``).  Only on one machine
at a time (a cluster's lanes keep ``C R``).

Order: the first round follows the caller's order (the sweep's order rule puts the likely bottleneck's knobs
first); every later round measures the open candidates in a shuffled order (random interleaving, as Google
Benchmark's ``--benchmark_enable_random_interleaving``), so a candidate is not always measured at the same point of
a round's drift and load.  The shuffle is seeded by the reference, the round and the open candidates (``round_order``),
never by the clock, so a resumed sweep plans exactly the same rounds and reuses what finished.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Callable, Hashable, Optional, Sequence, Union

from perftune.engine.budget import BudgetSpent
from perftune.engine.paired import PairedRun, decide_paired
from perftune.engine.sequential import decide, futile
from perftune.engine.stats import Decision, Noise, Policy, ProcessRun

#: a process that ran but whose timing is not used (measured while other processes used its node's cores): no look
EXCLUDED = "excluded"
LaneOutcome = Union[ProcessRun, str, None]  # a usable process, None (failed), or EXCLUDED


@dataclass(frozen=True)
class Lanes:
    """Processes measured side by side: ``count`` lanes; ``run_round(sequences)`` measures each lane's sequence of
    configurations in order, the lanes at once, and returns each process's ``LaneOutcome`` in the same shape;
    ``node(lane)`` is the node a lane measures on, when known (so a lane whose node last measured the reference
    needs no leading reference process)."""

    count: int
    run_round: Callable[[list[list[Hashable]]], list[list[LaneOutcome]]]
    node: Callable[[int], Optional[str]]


def plan_round(pending: Sequence[Hashable], processes: dict[Hashable, int], max_runs: int, lanes: int,
               reference: Hashable, ends_with_reference: Sequence[bool]) -> list[list[Hashable]]:
    """Each lane's sequence for one round: every pending candidate once, then more processes of the candidates
    with room left (fewest first) until every lane has one, dealt to the lanes in turn; a lane with work runs
    ``[R] C R C R ...``."""
    slots = list(pending)
    planned = {c: processes.get(c, 0) + 1 for c in pending}
    while len(slots) < lanes:
        room = [c for c in pending if planned[c] < max_runs]
        if not room:
            break
        c = min(room, key=lambda x: planned[x])
        slots.append(c)
        planned[c] += 1
    sequences = []
    for lane in range(lanes):
        mine = slots[lane::lanes]
        seq: list[Hashable] = [] if not mine or ends_with_reference[lane] else [reference]
        for c in mine:
            seq += [c, reference]
        sequences.append(seq)
    return sequences


def round_order(pending: Sequence[Hashable], reference: Hashable, round_index: int) -> list[Hashable]:
    """The order in which round ``round_index`` (0: the first) measures the ``pending`` candidates: the first as
    given, later ones shuffled with a seed made of the reference, the round and the candidates (their ``str``, so
    the same on every run and every Python)."""
    if round_index == 0:
        return list(pending)
    order = sorted(pending, key=str)
    random.Random(f"{reference}|{round_index}|{'|'.join(map(str, order))}").shuffle(order)
    return order


def _never(config: Hashable) -> bool:
    return False


def _unpaired(reference: Hashable, candidate: Hashable) -> bool:
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
    timing_moot: Callable[[Hashable], bool] = _never  # no more timing can change its verdict
    processes: dict[Hashable, int] = field(default_factory=dict)  # candidate -> processes it got in this race
    lanes: Optional[Lanes] = None  # processes side by side (a cluster's nodes); None: one at a time
    #: whether a candidate is compared with the reference by paired processes, and how one is measured (None: failed)
    pairable: Callable[[Hashable, Hashable], bool] = _unpaired
    measure_pair: Optional[Callable[[Hashable, Hashable], Optional[PairedRun]]] = None
    pairs: list[PairedRun] = field(default_factory=list)  # the sweep's paired processes, shared with the caller
    stopped: set = field(default_factory=set)  # candidates stopped as futile
    #: candidate -> processes tried in this race, usable or not (a contended one on a lane is tried, not usable)
    tried: dict[Hashable, int] = field(default_factory=dict)

    def left(self, candidate: Hashable) -> int:
        """The processes ``candidate`` may still get: ``max_runs`` less those it has (its first one included)."""
        return self.policy.max_runs - self.processes[candidate]

    def worth_another(self, candidate: Hashable, d: Optional[Decision]) -> bool:
        """Whether an open comparison is worth another process: budget left, and not ``futile`` (then ``stopped``)."""
        left = self.left(candidate)
        if left <= 0:
            return False
        if d is not None and futile(d, d.blocks + left):
            self.stopped.add(candidate)
            return False
        return True

    def undiscovered(self, candidate: Hashable, d: Optional[Decision], family: int) -> bool:
        """A ``faster``/``slower`` comparison with budget left whose p-value is above the strictest level the sweep's
        Benjamini-Hochberg step can ask of it (``(1 - confidence) / family``): it gets the rest of its budget, as an
        open one does, instead of ending on a look that the multiplicity rule would demote to ``not significant``
        (a real 5% change ended so in 3 of 5 sweeps after two paired processes with one left).  Looking again
        does not add false alarms: Pocock's boundary covers every look up to ``max_runs``."""
        return (d is not None and family > 1 and d.outcome in ("faster", "slower")
                and d.p_value > (1.0 - self.policy.confidence) / family
                and self.left(candidate) > 0)

    def final(self, candidates: Sequence[Hashable], reference: Hashable) -> dict[Hashable, Optional[Decision]]:
        """Each candidate's decision with the race's last noise; a futile stop marked on the ones still open."""
        noise = self.noise()
        out = {c: self.decide(c, reference, noise) for c in candidates}
        return {c: replace(d, futile=True) if d is not None and c in self.stopped and d.outcome == "open" else d
                for c, d in out.items()}

    def _run(self, config: Hashable) -> bool:
        try:
            run = self.measure(config)
        except BudgetSpent:  # not started: the sweep's budget had no room for it (``out_of_time`` ends the race)
            return False
        if run is None:
            return False
        self.runs.append(run)
        return True

    def noise(self) -> Noise:
        return Noise.pooled(self.runs)

    def decide(self, candidate: Hashable, reference: Hashable, noise: Optional[Noise] = None) -> Optional[Decision]:
        pairs = self.pairs_of(candidate, reference)
        if pairs:  # paired processes decide alone: the between-process noise is not in them
            return decide_paired(pairs, self.policy)
        return decide(self.runs, candidate, reference, noise or self.noise(), self.policy)

    def one_order(self, candidate: Hashable, reference: Hashable) -> bool:
        """A paired comparison with one arm order so far: it gets the other order before it may end (its estimate
        still holds the arm effect, and a decision on one process was often too marginal to survive
        Benjamini-Hochberg: 2 of 10 real 6% changes ended "not significant" that way, measured)."""
        pairs = self.pairs_of(candidate, reference)
        return bool(pairs) and len({p.swapped for p in pairs}) == 1

    def pairs_of(self, candidate: Hashable, reference: Hashable) -> list[PairedRun]:
        return [p for p in self.pairs if p.reference == reference and p.candidate == candidate]

    def paired(self, candidate: Hashable, reference: Hashable) -> bool:
        return self.measure_pair is not None and self.pairable(reference, candidate)

    def _run_pair(self, reference: Hashable, candidate: Hashable) -> bool:
        try:
            run = self.measure_pair(reference, candidate)  # type: ignore[misc]
        except BudgetSpent:
            return False
        if run is None:
            return False
        self.pairs.append(run)
        return True

    def goes_on(self, candidate: Hashable, reference: Hashable, d: Optional[Decision], family: int) -> bool:
        """The one continuation rule of the race, on one machine and on lanes: whether ``candidate`` gets another
        process after a round.  Never past twice ``max_runs`` processes tried (usable or not) nor once ``timing_moot``;
        a paired comparison with one arm order gets the other whatever its budget (``one_order``); an open one, or one
        with no decision yet (its processes had no usable reference beside them), while it has budget and is not
        futile (``worth_another``); a decided one while the multiplicity rule could still demote it
        (``undiscovered``)."""
        if self.tried.get(candidate, 0) >= 2 * self.policy.max_runs or self.timing_moot(candidate):
            return False
        if self.one_order(candidate, reference):
            return True
        if d is None or d.outcome == "open":
            return self.worth_another(candidate, d)
        return self.undiscovered(candidate, d, family)

    def next_round(self, pending: Sequence[Hashable], stopped: set, reference: Hashable,
                   family: int) -> list[Hashable]:
        """The candidates of ``pending`` that go on, by ``goes_on`` on the race's decisions after this round."""
        noise = self.noise()
        decisions = {c: self.decide(c, reference, noise) for c in pending if c not in stopped}
        return [c for c, d in decisions.items() if self.goes_on(c, reference, d, family)]

    def _counted(self, candidate: Hashable, usable: bool) -> None:
        self.tried[candidate] = self.tried.get(candidate, 0) + 1
        if usable:
            self.processes[candidate] += 1

    def _local_round(self, pending: Sequence[Hashable], reference: Hashable, first: bool) -> set:
        """One round on this machine: ``C R`` per candidate (a paired process after the first round where the change
        is pairable); returns the candidates whose process failed (that ends their race)."""
        stopped = set()
        for c in pending:
            ok = self._run_pair(reference, c) if not first and self.paired(c, reference) else self._run(c)
            if not ok:
                stopped.add(c)  # what it measured before still counts
                continue
            self._counted(c, True)
            if first or not self.paired(c, reference):
                self._run(reference)
        return stopped

    def run(self, candidates: Sequence[Hashable], reference: Hashable) -> dict[Hashable, Optional[Decision]]:
        if self.lanes is not None and self.lanes.count > 1:
            return self._run_lanes(candidates, reference, self.lanes)
        self.processes, self.tried = {c: 0 for c in candidates}, {c: 0 for c in candidates}
        if not any(r.config == reference for r in self.runs[-1:]):
            self._run(reference)  # a failed reference process: the candidates' blocks use the next one
        pending = list(candidates)
        rounds = 0
        while pending:
            pending = round_order(pending, reference, rounds)
            rounds += 1
            stopped = self._local_round(pending, reference, rounds == 1)
            if self.out_of_time():
                break
            pending = self.next_round(pending, stopped, reference, len(candidates))
        return self.final(candidates, reference)

    def _ends_with(self, node: Optional[str], reference: Hashable) -> bool:
        """Whether ``node``'s last usable process was the reference."""
        last = next((r for r in reversed(self.runs) if r.node == node), None) if node is not None else None
        return last is not None and last.config == reference

    def _run_lanes(self, candidates: Sequence[Hashable], reference: Hashable,
                   lanes: Lanes) -> dict[Hashable, Optional[Decision]]:
        """The race with rounds measured on ``Lanes.count`` lanes at once (see the module's docstring)."""
        self.processes, self.tried = {c: 0 for c in candidates}, {c: 0 for c in candidates}
        pending = list(candidates)
        rounds = 0
        while pending:
            pending = round_order(pending, reference, rounds)
            rounds += 1
            ends = [self._ends_with(lanes.node(j), reference) for j in range(lanes.count)]
            sequences = plan_round(pending, self.processes, self.policy.max_runs, lanes.count, reference, ends)
            stopped = set()
            for seq, outcomes in zip(sequences, lanes.run_round(sequences)):
                for config, outcome in zip(seq, outcomes):
                    if outcome is None:
                        if config != reference:
                            stopped.add(config)  # a failed process ends this candidate's race
                        continue
                    if isinstance(outcome, ProcessRun):
                        self.runs.append(outcome)
                    if config != reference:  # an excluded (contended) process is tried, not usable
                        self._counted(config, isinstance(outcome, ProcessRun))
            if self.out_of_time():
                break
            pending = self.next_round(pending, stopped, reference, len(candidates))
        return self.final(candidates, reference)
