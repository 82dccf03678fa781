"""Splits that are one story (issue 14, part 3), on real profiles.

* Three identical PyNative runs (``tests/data/profiles/repeat_pynative_cell_run{1,2,3}``, made by
  ``.venv/bin/python tests/data/profiles/make_profiles.py repeats``; MindSpore's default kernel threads on a shared
  2-core machine) give splits within the machine's noise of each other: per phase, the profiled steps' shares of
  their step do not differ between the runs by more than they differ between the steps of one run (one-way ANOVA).
* The op phases are their share of the profiled steps, carried to the timed (unprofiled) step: a profiler that
  slows the step no longer makes op time "exceed" the step, ``other`` keeps its share (it was 330 / 0 / 0 ms over
  three identical runs when op time was squeezed into the timed step), and the factor and its cause are stated.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as sps

from perftune.io.records import PHASES
from perftune.profile.layouts import ProfileData, load_profile
from perftune.profile.splits import compute_splits
from perftune.words.split_notes import split_notes, warning_text

PROFILES = Path(__file__).resolve().parent / "data" / "profiles"
REPEATS = [f"repeat_pynative_cell_run{i}" for i in (1, 2, 3)]
#: runs differ "beyond the noise" when the ANOVA of per-step shares gives p below this
P_NOISE = 0.01


@cache
def load(name: str) -> tuple[ProfileData, dict]:
    timing = json.loads((PROFILES / name / "expected.json").read_text())["ranks"]["0"]
    return load_profile(PROFILES / name / timing["profile_root"]), timing


def step_shares(name: str):
    """Per profiled step: each phase's op time as a share of that step's compute (step - data), and other."""
    prof, t = load(name)
    compute = np.array(t["profiled_step_ms_list"]) - np.array(t["profiled_data_wait_ms_list"])
    shares = prof.phase_ms_by_step.div(compute, axis=0)
    shares["other"] = 1.0 - shares.sum(axis=1)
    return shares


def burst_splits(name: str):
    """The splits as a burst computes them: the timed step and its data wait, the profiled steps' shares."""
    prof, t = load(name)
    return compute_splits(prof, t["profiled_steps"], t["unprofiled_step_ms_mean"], t["unprofiled_data_wait_ms_mean"],
                          t["step_ms"], t["data_wait_ms"]), t


@pytest.mark.parametrize("phase", ["forward", "backward", "optimizer", "other"])
def test_three_identical_runs_agree_within_the_noise(phase):
    runs = [step_shares(n) for n in REPEATS]
    assert all(len(r) == 5 for r in runs)  # 5 profiled steps each, placed by the launch timeline
    p = sps.f_oneway(*[r[phase].to_numpy() for r in runs]).pvalue
    assert p >= P_NOISE, f"{phase}: the three runs differ beyond the step-to-step noise (p={p:.4f})"


def test_the_noise_test_can_tell_configurations_apart():
    """The same test separates a different configuration (GRAPH mode: far less host overhead)."""
    runs = [step_shares(REPEATS[0]), step_shares(REPEATS[1]), step_shares("tiny_gpt_graph_cell")]
    assert sps.f_oneway(*[r["other"].to_numpy() for r in runs]).pvalue < P_NOISE


@pytest.mark.parametrize("name", REPEATS)
def test_burst_splits_carry_the_profiled_shares_to_the_timed_step(name):
    sp, t = burst_splits(name)
    assert sum(getattr(sp, f"{p}_ms") for p in PHASES) == pytest.approx(t["unprofiled_step_ms_mean"], rel=1e-9)
    prof, _ = load(name)
    profiled_compute = t["step_ms"] - t["data_wait_ms"]
    timed_compute = t["unprofiled_step_ms_mean"] - t["unprofiled_data_wait_ms_mean"]
    totals = prof.phase_totals_ms()
    for phase in ("forward", "backward", "optimizer"):  # each op phase keeps its share of the compute time
        share = totals[phase] / t["profiled_steps"] / profiled_compute
        assert getattr(sp, f"{phase}_ms") / timed_compute == pytest.approx(share, rel=1e-9)
    assert sp.other_ms / timed_compute > 0.3  # PyNative host overhead stays visible, never squeezed to 0
    assert sp.op_scale == pytest.approx(timed_compute / profiled_compute)
    assert sp.profiled_step_ms == t["step_ms"]
    if abs(sp.op_scale - 1) > 0.05:  # the cause is stated, with both numbers
        (w,) = [w for w in sp.warnings if w.kind in ("profiled_slower", "profiled_faster")]
        assert w.kind == ("profiled_slower" if sp.op_scale < 1 else "profiled_faster")
        assert f"{profiled_compute:.3f} ms" in warning_text(w)


def test_profiler_overhead_is_not_squeezed_into_the_step():
    """mlp_pynative: the profiled steps ran x1.2 slower than the unprofiled ones.  Op time is shared out by the
    profiled step, so other keeps its share and the cause names the profiler's overhead."""
    prof, t = load("mlp_pynative")
    slow = t["step_ms"] / 1.6  # a timed step well below the profiled one: the profiler's overhead
    sp = compute_splits(prof, t["profiled_steps"], slow, 0.0, t["step_ms"], t["data_wait_ms"])
    assert sum(getattr(sp, f"{p}_ms") for p in PHASES) == pytest.approx(slow, rel=1e-9)
    op_share = sum(prof.phase_totals_ms().values()) / t["profiled_steps"] / (t["step_ms"] - t["data_wait_ms"])
    assert sp.explained_share == pytest.approx(op_share, rel=1e-9)
    text = " ".join(split_notes(sp))
    assert "profiler overhead" in text and "slower" in text and "op phases scaled by 0.62" in text
    assert [w.kind for w in sp.warnings] == ["profiled_slower", "op_scale_far"]


def test_ops_longer_than_their_own_steps_are_squeezed_with_the_cause():
    """Op time above the profiled steps' own compute cannot be profiler overhead: ops overlap or wait."""
    prof, t = load("mlp_pynative")
    op_ms = sum(prof.phase_totals_ms().values()) / t["profiled_steps"]
    sp = compute_splits(prof, t["profiled_steps"], op_ms, 0.0, op_ms / 2, 0.0)
    assert sp.other_ms == pytest.approx(0.0, abs=1e-9)
    assert sp.warnings[0].kind == "ops_overlap" and "squeezed" in warning_text(sp.warnings[0])
    assert sum(getattr(sp, f"{p}_ms") for p in PHASES) == pytest.approx(op_ms, rel=1e-9)
