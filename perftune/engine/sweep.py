"""The sweep engine: baseline, one variable at a time, accuracy gate, stacking, leave-one-out; resumable.

Order of work
1. the baseline's first process (with the accuracy phase and the profile), whose profile sets the order: if waiting
   for data is at least ``DATA_BOUND_SHARE`` of the step, the data-pipeline knobs go first, otherwise the compute
   knobs do (then the rest in plan order);
2. every value of every variable against the baseline, raced (``race.py``): ``R C1 R C2 R ...`` (R a cheap repeat
   process of the baseline), then ``C R`` rounds for the comparisons still open, each decided sequentially
   (``sequential.py``: faster / slower / equivalent, or undecided at ``decision.max_runs``), Benjamini-Hochberg
   across them, and the verdict with its precedence (``verdicts.py``: no-op and accuracy outrank timing);
3. stacking: the best value of each kept variable, in order of measured gain, applied one after another; each
   cumulative configuration is raced against the stack before it by the same rule and kept only if it is faster
   (a change that stops helping once stacked is dropped, and said so) and the accuracy gate still holds;
4. leave-one-out: the final stack minus each of its changes, to show each change's contribution in context.

A process measured while other processes competed for the cores (``TrialResult.contended_windows``) is measured
again (``decision.remeasure_contended`` times at most) and does not count as a look.  A runner with lanes (a Ray
cluster's nodes) measures each round side by side (``lanes.py``); there a contended process is left out and the race
gives the candidate another.  Every trial's folder is named
by its id (a hash of all knob values, the burst settings and the replicate index), and the races are deterministic
given the measurements, so a rerun reuses what finished and runs only what is missing.  ``results.json`` is
rewritten (atomically) after every trial.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Hashable, Optional

from perftune import knobs
from perftune.engine import accuracy as accuracy_gate
from perftune.engine import lm, noop, order, seed_runs, verdicts
from perftune.engine.blocked import process_run
from perftune.engine.progress import SilentProgress, SweepProgress
from perftune.engine.lanes import ParallelRunner, lanes_of
from perftune.engine.race import EXCLUDED, LaneOutcome, Race
from perftune.engine.sequential import Noise, Policy, ProcessRun, benjamini_hochberg, decide
from perftune.engine.specs import make_spec
from perftune.errors import UserError
from perftune.io.files import RESULTS_NAME, TRIALS_DIR, reusable_trial
from perftune.io.outdir import clear_own
from perftune.io.plan import Plan
from perftune.io.records import TrialResult, TrialSpec
from perftune.io.store import write_json_atomic
from perftune.io.sweep_records import FAILED_VERDICTS, ComparisonRecord, StackStep, SweepResult, SweepTrial

FAILED = FAILED_VERDICTS
label_of = knobs.label_of
#: runs one trial in ``trial_dir`` and returns its result (``perftune.runner.run_trial``; tests pass scripted ones)
TrialRunner = Callable[[TrialSpec, Path], TrialResult]


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Sweep:
    def __init__(self, plan: Plan, out_dir: Path, run: TrialRunner, plan_path: Optional[Path] = None,
                 fresh: bool = False, progress: Optional[SweepProgress] = None, command: str = ""):
        self.plan = plan
        self.out = Path(out_dir)
        self.trials_dir = self.out / TRIALS_DIR
        self.cache_dir = (self.out / "cache").resolve()
        self.run_trial = run
        if fresh and self.out.exists():
            clear_own(self.out)  # perftune's own results and trial folders only, never a file it did not write
        self.result = SweepResult(plan=plan, plan_path=str(plan_path) if plan_path else None, command=command,
                                  started_utc=utc_now())
        self.progress: SweepProgress = progress or SilentProgress()
        d = plan.decision
        self.policy = Policy(confidence=d.confidence, equivalence=d.equivalence, max_runs=d.max_runs)
        self.runs: list[ProcessRun] = []  # every usable process, in measurement order (config = its key)
        self.configs: dict[Hashable, tuple[dict[str, Any], str]] = {}  # key -> (changes, kind)
        self.processes: dict[Hashable, list[SweepTrial]] = {}  # key -> its processes, in order
        self.contended: dict[Hashable, int] = {}  # key -> its processes measured under contention
        self.streak = 0  # contended processes in a row, whatever their configuration
        self.base: Hashable = ""
        self.best: Hashable = ""
        self.expected = self.ticks = 0  # progress lines expected so far, and given
        self.started = time.perf_counter()
        # a runner with lanes (a Ray cluster's nodes) measures each race's rounds side by side (``lanes.py``)
        self.parallel = run if isinstance(run, ParallelRunner) and run.lanes > 1 else None
        self.lock = threading.RLock()  # the lanes' threads share the records, the progress and results.json
        self.booked: dict[Hashable, int] = {}  # key -> replicates reserved so far
        self.unused: dict[Hashable, int] = {}  # key -> contended processes left out of the lanes' comparisons

    # -- running trials -------------------------------------------------------------------------------------
    def _spec(self, changes: dict[str, Any], replicate: int = 0) -> TrialSpec:
        return make_spec(self.plan, changes, label_of(changes), replicate, self.cache_dir)

    def measure(self, changes: dict[str, Any], kind: str, replicate: int = 0, lane: Optional[int] = None) -> SweepTrial:
        """One trial (reused when an earlier run finished it); ``lane``: the runner's lane, from a lane's thread."""
        spec = self._spec(changes, replicate)
        trial_dir = self.trials_dir / spec.trial_id
        if lane is None:  # the lanes' runner says itself what runs where
            self.progress.start(spec.label + (f" (run {replicate + 1})" if replicate else ""))
        result = reusable_trial(trial_dir, spec.trial_id)
        with self.lock:  # reused = finished by an earlier, interrupted run (not one this run already measured)
            reused = result is not None and all(t.trial_id != spec.trial_id for t in self.result.trials)
        if result is None:
            result = self.run_trial(spec, trial_dir) if lane is None else self.run_trial(spec, trial_dir, lane=lane)
        verdict = result.status if result.status in FAILED else ("baseline" if kind == "baseline" else "measured")
        trial = SweepTrial(trial_id=spec.trial_id, label=spec.label, kind=kind, changes=changes,
                           replicate=replicate, verdict=verdict, reason=result.reason or "", reused=reused,
                           result=result.model_copy(update={"steps": []}))
        with self.lock:
            self.result.trials.append(trial)
            self.save()
        return trial

    def save(self) -> None:
        with self.lock:
            self.result.wall_s = time.perf_counter() - self.started
            write_json_atomic(self.out / RESULTS_NAME, self.result.model_dump(mode="json"))

    def say(self, line: str) -> None:
        """One progress line (a process measured, or a verdict); the bar grows past what was expected."""
        with self.lock:
            self.ticks += 1
            if self.ticks > self.expected:
                self.progress.grow(1)  # an extra round, a re-measure, stacking or leave-one-out
            self.progress.done(line)

    def out_of_time(self) -> bool:
        budget = self.plan.decision.budget_s
        return budget is not None and time.perf_counter() - self.started > budget

    def register(self, changes: dict[str, Any], kind: str) -> Hashable:
        """A configuration's key (its first process's trial id) for the races."""
        key = self._spec(changes).trial_id
        self.configs.setdefault(key, (changes, kind))
        self.processes.setdefault(key, [])
        return key

    def measure_process(self, key: Hashable) -> Optional[ProcessRun]:
        """One more usable process of ``key``; None if it failed.

        A contended process is measured again, at most ``remeasure_contended`` times, and only while contention
        looks passing: once that many processes in a row were contended, it is the machine's state, measuring again
        would double the cost for nothing, and the process is used (and counted in its comparison's ``contended``).
        """
        retries, limit = 0, self.plan.decision.remeasure_contended
        while True:
            trial = self.measure_replicate(key, self.book(key))
            self.processes[key].append(trial)
            r = trial.result
            if trial.verdict in FAILED or not r.windows:
                self._done(trial)
                return None
            self.streak = self.streak + 1 if r.contended_windows else 0
            self.contended[key] = self.contended.get(key, 0) + bool(r.contended_windows)
            if r.contended_windows and retries < limit and self.streak <= limit and not self.out_of_time():
                trial.excluded = (f"{r.contended_windows} of {len(r.windows)} timed windows contended (other "
                                  "processes used the cores): measured again")
                retries += 1
                self._done(trial)
                continue
            self._done(trial)
            return process_run(key, r)

    def book(self, key: Hashable) -> int:
        """The next replicate of ``key``, reserved (a lane's process gets its number before the round starts)."""
        with self.lock:
            replicate = self.booked.get(key, 0)  # every process of ``key`` is booked first
            self.booked[key] = replicate + 1
            return replicate

    def measure_replicate(self, key: Hashable, replicate: int, lane: Optional[int] = None) -> SweepTrial:
        """Process ``replicate`` of ``key``: the first carries the configuration's kind, later ones are repeats."""
        changes, kind = self.configs[key]
        return self.measure(changes, kind if replicate == 0 or kind == "baseline" else "repeat", replicate, lane)

    def measure_booked(self, key: Hashable, replicate: int, lane: int) -> SweepTrial:
        """A lane's process (in the lane's thread): measured once; ``settle`` decides whether its timing is used."""
        trial = self.measure_replicate(key, replicate, lane)
        with self.lock:
            self.processes[key].append(trial)
            self.processes[key].sort(key=lambda t: t.replicate)
            self._done(trial)
        return trial

    def settle(self, key: Hashable, trial: SweepTrial) -> LaneOutcome:
        """A lane's finished process, in lane order: failed (None), usable, or left out while contention looks passing
        (``EXCLUDED``: not a look; the race gives an open candidate another process), at most ``remeasure_contended``
        processes of a configuration in the sweep."""
        r = trial.result
        if trial.verdict in FAILED or not r.windows:
            return None
        self.contended[key] = self.contended.get(key, 0) + bool(r.contended_windows)
        if r.contended_windows and self.unused.get(key, 0) < self.plan.decision.remeasure_contended \
                and not self.out_of_time():
            self.unused[key] = self.unused.get(key, 0) + 1
            trial.excluded = (f"{r.contended_windows} of {len(r.windows)} timed windows contended (other processes "
                              "used the node's cores): not used")
            self.save()
            return EXCLUDED
        return process_run(key, r)

    def first(self, key: Hashable) -> SweepTrial:
        return self.processes[key][0]

    @property
    def baseline_runs(self) -> list[SweepTrial]:
        return self.processes.get(self.base, [])

    # -- decisions ---------------------------------------------------------------------------------------------
    def gate(self, trial: SweepTrial) -> Optional[accuracy_gate.GateResult]:
        base = self.baseline_runs[0].result.accuracy if self.baseline_runs else None
        return accuracy_gate.check(base, trial.result.accuracy, self.plan.accuracy, seed_runs.band(self.result),
                                   self.plan.decision.confidence) if base else None

    def settled(self, key: Hashable) -> bool:
        """No more timing can change the verdict: a known no-op, or an accuracy failure."""
        trial = self.first(key)
        gate = self.gate(trial)
        return bool(noop.no_effect_reasons(trial.changes, trial.result)) or (gate is not None and not gate.ok)

    def race(self, candidates: list[Hashable], reference: Hashable) -> dict[Hashable, Optional[ComparisonRecord]]:
        """Race ``candidates`` against ``reference``; their comparisons as records."""
        race = Race(self.measure_process, self.runs, self.policy, self.out_of_time, self.settled,
                    lanes=lanes_of(self, self.parallel) if self.parallel is not None else None)
        decisions = race.run(candidates, reference)
        label = label_of(self.configs[reference][0])
        self.record_noise()
        return {c: verdicts.record(d, label, contended=self.contended.get(c, 0) + self.contended.get(reference, 0))
                if d else None for c, d in decisions.items()}

    def informational(self, candidate: Hashable, reference: Hashable, label: str) -> Optional[ComparisonRecord]:
        """A comparison looked at once (not raced): e.g. a stack row against the baseline."""
        d = decide(self.runs, candidate, reference, self.record_noise(), self.policy, looks=1)
        return verdicts.record(d, label, final=False) if d else None

    def record_noise(self) -> Noise:
        """The sweep's pooled process noise so far, recorded in results.json."""
        noise = Noise.pooled(self.runs, self.policy.prior_sd, self.policy.prior_df)
        self.result.noise_sd, self.result.noise_df, self.result.noise_observed_df = \
            noise.sd, noise.df, noise.observed_df
        return noise

    def judge(self, trial: SweepTrial, comparison: Optional[ComparisonRecord], discovered: bool = True,
              family: str = "the sweep") -> None:
        gate = self.gate(trial)
        if gate is not None:
            trial.accuracy_changes = gate.changes
        trial.verdict, trial.reason = verdicts.verdict(
            comparison, noop.no_effect_reasons(trial.changes, trial.result), gate,
            min_gain=self.plan.decision.min_gain, discovered=discovered, family=family)
        if gate is not None and trial.verdict not in FAILED:
            trial.reason += gate.passed_note()  # passed, but not because it was judged: say so
        self.save()

    # -- the phases ---------------------------------------------------------------------------------------------
    def singles(self) -> list[dict[str, Any]]:
        return [{name: value} for name, values in self.plan.variables.items() for value in values]

    def order_singles(self, singles: list[dict[str, Any]]) -> list[dict[str, Any]]:
        first = self.baseline_runs[0].result if self.baseline_runs else None
        ordered, self.result.order_rule = order.singles_by_bottleneck(singles, first)
        return ordered

    def run(self) -> SweepResult:
        singles = self.singles()
        self.expected = 1 + 3 * len(singles)  # R C1 R C2 R ... and a verdict line each, before any extra round
        self.progress.begin(self.expected)
        try:
            self.plan, self.result.accuracy_calibration = seed_runs.calibrate_sweep(self)
            self._run(singles)
            self.result.status = "complete"
        except KeyboardInterrupt:
            self.result.status = "interrupted"
            raise
        finally:
            self.result.finished_utc = utc_now()
            self.progress.end()
            self.save()
        return self.result

    def _run(self, singles: list[dict[str, Any]]) -> None:
        self.base = self.register({}, "baseline")
        run = self.measure_process(self.base)
        if run is None:
            last = self.baseline_runs[-1]
            last.reason = f"the baseline itself failed: {last.result.reason}"
            self.save()
            return
        self.runs.append(run)
        self.result.environment = self.baseline_runs[0].result.environment
        for _ in range(self.plan.decision.baseline_runs - 1 - len(singles)):  # too few candidates to interleave
            run = self.measure_process(self.base)
            self.runs += [run] if run else []
        keys = [self.register(changes, "single") for changes in self.order_singles(singles)]
        comparisons = self.race(keys, self.base)
        self.aa_check()
        measured = [k for k in keys if comparisons[k] is not None]
        found = benjamini_hochberg([comparisons[k].p_value for k in measured], 1 - self.plan.decision.confidence)
        discovered = dict(zip(measured, found))
        family = (f"the {len(measured)} one-at-a-time comparisons (Benjamini-Hochberg, false discovery rate "
                  f"{1 - self.plan.decision.confidence:.0%})")
        self.result.multiplicity = (
            f"{family}; each interval allows for up to {self.policy.max_runs} looks (Pocock), so adding processes "
            "to an open comparison does not inflate false alarms")
        for key in keys:
            trial = self.first(key)
            if trial.verdict in FAILED:
                continue
            trial.vs_baseline = comparisons[key]
            self.judge(trial, comparisons[key], discovered.get(key, False), family)
            self.say(f"  {trial.label}: {trial.verdict}: {trial.reason}{lm.verdict_suffix(trial.result)}")
        self.stack([self.first(k) for k in keys])
        self.leave_one_out()

    def aa_check(self) -> None:
        """The baseline's last usable process against its first: how far the machine drifted over the singles."""
        base_runs = [r for r in self.runs if r.config == self.base]
        base_runs = [r for r in base_runs if r.node == base_runs[0].node] if base_runs else []  # one machine's drift
        if len(base_runs) > 1:
            pair = [ProcessRun("first", base_runs[0].windows), ProcessRun("last", base_runs[-1].windows)]
            d = decide(pair, "last", "first", self.record_noise(), self.policy, looks=1)
            self.result.aa_check = verdicts.record(d, "baseline (run 1)", final=False) if d else None

    def _done(self, trial: SweepTrial) -> None:
        r = trial.result
        what = lm.progress_text(r) if r.status == "ok" and r.samples_per_s else \
            f"{trial.verdict}: {trial.reason}"
        run = f" (run {trial.replicate + 1})" if trial.replicate else ""
        extra = (f" ({trial.excluded})" if trial.excluded else "") + (" (reused)" if trial.reused else "")
        extra += f" [on {r.node.host}]" if r.node is not None else ""
        self.say(f"  {trial.label}{run}: {what}{extra}")

    def stack(self, single_trials: list[SweepTrial]) -> None:
        ordered = order.stack_candidates(single_trials, self.plan.decision.retry_on_stack)
        self.result.stack = [StackStep(label="baseline", trial_id=self.baseline_runs[0].trial_id, kept=True)]
        current_changes: dict[str, Any] = {}
        current = self.base
        for single in ordered:
            changes = {**current_changes, **single.changes}
            if not current_changes:
                if single.verdict != "kept":
                    continue  # on top of the baseline alone, its one-at-a-time verdict already answers
                trial, key = single, self.register(single.changes, "single")
            else:
                key = self.register(changes, "stack")
                comparison = self.race([key], current)[key]
                trial = self.first(key)
                if trial.verdict not in FAILED:
                    trial.vs_previous = comparison
                    trial.vs_baseline = self.informational(key, self.base, "baseline")
                    self.judge(trial, comparison)
            kept = trial.verdict == "kept"
            reason = trial.reason if kept else f"{trial.verdict}: {trial.reason}"
            if not kept and trial.verdict not in FAILED and trial.kind == "stack":
                trial.verdict = "dropped"
                trial.reason = reason
            self.result.stack.append(StackStep(label=label_of(changes), change=dict(single.changes),
                                               trial_id=trial.trial_id, kept=kept, reason=reason))
            self.say(f"  stack {label_of(changes)}: {'kept' if kept else reason}{lm.verdict_suffix(trial.result)}")
            if kept:
                current_changes, current = changes, key
            self.save()
        self._set_best(self.first(current), label_of(current_changes))
        self.best = current

    def _set_best(self, trial: SweepTrial, label: str) -> None:
        self.result.best_label = label
        self.result.best_trial_id = trial.trial_id
        self.result.best_vs_baseline = trial.vs_baseline if trial.kind != "baseline" else None
        self.save()

    def leave_one_out(self) -> None:
        kept_steps = [s for s in self.result.stack[1:] if s.kept]
        if len(kept_steps) < 2:
            return
        final_changes: dict[str, Any] = {}
        for s in kept_steps:
            final_changes.update(s.change or {})
        for s in kept_steps:
            without = {k: v for k, v in final_changes.items() if k not in (s.change or {})}
            key = self.register(without, "leave_one_out")
            trial = self.measure(without, "leave_one_out")  # an earlier stack row's process is reused
            if trial.verdict not in FAILED:
                if not any(r.config == key for r in self.runs):
                    self.runs.append(process_run(key, trial.result))
                # how much faster the final stack is than the stack without this change
                trial.vs_previous = self.informational(self.best, key, f"final without {label_of(s.change or {})}")
                trial.vs_baseline = self.informational(key, self.base, "baseline")
                trial.verdict = "measured"
                c = trial.vs_previous
                trial.reason = (f"removing {label_of(s.change or {})} from the final stack: final is "
                                f"x{c.ratio:.2f} [{c.ci_low:.2f}, {c.ci_high:.2f}] of this" if c else "")
            self.say(f"  {trial.label}: {trial.reason or trial.verdict}{lm.verdict_suffix(trial.result)}")
            self.save()


def run_sweep(plan: Plan, out_dir: Path, run: TrialRunner, plan_path: Optional[Path] = None, fresh: bool = False,
              progress: Optional[SweepProgress] = None, command: str = "") -> SweepResult:
    """Run (or resume) the sweep of ``plan`` in ``out_dir``; ``command`` is recorded in results.json as it is."""
    return Sweep(plan, out_dir, run, plan_path, fresh=fresh, progress=progress, command=command).run()
