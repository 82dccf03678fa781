"""The sweep's last two phases: stacking the changes that helped, and taking each out of the final stack again.

Here only the order in which stack rows are tried, kept or dropped, and the leave-one-out rows; the processes, the
races and the verdicts are the sweep's (``StackingSweep`` names what these phases use of it).  Each phase yields its
rows as they are decided: the sweep keeps them (``results.json`` after each) and takes the best stack from them.
"""

from __future__ import annotations

from typing import Any, Hashable, Iterator, Optional, Protocol

from perftune.engine import order
from perftune.engine.blocked import process_run
from perftune.engine.stats import ProcessRun
from perftune.io.records import TrialResult
from perftune.io.sweep_records import FAILED_VERDICTS, ComparisonRecord, StackStep, SweepTrial, Why
from perftune.knobs import label_of
from perftune.words import lm, reasons


class StackingProcesses(Protocol):
    """What stacking uses of the sweep's processes (``perftune.engine.processes.Processes``)."""

    runs: list[ProcessRun]  # every usable process: a leave-one-out row's first process joins them
    of: dict[Hashable, list[SweepTrial]]  # each configuration's processes (none: the budget left it unmeasured)

    def register(self, changes: dict[str, Any], kind: str) -> Hashable: ...
    def first(self, key: Hashable) -> SweepTrial: ...
    def measure(self, changes: dict[str, Any], kind: str) -> SweepTrial: ...


class StackingSweep(Protocol):
    """What stacking and leave-one-out use of the sweep (``perftune.engine.sweep.Sweep``)."""

    base: Hashable  # the baseline's configuration
    procs: StackingProcesses

    def race(self, candidates: list[Hashable], reference: Hashable) -> dict[Hashable, Optional[ComparisonRecord]]: ...
    def informational(self, candidate: Hashable, reference: Hashable, label: str) -> Optional[ComparisonRecord]: ...
    def judge(self, trial: SweepTrial, which: str) -> None: ...
    def explain(self, trial: SweepTrial, why: Why) -> None: ...
    def say(self, line: str) -> None: ...
    def cannot_gain(self, changes: dict[str, Any], on: Optional[TrialResult], where: str) -> bool: ...


def stack(sweep: StackingSweep, single_trials: list[SweepTrial], retry_on_stack: bool,
          cannot_gain: list[dict[str, Any]] = ()) -> Iterator[StackStep]:
    """The stack's rows: the baseline, then the kept singles in order of gain, each raced against the stack below it
    and kept or dropped; then the changes that could not gain on the baseline, each raced where the stack below it
    raises its ceiling.  The best stack is the last kept row (its ``trial_id`` is its configuration's key)."""
    yield StackStep(label="baseline", trial_id=sweep.procs.first(sweep.base).trial_id, kept=True)
    current_changes: dict[str, Any] = {}
    current = sweep.base
    tries = [(t.changes, t) for t in order.stack_candidates(single_trials, retry_on_stack)]
    for change, single in tries + [(c, None) for c in cannot_gain]:
        changes = {**current_changes, **change}
        if single is None and (not current_changes or sweep.cannot_gain(
                change, sweep.procs.first(current).result, label_of(current_changes))):
            continue  # its ceiling on the stack below is still too low (on the baseline alone: already said)
        if not current_changes:
            if single.verdict != "kept":
                continue  # on top of the baseline alone, its one-at-a-time verdict already answers
            trial, key = single, sweep.procs.register(single.changes, "single")
        else:
            key = sweep.procs.register(changes, "stack")
            comparison = sweep.race([key], current)[key]
            if not sweep.procs.of.get(key):
                return  # the sweep's budget had no room for it: the rest is left unmeasured
            trial = sweep.procs.first(key)
            if trial.verdict not in FAILED_VERDICTS:
                trial.vs_previous = comparison
                trial.vs_baseline = sweep.informational(key, sweep.base, "baseline")
                sweep.judge(trial, "vs_previous")
        kept = trial.verdict == "kept"
        if not kept and trial.verdict not in FAILED_VERDICTS and trial.kind == "stack":
            before, trial.verdict = trial.verdict, "dropped"
            sweep.explain(trial, (trial.why or Why()).model_copy(update={"before": before}))
        reason = reasons.stack_reason(kept, trial)
        sweep.say(f"  stack {label_of(changes)}: {'kept' if kept else reason}{lm.verdict_suffix(trial.result)}")
        yield StackStep(label=label_of(changes), change=dict(change), trial_id=trial.trial_id, kept=kept,
                        reason=reason)
        if kept:
            current_changes, current = changes, key


def leave_one_out(sweep: StackingSweep, steps: list[StackStep], best: Hashable) -> Iterator[SweepTrial]:
    """Each kept change taken out of the final stack (``best``, of the rows ``steps``): how much of the final speed
    it accounts for; each row's process as it is compared."""
    kept_steps = [s for s in steps[1:] if s.kept]
    if len(kept_steps) < 2:
        return
    final_changes: dict[str, Any] = {}
    for s in kept_steps:
        final_changes.update(s.change or {})
    for s in kept_steps:
        without = {k: v for k, v in final_changes.items() if k not in (s.change or {})}
        key = sweep.procs.register(without, "leave_one_out")
        trial = sweep.procs.measure(without, "leave_one_out")  # an earlier stack row's process is reused
        if trial.verdict not in FAILED_VERDICTS:
            if not any(r.config == key for r in sweep.procs.runs):
                sweep.procs.runs.append(process_run(key, trial.result))
            # how much faster the final stack is than the stack without this change
            trial.vs_previous = sweep.informational(best, key, f"final without {label_of(s.change or {})}")
            trial.vs_baseline = sweep.informational(key, sweep.base, "baseline")
            trial.verdict = "measured"
            if trial.vs_previous is not None:
                sweep.explain(trial, Why(comparison="vs_previous", removed=label_of(s.change or {})))
        sweep.say(f"  {trial.label}: {trial.reason or trial.verdict}{lm.verdict_suffix(trial.result)}")
        yield trial
