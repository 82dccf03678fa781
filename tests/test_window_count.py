"""A repeat process's timed windows chosen from its configuration's costs and variances (issue 38, Kalibera and
Jones), on scripted measurements: the machine's speed changes nothing here."""

from __future__ import annotations

import math

import pytest
from scripted_sweeps import Script, make_sweep

from perftune.engine import window_count
from perftune.engine.stats import Noise
from perftune.io.plan import BurstSettings
from perftune.io.records import TrialResult, WindowStats


def process(wall_s: float, window_s: float, sps: list[float]) -> TrialResult:
    windows = [WindowStats(steps=10, total_ms=window_s * 1e3, median_step_ms=window_s * 100, samples_per_s=v)
               for v in sps]
    return TrialResult(trial_id="t", status="ok", workload="mlp", device="CPU", knobs={}, burst=BurstSettings(),
                       windows=windows, wall_s=wall_s)


def test_the_count_follows_kalibera_and_jones():
    # 3 windows of 0.5 s in a 6.5 s process: 5 s of fixed cost; windows +-5%; the sweep's process sd 4%
    first = process(6.5, 0.5, [95.0, 100.0, 105.0])
    noise = Noise(var=0.04**2, df=10)
    choice = window_count.choose([first], noise, 3)
    var_w = window_count.window_variance([first])
    var_p = noise.var - var_w / 3
    assert choice.optimum == pytest.approx(math.sqrt(5.0 / 0.5 * var_w / var_p))
    assert choice.windows == round(choice.optimum) and choice.default == 3
    assert choice.process_s == pytest.approx(5.0) and choice.window_s == pytest.approx(0.5)
    assert choice.window_sd == pytest.approx(math.sqrt(var_w)) and choice.process_sd == pytest.approx(math.sqrt(var_p))


def test_costly_processes_and_noisy_windows_ask_for_more_windows_noisy_processes_for_fewer():
    noise = Noise(var=0.03**2, df=10)
    cheap = window_count.choose([process(2.0, 0.5, [98.0, 100.0, 102.0])], noise, 3).windows
    costly = window_count.choose([process(30.0, 0.5, [98.0, 100.0, 102.0])], noise, 3).windows
    noisy_windows = window_count.choose([process(30.0, 0.5, [80.0, 100.0, 120.0])], noise, 3).windows
    assert cheap < costly < noisy_windows
    between = window_count.choose([process(30.0, 0.5, [98.0, 100.0, 102.0])], Noise(var=0.2**2, df=10), 3).windows
    assert between < costly


def test_the_count_is_bounded_and_needs_windows_to_tell():
    tiny_between = Noise(var=1e-9, df=10)  # floored at PROCESS_SD_FLOOR
    assert window_count.choose([process(600.0, 0.1, [50.0, 100.0, 150.0])], tiny_between, 3).windows == \
        window_count.MAX_WINDOWS
    assert window_count.choose([process(1.0, 5.0, [99.9, 100.0])], Noise(var=0.1, df=4), 3).windows == \
        window_count.MIN_WINDOWS
    assert window_count.choose([process(5.0, 0.5, [100.0])], Noise(var=0.01, df=4), 3) is None  # one window
    assert window_count.choose([], Noise(var=0.01, df=4), 3) is None


def test_a_sweeps_repeat_processes_run_the_chosen_windows(tmp_path):
    """The baseline's repeats (and a candidate's) run the chosen count, recorded beside the process; its first
    process the plan's; ``burst.windows: fixed`` keeps the plan's everywhere."""
    scripts = {"baseline": Script(factor=[1.0, 1.05, 0.95], wall_s=20.0), "+mode=pynative": Script(factor=0.5)}
    result = make_sweep(tmp_path / "chosen", {"mode": ["pynative"]}, scripts, baseline_runs=3)[0].run()
    base = [t for t in result.trials if t.label == "baseline"]
    assert base[0].window_count is None and base[0].result.burst.repeats == 3
    repeats = [t for t in base if t.replicate > 0]
    assert repeats and all(t.window_count is not None for t in repeats)
    assert all(t.result.burst.repeats == t.window_count.windows for t in repeats)
    assert any(t.window_count.windows != 3 for t in repeats)


def test_a_repeats_windows_take_at_most_its_fixed_cost():
    """A window spread that is structure, not noise (every other 4-step window holding an 8-step epoch's end) and a
    between-process variance at its floor asked for 40 windows of 2.8 s in a process of 14 s fixed cost: the windows
    are capped at what the fixed cost pays for."""
    first = process(14.0 + 2 * 2.8, 2.8, [800.0, 1000.0])
    choice = window_count.choose([first], Noise(var=1e-6, df=10), 2)
    assert choice.optimum > window_count.MAX_WINDOWS
    assert choice.windows == math.floor(14.0 / 2.8) == 5
    # a cheap process still gets its two windows
    assert window_count.choose([process(1.2, 1.0, [800.0, 1000.0])], Noise(var=1e-6, df=10), 2).windows == 2
