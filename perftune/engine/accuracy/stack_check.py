"""After stacking: the final stack and the baseline trained for a longer window, once per sweep.

Every candidate is judged at the sweep's accuracy window, which a budget bounds because every process trains it.
A change that only hurts late (a precision floor, a learning rate that diverges after the window, a batch too large
to keep improving) passes there.  So the configuration the user will adopt is checked once more at
``accuracy.verify_multiple`` times the window (within ``accuracy.verify_budget_s``): the baseline on the seeds the
gate was calibrated on, the final stack on the plan's seed, each figure judged against the baseline's seed band as
the gate judges (``perftune.engine.accuracy.gate.against_seeds``).  A refused stack names the stacked change to suspect:
the only one, or by leave-one-out at the longer window when that fits the budget again.

The decisions (``judge``, ``suspects``; the check's length: ``sizing.check_length``) are pure functions of
records; ``verify`` runs the trials.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence

from perftune.engine.accuracy.gate import against_seeds
from perftune.engine.accuracy.sizing import check_length, step_unit
from perftune.engine.accuracy.window_trials import Measure, Runs, SweepTrials, seconds_per_sample, window_spec
from perftune.io.accuracy_window import FigureCheck, LeaveOneOutCheck, StackCheck
from perftune.io.plan import MAX_SEED, AccuracyGate, Plan
from perftune.io.records import Accuracy
from perftune.io.sweep_records import SweepResult, SweepTrial
from perftune.words.window_words import changes_text


def figure_checks(baseline_runs: Sequence[Accuracy], candidate: Accuracy, gate: AccuracyGate,
                  confidence: float) -> list[FigureCheck]:
    """Every figure of ``candidate`` against the baseline's runs at the same window (the plan's seed first)."""
    if not baseline_runs:
        return []
    judged = against_seeds(baseline_runs[0], candidate, gate, list(baseline_runs[1:]), confidence)
    return [FigureCheck(name=j.name, value=j.value, mean=j.mean, sd=j.sd, n=j.n, limit=j.limit, outcome=j.outcome,
                        spreads=j.spreads) for j in judged]


def judge(baseline_runs: Sequence[Accuracy], candidate: Accuracy, gate: AccuracyGate, confidence: float
          ) -> tuple[bool, list[FigureCheck]]:
    """(passes, its figures): NaN/Inf where the baseline has none, or a figure worse than seed noise, refuses."""
    figures = figure_checks(baseline_runs, candidate, gate, confidence)
    if candidate.nonfinite and not any(b.nonfinite for b in baseline_runs):
        nan = FigureCheck(name="nonfinite", value=float("nan"), mean=0.0, sd=0.0, n=len(baseline_runs), limit=0.0,
                          outcome="worse")
        return False, [nan, *figures]
    return not any(f.outcome == "worse" for f in figures), figures


def suspects(changes: dict, loo: Sequence[LeaveOneOutCheck]) -> tuple[list[dict], str]:
    """The stacked changes to suspect when the stack is refused: the only one; else those whose removal cures the
    stack at the longer window (all of them when no single removal does, or leave-one-out did not run)."""
    if len(changes) == 1:
        return [dict(changes)], "only_change"
    if not loo:
        return [{k: v} for k, v in changes.items()], "not_run"
    cured = [c.removed for c in loo if c.ok]
    return (cured, "leave_one_out") if cured else ([c.removed for c in loo], "leave_one_out")


def worst(figures: Sequence[FigureCheck]) -> Optional[FigureCheck]:
    bad = [f for f in figures if f.outcome == "worse"]
    return max(bad, key=lambda f: f.spreads if f.spreads is not None else float("inf")) if bad else None


class Check:
    """The runs of one stack check: the baseline's seeds, the stack, leave-one-out, through ``measure``."""

    def __init__(self, plan: Plan, measure: Measure, cache_dir: Optional[str], record: StackCheck):
        self.plan, self.measure, self.cache_dir, self.record = plan, measure, cache_dir, record

    def run(self, changes: dict[str, Any], seed: int, label: str) -> Optional[Accuracy]:
        spec = window_spec(self.plan, self.record.samples, seed, label, self.cache_dir, changes)
        result, _ = self.measure(spec)
        self.record.cost_s += result.wall_s or 0.0
        self.record.trial_ids.append(result.trial_id)
        if result.status != "ok" or result.accuracy is None:
            self.record.failed.append(f"{label}: {result.status}: {result.reason}")
            return None
        return result.accuracy

    def baseline(self) -> list[Accuracy]:
        seeds = [(self.plan.seed + i) % (MAX_SEED + 1) for i in range(self.plan.accuracy.seeds)]
        for seed in seeds:
            acc = self.run({}, seed, f"stack check: baseline seed {seed} ({self.record.samples} samples)")
            if acc is not None:
                self.record.seeds.append(seed)
                self.record.baseline_runs.append(acc)
        return self.record.baseline_runs

    def leave_one_out(self, changes: dict[str, Any], per_sample: Optional[float]) -> None:
        """Each stacked change removed in turn, when that many runs fit the check's budget again."""
        gate = self.plan.accuracy
        if len(changes) < 2 or (per_sample and len(changes) * self.record.samples * per_sample > gate.verify_budget_s):
            return
        for name, value in changes.items():
            without = {k: v for k, v in changes.items() if k != name}
            acc = self.run(without, self.plan.seed, f"stack check: without {name}={value}")
            if acc is None:
                self.record.leave_one_out.append(LeaveOneOutCheck(removed={name: value}))
                continue
            ok, figures = judge(self.record.baseline_runs, acc, gate, self.plan.decision.confidence)
            self.record.leave_one_out.append(LeaveOneOutCheck(removed={name: value}, ok=ok, worst=worst(figures)))


def verify(plan: Plan, best: dict[str, Any], measure: Measure, cache_dir: Optional[str],
           per_sample: Optional[float], out_of_time: bool = False) -> StackCheck:
    """The final stack ``best`` (its changes) against the baseline at the longer window; ``plan``'s accuracy
    window is the sweep's (sized); ``per_sample``: the baseline's training seconds per sample."""
    gate = plan.accuracy
    window = gate.samples or 0
    record = StackCheck(status="skipped", best=dict(best), window=window, multiple=gate.verify_multiple,
                        budget_s=gate.verify_budget_s)
    if not best or gate.verify_multiple <= 0:
        record.skipped_why = "no_change"
        return record
    if gate.seeds < 2:  # a plan that opted out of the seed band has nothing to judge the stack against at length
        record.skipped_why = "uncalibrated"
        return record
    if out_of_time:
        record.skipped_why = "out_of_time"
        return record
    record.samples, record.budget_bound = check_length(window, step_unit(plan), per_sample, gate, gate.seeds + 1)
    if not record.samples:
        record.skipped_why = "budget"
        return record
    check = Check(plan, measure, cache_dir, record)
    stack = check.run(best, plan.seed, f"stack check: {changes_text(best)} ({record.samples} samples)")
    baseline = check.baseline()
    if stack is None or not baseline or record.seeds[0] != plan.seed:
        record.status = "failed"
        return record
    record.stack_run = stack
    ok, record.figures = judge(baseline, stack, gate, plan.decision.confidence)
    record.status = "verified" if ok else "refused"
    if not ok:
        check.leave_one_out(best, per_sample)
        record.suspects, record.suspects_by = suspects(best, record.leave_one_out)
    return record


class StackSweep(Protocol):
    """What the stack check needs of a sweep after stacking (``perftune.engine.sweep.Sweep``)."""

    @property
    def plan(self) -> Plan: ...  # its accuracy window sized
    @property
    def result(self) -> SweepResult: ...  # its stack and its calibration
    @property
    def baseline_runs(self) -> list[SweepTrial]: ...
    @property
    def store(self) -> SweepTrials: ...  # its trials, run or reused
    def say(self, line: str) -> None: ...
    def out_of_time(self) -> bool: ...


def verify_sweep(sweep: StackSweep) -> StackCheck:
    """:func:`verify` for a sweep after stacking: its final stack, trial folders, runner and progress lines."""
    best: dict[str, Any] = {}
    for step in (sweep.result.stack or [])[1:]:
        if step.kept:
            best.update(step.change or {})
    base = sweep.baseline_runs[0].result if sweep.baseline_runs else None
    reach = sweep.result.accuracy_calibration.reach if sweep.result.accuracy_calibration else None
    per_sample = (reach.seconds_per_sample if reach and reach.seconds_per_sample else
                  seconds_per_sample(base) if base is not None else None)
    check = verify(sweep.plan, best, Runs(sweep.store, sweep.say), str(sweep.store.cache_dir), per_sample,
                   sweep.out_of_time())
    if check.status in ("verified", "refused"):
        sweep.say(f"  stack check at {check.samples} samples: {check.status}")
    return check
