"""A real mindcv ResNet-18 in PyNative through both routes a user takes (issue 28): its convolution gradients are
backward and the optimizer's share is the optimizer's.

The script route runs ``experiments/script_workload/mindcv_train.py`` (``Model.train``, mindcv's momentum) unchanged;
the function route ``experiments/mindcv_resnet.py:build`` (perftune's own step, Adam).  In PyNative the profiler
names the convolution gradients ``Default/Conv2DBackpropInput-op9`` (no ``Gradients/`` scope, no ``Grad`` in the
type): once they were placed by time and landed under ``optimizer``.  Tiny bursts (32x32 images, batch 2); nothing
here compares speeds (about 3 minutes on 2 shared cores).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from perftune.engine.plan_load import load_plan
from perftune.engine.specs import make_spec
from perftune.profile.layouts import load_profile
from perftune.profile.op_phase import OPTIMIZER_OP_TYPES, is_gradient_type
from perftune.runner import run_trial

BURST = {"warmup_steps": 1, "steps": 2, "repeats": 2, "profile_steps": 2, "timeout_s": 400}
#: small ops an optimizer runs besides its update kernels (step counter, learning-rate reads, weight decay)
OPTIMIZER_HELPERS = {"Assign", "AssignAdd", "Mul", "AddN", "Add", "Sub", "Cast", "Gather", "Identity"}


def burst(tmp_path: Path, name: str, workload, params=None, accuracy=None):
    plan = {"name": name, "workload": workload, "device": "CPU", "burst": BURST,
            "accuracy": accuracy or {"samples": 4}, "baseline": {"mode": "pynative", "batch_size": 2}}
    if params:
        plan["workload_params"] = params
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    out = tmp_path / "runs" / name
    result = run_trial(make_spec(load_plan(path), {}, name), out)
    assert result.status == "ok", (result.status, result.error)
    return result, out


def check_phases(result, out: Path) -> None:
    summary = result.profile
    assert summary is not None and summary.error is None and summary.splits is not None
    prof = load_profile(out / "profile")
    ops = prof.ops
    backprops = ops[ops["op_type"].str.startswith("Conv2DBackprop")]
    assert set(backprops["op_type"]) == {"Conv2DBackpropInput", "Conv2DBackpropFilter"}
    assert set(backprops["phase"]) == {"backward"} and set(backprops["phase_rule"]) == {"op_type"}
    gradients = ops[[is_gradient_type(t) for t in ops["op_type"]]]
    assert set(gradients["phase"]) == {"backward"}
    optimizer = ops[ops["phase"] == "optimizer"]
    assert set(optimizer["op_type"]) & OPTIMIZER_OP_TYPES, "the update kernels are the optimizer"
    assert set(optimizer["op_type"]) <= OPTIMIZER_OP_TYPES | OPTIMIZER_HELPERS, sorted(set(optimizer["op_type"]))
    totals = prof.phase_totals_ms()
    assert totals["optimizer"] / sum(totals.values()) < 0.1
    for row in summary.top_op_types:
        if row.op_type.startswith("Conv2DBackprop"):
            assert row.phases == ["backward"]
    s = summary.splits
    assert s.backward_ms > 5 * s.optimizer_ms
    assert s.by_time_share is not None and 0 <= s.by_time_share < 1


def test_mindcv_script_route_in_pynative(tmp_path):
    shutil.copy(REPO / "experiments" / "script_workload" / "mindcv_train.py", tmp_path / "mindcv_train.py")
    workload = {"script": "mindcv_train.py", "knob_args": {"batch_size": "--batch-size"},
                "args": ["--model", "resnet18", "--image-size", "32", "--samples", "64", "--epochs", "20"]}
    check_phases(*burst(tmp_path, "script", workload, accuracy={"metric": "train_loss", "samples": 4}))


def test_mindcv_function_route_in_pynative(tmp_path):
    params = {"model": "resnet18", "image_size": 32, "classes": 10, "train_samples": 64, "val_samples": 4}
    check_phases(*burst(tmp_path, "function", "experiments.mindcv_resnet:build", params))


def test_mindcv_workload_refuses_a_grid_that_does_not_divide_the_image(monkeypatch):
    """The pattern's grid (``workload_params.grid``) must tile the image: the error names the field and the size."""
    monkeypatch.syspath_prepend(str(REPO))
    from experiments.mindcv_resnet import build

    with pytest.raises(ValueError, match=r"grid must divide image_size \(32\), got 3"):
        build({"image_size": 32, "grid": 3}, 0)
    with pytest.raises(ValueError, match=r"unknown workload_params \['teacher'\]"):
        build({"teacher": "pixels"}, 0)
