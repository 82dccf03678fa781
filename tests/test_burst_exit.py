"""A burst whose last phase failed (its trial.json cannot be written, as on a full disk, after its profiler's start
failed) leaves at once through ``os._exit`` with the reason as its log's last line, never through the interpreter's
teardown, where MindSpore's pipeline and profiler threads can hold the process until the runner's timeout."""

from __future__ import annotations

import subprocess
import sys
import time

from conftest import TINY_BURST, TINY_MLP

from perftune.burst.main import WRITE_FAILED
from perftune.engine.plan_load import parse_plan
from perftune.engine.specs import make_spec
from perftune.io.files import SPEC_NAME, TRIAL_NAME


def test_a_burst_that_cannot_write_its_trial_ends_within_seconds_and_says_why(tmp_path):
    plan = parse_plan({"name": "exit", "workload": "mlp", "workload_params": TINY_MLP,
                       "burst": {**TINY_BURST, "profile_steps": 2, "timeout_s": 600},
                       "baseline": {"batch_size": 32, "mode": "graph", "prefetch_size": 2},
                       "accuracy": {"samples": 64, "seeds": 1}}, "t")
    (tmp_path / SPEC_NAME).write_text(make_spec(plan, {}, "baseline").model_dump_json())
    (tmp_path / TRIAL_NAME).mkdir()  # the write fails as a full disk's would, after every phase ran
    (tmp_path / "profile").write_text("not a folder")  # the profiler's start raises
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "perftune.burst", str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    took = time.monotonic() - started
    assert done.returncode == WRITE_FAILED, done.stderr[-2000:]
    assert took < 60, f"{took:.0f} s"
    last = done.stderr.strip().splitlines()[-1]
    assert f"could not write {TRIAL_NAME}" in last and "regular files" in last, last
