"""Phases from what an op is, on real profiles of models nobody here wrote, and the splits' decision logic.

The op-type table (``tests/data/profiles/op_types/table.json``, made by ``make_op_types.py`` beside it from real
MindSpore 2.10 CPU profiles of mindcv's ResNet-18, MobileNetV3-small and a ViT, perftune's tiny_gpt and the
third-party LM stand-in, in GRAPH and PYNATIVE mode) is checked two ways: the stored profiles still attribute as the
table says, and the table itself agrees with what each op is (gradient kernels backward, update kernels optimizer,
forward kernels forward), whatever the rule that placed it.  The decision logic of ``compute_splits`` (warnings,
ranges, the share placed by time) runs on scripted op tables: no timing.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pandas as pd
import pytest

from perftune.profile.columns import OP_COLUMNS
from perftune.profile.layouts import ProfileData, load_profile
from perftune.profile.op_phase import OPTIMIZER_OP_TYPES, is_gradient_type, phase_rule
from perftune.profile.splits import FAR_SCALE, compute_splits, phase_ranges
from perftune.words.split_notes import split_notes, warning_text

HERE = Path(__file__).resolve().parent / "data" / "profiles" / "op_types"
TABLE = json.loads((HERE / "table.json").read_text())
SCENARIOS = sorted(TABLE)
#: forward kernels of these models: forward wherever they run, whatever placed them
FORWARD_TYPES = {"Conv2D", "BatchNorm", "MaxPool", "HSwish", "HSigmoid", "GeLU", "Softmax", "LayerNorm", "ReLU", "Erf"}


@cache
def profile(name: str) -> ProfileData:
    return load_profile(HERE / name)


def test_the_table_covers_every_model_in_both_modes():
    models = {(e["model"], e["mode"]) for e in TABLE.values()}
    for model in ("resnet18", "mobilenet_v3_small_100", "vit_tiny", "tiny_gpt", "third_party_lm"):
        assert {(model, "graph"), (model, "pynative")} <= models
    seen = {t for e in TABLE.values() for t in e["op_types"]}
    assert {"Conv2DBackpropInput", "Conv2DBackpropFilter", "MaxPoolGrad", "BatchNormGrad", "ReluGrad", "BiasAddGrad",
            "LayerNormGrad", "GeLUGrad", "HSwishGrad", "ApplyMomentum", "Adam"} <= seen


@pytest.mark.parametrize("name", SCENARIOS)
def test_stored_profiles_attribute_as_the_table_says(name):
    """Regenerate table.json with make_op_types.py --table-only when a rule changes on purpose."""
    ops = profile(name).ops
    for op_type, row in TABLE[name]["op_types"].items():
        mine = ops[ops["op_type"] == op_type]
        phases = mine.groupby("phase")["total_ms"].sum()
        assert set(phases.index) == set(row["phases_ms"]), op_type
        for phase, ms in row["phases_ms"].items():
            assert phases[phase] == pytest.approx(ms, abs=2e-3), (op_type, phase)
        assert sorted(set(mine["phase_rule"])) == row["rules"], op_type


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_op_gets_the_phase_of_what_it_is(name):
    for op_type, row in TABLE[name]["op_types"].items():
        phases = set(row["phases_ms"])
        if is_gradient_type(op_type):  # by its type or its Gradients/ scope, never by time
            assert phases == {"backward"}, (name, op_type, row)
            assert set(row["rules"]) <= {"op_type", "scope"}, (name, op_type, row)
        if op_type in OPTIMIZER_OP_TYPES:
            assert phases == {"optimizer"} and set(row["rules"]) <= {"op_type", "scope"}, (name, op_type)
        if op_type in FORWARD_TYPES:
            assert phases == {"forward"}, (name, op_type, row)


@pytest.mark.parametrize("name", [n for n in SCENARIOS if TABLE[n]["model"] not in ("tiny_gpt", "third_party_lm")])
def test_convolution_gradients_are_backward_and_the_optimizer_is_small(name):
    prof = profile(name)
    ops = prof.ops
    backprops = ops[ops["op_type"].str.contains("Backprop")]
    assert len(backprops) and set(backprops["phase"]) == {"backward"}
    totals = prof.phase_totals_ms()
    optimizer = ops[ops["phase"] == "optimizer"]
    assert set(optimizer["op_type"]) <= OPTIMIZER_OP_TYPES | {"Assign", "AssignAdd", "Mul", "AddN", "Add", "Sub"}
    assert totals["optimizer"] / sum(totals.values()) < 0.05
    assert totals["backward"] > totals["optimizer"] * 5


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_share_placed_by_time_is_recorded(name):
    prof = profile(name)
    op_ms = sum(prof.phase_totals_ms().values()) / 2
    sp = compute_splits(prof, 2, op_ms * 1.25, 0.0, op_ms * 1.25, 0.0)
    by_time = prof.ops[prof.ops["phase_rule"].isin(("timeline", "recompute", "default"))]
    assert sp.by_time_share == pytest.approx(float(by_time["total_ms"].sum()) / 2 / sp.step_ms, rel=1e-9)
    assert not any(is_gradient_type(t) for t in by_time["op_type"])
    if TABLE[name]["mode"] == "pynative":  # bare eager ops: their phase can only come from when they ran
        assert sp.by_time_share > 0
        assert any("placed" in n or "from where its ops ran" in n for n in split_notes(sp))


# ---- the rule on names alone ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("full_name, op_type, expected", [
    ("Default/Conv2DBackpropInput-op9", "Conv2DBackpropInput", ("backward", "op_type")),  # PyNative: no Gradients/
    ("Default/Conv2DBackpropFilter-op0", "Conv2DBackpropFilter", ("backward", "op_type")),
    ("Conv3DBackpropFilterV2", "Conv3DBackpropFilterV2", ("backward", "op_type")),
    ("Default/MaxPoolGradWithArgmaxV2-op0", "MaxPoolGradWithArgmaxV2", ("backward", "op_type")),
    ("BatchNormGradExt", "BatchNormGradExt", ("backward", "op_type")),
    ("EmbeddingDenseBackward", "EmbeddingDenseBackward", ("backward", "op_type")),
    # a transposed convolution's forward runs the input backprop kernel: its forward cell scope wins
    ("Default/network-Net/up-Conv2dTranspose/Conv2DBackpropInput-op0", "Conv2DBackpropInput", ("forward", "scope")),
    ("Default/Conv2D-op1", "Conv2D", ("forward", "step_cell")),
    ("Default/ApplyMomentum-op4", "ApplyMomentum", ("optimizer", "op_type")),
    ("StopGradient", "StopGradient", ("forward", "unscoped")),
])
def test_phase_rule_by_type(full_name, op_type, expected):
    assert phase_rule(full_name, op_type) == expected


# ---- compute_splits' decisions, on a scripted op table (no timing) -------------------------------------------------


def scripted(forward=60.0, backward=30.0, optimizer=10.0, by_step=None, launch_steps=None, rules=None) -> ProfileData:
    rules = rules or {}
    rows = [(p, p, "Op", p, rules.get(p, "scope"), 1, ms, ms) for p, ms in
            (("forward", forward), ("backward", backward), ("optimizer", optimizer))]
    ops = pd.DataFrame(rows, columns=["name", "full_name", "op_type", "phase", "phase_rule", "count", "total_ms",
                                      "mean_ms"])[OP_COLUMNS]
    return ProfileData(root=Path("scripted"), layout="cpu", rank=0, ops=ops, launch_steps=launch_steps,
                       phase_ms_by_step=by_step)


def test_far_op_scale_gives_ranges_and_a_warning():
    """Profiled compute 100 ms, timed 62 ms (x0.62, the LLaMA case): each phase lies between its profiled time and
    that minus the 38 ms difference; the carried point is inside; the warning says to compare by ranges."""
    sp = compute_splits(scripted(), 1, 62.0, 0.0, 100.0, 0.0)
    assert sp.op_scale == pytest.approx(0.62)
    assert [w.kind for w in sp.warnings] == ["profiled_slower", "op_scale_far"]
    assert sp.phase_ranges["forward"] == pytest.approx([22.0, 60.0])
    assert sp.phase_ranges["backward"] == pytest.approx([0.0, 30.0])
    for p in ("forward", "backward", "optimizer"):
        lo, hi = sp.phase_ranges[p]
        assert lo <= getattr(sp, f"{p}_ms") <= hi
    notes = split_notes(sp)
    assert any("x1.61 slower" in n for n in notes) and any(n.startswith("ranges (ms): forward 22.00-60.00") for n in notes)


def test_a_forward_that_doubled_is_told_from_one_within_the_ranges():
    """A recompute comparison: a forward 1.55x of another's is only a difference when the ranges do not overlap."""
    a = compute_splits(scripted(forward=40.0), 1, 62.0, 0.0, 80.0, 0.0)  # x0.775: far
    b = compute_splits(scripted(forward=62.0), 1, 62.0, 0.0, 102.0, 0.0)
    assert b.forward_ms / a.forward_ms > 1.0
    assert b.phase_ranges["forward"][0] < a.phase_ranges["forward"][1]  # overlap: not a difference
    c = compute_splits(scripted(forward=40.0), 1, 98.0, 0.0, 100.0, 0.0)  # x0.98: near
    d = compute_splits(scripted(forward=62.0), 1, 120.0, 0.0, 122.0, 0.0)
    assert d.phase_ranges["forward"][0] > c.phase_ranges["forward"][1]  # apart: a difference
    assert not c.warnings and not d.warnings


@pytest.mark.parametrize("timed, kinds", [(97.0, []), (90.0, ["profiled_slower"]), (110.0, ["profiled_faster"]),
                                          (100 * FAR_SCALE + 1, ["profiled_faster", "op_scale_far"]),
                                          (100 / FAR_SCALE - 1, ["profiled_slower", "op_scale_far"])])
def test_speed_warnings_by_op_scale(timed, kinds):
    sp = compute_splits(scripted(), 1, timed, 0.0, 100.0, 0.0)
    assert [w.kind for w in sp.warnings] == kinds
    assert sum(getattr(sp, f"{p}_ms") for p in ("data", "forward", "backward", "optimizer", "communication", "other")) \
        == pytest.approx(timed, rel=1e-12)


def test_the_profiled_steps_spread_widens_the_ranges():
    by_step = pd.DataFrame({"forward": [50.0, 70.0], "backward": [30.0, 30.0], "optimizer": [10.0, 10.0]})
    sp = compute_splits(scripted(forward=120.0, backward=60.0, optimizer=20.0, by_step=by_step, launch_steps=2),
                        2, 100.0, 0.0, 100.0, 0.0)
    assert sp.op_scale == pytest.approx(1.0) and not sp.warnings
    assert sp.phase_ranges["forward"] == pytest.approx([50.0, 70.0])
    assert sp.phase_ranges["backward"] == pytest.approx([30.0, 30.0])


def test_a_launch_count_that_does_not_fit_the_profiled_steps_is_a_warning():
    sp = compute_splits(scripted(launch_steps=3), 2, 100.0, 0.0)
    (w,) = sp.warnings
    assert w.kind == "launch_steps" and w.figures == {"launch_steps": 3, "profiled_steps": 2}
    assert "split into 3 steps, not the 2 profiled" in warning_text(w)
    assert sp.step_source == "burst"


def test_by_time_share_counts_only_ops_without_evidence():
    prof = scripted(rules={"forward": "timeline", "backward": "op_type", "optimizer": "op_type"})
    sp = compute_splits(prof, 1, 200.0, 0.0)  # op time 100 of a 200 ms step; forward's 60 placed by time
    assert sp.by_time_share == pytest.approx(0.3)


def test_phase_ranges_without_a_speed_difference_or_steps_are_empty():
    assert phase_ranges({"forward": 1.0, "backward": 1.0, "optimizer": 1.0},
                        {"forward": 1.0, "backward": 1.0, "optimizer": 1.0}, 0.0) == {}


def test_each_profile_file_is_read_once(monkeypatch):
    """The timestamps file (the largest) and the op table are each opened once per load (issue 29)."""
    import builtins
    from collections import Counter
    from pathlib import Path as P

    opened: Counter = Counter()
    real_open, real_read_bytes = builtins.open, P.read_bytes

    def counting_open(file, *args, **kwargs):
        opened[P(file).name] += 1
        return real_open(file, *args, **kwargs)

    def counting_read_bytes(self):
        opened[self.name] += 1
        return real_read_bytes(self)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(P, "read_bytes", counting_read_bytes)
    load_profile(HERE / "resnet18_pynative_model")
    assert opened["cpu_op_execute_timestamp_0.txt"] == 1 and opened["cpu_op_detail_info_0.csv"] == 1, opened
