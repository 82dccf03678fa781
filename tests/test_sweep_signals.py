"""A sweep stopped by SIGTERM, and a sweep whose baseline fails: real processes, the right exit codes, nothing lost."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from conftest import TINY_MLP, run_sweep_cli, write_plan

REPO = Path(__file__).resolve().parent.parent


def bursts_under(out: Path) -> list[psutil.Process]:
    marker = str(out.resolve())
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            line = " ".join(p.info["cmdline"] or [])
        except psutil.Error:
            continue
        if marker in line and "perftune.burst" in line:
            found.append(p)
    return found


def test_sigterm_is_handled_like_ctrl_c(tmp_path):
    plan = write_plan(tmp_path, name="term", decision={"baseline_runs": 1}, variables={"batch_size": [16]},
                      workload_params={**TINY_MLP, "preprocess_ms": 5.0})
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "perftune.cli", "sweep", str(plan), "--out", str(out),
                             "--no-progress", "--no-report"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not bursts_under(out) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    assert bursts_under(out), "no burst started in time"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM)" in err and "resume with: perftune sweep" in err
    end = time.monotonic() + 5
    while bursts_under(out) and time.monotonic() < end:
        time.sleep(0.1)
    assert not bursts_under(out)
    assert json.loads((out / "results.json").read_text())["status"] == "interrupted"


def test_a_failed_baseline_is_a_non_zero_exit_with_the_reason(tmp_path):
    plan = write_plan(tmp_path, name="broken", workload="tests.workloads_for_tests:raising",
                      workload_params={"why": "checked by the test"}, variables={"batch_size": [16]})
    result = run_sweep_cli(plan, tmp_path / "out", "--no-report")
    assert result.exit_code == 1, result.output
    assert "the baseline failed" in result.stderr and "checked by the test" in result.stderr
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["status"] == "complete" and saved["trials"][0]["result"]["status"] == "failed"
