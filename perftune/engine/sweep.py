"""The sweep engine: baseline, one variable at a time, accuracy gate, stacking, leave-one-out; resumable.

Order of work
1. the baseline, measured ``decision.baseline_runs`` times in separate processes, spread through the
   one-at-a-time phase (first, evenly between, last), so drift shows up as baseline spread and the noise estimate
   covers process-to-process variation (see ``stats.py``);
2. every value of every variable alone against the pooled baseline.  Order rule: the first baseline's profile
   decides: if waiting for data is at least ``DATA_BOUND_SHARE`` of the step, the data-pipeline knobs go first,
   otherwise the compute knobs do (then the rest in plan order).  Every single is compared with all baseline runs,
   so the order changes when an answer arrives, not the answer;
3. stacking: the best kept value of each kept variable, in order of measured gain, applied one after another; each
   cumulative configuration is measured and kept only if it is faster than the stack before it (a change that
   stops helping once stacked is dropped, and said so) and the accuracy gate still holds against the baseline;
4. leave-one-out: the final stack minus each of its changes, to show each change's contribution in context.

Every trial's folder is named by its id (a hash of all knob values and the burst settings), so a rerun reuses
what finished and runs only what is missing.  ``results.json`` is rewritten (atomically) after every trial.
"""

from __future__ import annotations

import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

from perftune import knobs
from perftune.engine import accuracy as accuracy_gate
from perftune.engine import noop, stats
from perftune.engine.specs import make_spec
from perftune.errors import UserError
from perftune.io.files import RESULTS_NAME, TRIAL_NAME, TRIALS_DIR, read_trial_if_present
from perftune.io.plan import Plan
from perftune.io.records import DATA_BOUND_SHARE, TrialResult, TrialSpec
from perftune.io.store import write_json_atomic
from perftune.io.sweep_records import FAILED_VERDICTS, ComparisonRecord, StackStep, SweepResult, SweepTrial

FAILED = FAILED_VERDICTS
label_of = knobs.label_of
#: runs one trial in ``trial_dir`` and returns its result (``perftune.runner.run_trial``; tests pass scripted ones)
TrialRunner = Callable[[TrialSpec, Path], TrialResult]


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class SweepProgress(Protocol):
    """What the sweep reports while it runs; the CLI renders it (a progress bar, or plain lines)."""

    def begin(self, total: int) -> None: ...  # trials expected so far
    def start(self, label: str) -> None: ...  # a trial starts
    def done(self, line: str) -> None: ...  # a trial is done: one line saying what came out
    def note(self, line: str) -> None: ...  # a line that finishes no trial (a verdict decided after its trial ran)
    def grow(self, n: int) -> None: ...  # n more trials than expected (stacking, leave-one-out)
    def end(self) -> None: ...


class SilentProgress:
    """Reports nothing."""

    def begin(self, total: int) -> None:
        pass

    def start(self, label: str) -> None:
        pass

    def done(self, line: str) -> None:
        pass

    def note(self, line: str) -> None:
        pass

    def grow(self, n: int) -> None:
        pass

    def end(self) -> None:
        pass


class Sweep:
    def __init__(self, plan: Plan, out_dir: Path, run: TrialRunner, plan_path: Optional[Path] = None,
                 fresh: bool = False, progress: Optional[SweepProgress] = None, command: str = ""):
        self.plan = plan
        self.out = Path(out_dir)
        self.trials_dir = self.out / TRIALS_DIR
        self.cache_dir = (self.out / "cache").resolve()
        self.run_trial = run
        if fresh and self.out.exists():
            shutil.rmtree(self.trials_dir, ignore_errors=True)
            (self.out / RESULTS_NAME).unlink(missing_ok=True)
        self.result = SweepResult(plan=plan, plan_path=str(plan_path) if plan_path else None, command=command,
                                  started_utc=utc_now())
        self.progress: SweepProgress = progress or SilentProgress()
        self.baseline_runs: list[SweepTrial] = []
        self.started = time.perf_counter()

    # -- running trials -------------------------------------------------------------------------------------
    def _spec(self, changes: dict[str, Any], replicate: int = 0) -> TrialSpec:
        return make_spec(self.plan, changes, label_of(changes), replicate, self.cache_dir)

    def measure(self, changes: dict[str, Any], kind: str, replicate: int = 0) -> SweepTrial:
        spec = self._spec(changes, replicate)
        trial_dir = self.trials_dir / spec.trial_id
        label = spec.label + (f" (run {replicate + 1})" if kind == "baseline" else "")
        self.progress.start(label)
        result = _reusable(trial_dir, spec.trial_id)
        # reused = finished by an earlier, interrupted run (not a configuration this run already measured)
        reused = result is not None and all(t.trial_id != spec.trial_id for t in self.result.trials)
        if result is None:
            result = self.run_trial(spec, trial_dir)
        verdict = result.status if result.status in FAILED else ("baseline" if kind == "baseline" else "measured")
        trial = SweepTrial(trial_id=spec.trial_id, label=spec.label, kind=kind, changes=changes,
                           replicate=replicate, verdict=verdict, reason=result.reason or "", reused=reused,
                           result=result.model_copy(update={"steps": []}))
        self.result.trials.append(trial)
        self.save()
        return trial

    def save(self) -> None:
        self.result.wall_s = time.perf_counter() - self.started
        write_json_atomic(self.out / RESULTS_NAME, self.result.model_dump(mode="json"))

    # -- measurements and decisions --------------------------------------------------------------------------
    def _measurement(self, trials: list[SweepTrial]) -> Optional[stats.Measurement]:
        return stats.measurement_of(t.result for t in trials)

    def noise(self) -> stats.Noise:
        base = self._measurement(self.baseline_runs)
        return stats.Noise.estimate([base] if base else [])

    def compare(self, reference: list[SweepTrial], candidate: SweepTrial, ref_label: str,
                min_gain: Optional[float] = None) -> Optional[ComparisonRecord]:
        ref, cand = self._measurement(reference), self._measurement([candidate])
        if ref is None or cand is None:
            return None
        c = stats.compare(ref, cand, self.noise(), self.plan.decision.confidence,
                          self.plan.decision.min_gain if min_gain is None else min_gain)
        return ComparisonRecord(reference=ref_label, **c.as_dict())

    @property
    def baseline_accuracy(self):
        for t in self.baseline_runs:
            if t.result.status == "ok" and t.result.accuracy is not None:
                return t.result.accuracy
        return None

    def decide(self, trial: SweepTrial, reference: list[SweepTrial], ref_label: str) -> None:
        """Verdict for a measured trial against ``reference`` (the pooled baseline, or the previous stack)."""
        if trial.verdict in FAILED:
            return
        comparison = self.compare(reference, trial, ref_label)
        if ref_label == "baseline":
            trial.vs_baseline = comparison
        else:
            trial.vs_previous = comparison
            trial.vs_baseline = self.compare(self.baseline_runs, trial, "baseline")
        base_acc = self.baseline_accuracy
        gate = accuracy_gate.check(base_acc, trial.result.accuracy, self.plan.accuracy) if base_acc else None
        if gate is not None:
            trial.accuracy_changes = gate.changes
        no_effect = noop.no_effect_reasons(trial.changes, trial.result)
        if comparison is None:
            trial.verdict, trial.reason = "failed", "no throughput to compare"
        elif no_effect:  # before the timing: a known no-op that timed faster is noise, never a win
            trial.verdict, trial.reason = "no effect", no_effect[0]
        elif comparison.verdict == "faster":
            if gate is not None and not gate.ok:
                trial.verdict, trial.reason = "accuracy rejected", f"faster (x{comparison.ratio:.2f}) but {gate.reason}"
            else:
                trial.verdict = "kept"
                trial.reason = (f"x{comparison.ratio:.2f} [{comparison.ci_low:.2f}, {comparison.ci_high:.2f}] "
                                f"vs {ref_label}")
        elif comparison.verdict == "slower":
            trial.verdict = "slower"
            trial.reason = f"x{comparison.ratio:.2f} [{comparison.ci_low:.2f}, {comparison.ci_high:.2f}] vs {ref_label}"
        else:
            trial.verdict = "not significant"
            gain = comparison.ratio - 1
            why = "interval includes 1" if comparison.ci_low <= 1 <= comparison.ci_high else \
                f"gain {gain:+.1%} below min_gain {self.plan.decision.min_gain:.0%}"
            trial.reason = f"x{comparison.ratio:.2f} [{comparison.ci_low:.2f}, {comparison.ci_high:.2f}]: {why}"
        if gate is not None and not gate.ok and trial.verdict in ("not significant", "slower", "no effect"):
            # an accuracy failure is never hidden behind a speed verdict: it is the verdict, the speed is the reason
            speed = f"{trial.verdict} ({trial.reason})"
            trial.verdict, trial.reason = "accuracy rejected", f"{gate.reason}; speed: {speed}"
        self.save()

    # -- the phases ---------------------------------------------------------------------------------------------
    def singles(self) -> list[dict[str, Any]]:
        return [{name: value} for name, values in self.plan.variables.items() for value in values]

    def order_singles(self, singles: list[dict[str, Any]]) -> list[dict[str, Any]]:
        first = self.baseline_runs[0].result if self.baseline_runs else None
        data_share = None
        if first is not None and first.status == "ok" and first.step_ms_median:
            data_share = (first.data_wait_ms_median or 0) / first.step_ms_median
        data_bound = data_share is not None and data_share >= DATA_BOUND_SHARE
        group = knobs.in_group("data" if data_bound else "compute")
        share_text = f"{data_share:.0%}" if data_share is not None else "unknown"
        self.result.order_rule = (
            f"baseline waits for data {share_text} of the step "
            f"({'>=' if data_bound else '<'} {DATA_BOUND_SHARE:.0%}): "
            f"{'data-pipeline' if data_bound else 'compute'} knobs first, then the rest in plan order"
        )
        return sorted(singles, key=lambda c: 0 if next(iter(c)) in group else 1)

    def run(self) -> SweepResult:
        plan = self.plan
        singles = self.singles()
        runs = max(1, plan.decision.baseline_runs)
        self.progress.begin(1 + len(singles) + (runs - 1))
        try:
            self._run(singles, runs)
            self.result.status = "complete"
        except KeyboardInterrupt:
            self.result.status = "interrupted"
            raise
        finally:
            self.result.finished_utc = utc_now()
            self.progress.end()
            self.save()
        return self.result

    def _run(self, singles: list[dict[str, Any]], runs: int) -> None:
        first = self.measure({}, "baseline", 0)
        self.baseline_runs.append(first)
        self._done(first)
        if first.result.status != "ok":
            self.result.trials[-1].reason = f"the baseline itself failed: {first.result.reason}"
            return
        self.result.environment = first.result.environment
        ordered = self.order_singles(singles)
        # spread the remaining baseline runs evenly through the singles (and one at the very end)
        slots = {round((i + 1) * len(ordered) / (runs - 1)) for i in range(runs - 1)} if runs > 1 else set()
        single_trials = []
        replicate = 1
        for i, changes in enumerate(ordered, start=1):
            single_trials.append(self.measure(changes, "single"))
            self._done(single_trials[-1], pending=True)
            if i in slots and replicate < runs:
                self._baseline_run(replicate)
                replicate += 1
        while replicate < runs:
            self._baseline_run(replicate)
            replicate += 1
        if len(self.baseline_runs) > 1:
            second = self.compare([self.baseline_runs[0]], self.baseline_runs[-1], "baseline (run 1)")
            self.result.aa_check = second
        for trial in single_trials:
            self.decide(trial, self.baseline_runs, "baseline")
            self.progress.note(f"  {trial.label}: {trial.verdict} {trial.reason}")
        self.stack(single_trials)
        self.leave_one_out()

    def _baseline_run(self, replicate: int) -> None:
        trial = self.measure({}, "baseline", replicate)
        self.baseline_runs.append(trial)
        self._done(trial)

    def _done(self, trial: SweepTrial, pending: bool = False) -> None:
        r = trial.result
        what = f"{r.samples_per_s:.1f} samples/s" if r.status == "ok" and r.samples_per_s else \
            f"{trial.verdict}: {trial.reason}"
        if pending and trial.verdict not in FAILED:  # a line as it finishes; its verdict once every baseline ran
            what = f"measured {what}; verdict once every baseline run is in"
        self.progress.done(f"  {trial.label}{' (run %d)' % (trial.replicate + 1) if trial.kind == 'baseline' else ''}"
                           f": {what}{' (reused)' if trial.reused else ''}")

    def stack_candidates(self, single_trials: list[SweepTrial]) -> list[SweepTrial]:
        """Best value of each knob: kept ones by gain, then (``decision.retry_on_stack``) the not-significant ones.

        A change that did nothing against a compute-bound baseline can matter once the stack has moved the
        bottleneck (more data workers only help after graph mode made the step fast), so those are tried on top of
        the stack too.  Slower, accuracy-rejected, failed and no-effect changes are not retried.
        """
        allowed = ("kept", "not significant") if self.plan.decision.retry_on_stack else ("kept",)
        best: dict[str, SweepTrial] = {}
        for t in single_trials:
            if t.verdict not in allowed or t.vs_baseline is None:
                continue
            knob = next(iter(t.changes))
            rank = (t.verdict == "kept", t.vs_baseline.ratio)
            if knob not in best or rank > (best[knob].verdict == "kept", best[knob].vs_baseline.ratio):
                best[knob] = t
        return sorted(best.values(), key=lambda t: (t.verdict != "kept", -t.vs_baseline.ratio))

    def stack(self, single_trials: list[SweepTrial]) -> None:
        order = self.stack_candidates(single_trials)
        self.result.stack = [StackStep(label="baseline", trial_id=self.baseline_runs[0].trial_id, kept=True)]
        current_changes: dict[str, Any] = {}
        current = self.baseline_runs
        self.progress.grow(max(0, len(order) - 1))
        for single in order:
            changes = {**current_changes, **single.changes}
            if not current_changes:
                if single.verdict != "kept":
                    continue  # on top of the baseline alone, its one-at-a-time verdict already answers
                trial = single  # the first row is the best single itself: already measured against the baseline
            else:
                trial = self.measure(changes, "stack")
                self.decide(trial, current, label_of(current_changes) if current_changes else "baseline")
            kept = trial.verdict == "kept"
            reason = trial.reason if kept else f"{trial.verdict}: {trial.reason}"
            if not kept and trial.verdict not in FAILED and trial.kind == "stack":
                trial.verdict = "dropped"
                trial.reason = reason
            self.result.stack.append(StackStep(label=label_of(changes), change=dict(single.changes),
                                               trial_id=trial.trial_id, kept=kept, reason=reason))
            self.progress.done(f"  stack {label_of(changes)}: {'kept' if kept else reason}")
            if kept:
                current_changes, current = changes, [trial]
            self.save()
        if not current_changes:
            self._set_best(self.baseline_runs[0], "baseline")
        else:
            self._set_best(current[0], label_of(current_changes))

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
        final = [t for t in self.result.trials if t.trial_id == self.result.best_trial_id]
        self.progress.grow(len(kept_steps))
        for s in kept_steps:
            without = {k: v for k, v in final_changes.items() if k not in (s.change or {})}
            trial = self.measure(without, "leave_one_out")
            if trial.verdict not in FAILED:
                # how much faster the final stack is than the stack without this change
                trial.vs_previous = self.compare([trial], final[0], f"final without {label_of(s.change or {})}", 0.0)
                trial.vs_baseline = self.compare(self.baseline_runs, trial, "baseline", 0.0)
                trial.verdict = "measured"
                c = trial.vs_previous
                trial.reason = (f"removing {label_of(s.change or {})} from the final stack: final is "
                                f"x{c.ratio:.2f} [{c.ci_low:.2f}, {c.ci_high:.2f}] of this" if c else "")
            self.progress.done(f"  {trial.label}: {trial.reason or trial.verdict}")
            self.save()


def _reusable(trial_dir: Path, trial_id: str) -> Optional[TrialResult]:
    """A finished trial.json of this very trial (same id) left by an earlier run, else None.

    A trial.json that exists but cannot be read is reported, not silently measured again: it may hold the only copy
    of a long measurement, and a file that keeps breaking would otherwise be re-run on every resume.
    """
    try:
        result = read_trial_if_present(trial_dir / TRIAL_NAME)
    except UserError as exc:
        raise UserError(f"{exc}; delete the folder {trial_dir} to measure this trial again, or start the sweep "
                        "over with --fresh") from None
    return result if result is not None and result.trial_id == trial_id else None


def run_sweep(plan: Plan, out_dir: Path, run: TrialRunner, plan_path: Optional[Path] = None, fresh: bool = False,
              progress: Optional[SweepProgress] = None, command: str = "") -> SweepResult:
    """Run (or resume) the sweep of ``plan`` in ``out_dir``; ``command`` is recorded in results.json as it is."""
    return Sweep(plan, out_dir, run, plan_path, fresh=fresh, progress=progress, command=command).run()
