"""The sweep's last two phases: stacking the changes that helped, and taking each out of the final stack again.

Functions of a ``perftune.engine.sweep.Sweep`` (each takes it as ``sweep``, as ``seed_runs.calibrate_sweep`` does),
which holds the processes, the races and the decisions; here only the order in which stack rows are tried, kept or
dropped, and the leave-one-out rows.
"""

from __future__ import annotations

from typing import Any

from perftune.engine import order
from perftune.engine.blocked import process_run
from perftune.io.sweep_records import FAILED_VERDICTS, StackStep, SweepTrial, Why
from perftune.knobs import label_of
from perftune.words import lm, reasons

FAILED = FAILED_VERDICTS


def stack(sweep, single_trials: list[SweepTrial]) -> None:
    """The kept singles stacked in order of gain, each raced against the stack below it; the best stack found."""
    ordered = order.stack_candidates(single_trials, sweep.plan.decision.retry_on_stack)
    sweep.result.stack = [StackStep(label="baseline", trial_id=sweep.baseline_runs[0].trial_id, kept=True)]
    current_changes: dict[str, Any] = {}
    current = sweep.base
    for single in ordered:
        changes = {**current_changes, **single.changes}
        if not current_changes:
            if single.verdict != "kept":
                continue  # on top of the baseline alone, its one-at-a-time verdict already answers
            trial, key = single, sweep.procs.register(single.changes, "single")
        else:
            key = sweep.procs.register(changes, "stack")
            comparison = sweep.race([key], current)[key]
            trial = sweep.first(key)
            if trial.verdict not in FAILED:
                trial.vs_previous = comparison
                trial.vs_baseline = sweep.informational(key, sweep.base, "baseline")
                sweep.judge(trial, "vs_previous")
        kept = trial.verdict == "kept"
        if not kept and trial.verdict not in FAILED and trial.kind == "stack":
            before, trial.verdict = trial.verdict, "dropped"
            sweep.explain(trial, (trial.why or Why()).model_copy(update={"before": before}))
        reason = reasons.stack_reason(kept, trial)
        sweep.result.stack.append(StackStep(label=label_of(changes), change=dict(single.changes),
                                           trial_id=trial.trial_id, kept=kept, reason=reason))
        sweep.say(f"  stack {label_of(changes)}: {'kept' if kept else reason}{lm.verdict_suffix(trial.result)}")
        if kept:
            current_changes, current = changes, key
        sweep.save()
    _set_best(sweep, sweep.first(current), label_of(current_changes))
    sweep.best = current

def _set_best(sweep, trial: SweepTrial, label: str) -> None:
    sweep.result.best_label = label
    sweep.result.best_trial_id = trial.trial_id
    sweep.result.best_vs_baseline = trial.vs_baseline if trial.kind != "baseline" else None
    sweep.save()

def leave_one_out(sweep) -> None:
    """Each kept change taken out of the final stack: how much of the final speed it accounts for."""
    kept_steps = [s for s in sweep.result.stack[1:] if s.kept]
    if len(kept_steps) < 2:
        return
    final_changes: dict[str, Any] = {}
    for s in kept_steps:
        final_changes.update(s.change or {})
    for s in kept_steps:
        without = {k: v for k, v in final_changes.items() if k not in (s.change or {})}
        key = sweep.procs.register(without, "leave_one_out")
        trial = sweep.procs.measure(without, "leave_one_out")  # an earlier stack row's process is reused
        if trial.verdict not in FAILED:
            if not any(r.config == key for r in sweep.runs):
                sweep.runs.append(process_run(key, trial.result))
            # how much faster the final stack is than the stack without this change
            trial.vs_previous = sweep.informational(sweep.best, key, f"final without {label_of(s.change or {})}")
            trial.vs_baseline = sweep.informational(key, sweep.base, "baseline")
            trial.verdict = "measured"
            if trial.vs_previous is not None:
                sweep.explain(trial, Why(comparison="vs_previous", removed=label_of(s.change or {})))
        sweep.say(f"  {trial.label}: {trial.reason or trial.verdict}{lm.verdict_suffix(trial.result)}")
        sweep.save()
