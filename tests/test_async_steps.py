"""Asynchronous steps (issue 36) timed as they really run, on scripted steps with a scripted clock: a fake step whose
call returns at once and whose loss read-back waits for the work, as an ``@ms.jit`` function step on CPU (and every
step on GPU/Ascend) behaves.  The Meter reads the scripted clock, so the machine's load changes nothing; what is
checked is the arithmetic: every phase's step ends after its read-back, the phases agree, and a step timed from its
dispatch is caught by the phase-agreement check."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from perftune.burst import meter as meter_module
from perftune.burst.agreement import AGREE_LIMIT, WARMUP_SKIPPED_STEPS, check_phases, phase_medians
from perftune.burst.meter import Meter
from perftune.engine.plan_load import parse_plan
from perftune.engine.specs import make_spec
from perftune.io.records import StepRecord

DISPATCH_S = 0.001  # the call returns after 1 ms
WORK_S = 0.400  # the step's work: the read-back waits for it
WAIT_S = 0.002  # fetching the batch


class Clock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class PendingLoss:
    """A loss whose value is ready only once the step's work is done: ``asnumpy`` advances the clock to then."""

    def __init__(self, clock: Clock, value: float, ready_at: float):
        self.clock, self.value, self.ready_at = clock, value, ready_at

    def asnumpy(self):
        self.clock.now = max(self.clock.now, self.ready_at)
        return np.float32(self.value)


def spec_of(burst: dict, samples: int = 320, **extra):
    plan = parse_plan({"name": "a", "workload": "mlp", "accuracy": {"samples": samples, "seeds": 1},
                       "burst": {"drain_s": 0, **burst}, **extra}, "t")
    return make_spec(plan, {}, "baseline")


def drive(meter: Meter, clock: Clock) -> list[float]:
    """Step an asynchronous step until the meter is done; returns each step's true time (fetch + work)."""
    truths = []
    meter.start()
    while not meter.done:
        clock.now += WAIT_S
        meter.begin()
        clock.now += DISPATCH_S  # the call returns; the work goes on for WORK_S
        loss = PendingLoss(clock, 1.0, clock.now - DISPATCH_S + WORK_S)
        truths.append((WAIT_S + WORK_S) * 1e3)
        meter.end(loss, 32, grad_norm=PendingLoss(clock, 0.5, loss.ready_at))
    return truths


def test_an_asynchronous_step_is_timed_to_its_completion_in_every_phase(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(meter_module, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    meter = Meter(spec_of({"warmup_steps": 3, "steps": 5, "repeats": 2, "profile_steps": 0}), tmp_path,
                  grad_norms=True)
    truths = drive(meter, clock)
    result = meter.result
    phases = {r.phase for r in result.steps}
    assert phases == {"accuracy", "warmup", "timed"}
    for record, truth in zip(result.steps, truths):  # every step, untimed phases included, ends after its work
        assert record.step_ms == pytest.approx(truth)
        assert record.data_wait_ms == pytest.approx(WAIT_S * 1e3)
        assert record.loss == pytest.approx(1.0)
    assert result.compile_ms == pytest.approx(truths[0])  # the first step to its completion
    assert all(r.grad_norm == pytest.approx(0.5) for r in result.steps if r.phase == "accuracy")
    assert result.step_ms_mean == pytest.approx((WAIT_S + WORK_S) * 1e3)
    assert result.samples_per_s == pytest.approx(32 / (WAIT_S + WORK_S))
    for window in result.windows:  # the steps add up to the window's time
        assert window.total_ms == pytest.approx(window.steps * (WAIT_S + WORK_S) * 1e3)
    agreement = result.phase_agreement
    assert agreement is not None and agreement.agree and agreement.ratio == pytest.approx(1.0)
    assert set(agreement.medians_ms) == {"accuracy", "warmup", "timed"}
    assert not any(n.text.startswith("phases disagree") for n in result.notes)


def test_a_step_timed_from_its_dispatch_is_caught_by_the_phase_check():
    """The failure issue 36 found: untimed phases took 1.2 ms (dispatch) and the timed ones 751 ms.  Whatever the
    cause, phases that ran the same computation and disagree are said in words and as data."""
    records = ([StepRecord(phase="accuracy", step_ms=1.2, data_wait_ms=0.1)] * 20
               + [StepRecord(phase="warmup", step_ms=1.2, data_wait_ms=0.1)] * 4
               + [StepRecord(phase="timed", window=0, step_ms=751.0 + i, data_wait_ms=0.1) for i in range(10)]
               + [StepRecord(phase="profiled", step_ms=3.0, data_wait_ms=0.1)] * 3)
    timed = [r for r in records if r.phase == "timed"]
    agreement, note = check_phases(records, timed)
    assert not agreement.agree and agreement.ratio > 600 and agreement.worst_phase in ("accuracy", "warmup")
    assert note.kind == "warning" and "phases disagree" in note.text and "faster" in note.text
    # within the limit (the accuracy step's gradient norm, the profiler's overhead): they agree, and no note
    close = ([StepRecord(phase="accuracy", step_ms=12.0, data_wait_ms=0.1)] * 5
             + [StepRecord(phase="timed", window=0, step_ms=10.0, data_wait_ms=0.1)] * 5
             + [StepRecord(phase="profiled", step_ms=10.0 * AGREE_LIMIT * 0.99, data_wait_ms=0.1)] * 3)
    agreement, note = check_phases(close, [r for r in close if r.phase == "timed"])
    assert agreement.agree and note is None


def test_the_warm_ups_median_is_all_its_steps_but_the_first_few():
    """The warm-up's first steps (batches queued meanwhile, a compile) are left out; every later one counts, so a
    short slow streak at its end does not move its median (a last-3 median did: x1.70 on a stored run)."""
    first = [StepRecord(phase="warmup", step_ms=900.0, data_wait_ms=0.0)] * WARMUP_SKIPPED_STEPS
    steady = [StepRecord(phase="warmup", step_ms=100.0 + i % 3, data_wait_ms=0.0) for i in range(20)]
    streak = [StepRecord(phase="warmup", step_ms=170.0, data_wait_ms=0.0)] * 3
    timed = [StepRecord(phase="timed", window=0, step_ms=101.0, data_wait_ms=0.0)] * 10
    later = [StepRecord(phase="warmup", step_ms=5.0, data_wait_ms=0.0)] * 4  # a paired switch's drain: not counted
    medians = phase_medians(first + steady + streak + timed + later, timed)
    assert medians["warmup"] == pytest.approx(101.0) and medians["timed"] == 101.0
    # a warm-up too short to leave any out still gives a median, without its first step
    short = [StepRecord(phase="warmup", step_ms=ms, data_wait_ms=0.0) for ms in (900.0, 100.0, 102.0)]
    assert phase_medians(short + timed, timed)["warmup"] == pytest.approx(101.0)


def test_the_window_calibration_and_the_drain_read_completed_steps(tmp_path, monkeypatch):
    """``burst.min_window_s``: the calibration reads the warm-up's completed steps (400 ms), not their dispatch
    (1 ms): a 2 s window is 5 steps, where dispatch times would have made it the 100x cap."""
    clock = Clock()
    monkeypatch.setattr(meter_module, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    meter = Meter(spec_of({"warmup_steps": 3, "steps": 2, "repeats": 2, "profile_steps": 0, "min_window_s": 2.0},
                          samples=64), tmp_path)
    drive(meter, clock)
    assert [w.steps for w in meter.result.windows] == [5, 5]
    assert any("calibrated to 5 steps" in n.text for n in meter.result.notes)
