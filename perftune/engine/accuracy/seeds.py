"""Before the sweep: the gate calibrated on the baseline, its window sized (``sizing``) and its seed runs measured.

A fixed tolerance knows nothing of seed noise, so the baseline's accuracy window runs with ``accuracy.seeds - 1``
other seeds (initialisation and data order on the same data: ``TrialSpec.data_seed``): their spread calibrates the
gate (``seed_band``).  The seed runs are accuracy-only trials (``window_trials``), so a resumed sweep reuses them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional, Protocol

import numpy as np

from perftune.engine.accuracy import seed_band
from perftune.engine.accuracy.sizing import Sizing, size_window
from perftune.engine.accuracy.window_trials import Measure, Runs, SweepTrials, window_spec
from perftune.engine.plan_load import baseline_knobs
from perftune.errors import UserError
from perftune.io.accuracy_window import CURVE
from perftune.io.files import RESULTS_NAME, read_sweep
from perftune.io.plan import MAX_SEED, Plan
from perftune.io.records import Accuracy
from perftune.io.sweep_records import AccuracyCalibration, SweepResult, WindowSizing
from perftune.words.window_words import calibration_line


def seed_spread(runs: list[Accuracy], samples: int, checkpoints: int) -> list[tuple[int, float]]:
    """The relative spread (sd / mean) of the training loss across ``runs`` at the window's checkpoints (the
    baseline's probe curve cut at ``samples`` counts as a run): whether the seeds still disagree at its end."""
    points = [seed_band.curve_points([(s, v) for s, v in a.loss_curve if s <= samples], samples, checkpoints)
              for a in runs]
    out = []
    for name in (points[0] if points else {}):
        vals = [p[name] for p in points if name in p]
        if len(vals) >= 2 and np.mean(vals) > 0:
            out.append((int(name[len(CURVE):]), float(np.std(vals, ddof=1) / np.mean(vals))))
    return out


def _any_room(label: str, seconds: float) -> bool:
    return True


def calibrate(plan: Plan, measure: Measure, cache_dir: Optional[str], say: Callable[[str], None] = print,
              room: Callable[[str, float], bool] = _any_room) -> tuple[Plan, AccuracyCalibration]:
    """The plan with its accuracy window fixed, and the calibration: the window's sizing and the seed runs; ``say``
    states what was chosen (one line); ``room(label, seconds)``: whether the sweep's budget has room for a seed run
    that long (``engine.budget.Budget.room``): one that has none is not started, nor the seeds after it."""
    if plan.accuracy.samples:
        chosen = Sizing(plan.accuracy.samples, WindowSizing(how="plan", samples=plan.accuracy.samples), 0.0)
    else:
        chosen = size_window(plan, measure, cache_dir)
    samples, sizing = chosen.samples, chosen.sizing
    sized = plan.model_copy(update={"accuracy": plan.accuracy.model_copy(update={"samples": samples})})
    cal = AccuracyCalibration(samples=samples, sized=not plan.accuracy.samples, sizing=sizing,
                              sizing_s=chosen.spent, reach=chosen.reach)
    length = chosen.spent  # a seed run trains the window once: at most as long as the sizing probes together
    for i in range(1, plan.accuracy.seeds):
        seed = (plan.seed + i) % (MAX_SEED + 1)
        if not room(f"baseline seed {seed}", length):
            break
        start = time.perf_counter()
        result, reused = measure(window_spec(sized, samples, seed, f"baseline seed {seed}", cache_dir))
        length = length if reused else time.perf_counter() - start
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
        say(calibration_line(cal))
    return sized, cal


class CalibrationSweep(Protocol):
    """What the calibration needs of a sweep (``perftune.engine.sweep.Sweep``)."""

    @property
    def plan(self) -> Plan: ...
    @property
    def out(self) -> Path: ...  # its folder: an earlier results.json says how it was measured
    @property
    def store(self) -> SweepTrials: ...  # its trials, run or reused
    def say(self, line: str) -> None: ...


def calibrate_sweep(sweep: CalibrationSweep, room: Callable[[str, float], bool] = _any_room
                    ) -> tuple[Plan, AccuracyCalibration]:
    """:func:`calibrate` for a sweep (its trial folders, runner and progress).

    A sweep folder from before the window was sized and calibrated resumes as it was measured (trial ids hash the
    window): one timed window of samples, no seed runs; one sized before the window ran to the curve's knee (its
    calibration records no ``reach``) with the window it had."""
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
    return calibrate(plan, Runs(sweep.store, sweep.say), str(sweep.store.cache_dir), sweep.say, room)


def _earlier(results: Path) -> Optional[SweepResult]:
    if not results.is_file():
        return None
    try:
        return read_sweep(results)
    except UserError:  # the sweep rewrites it; a trial it cannot reuse says so itself
        return None


def band(result: SweepResult) -> list[Accuracy]:
    """The baseline's seed runs of a sweep (empty with ``accuracy.seeds: 1``, or in a sweep measured before the gate
    had seed runs)."""
    return list(result.accuracy_calibration.runs) if result.accuracy_calibration else []
