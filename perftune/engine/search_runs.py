"""The range searches of a sweep (``perftune.engine.search``) on the sweep's own processes and races.

Each value a search tries is a configuration of the sweep (``{knob: value}``; the baseline's own value is the
baseline), registered as kind ``search``; a comparison is the sweep's race of one candidate against the value the
search stands at, so the pooled noise, the paired processes, the contention rule, ``budget_s`` and the accuracy gate
are the singles' own.  The found value is then promoted to the knob's ``single``: its first process carries the
verdict against the baseline as every single does, and stacking takes it like a listed value's.
"""

from __future__ import annotations

import os
from typing import Any, Hashable, Optional, Protocol

from perftune import knobs
from perftune.engine.accuracy.gate import GateResult
from perftune.engine.budget import spend_or_none
from perftune.engine.search import Space, ValueState, search, start
from perftune.engine.stats import Noise, ProcessRun
from perftune.io.plan import Plan
from perftune.io.records import TrialResult
from perftune.io.sweep_records import ComparisonRecord, SearchRecord, SweepResult, SweepTrial
from perftune.words.search_words import search_line


class SearchProcesses(Protocol):
    """What the searches use of the sweep's processes (``perftune.engine.processes.Processes``)."""

    runs: list[ProcessRun]
    configs: dict[Hashable, tuple[dict[str, Any], str]]
    of: dict[Hashable, list[SweepTrial]]

    def register(self, changes: dict[str, Any], kind: str) -> Hashable: ...
    def measure_process(self, key: Hashable) -> Optional[ProcessRun]: ...


class SearchingSweep(Protocol):
    """What the searches use of the sweep (``perftune.engine.sweep.Sweep``)."""

    plan: Plan
    base: Hashable
    procs: SearchProcesses
    result: SweepResult
    skipped: list[dict[str, Any]]  # changes that cannot gain on the baseline: tried on the stack instead

    def race(self, candidates: list[Hashable], reference: Hashable) -> dict[Hashable, Optional[ComparisonRecord]]: ...
    def gate(self, trial: SweepTrial) -> Optional[GateResult]: ...
    def out_of_time(self) -> bool: ...
    def record_noise(self) -> Noise: ...
    def say(self, line: str) -> None: ...
    def cannot_gain(self, changes: dict[str, Any], on: Optional[TrialResult], where: str) -> bool: ...


class SweepSearch:
    """``search.SearchSide`` over one sweep's processes."""

    def __init__(self, sweep: SearchingSweep):
        self.sweep = sweep
        self.base = knobs.effective(sweep.plan.baseline)

    def changes(self, knob: str, value: int) -> dict[str, Any]:
        return {} if self.base.get(knob) == value else {knob: value}

    def key(self, knob: str, value: int) -> Hashable:
        changes = self.changes(knob, value)
        return self.sweep.base if not changes else self.sweep.procs.register(changes, "search")

    def state(self, knob: str, value: int) -> Optional[ValueState]:
        trials = self.sweep.procs.of.get(self.key(knob, value)) or []
        if not trials:
            return None
        first = trials[0]
        if first.result.status != "ok":
            return ValueState(first.result.status, first.trial_id, first.result.reason or first.result.status,
                              "failed")
        gate = self.sweep.gate(first)
        if gate is not None and not gate.ok:
            return ValueState("ok", first.trial_id, gate.reason, "accuracy rejected")
        return ValueState("ok", first.trial_id)

    def measure_value(self, knob: str, value: int) -> ValueState:
        key = self.key(knob, value)
        if not self.sweep.procs.of.get(key):
            run = spend_or_none(lambda: self.sweep.procs.measure_process(key))
            if run is not None:
                self.sweep.procs.runs.append(run)
        return self.state(knob, value) or ValueState("failed", "", "not measured: decision.budget_s", "failed")

    def race_value(self, knob: str, candidate: int, reference: int) -> Optional[ComparisonRecord]:
        cand = self.key(knob, candidate)
        return self.sweep.race([cand], self.key(knob, reference))[cand]

    def out_of_time(self) -> bool:
        return self.sweep.out_of_time()

    def processes(self) -> int:
        return len(self.sweep.result.trials) + len(self.sweep.result.paired)

    def value_runs(self, knob: str, value: int) -> list[ProcessRun]:
        key = self.key(knob, value)
        return [r for r in self.sweep.procs.runs if r.config == key]

    def noise(self) -> Noise:
        return self.sweep.record_noise()

    def promote(self, knob: str, value: int) -> None:
        """The found value's configuration becomes the knob's single (its first process's kind included)."""
        key = self.key(knob, value)
        self.sweep.procs.configs[key] = (self.changes(knob, value), "single")
        for trial in self.sweep.procs.of.get(key, [])[:1]:
            trial.kind = "single"


def run_searches(sweep: SearchingSweep) -> list[dict[str, Any]]:
    """Every range of the plan searched in plan order, each record kept in ``results.json`` as it ends; the found
    values that change the baseline, as singles (``{knob: value}``).  A knob confined to a split of the step too small
    to pay (``ceilings.py``) is not searched: its start value is tried on the stack, as a listed one would be."""
    side, found = SweepSearch(sweep), []
    decision = sweep.plan.decision
    env = sweep.result.environment
    cores = env.cpu_count if env is not None and env.cpu_count else os.cpu_count()
    first = sweep.procs.of[sweep.base][0].result
    for knob, r in sweep.plan.ranges.items():
        values = tuple(r.values())
        at = start(Space(knob, values, 0, 0.0, cores), len(values) - 1)[0]
        # the start value, else the nearest that changes the baseline: what the stack tries if none can pay here
        moves = sorted((i for i, v in enumerate(values) if side.changes(knob, v)), key=lambda i: (abs(i - at), -i))
        begin = {knob: values[moves[0]]} if moves else {}
        if r.until is None and begin and sweep.cannot_gain(begin, first, "baseline"):
            sweep.skipped.append(begin)
            continue
        record: SearchRecord = search(side, knob, r, decision.search_steps, decision.min_gain, cores)
        sweep.result.searches.append(record)
        sweep.say(f"  {search_line(record)}")
        if record.found is not None and side.changes(knob, record.found):
            side.promote(knob, record.found)
            found.append({knob: record.found})
    return found
