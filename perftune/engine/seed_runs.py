"""Before the sweep: the accuracy window's length, sized from the baseline, and the baseline's seed runs.

A gate that cannot judge is a defect of the default, and so is one that judges only the first steep part of the
curve (issue 37).  When ``accuracy.samples`` is not given, a short probe of the baseline measures its speed, a probe
as long as ``accuracy.window_budget_s`` allows gives its curve, and the window ends where the curve flattens
(``perftune.engine.knee``) or at the budget's end.  Then the baseline's accuracy window runs with
``accuracy.seeds - 1`` other seeds (initialisation and data order on the same data: ``TrialSpec.data_seed``): their
spread calibrates the gate (``seed_band``).

Probes and seed runs are accuracy-only bursts through the existing burst settings (no warm-up beyond the queue's
drain, one timed step, no profiler), in their own trial folders, so a resumed sweep reuses them and makes the same
choice."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from perftune.engine import knee, seed_band
from perftune.engine.plan_load import baseline_knobs
from perftune.engine.specs import make_spec, trial_id
from perftune.errors import UserError
from perftune.io.accuracy_window import WindowReach
from perftune.io.files import RESULTS_NAME, read_sweep
from perftune.io.plan import MAX_SEED, AccuracyGate, BurstSettings, Plan
from perftune.io.records import Accuracy, TrialResult, TrialSpec
from perftune.io.sweep_records import AccuracyCalibration, SweepResult, WindowSizing
from perftune.words.rules import sizing_text

#: a knee counts once the baseline's training loss fell by this many times the tolerance (relative), so the gate
#: can judge there
FALL_FACTOR = 3.0
MIN_FALL = 0.05
#: the long probe is at least this many times the short one; while the loss has not fallen clearly, probes grow by
#: this factor (at most ``MAX_PROBES`` in all), within ``FALL_BUDGET`` x ``window_budget_s``
GROWTH = 4
MAX_PROBES = 3
FALL_BUDGET = 4.0
HEAD_STEPS = 3
#: runs one accuracy-only trial (reusing a finished one): its result, and whether it was reused
Measure = Callable[[TrialSpec], tuple[TrialResult, bool]]


def accuracy_only(plan: Plan, samples: int, seed: int) -> Plan:
    """``plan`` for a burst that measures the accuracy window only: the cheapest burst its settings allow."""
    burst = BurstSettings(warmup_steps=0, steps=1, repeats=1, profile_steps=0, timeout_s=plan.burst.timeout_s)
    return plan.model_copy(update={"seed": seed, "burst": burst,
                                   "accuracy": plan.accuracy.model_copy(update={"samples": samples})})


def window_spec(plan: Plan, samples: int, seed: int, label: str, cache_dir: Optional[str],
                changes: Optional[dict] = None) -> TrialSpec:
    """An accuracy-only trial of the baseline (with ``changes``) of ``samples`` with ``seed``; the data stays the
    plan's (``data_seed``)."""
    spec = make_spec(accuracy_only(plan, samples, seed), changes or {}, label, 0,
                     Path(cache_dir) if cache_dir else None)
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


def fall_ratio(losses: list[float]) -> Optional[float]:
    """How much the training loss fell over ``losses`` as the rule before issue 37 measured it (head mean over tail
    mean - 1: a ratio, not a share of the loss; the summary states ``knee.at``'s 1 - end / start instead)."""
    if len(losses) < 2 * HEAD_STEPS:
        return None
    tail = float(np.mean(losses[-max(HEAD_STEPS, len(losses) // 10):]))
    return float(np.mean(losses[:HEAD_STEPS])) / tail - 1.0 if tail > 0 else None


def clear_fall_at(curve: list[tuple[int, float]], target: float) -> Optional[int]:
    """The first samples-seen at which the loss has fallen by ``target`` (``fall_ratio``), None if it never does:
    the shortest window the gate can judge, whatever the budget (the rule before issue 37)."""
    losses: list[float] = []
    for samples, loss in curve:
        if loss is None or not math.isfinite(loss):
            return None
        losses.append(loss)
        f = fall_ratio(losses)
        if f is not None and f >= target:
            return int(samples)
    return None


def seconds_per_sample(result: TrialResult) -> Optional[float]:
    steps = [s for s in result.steps if s.phase == "accuracy"][1:]  # the first is the compile
    samples = steps[-1].samples_seen - steps[0].samples_seen if len(steps) > 1 else 0
    return sum(s.step_ms for s in steps[1:]) / 1e3 / samples if samples > 0 else None


def check_length(window: int, unit: int, per_sample: Optional[float], gate: AccuracyGate, runs: int
                 ) -> tuple[int, bool]:
    """(samples of the stack check, whether its budget shortened it): ``verify_multiple`` x ``window`` on the unit
    grid, cut to what ``verify_budget_s`` allows ``runs`` runs at ``per_sample`` seconds; 0 when that is no longer
    than the window itself (``perftune.engine.stack_check``)."""
    want = round_up(gate.verify_multiple * window, unit) if gate.verify_multiple > 0 else 0
    if per_sample:
        afford = int(gate.verify_budget_s / (runs * per_sample)) // unit * unit
        if afford < want:
            return (afford, True) if afford > window else (0, True)
    return (want, False) if want > window else (0, False)


@dataclass(frozen=True)
class Sizing:
    """The sized window: its length, a short account, the probes' seconds and what it reached on the curve."""

    samples: int
    sizing: WindowSizing
    spent: float
    reach: Optional[WindowReach] = None


def _probe(plan: Plan, measure: Measure, samples: int, cache_dir: Optional[str]) -> TrialResult:
    return measure(window_spec(plan, samples, plan.seed, f"accuracy window probe ({samples} samples)", cache_dir))[0]


def size_window(plan: Plan, measure: Measure, cache_dir: Optional[str]) -> Sizing:
    """The window for a plan without ``accuracy.samples``: a short probe of the baseline measures its speed, a probe
    as long as ``accuracy.window_budget_s`` allows (and on to the stack check's length) gives the curve, and the
    window ends at its knee (``perftune.engine.knee``) or at the budget's end, but never before the loss has fallen
    clearly (``FALL_FACTOR`` x the tolerance; longer probes while it has not, within ``FALL_BUDGET`` x the budget)."""
    unit = step_unit(plan)
    first = round_up(int(baseline_knobs(plan)["batch_size"]) * plan.burst.steps, unit)
    target = max(FALL_FACTOR * plan.accuracy.rel_tolerance, MIN_FALL)
    gate = plan.accuracy
    result = _probe(plan, measure, first, cache_dir)
    spent = result.wall_s or 0.0  # what measuring it cost, also when this run reused it
    if result.status != "ok" or result.accuracy is None:
        return Sizing(first, WindowSizing(how="probe_failed", samples=first, failure=result.reason), spent)
    per_sample = seconds_per_sample(result)
    budget_samples = max(int(gate.window_budget_s / per_sample) // unit * unit if per_sample else 0, first)
    # the long probe runs as far as the stack check will (perftune.engine.stack_check) for a window ending at the
    # budget: it shows whether a flat stretch stays flat, and is that check's own baseline run (reused)
    length = max(check_length(budget_samples, unit, per_sample, gate, gate.seeds + 1)[0], budget_samples,
                 first * GROWTH)
    cap = int(FALL_BUDGET * gate.window_budget_s / per_sample) // unit * unit if per_sample else length * GROWTH ** 2
    curve, longest = result.accuracy.loss_curve, first
    for _ in range(MAX_PROBES - 1):
        longer = _probe(plan, measure, length, cache_dir)
        spent += longer.wall_s or 0.0
        if longer.status != "ok" or longer.accuracy is None:
            break
        curve, longest = longer.accuracy.loss_curve, length
        length = min(length * GROWTH, max(cap, length))
        if clear_fall_at(curve, target) is not None or length <= longest:
            break
    choice = knee.choose(curve, unit, budget_samples, target)
    floor = clear_fall_at(curve, target)
    samples = max(choice.samples, round_up(floor, unit) if floor is not None else 0)
    extended = samples > choice.samples
    end = knee.at(curve, samples, target) if extended else choice.knee
    reach = WindowReach(samples=samples, curve_samples=longest, fall=end.fall, late_share=end.late_share,
                        flat=end.flat, flat_share=knee.FLAT_SHARE, budget_bound=choice.budget_bound and not extended,
                        clear_fall=extended, after_fall=knee.further_fall(curve, samples),
                        seconds_per_sample=per_sample)
    how = "loss_fell" if extended else "knee" if reach.flat else "budget"
    sizing = WindowSizing(how=how, samples=samples, loss_fall=reach.fall, fall_factor=FALL_FACTOR,
                          tolerance=gate.rel_tolerance, budget_s=gate.window_budget_s)
    return Sizing(samples, sizing, spent, reach)


def seed_spread(runs: list[Accuracy], samples: int, checkpoints: int) -> list[tuple[int, float]]:
    """The relative spread (sd / mean) of the training loss across ``runs`` at the window's checkpoints (the
    baseline's probe curve cut at ``samples`` counts as a run): whether the seeds still disagree at its end."""
    points = [seed_band.curve_points([(s, v) for s, v in a.loss_curve if s <= samples], samples, checkpoints)
              for a in runs]
    out = []
    for name in (points[0] if points else {}):
        vals = [p[name] for p in points if name in p]
        if len(vals) >= 2 and np.mean(vals) > 0:
            out.append((int(name[len(seed_band.CURVE):]), float(np.std(vals, ddof=1) / np.mean(vals))))
    return out


def calibrate(plan: Plan, measure: Measure, cache_dir: Optional[str], say: Callable[[str], None] = print
              ) -> tuple[Plan, AccuracyCalibration]:
    """The plan with its accuracy window fixed, and the calibration: the window's sizing and the seed runs; ``say``
    states what was chosen (one line)."""
    if plan.accuracy.samples:
        chosen = Sizing(plan.accuracy.samples, WindowSizing(how="plan", samples=plan.accuracy.samples), 0.0)
    else:
        chosen = size_window(plan, measure, cache_dir)
    samples, sizing = chosen.samples, chosen.sizing
    sized = plan.model_copy(update={"accuracy": plan.accuracy.model_copy(update={"samples": samples})})
    cal = AccuracyCalibration(samples=samples, sized=not plan.accuracy.samples, sizing=sizing,
                              sizing_s=chosen.spent, reach=chosen.reach)
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
    if cal.reach is not None:
        cal.reach.seed_spread = seed_spread(cal.runs, samples, plan.accuracy.checkpoints)
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
    window): one timed window of samples, no seed runs; one sized before the knee (issue 37) with its window."""
    plan = sweep.plan
    earlier = _earlier(sweep.out / RESULTS_NAME)
    if earlier is not None and earlier.trials and earlier.accuracy_calibration is None:
        gate = plan.accuracy.model_copy(update={"seeds": 1, "samples": plan.accuracy.samples or int(
            baseline_knobs(plan)["batch_size"]) * plan.burst.steps})
        plan = plan.model_copy(update={"accuracy": gate})
    elif earlier is not None and earlier.trials and earlier.accuracy_calibration.sized \
            and earlier.accuracy_calibration.reach is None and not plan.accuracy.samples:
        gate = plan.accuracy.model_copy(update={"samples": earlier.accuracy_calibration.samples})
        plan = plan.model_copy(update={"accuracy": gate})
    procs = sweep.procs
    runs = Runs(procs.run_or_reuse, procs.progress.start, sweep.say)
    return calibrate(plan, runs, str(procs.cache_dir), sweep.say)


def _earlier(results: Path) -> Optional[SweepResult]:
    if not results.is_file():
        return None
    try:
        return read_sweep(results)
    except UserError:  # the sweep rewrites it; a trial it cannot reuse says so itself
        return None


def band(result: SweepResult) -> list[Accuracy]:
    """The baseline's seed runs of a sweep (empty before issue 26, or with ``accuracy.seeds: 1``)."""
    return list(result.accuracy_calibration.runs) if result.accuracy_calibration else []


def progress_text(result: TrialResult) -> str:
    acc = result.accuracy
    if result.status != "ok" or acc is None:
        return f"{result.status}: {result.reason}"
    val = f", val loss {acc.val_loss:.4f}" if acc.val_loss is not None else ""
    train = f"train loss {acc.train_loss:.4f}" if acc.train_loss is not None else "no training loss"
    return f"{train}{val}"

