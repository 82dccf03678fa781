"""A repeat process warms up until its step time settles (issue 38, ``perftune.burst.settle``), checked on scripted
step times and a scripted clock: the machine's load changes nothing here."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from perftune.burst import meter as meter_module
from perftune.burst import settle
from perftune.burst.meter import Meter
from perftune.engine.plan_load import parse_plan
from perftune.engine.specs import make_spec


def warming(steps: int, start_ms: float = 200.0, steady_ms: float = 100.0, rate: float = 0.9) -> list[float]:
    """Step times falling geometrically from ``start_ms`` towards ``steady_ms`` (a JIT, caches, the allocator)."""
    return [steady_ms + (start_ms - steady_ms) * rate ** i for i in range(steps)]


def first_settled(times: list[float]) -> int:
    """The number of steps after which the rule ends the warm-up."""
    for n in range(1, len(times) + 1):
        if settle.settling(times[:n]).done:
            return n
    raise AssertionError("never ended")


def test_flat_steps_settle_after_two_blocks():
    assert first_settled([100.0] * 50) == 2 * settle.BLOCK_STEPS
    state = settle.settling([100.0] * 10)
    assert state.settled and state.change == 0.0


def test_a_warming_process_settles_only_once_its_blocks_stop_falling():
    times = warming(400)
    n = first_settled(times)
    block = settle.block_steps(times[:n])
    assert n > 2 * settle.BLOCK_STEPS  # not at the first two blocks: they were 30% apart
    before, last = sorted(times[n - 2 * block:n - block])[block // 2], sorted(times[n - block:n])[block // 2]
    assert abs(last / before - 1) <= settle.TOLERANCE
    assert times[n - 1] < 1.10 * 100.0  # within 10% of the steady state by then


def test_blocks_last_at_least_a_quarter_second():
    assert settle.block_steps([10.0] * 10) == 25  # 10 ms steps: 25 of them make 0.25 s
    assert settle.block_steps([500.0] * 10) == settle.BLOCK_STEPS
    assert settle.block_steps([0.001] * 10) == settle.MAX_BLOCK_STEPS


def test_a_process_that_never_settles_ends_at_the_time_limit():
    block = settle.BLOCK_STEPS
    times = [(100.0 if (i // block) % 2 else 130.0) for i in range(400)]  # blocks alternate 30% apart
    n = first_settled(times)
    state = settle.settling(times[:n])
    assert not state.settled and sum(times[:n]) >= settle.MAX_S * 1e3 > sum(times[:n - 1])


class Clock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_a_repeat_process_is_timed_after_its_warm_up_settled(tmp_path, monkeypatch):
    """A repeat (replicate 1) has no accuracy window; with steps warming from 200 to 100 ms its timed windows are
    within 10% of the steady step, where a fixed 3-step warm-up would have timed steps 50-70% slower."""
    clock = Clock()
    monkeypatch.setattr(meter_module, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    plan = parse_plan({"name": "a", "workload": "mlp", "accuracy": {"samples": 3200, "seeds": 1},
                       "burst": {"drain_s": 0, "warmup_steps": 3, "steps": 10, "repeats": 2, "profile_steps": 0}},
                      "t")
    spec = make_spec(plan, {}, "baseline", replicate=1)  # its warm-up's budget: 3200 samples + 3 steps (103 steps)
    meter = Meter(spec, tmp_path)
    times = [5000.0] + warming(1000)  # the compile, then the warming steps
    meter.start()
    for step_ms in times:
        meter.begin()
        clock.now += step_ms / 1e3
        if meter.end(1.0, 32):
            break
    result = meter.result
    assert result.accuracy is None and {r.phase for r in result.steps} == {"warmup", "timed"}
    assert result.warmup_steps > 2 * settle.BLOCK_STEPS
    assert result.step_ms_median == pytest.approx(100.0, rel=0.10)
    assert warming(4)[3] > 1.5 * 100.0  # what timing after the fixed 3 steps would have started from
    assert any(n.kind == "info" and n.text.startswith(f"warm-up settled after {result.warmup_steps} steps")
               for n in result.notes)


def test_a_repeat_warms_up_for_no_more_samples_than_the_first_process_trained_untimed(tmp_path, monkeypatch):
    """A process still warming up when its budget (the accuracy window's samples and the warm-up steps: what the
    first process trained before its timed steps) is spent is timed anyway, with a warning: a script with a fixed
    number of epochs has no more steps to give it."""
    clock = Clock()
    monkeypatch.setattr(meter_module, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    plan = parse_plan({"name": "a", "workload": "mlp", "accuracy": {"samples": 320, "seeds": 1},
                       "burst": {"drain_s": 0, "warmup_steps": 3, "steps": 10, "repeats": 2, "profile_steps": 0}},
                      "t")
    meter = Meter(make_spec(plan, {}, "baseline", replicate=1), tmp_path)
    meter.start()
    for step_ms in [5000.0] + warming(1000, rate=0.97):
        meter.begin()
        clock.now += step_ms / 1e3
        if meter.end(1.0, 32):
            break
    assert meter.result.warmup_steps == 320 // 32 + 3  # the budget, the compile step included
    assert any(n.kind == "warning" and "did not settle within 13 steps" in n.text for n in meter.result.notes)
