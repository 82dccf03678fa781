"""One phase machine, three routes (issue 29): perftune's own workload, a script workload and ``perftune.Callback``
added by hand run the same phases, in the same order, with the same steps per phase, for a configuration's first
process and for a repeat process (which leaves the accuracy window and the profile out, and warms up until its step
time settles, for at most the samples the first process trained untimed: here 4 steps, fewer than the settle rule's
two blocks, so the count is known in advance).

Real tiny bursts: the mlp workload, ``experiments/script_workload/train.py`` (copied to a temporary folder) and a
ten-line job with the callback.  ``burst.drain_s`` of a microsecond makes the drain exactly one step on every route
(its time bound ends it after the first step), so the step counts are known in advance.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from itertools import groupby
from pathlib import Path

import pytest
from conftest import REPO, TINY_MLP
from workloads_for_tests import model_job

from perftune.engine.plan_load import parse_plan
from perftune.engine.specs import make_spec
from perftune.io.records import TrialResult
from perftune.runner import run_trial

BATCH = 32
BURST = {"warmup_steps": 1, "steps": 4, "repeats": 2, "profile_steps": 2, "timeout_s": 240, "drain_s": 1e-6}
ACCURACY_SAMPLES = 3 * BATCH
FIRST = [("accuracy", None, 3), ("warmup", None, 1 + 1), ("timed", 0, 4), ("timed", 1, 4), ("profiled", None, 2)]
REPEAT = [("warmup", None, ACCURACY_SAMPLES // BATCH + 1), ("timed", 0, 4), ("timed", 1, 4)]

JOB = model_job(32, "[perftune.Callback(out=sys.argv[1], warmup_steps=1, steps=4, repeats=2, profile_steps=2, "
                    "accuracy_samples=96, drain_s=1e-6, replicate=int(sys.argv[2]), stop=True)]", epochs=4)


def sequence(result: TrialResult) -> list[tuple[str, object, int]]:
    """(phase, timed window, steps) for each run of steps, in order."""
    return [(phase, window, len(list(run))) for (phase, window), run in
            groupby(result.steps, key=lambda s: (s.phase, s.window))]


def own_workload(folder: Path, replicate: int) -> TrialResult:
    plan = parse_plan({"name": "routes", "workload": "mlp", "workload_params": TINY_MLP, "burst": BURST,
                       "accuracy": {"samples": ACCURACY_SAMPLES}, "baseline": {"batch_size": BATCH, "mode": "graph"}})
    spec = make_spec(plan, {}, "baseline", replicate=replicate, cache_dir=folder / "cache")
    return run_trial(spec, folder / f"own{replicate}")


def script_workload(folder: Path, replicate: int) -> TrialResult:
    script = folder / "train.py"
    if not script.exists():
        shutil.copy(REPO / "experiments" / "script_workload" / "train.py", script)
    plan = parse_plan({"name": "routes", "workload": {"script": str(script), "args": ["--epochs", "50", "--samples",
                                                                                      "256"],
                                                      "knob_args": {"batch_size": "--batch-size"}},
                       "burst": BURST, "accuracy": {"samples": ACCURACY_SAMPLES},
                       "baseline": {"batch_size": BATCH, "mode": "graph"}})
    return run_trial(make_spec(plan, {}, "baseline", replicate=replicate), folder / f"script{replicate}")


def callback_by_hand(folder: Path, replicate: int) -> TrialResult:
    job = folder / "job.py"
    job.write_text(JOB)
    out = folder / f"callback{replicate}"
    run = subprocess.run([sys.executable, str(job), str(out), str(replicate)], cwd=folder, capture_output=True,
                         text=True, timeout=240, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-2000:]
    return TrialResult.model_validate_json((out / "trial.json").read_text())


@pytest.mark.parametrize("replicate, expected", [(0, FIRST), (1, REPEAT)], ids=["first", "repeat"])
def test_the_three_routes_run_the_same_phases(tmp_path, replicate, expected):
    results = {name: route(tmp_path, replicate) for name, route in
               (("own workload", own_workload), ("script", script_workload), ("perftune.Callback", callback_by_hand))}
    for name, result in results.items():
        assert result.status == "ok", (name, result.reason, result.log_tail)
    sequences = {name: sequence(r) for name, r in results.items()}
    assert all(s == expected for s in sequences.values()), sequences
    for name, r in results.items():
        assert r.warmup_steps == (2 if replicate == 0 else 4) and len(r.windows) == 2, name
        assert (r.accuracy.samples_seen if r.accuracy else None) == (ACCURACY_SAMPLES if replicate == 0 else None)
        assert r.compile_ms == r.steps[0].step_ms, name
        assert (r.profile is not None) == (replicate == 0), name
        assert any("repeat process 2" in n.text for n in r.notes) == (replicate == 1), name
        # one throughput on every route: batch / mean step of the timed windows
        assert r.samples_per_s == pytest.approx(BATCH / r.step_ms_mean * 1e3, rel=1e-12), name
