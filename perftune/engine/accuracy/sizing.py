"""The accuracy window's length, sized from the baseline before the sweep; and the stack check's, after it.

A gate that cannot judge is a defect of the default, and so is one that judges only the first steep part of the
curve, where a harm that shows late has not shown yet.  When ``accuracy.samples`` is not given, a short probe of the
baseline measures its speed, a probe as long as ``accuracy.window_budget_s`` allows gives its curve, and the window
ends where the curve flattens (``perftune.engine.accuracy.knee``) or at the budget's end, never before the loss has
fallen clearly.  Every length is on one grid (``step_unit``), so every trial's window ends at exactly the same
number of samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from perftune.engine.accuracy import knee
from perftune.engine.accuracy.window_trials import Measure, seconds_per_sample, window_spec
from perftune.engine.plan_load import baseline_knobs
from perftune.io.accuracy_window import WindowReach
from perftune.io.plan import AccuracyGate, Plan
from perftune.io.records import TrialResult
from perftune.io.sweep_records import WindowSizing

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


def step_unit(plan: Plan) -> int:
    """Samples seen per step, least common multiple over every configuration the plan can run, so that every
    trial's accuracy window ends at exactly the same number of samples."""
    base = baseline_knobs(plan)
    searched = {name: r.values() for name, r in plan.ranges.items()}  # every value a range search may try
    batches = {int(base["batch_size"])} | {int(v) for v in plan.variables.get("batch_size", [])} | set(
        searched.get("batch_size", []))
    workers = {int(base["workers"])} | {int(v) for v in plan.variables.get("workers", [])} | set(
        searched.get("workers", []))
    return int(np.lcm.reduce([b * w for b in batches for w in workers]))


def round_up(n: float, unit: int) -> int:
    return max(unit, int(math.ceil(n / unit)) * unit)


def fall_ratio(losses: list[float]) -> Optional[float]:
    """How much the training loss fell over ``losses`` as the window's floor measures it (head mean over tail mean
    - 1: a ratio, not a share of the loss; the summary states ``knee.at``'s 1 - end / start instead)."""
    if len(losses) < 2 * HEAD_STEPS:
        return None
    tail = float(np.mean(losses[-max(HEAD_STEPS, len(losses) // 10):]))
    return float(np.mean(losses[:HEAD_STEPS])) / tail - 1.0 if tail > 0 else None


def clear_fall_at(curve: list[tuple[int, float]], target: float) -> Optional[int]:
    """The first samples-seen at which the loss has fallen by ``target`` (``fall_ratio``), None if it never does:
    the shortest window the gate can judge, whatever the budget (the window's floor)."""
    losses: list[float] = []
    for samples, loss in curve:
        if loss is None or not math.isfinite(loss):
            return None
        losses.append(loss)
        f = fall_ratio(losses)
        if f is not None and f >= target:
            return int(samples)
    return None


def check_length(window: int, unit: int, per_sample: Optional[float], gate: AccuracyGate, runs: int
                 ) -> tuple[int, bool]:
    """(samples of the stack check, whether its budget shortened it): ``verify_multiple`` x ``window`` on the unit
    grid, cut to what ``verify_budget_s`` allows ``runs`` runs at ``per_sample`` seconds; 0 when that is no longer
    than the window itself (``perftune.engine.accuracy.stack_check``)."""
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
    window ends at its knee (``knee.choose``) or at the budget's end, but never before the loss has fallen clearly
    (``FALL_FACTOR`` x the tolerance; longer probes while it has not, within ``FALL_BUDGET`` x the budget)."""
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
    # the long probe runs as far as the stack check will for a window ending at the budget (``check_length``): it
    # shows whether a flat stretch stays flat, and is that check's own baseline run (reused)
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
