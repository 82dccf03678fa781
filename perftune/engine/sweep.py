"""The sweep engine: baseline, one variable at a time, accuracy gate, stacking, leave-one-out; resumable.

Order of work
1. the baseline's first process (with the accuracy phase and the profile), whose splits set the order (each group
   of knobs by the share of the step it can reach, ``ceilings.py``) and skip the changes confined to a split too
   small to pay (``cannot gain``: tried on the stack once a stack row raises their ceiling);
2. every value of every variable against the baseline, raced (``race.py``): ``R C1 R C2 R ...`` (R a cheap repeat
   process of the baseline), then ``C R`` rounds for the comparisons still open, each decided sequentially
   (``sequential.py``: faster / slower / equivalent, or undecided at ``decision.max_runs``), Benjamini-Hochberg
   across them, and the verdict with its precedence (``verdicts.py``: no-op and accuracy outrank timing);
3. stacking: the best value of each kept variable, in order of measured gain, applied one after another; each
   cumulative configuration is raced against the stack before it by the same rule and kept only if it is faster
   (a change that stops helping once stacked is dropped, and said so) and the accuracy gate still holds;
4. leave-one-out: the final stack minus each of its changes, to show each change's contribution in context.

The processes themselves (booked, measured, contended ones left out by one rule) are ``processes.py``'s, their trial
folders and ``results.json`` ``trial_store.py``'s; this module is the order of the phases and the decisions.  Each phase
is one method (``baseline``, ``one_at_a_time``, ``stack``, ``leave_one_out``) that ``run`` calls in order, so a new
phase (more baseline processes, say) is a method and a line there: it measures with ``self.procs.measure_process(key)``
after ``self.procs.register(changes, kind)`` and appends the usable ``ProcessRun`` it gets to ``self.procs.runs`` (the
races do that themselves), so the noise and the comparisons count it.  A runner with lanes (a Ray cluster's nodes)
measures each round side by side (``lanes.py``).  Every trial's folder is named by its id (a hash of all knob values,
the burst settings and the replicate index), and the races are deterministic given the measurements, so a rerun reuses
what finished and runs only what is missing.  ``results.json`` is rewritten (atomically) after every trial.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Hashable, Optional

from perftune import knobs
from perftune.engine import ceilings, memory, noop, stacking, verdicts
from perftune.engine.aa_check import aa_checks
from perftune.engine.accuracy import gate as accuracy_gate
from perftune.engine.accuracy import seeds as seed_runs
from perftune.engine.accuracy import stack_check
from perftune.engine.budget import Budget, spend_or_none, stack_check_runs
from perftune.engine.lanes import ParallelRunner, lanes_of
from perftune.engine.paired import PairedRun
from perftune.engine.processes import Processes
from perftune.engine.progress import SilentProgress, SweepProgress, most_lines
from perftune.engine.race import Race
from perftune.engine.search_runs import run_searches
from perftune.engine.sequential import decide
from perftune.engine.stats import Noise, Policy, benjamini_hochberg
from perftune.engine.trial_store import TrialRunner, TrialStore
from perftune.io.outdir import clear_own
from perftune.io.plan import Plan
from perftune.io.records import TrialResult
from perftune.io.sweep_records import (
    FAILED_VERDICTS,
    ComparisonRecord,
    Multiplicity,
    SweepResult,
    SweepTrial,
    Why,
)
from perftune.words import lm, reasons, rules
from perftune.words.ceiling_words import ceiling_text


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Sweep:
    """The phases of one sweep (baseline, singles, stack, leave-one-out) and their decisions."""

    def __init__(self, plan: Plan, out_dir: Path, run: TrialRunner, plan_path: Optional[Path] = None,
                 fresh: bool = False, progress: Optional[SweepProgress] = None, command: str = ""):
        self.plan = plan
        self.out = Path(out_dir)
        if fresh and self.out.exists():
            clear_own(self.out)  # perftune's own results and trial folders only, never a file it did not write
        self.result = SweepResult(plan=plan, plan_path=str(plan_path) if plan_path else None, command=command,
                                  started_utc=utc_now())
        d = plan.decision
        self.policy = Policy(confidence=d.confidence, equivalence=d.equivalence, max_runs=d.max_runs)
        self.started = time.perf_counter()
        self.budget = Budget(d.budget_s, self.started, left_unmeasured=self.result.left_unmeasured)
        self.store = TrialStore(self.out, run, self.result, progress or SilentProgress())
        self.procs = Processes(plan, self.store, self.say, self.out_of_time, self.budget)
        self.expected = self.ticks = 0  # progress lines expected so far, and given
        self.base: Hashable = ""
        self.best: Hashable = ""
        # a runner with lanes (a Ray cluster's nodes) measures each race's rounds side by side (``lanes.py``)
        self.parallel = run if isinstance(run, ParallelRunner) and run.lanes > 1 else None
        self.pairs: list[PairedRun] = []  # every paired process's blocks (``engine/paired.py``), in order
        self.skipped: list[dict[str, Any]] = []  # the singles that cannot gain on the baseline: tried on the stack

    def say(self, line: str) -> None:
        """One progress line (a process measured, or a verdict); the bar grows past what was expected (an extra
        round, a re-measure, stacking or leave-one-out)."""
        with self.store.lock:  # a cluster's lanes say their processes from their own threads
            self.ticks += 1
            if self.ticks > self.expected:
                self.store.progress.grow(1)
            self.store.progress.done(line)

    def out_of_time(self) -> bool:
        return not self.budget.fits()  # no room in ``decision.budget_s`` for one more process like those so far

    @property
    def baseline_runs(self) -> list[SweepTrial]:
        return self.procs.of.get(self.base, [])

    # -- decisions ---------------------------------------------------------------------------------------------
    def gate(self, trial: SweepTrial) -> Optional[accuracy_gate.GateResult]:
        base = self.baseline_runs[0].result.accuracy if self.baseline_runs else None
        return accuracy_gate.check(base, trial.result.accuracy, self.plan.accuracy, seed_runs.band(self.result),
                                   self.plan.decision.confidence) if base else None

    def timing_moot(self, key: Hashable) -> bool:
        """No more timing can change the verdict: a known no-op, or an accuracy failure."""
        trial = self.procs.first(key)
        gate = self.gate(trial)
        return bool(noop.no_effect_reasons(trial.changes, trial.result)) or (gate is not None and not gate.ok)

    def race(self, candidates: list[Hashable], reference: Hashable) -> dict[Hashable, Optional[ComparisonRecord]]:
        """Race ``candidates`` against ``reference``; their comparisons as records."""
        race = Race(self.procs.measure_process, self.procs.runs, self.policy, self.out_of_time, self.timing_moot,
                    lanes=lanes_of(self.procs, self.parallel) if self.parallel is not None else None,
                    pairable=lambda ref, cand: self.procs.pairable(ref, cand) is not None,
                    measure_pair=self.procs.measure_pair, pairs=self.pairs)
        decisions = race.run(candidates, reference)
        label = knobs.label_of(self.procs.configs[reference][0])
        self.record_noise()
        return {c: memory.with_memory(verdicts.record(d, label) if d else None, self.procs.of, c, reference,
                                      self.plan) for c, d in decisions.items()}  # peak memory beside the speed

    def informational(self, candidate: Hashable, reference: Hashable, label: str) -> Optional[ComparisonRecord]:
        """A comparison looked at once (not raced): e.g. a stack row against the baseline."""
        d = decide(self.procs.runs, candidate, reference, self.record_noise(), self.policy, looks=1)
        return memory.with_memory(verdicts.record(d, label, final=False) if d else None, self.procs.of, candidate,
                                  reference, self.plan)

    def record_noise(self) -> Noise:
        """The sweep's pooled process noise so far, recorded in results.json."""
        noise = Noise.pooled(self.procs.runs)
        self.result.noise_sd, self.result.noise_df, self.result.noise_observed_df = \
            noise.sd, noise.df, noise.observed_df
        return noise

    def judge(self, trial: SweepTrial, which: str, discovered: bool = True, family: str = "the sweep") -> None:
        """``trial``'s verdict from its comparison ``which`` (``vs_baseline`` or ``vs_previous``), and why."""
        gate = self.gate(trial)
        if gate is not None:
            trial.accuracy_changes = gate.changes
        trial.verdict, why = verdicts.verdict(
            getattr(trial, which), noop.no_effect_reasons(trial.changes, trial.result), gate,
            min_gain=self.plan.decision.min_gain, discovered=discovered, family=family, which=which)
        if gate is not None and gate.ok and trial.verdict not in FAILED_VERDICTS:
            why.unjudged, why.gate_notes = list(gate.unjudged), gate.pass_notes()  # a pass not judged or separated
        base = self.baseline_runs[0].result if self.baseline_runs else None
        why.other_model = noop.model_mismatch(trial.changes, trial.result, base)
        self.explain(trial, why)

    def explain(self, trial: SweepTrial, why: Why) -> None:
        """``why`` recorded, and its words (the one renderer's) as the trial's ``reason``."""
        trial.why = why
        trial.reason = reasons.reason_text(trial)
        self.store.save()

    # -- the phases ---------------------------------------------------------------------------------------------
    def singles(self) -> list[dict[str, Any]]:
        return [{name: value} for name, values in self.plan.variables.items() for value in values]

    def order_singles(self, singles: list[dict[str, Any]]) -> list[dict[str, Any]]:
        first = self.baseline_runs[0].result if self.baseline_runs else None
        ordered, self.result.order_rule = ceilings.order_singles(singles, first)
        return ordered

    def cannot_gain(self, changes: dict[str, Any], on: Optional[TrialResult], where: str) -> bool:
        """Whether ``changes`` cannot gain ``decision.min_gain`` on the process ``on`` (its ceiling from ``on``'s
        splits, recorded with where it was read); a change not confined to one split always can."""
        c = ceilings.judged(changes, on, where, self.plan.decision)
        self.result.ceilings += [c] if c else []
        if c and not c.raced:
            self.say(f"  {c.label}: cannot gain{'' if where == 'baseline' else ' on ' + where}: {ceiling_text(c)}")
        return bool(c and not c.raced)

    def run(self) -> SweepResult:
        singles = self.singles()
        self.expected = 1 + 3 * len(singles)  # R C1 R C2 R ... and a verdict line each, before any extra round
        self.store.progress.begin(self.expected)
        self.store.progress.bound(most_lines(len(singles), self.plan.decision.max_runs, self.plan.accuracy.seeds))
        finished = False
        try:
            self.store.check_earlier()
            self.plan, self.result.accuracy_calibration = seed_runs.calibrate_sweep(self, self.budget.room)
            self.procs.plan = self.plan  # the sized accuracy window: every spec from here on is judged at it
            if self.baseline(len(singles) + len(self.plan.ranges)):
                self.stack(self.one_at_a_time(singles + run_searches(self)))  # ranges' found values: singles
                self.leave_one_out()
                self.budget.reserve("the stack check", stack_check_runs(self.plan, self.result.stack))
                self.result.stack_check = stack_check.verify_sweep(self)  # the final stack at a longer window
            self.result.status = "complete"
            finished = True
        except KeyboardInterrupt:
            self.result.status = "interrupted"
            raise
        finally:
            self.result.finished_utc = utc_now()
            self.store.progress.end()
            self.store.save_last(finished)
        return self.result

    def baseline(self, candidates: int) -> bool:
        """The baseline's first process (and more where too few candidates interleave it); False if it failed."""
        self.base = self.procs.register({}, "baseline")
        run = self.procs.measure_process(self.base)
        if run is None:
            last = self.baseline_runs[-1]
            self.explain(last, Why(failure=last.result.reason or last.verdict, stopped_sweep=True))
            return False
        self.procs.runs.append(run)
        self.result.environment = self.baseline_runs[0].result.environment
        for _ in range(self.plan.decision.baseline_runs - 1 - candidates):  # too few candidates to interleave
            self.procs.runs.extend(r for r in [spend_or_none(lambda: self.procs.measure_process(self.base))] if r)
        return True

    def one_at_a_time(self, singles: list[dict[str, Any]]) -> list[SweepTrial]:
        """Every value of every variable raced against the baseline, with its verdict; their first processes."""
        first = self.baseline_runs[0].result
        ordered = self.order_singles(singles)
        self.skipped += [c for c in ordered if self.cannot_gain(c, first, "baseline")]
        keys = [self.procs.register(changes, "single") for changes in ordered if changes not in self.skipped]
        comparisons = self.race(keys, self.base)
        self.result.aa_check, self.result.aa_paired = aa_checks(self.procs, self.base, self.policy, self.record_noise,
                                                                paired=self.parallel is None and bool(self.pairs))
        keys = [k for k in keys if self.procs.of[k]]  # the budget may have left some unmeasured
        measured = [k for k in keys if comparisons[k] is not None]
        found = benjamini_hochberg([comparisons[k].p_value for k in measured], 1 - self.plan.decision.confidence)
        discovered = dict(zip(measured, found))
        self.result.multiplicity = Multiplicity(comparisons=len(measured), looks=self.policy.max_runs,
                                                false_discovery_rate=1 - self.plan.decision.confidence)
        family = rules.family_text(self.result.multiplicity)
        for key in keys:
            trial = self.procs.first(key)
            if trial.verdict in FAILED_VERDICTS:
                continue
            trial.vs_baseline = comparisons[key]
            self.judge(trial, "vs_baseline", discovered.get(key, False), family)
            self.say(f"  {trial.label}: {trial.verdict}: {trial.reason}{lm.verdict_suffix(trial.result)}")
        return [self.procs.first(k) for k in keys]

    def stack(self, single_trials: list[SweepTrial]) -> None:
        """The stack's rows as stacking decides them, each saved; the best stack is the last one kept."""
        self.result.stack = []
        for step in stacking.stack(self, single_trials, self.plan.decision.retry_on_stack, self.skipped):
            self.result.stack.append(step)
            self.store.save()
        best = [s for s in self.result.stack if s.kept][-1]
        trial = self.procs.first(best.trial_id)
        self.result.best_label, self.result.best_trial_id = best.label, best.trial_id
        self.result.best_vs_baseline = trial.vs_baseline if trial.kind != "baseline" else None
        self.store.save()
        self.best = best.trial_id

    def leave_one_out(self) -> None:
        # each row saved as it is compared; the rows the budget left are named in ``left_unmeasured``
        spend_or_none(lambda: [self.store.save() for _ in stacking.leave_one_out(self, self.result.stack, self.best)])


def run_sweep(plan: Plan, out_dir: Path, run: TrialRunner, plan_path: Optional[Path] = None, fresh: bool = False,
              progress: Optional[SweepProgress] = None, command: str = "") -> SweepResult:
    """Run (or resume) the sweep of ``plan`` in ``out_dir``; ``command`` is recorded in results.json as it is."""
    return Sweep(plan, out_dir, run, plan_path, fresh=fresh, progress=progress, command=command).run()
