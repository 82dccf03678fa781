"""A script's own failure is named as the script's (issue 28 item 5): a real tiny training script whose default
``--num_parallel_workers`` exceeds the machine's cores fails in its own ``map`` call; the trial is ``failed`` (not
"unsupported": perftune's knob was never the value MindSpore refused), and the reason gives the script's file and
line from the traceback."""

from __future__ import annotations

import pytest
import yaml

from perftune.burst.failures import classify_failure, script_location
from perftune.engine.plan_load import load_plan
from perftune.engine.specs import make_spec
from perftune.runner import run_trial

SCRIPT = '''"""A tiny training script whose own default dataset workers exceed the machine's cores."""
import argparse
import os

import numpy as np
import mindspore.dataset as ds
from mindspore import nn
from mindspore.train import Model

parser = argparse.ArgumentParser()
parser.add_argument("--num_parallel_workers", type=int, default=(os.cpu_count() or 1) + 6)
parser.add_argument("--batch-size", type=int, default=8)
args = parser.parse_args()

data = ds.NumpySlicesDataset({"x": np.ones((64, 4), np.float32), "y": np.zeros((64,), np.int32)}, shuffle=False)
data = data.map(lambda x: x * 2, input_columns=["x"], num_parallel_workers=args.num_parallel_workers)
data = data.batch(args.batch_size)
net = nn.Dense(4, 2)
loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
Model(net, loss, nn.SGD(net.trainable_params(), 0.1)).train(20, data)
'''
MAP_LINE = SCRIPT.splitlines().index(next(ln for ln in SCRIPT.splitlines() if ln.startswith("data = data.map("))) + 1


@pytest.mark.slow
def test_a_scripts_own_workers_above_the_cores_fail_at_its_line(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    plan = {"name": "workers", "workload": {"script": "train.py", "knob_args": {"batch_size": "--batch-size"}},
            "burst": {"warmup_steps": 1, "steps": 2, "repeats": 2, "profile_steps": 0, "timeout_s": 150},
            "accuracy": {"samples": 16}, "baseline": {"batch_size": 8}, "decision": {"baseline_runs": 1}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(plan))
    spec = make_spec(load_plan(tmp_path / "p.yaml"), {}, "baseline")
    assert "num_parallel_workers" not in spec.script_knobs  # the plan leaves the workers to the script
    result = run_trial(spec, tmp_path / "run")
    assert result.status == "failed", (result.status, result.reason)
    reason = result.reason
    assert "num_parallel_workers exceeds the boundary" in reason
    assert f"after 0 step(s), at train.py:{MAP_LINE} (`data = data.map(" in reason, reason
    assert reason.endswith(": the value is the script's own (the plan leaves num_parallel_workers to the script)"), reason
    assert "num_parallel_workers=1:" not in reason  # the wording that blamed perftune's default


def test_a_refusal_raised_where_perftune_set_the_value_stays_unsupported():
    """No frame of user code in the traceback (perftune's own data pipeline set the workers): the knob's value is
    perftune's, so the trial is "unsupported" with the value named, as before."""
    from perftune.io.records import BurstSettings, TrialSpec

    spec = TrialSpec(trial_id="t", label="x", workload="mlp", knobs={"num_parallel_workers": 64},
                     burst=BurstSettings(), accuracy_samples=16)
    exc = ValueError("num_parallel_workers exceeds the boundary between 1 and 2!")
    status, reason = classify_failure(exc, spec)
    assert status == "unsupported" and reason.startswith("num_parallel_workers=64: MindSpore says ValueError")
    assert script_location(exc, None) is None
