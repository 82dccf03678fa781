"""Before the sweep: the accuracy window's length, sized from the baseline, and the baseline's seed runs.

A gate that cannot judge is a defect of the default: with the old default (one timed window of samples) the
quickstart's baseline learnt -0.5% and nothing was judged.  When ``accuracy.samples`` is not given, a probe of the
baseline trains from its initial weights and the window ends where its training loss has fallen clearly
(``FALL_FACTOR`` times the tolerance), longer probes (x4) while none has and the ``window_budget_s`` allows.
Then the baseline's accuracy window runs with ``accuracy.seeds - 1`` other seeds (initialisation and data order on
the same data: ``TrialSpec.data_seed``): their spread calibrates the gate (``seed_band``).

Probes and seed runs are accuracy-only bursts through the existing burst settings (no warm-up beyond the queue's
drain, one timed step, no profiler), in their own trial folders, so a resumed sweep reuses them and makes the same
choice.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from perftune.engine.plan_load import baseline_knobs
from perftune.engine.specs import make_spec, trial_id
from perftune.errors import UserError
from perftune.io.files import RESULTS_NAME, read_sweep
from perftune.io.plan import MAX_SEED, BurstSettings, Plan
from perftune.io.records import Accuracy, TrialResult, TrialSpec
from perftune.io.sweep_records import AccuracyCalibration, SweepResult, WindowSizing
from perftune.words.rules import sizing_text

#: the window ends once the baseline's training loss fell by this many times the tolerance (relative)
FALL_FACTOR = 3.0
MIN_FALL = 0.05
#: a probe that has not reached it is followed by one this many times longer (within the budget)
GROWTH = 4
MAX_PROBES = 3
#: steps averaged at the start of the curve, and at least at its end (or a tenth of the steps)
HEAD_STEPS = 3
#: runs one accuracy-only trial (reusing a finished one): its result, and whether it was reused
Measure = Callable[[TrialSpec], tuple[TrialResult, bool]]


def accuracy_only(plan: Plan, samples: int, seed: int) -> Plan:
    """``plan`` for a burst that measures the accuracy window only: the cheapest burst its settings allow."""
    burst = BurstSettings(warmup_steps=0, steps=1, repeats=1, profile_steps=0, timeout_s=plan.burst.timeout_s)
    return plan.model_copy(update={"seed": seed, "burst": burst,
                                   "accuracy": plan.accuracy.model_copy(update={"samples": samples})})


def window_spec(plan: Plan, samples: int, seed: int, label: str, cache_dir: Optional[str]) -> TrialSpec:
    """An accuracy-only baseline trial of ``samples`` with ``seed``; the data stays the plan's (``data_seed``)."""
    spec = make_spec(accuracy_only(plan, samples, seed), {}, label, 0, Path(cache_dir) if cache_dir else None)
    return spec.model_copy(update={"data_seed": plan.seed, "label": label,
                                   "trial_id": trial_id({"accuracy_window": spec.trial_id, "data_seed": plan.seed})})


def step_unit(plan: Plan) -> int:
    """Samples seen per step, least common multiple over every configuration the plan can run, so that every
    trial's accuracy window ends at exactly the same number of samples."""
    base = baseline_knobs(plan)
    batches = {int(base["batch_size"])} | {int(v) for v in plan.variables.get("batch_size", [])}
    workers = {int(base["workers"])} | {int(v) for v in plan.variables.get("workers", [])}
    return int(np.lcm.reduce([b * w for b in batches for w in workers]))


def round_up(n: float, unit: int) -> int:
    return max(unit, int(math.ceil(n / unit)) * unit)


def fall(losses: list[float]) -> Optional[float]:
    """How much the training loss fell over ``losses`` (relative, head mean over tail mean - 1)."""
    if len(losses) < 2 * HEAD_STEPS:
        return None
    tail = float(np.mean(losses[-max(HEAD_STEPS, len(losses) // 10):]))
    return float(np.mean(losses[:HEAD_STEPS])) / tail - 1.0 if tail > 0 else None


def clear_fall_at(curve: list[tuple[int, float]], target: float) -> Optional[int]:
    """The first samples-seen at which the loss has fallen by ``target``, None if it never does."""
    losses: list[float] = []
    for samples, loss in curve:
        if loss is None or not math.isfinite(loss):
            return None
        losses.append(loss)
        f = fall(losses)
        if f is not None and f >= target:
            return int(samples)
    return None


def seconds_per_sample(result: TrialResult) -> Optional[float]:
    steps = [s for s in result.steps if s.phase == "accuracy"][1:]  # the first is the compile
    samples = steps[-1].samples_seen - steps[0].samples_seen if len(steps) > 1 else 0
    return sum(s.step_ms for s in steps[1:]) / 1e3 / samples if samples > 0 else None


def size_window(plan: Plan, measure: Measure, cache_dir: Optional[str]) -> tuple[int, WindowSizing, float]:
    """(samples, what was chosen and why, probe seconds) for a plan without ``accuracy.samples``."""
    unit = step_unit(plan)
    samples = round_up(int(baseline_knobs(plan)["batch_size"]) * plan.burst.steps, unit)
    target = max(FALL_FACTOR * plan.accuracy.rel_tolerance, MIN_FALL)
    budget = plan.accuracy.window_budget_s
    spent = 0.0
    for probe in range(MAX_PROBES):
        result, _ = measure(window_spec(plan, samples, plan.seed, f"accuracy window probe ({samples} samples)",
                                             cache_dir))
        spent += result.wall_s or 0.0  # what measuring it cost, also when this run reused it
        acc = result.accuracy
        if result.status != "ok" or acc is None:
            return samples, WindowSizing(how="probe_failed", samples=samples, failure=result.reason), spent
        at = clear_fall_at(acc.loss_curve, target)
        if at is not None:
            chosen = round_up(at, unit)
            losses = [v for s, v in acc.loss_curve if s <= chosen]
            return chosen, WindowSizing(how="loss_fell", samples=chosen, loss_fall=fall(losses), fall_factor=FALL_FACTOR,
                                        tolerance=plan.accuracy.rel_tolerance), spent
        per_sample = seconds_per_sample(result)
        longer = min(samples * GROWTH, (budget / per_sample) // unit * unit if per_sample else samples * GROWTH)
        if longer <= samples or probe == MAX_PROBES - 1:
            break
        samples = int(longer)
    return samples, WindowSizing(how="budget", samples=samples, loss_fall=fall([v for _, v in acc.loss_curve]),
                                 fall_factor=FALL_FACTOR, tolerance=plan.accuracy.rel_tolerance, budget_s=budget), spent


def calibrate(plan: Plan, measure: Measure, cache_dir: Optional[str], say: Callable[[str], None] = print
              ) -> tuple[Plan, AccuracyCalibration]:
    """The plan with its accuracy window fixed, and the calibration: the window's sizing and the seed runs; ``say``
    states what was chosen (one line)."""
    if plan.accuracy.samples:
        samples, sizing, spent = plan.accuracy.samples, WindowSizing(how="plan", samples=plan.accuracy.samples), 0.0
    else:
        samples, sizing, spent = size_window(plan, measure, cache_dir)
    sized = plan.model_copy(update={"accuracy": plan.accuracy.model_copy(update={"samples": samples})})
    cal = AccuracyCalibration(samples=samples, sized=not plan.accuracy.samples, sizing=sizing, sizing_s=spent)
    for i in range(1, plan.accuracy.seeds):
        seed = (plan.seed + i) % (MAX_SEED + 1)
        result, reused = measure(window_spec(sized, samples, seed, f"baseline seed {seed}", cache_dir))
        cal.seeds_s += result.wall_s or 0.0
        cal.trial_ids.append(result.trial_id)
        if result.status == "ok" and result.accuracy is not None:
            cal.seeds.append(seed)
            cal.runs.append(result.accuracy)
        else:
            cal.failed.append(f"seed {seed}: {result.status}: {result.reason}")
    if cal.sized or plan.accuracy.seeds > 1:  # a plan that fixes both has nothing to say
        say(f"  accuracy window: {sizing_text(sizing)}; judged against {len(cal.runs) + 1} seed(s) of the baseline"
            + (" (uncalibrated: the fixed tolerance judges)" if not cal.runs else ""))
    return sized, cal


class Runs:
    """``Measure`` for a sweep: each trial run or reused by ``run_or_reuse`` (the sweep's own,
    ``Processes.run_or_reuse``), one progress line each."""

    def __init__(self, run_or_reuse: Measure,
                 start: Callable[[str], None], say: Callable[[str], None]):
        self.run_or_reuse, self.start, self.say = run_or_reuse, start, say

    def __call__(self, spec: TrialSpec) -> tuple[TrialResult, bool]:
        self.start(spec.label)
        result, reused = self.run_or_reuse(spec)
        self.say(f"  {spec.label}: {progress_text(result)}" + (" (reused)" if reused else ""))
        return result, reused


def calibrate_sweep(sweep) -> tuple[Plan, AccuracyCalibration]:
    """:func:`calibrate` for a ``perftune.engine.sweep.Sweep`` (its trial folders, runner and progress).

    A sweep folder from before the window was sized and calibrated resumes as it was measured (trial ids hash the
    window): one timed window of samples, no seed runs."""
    plan = sweep.plan
    if _measured_before_calibration(sweep.out / RESULTS_NAME):
        gate = plan.accuracy.model_copy(update={"seeds": 1, "samples": plan.accuracy.samples or int(
            baseline_knobs(plan)["batch_size"]) * plan.burst.steps})
        plan = plan.model_copy(update={"accuracy": gate})
    procs = sweep.procs
    runs = Runs(procs.run_or_reuse, procs.progress.start, sweep.say)
    return calibrate(plan, runs, str(procs.cache_dir), sweep.say)


def _measured_before_calibration(results: Path) -> bool:
    if not results.is_file():
        return False
    try:
        earlier = read_sweep(results)
    except UserError:  # the sweep rewrites it; a trial it cannot reuse says so itself
        return False
    return bool(earlier.trials) and earlier.accuracy_calibration is None


def band(result: SweepResult) -> list[Accuracy]:
    """The baseline's seed runs of a sweep (empty before issue 26, or with ``accuracy.seeds: 1``)."""
    return list(result.accuracy_calibration.runs) if result.accuracy_calibration else []


def summary_line(result: SweepResult) -> list[str]:
    """The sweep summary's line on how the gate was set up (none for a sweep before issue 26)."""
    cal = result.accuracy_calibration
    if cal is None or not (cal.sized or cal.runs or cal.failed):  # the plan fixed the window and asked one seed
        return []
    seeds = (f"calibrated on {len(cal.runs) + 1} seeds of the baseline (seed runs {cal.seeds_s:.0f} s)" if cal.runs
             else "uncalibrated (one seed: the fixed tolerance judges)")
    probes = f", probes {cal.sizing_s:.0f} s" if cal.sized else ""
    failed = f"; failed seed runs: {'; '.join(cal.failed)}" if cal.failed else ""
    return [f"window {sizing_text(cal.sizing)}{probes}; {seeds}{failed}"]


def progress_text(result: TrialResult) -> str:
    acc = result.accuracy
    if result.status != "ok" or acc is None:
        return f"{result.status}: {result.reason}"
    val = f", val loss {acc.val_loss:.4f}" if acc.val_loss is not None else ""
    train = f"train loss {acc.train_loss:.4f}" if acc.train_loss is not None else "no training loss"
    return f"{train}{val}"

