"""Issue 39: nothing a user wrote is replaced.  A ``Model.train`` job that carries ``perftune.Callback(out="perf")``
by hand writes ``perf/trial.json`` when run alone; swept as a script workload, its callback stands down (perftune
measures every ``Model.train`` itself), so that file and every other file of the script's folder stay byte-identical.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import REPO, run_sweep_cli
from workloads_for_tests import model_job

from perftune.io.records import TrialResult
from perftune.io.sweep_records import SweepResult

JOB = model_job(16, '[LossMonitor(100), perftune.Callback(out="perf", warmup_steps=1, steps=4, repeats=2, '
                    'profile_steps=0)]', epochs=8)


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_hand_added_callbacks_trial_json_is_byte_identical_after_a_sweep(tmp_path):
    work = tmp_path / "job"
    work.mkdir()
    (work / "job.py").write_text(JOB)
    run = subprocess.run([sys.executable, "job.py"], cwd=work, capture_output=True, text=True, timeout=240,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-2000:]
    own = work / "perf" / "trial.json"
    assert TrialResult.model_validate_json(own.read_text()).status == "ok"
    before = snapshot(work)

    plan = {"name": "byhand", "workload": {"script": "job/job.py"},
            "burst": {"warmup_steps": 1, "steps": 4, "repeats": 2, "profile_steps": 0, "timeout_s": 240,
                      "drain_s": 1e-6},
            "accuracy": {"samples": 64, "seeds": 1}, "decision": {"baseline_runs": 1, "max_runs": 1},
            "variables": {"prefetch_size": [4]}, "output_dir": str(tmp_path / "out")}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    result = run_sweep_cli(path, tmp_path / "out")
    assert result.exit_code == 0, result.output
    sweep = SweepResult.model_validate_json((tmp_path / "out" / "results.json").read_text())
    assert sweep.trials and all(t.result.status == "ok" for t in sweep.trials), [(t.label, t.reason) for t in sweep.trials]
    assert snapshot(work) == before  # the user's trial.json, the script and nothing added beside them
    assert all(any("perftune.Callback stood down" in n.text for n in t.result.notes) for t in sweep.trials)
