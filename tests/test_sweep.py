"""The sweep engine on real bursts: verdicts, the accuracy gate, stacking, results on disk, interruption and resume."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
from conftest import TINY_BURST, TINY_MLP, write_plan

import perftune
from perftune.io.records import RESULTS_SCHEMA_VERSION
from perftune.io.sweep_records import SweepResult
from perftune.words.rules import multiplicity_text, order_rule_text

REPO = Path(__file__).resolve().parent.parent


def by_label(result: SweepResult) -> dict:
    return {t.label: t for t in result.trials if t.kind == "single"}


#: what a measured single may come out as; which one is the machine's doing (decisions: test_sweep_logic.py)
SINGLE_VERDICTS = {"kept", "not significant", "slower", "accuracy rejected", "no effect", "equivalent", "undecided"}


def assert_consistent(result: SweepResult, out: Path) -> None:
    """results.json agrees with the trial files, and the stack and best configuration with the trials."""
    ids = {t.trial_id for t in result.trials}
    for t in result.trials:
        on_file = json.loads((out / "trials" / t.trial_id / "trial.json").read_text())
        assert on_file["trial_id"] == t.trial_id and on_file["status"] == t.result.status
        assert on_file["windows"] == [w.model_dump() for w in t.result.windows]
    assert result.stack and result.stack[0].label == "baseline" and result.stack[0].kept
    assert all(step.trial_id in ids for step in result.stack)
    kept = [step.label for step in result.stack[1:] if step.kept]
    assert result.best_label == (kept[-1] if kept else "baseline") and result.best_trial_id in ids
    if len(result.stack) > 1:  # the first row on top of the baseline is the best kept single itself
        best_single = max((t for t in result.trials if t.kind == "single" and t.verdict == "kept"),
                          key=lambda t: t.vs_baseline.ratio)
        assert result.stack[1].trial_id == best_single.trial_id


def test_data_bound_sweep_runs_every_trial_and_records_its_decisions(quick_sweep):
    result = SweepResult.model_validate_json((quick_sweep / "results.json").read_text())
    assert result.status == "complete" and result.schema_version == RESULTS_SCHEMA_VERSION
    singles = by_label(result)
    assert set(singles) == {"+num_parallel_workers=2", "+mode=pynative"}
    for t in singles.values():
        assert t.result.status == "ok" and len(t.result.windows) == 2, t.reason
        assert t.verdict in SINGLE_VERDICTS and t.reason
        c = t.vs_baseline
        assert c.reference == "baseline" and c.ci_low <= c.ratio <= c.ci_high
    # R C1 R C2 R, then "C R" rounds (at most decision.max_runs = 2 processes per candidate, plus re-measures of
    # contended processes): the baseline's replicates count up from 0
    baseline = [t.replicate for t in result.trials if t.kind == "baseline"]
    assert len(baseline) >= 3 and baseline == list(range(len(baseline)))
    for t in singles.values():
        c = t.vs_baseline
        assert 1 <= c.processes <= 2 and c.reference_processes >= 2 and c.noise_sd > 0 and c.reason
        if not t.result.contended_windows:
            assert not t.excluded
    assert result.noise_sd > 0 and "Benjamini-Hochberg" in multiplicity_text(result.multiplicity)
    # the order rule follows the first baseline's own data-wait share (the fixture makes it data-bound): the larger of
    # the timed wait and the profile's data split (``engine/ceilings.py``)
    first = result.trials[0].result
    share = result.order_rule.shares["data"]
    assert share >= first.data_wait_ms_median / first.step_ms_median - 1e-9
    assert f"waits for data {share:.0%}" in order_rule_text(result.order_rule)
    expected_first = "+num_parallel_workers=2" if share >= result.order_rule.shares["compute"] else "+mode=pynative"
    assert [t.label for t in result.trials if t.kind == "single"][0] == expected_first
    # A/A: the baseline's later processes are compared with its earlier ones
    assert result.aa_check is not None and result.aa_check.reference == "baseline (earlier runs)"
    assert_consistent(result, quick_sweep)
    # identical maths: data workers do not change the losses
    assert singles["+num_parallel_workers=2"].accuracy_changes["val_loss"] == pytest.approx(0.0, abs=1e-9)


def test_results_on_disk_and_tables(quick_sweep):
    result = SweepResult.model_validate_json((quick_sweep / "results.json").read_text())
    for t in result.trials:
        trial_json = quick_sweep / "trials" / t.trial_id / "trial.json"
        assert trial_json.exists() and (trial_json.parent / "burst.log").exists()
        assert t.result.steps == []  # per-step rows stay in trial.json
        assert json.loads(trial_json.read_text())["steps"]
    ablation = pd.read_csv(quick_sweep / "ablation.csv")
    assert list(ablation["configuration"]) == [s.label for s in result.stack]
    for column in ("samples_per_s", "speedup", "speedup_ci_low", "step_ms", "data_ms", "forward_ms", "backward_ms",
                   "optimizer_ms", "communication_ms", "other_ms", "peak_mem_mb", "val_loss", "val_loss_change"):
        assert column in ablation.columns
    assert ablation["speedup"][0] == 1.0 and (ablation["samples_per_s"] > 0).all()
    md = (quick_sweep / "ablation.md").read_text()
    assert "### Cumulative ablation" in md and "### One variable at a time" in md
    for t in by_label(result).values():
        assert f"| {t.label} | {t.verdict} |" in md


def test_load_results_gives_dataframes(quick_sweep):
    results = perftune.load_results(quick_sweep)
    assert {"baseline", "single"} <= set(results.trials["kind"]) <= {"baseline", "single", "repeat"}
    assert len(results.trials) == len(results.raw.trials)
    assert {"knob.mode", "samples_per_s", "speedup", "val_loss"} <= set(results.trials.columns)
    assert len(results.windows) == sum(len(t.result.windows) for t in results.raw.trials)
    assert list(results.stack["configuration"]) == [s.label for s in results.raw.stack]
    assert not results.splits.empty  # every trial profiled its steps
    total = results.splits[[f"{p}_ms" for p in ("data", "forward", "backward", "optimizer", "communication",
                                               "other")]].sum(axis=1)
    assert (abs(total - results.splits["step_ms"]) <= 0.05 * results.splits["step_ms"]).all()


def _sweep_cmd(plan: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "perftune.cli", "sweep", str(plan), "--out", str(out), "--no-progress",
            "--no-report"]


def _bursts_of(out: Path) -> list[psutil.Process]:
    marker = str(out.resolve())
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if marker in " ".join(p.info["cmdline"] or []) and "perftune.burst" in " ".join(p.info["cmdline"]):
                found.append(p)
        except psutil.Error:
            pass
    return found


def _wait_for_trials(out: Path, n: int, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the sweep ended before it could be interrupted"
        try:
            if len(json.loads((out / "results.json").read_text())["trials"]) >= n:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError("the sweep did not get that far in time")


def test_sigkilled_sweep_resumes_with_the_finished_trials(tmp_path):
    # no profile: the resume is what is tested (a trial cut off while profiling: test_faults)
    plan = write_plan(tmp_path, name="resume", decision={"baseline_runs": 1, "max_runs": 1},
                      burst={**TINY_BURST, "profile_steps": 0},
                      variables={"batch_size": [16], "train_step": ["function"]})
    out = tmp_path / "out"
    proc = subprocess.Popen(_sweep_cmd(plan, out), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for_trials(out, 2, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _bursts_of(out) and time.monotonic() < deadline:  # PR_SET_PDEATHSIG ends the running burst
        time.sleep(0.2)
    assert not _bursts_of(out)
    finished = [t["trial_id"] for t in json.loads((out / "results.json").read_text())["trials"]]

    rerun = subprocess.run(_sweep_cmd(plan, out), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert "2 reused from an earlier run" in rerun.stdout
    result = SweepResult.model_validate_json((out / "results.json").read_text())
    assert result.status == "complete"
    assert [t.trial_id for t in result.trials[:2]] == finished[:2]
    assert all(t.reused for t in result.trials[:2]) and not result.trials[2].reused
    singles = pd.read_csv(out / "singles.csv")
    assert [c for c in singles["configuration"] if "(run " not in c and "(paired run " not in c] == \
        ["+batch_size=16", "+train_step=function"]  # each change's repeat processes are on lines of their own
    assert singles["configuration"][0] == "baseline (run 1)"
    assert (out / "ablation.csv").exists()


def test_ctrl_c_stops_the_burst_and_says_how_to_resume(tmp_path):
    plan = write_plan(tmp_path, name="interrupt", decision={"baseline_runs": 1},
                      variables={"batch_size": [16]}, workload_params={**TINY_MLP, "preprocess_ms": 5.0})
    out = tmp_path / "out"
    proc = subprocess.Popen(_sweep_cmd(plan, out), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    _wait_for_trials(out, 1, proc)
    deadline = time.monotonic() + 60
    while not _bursts_of(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 15
    assert proc.returncode == 130
    assert "resume with: perftune sweep" in err
    assert not _bursts_of(out)
    assert json.loads((out / "results.json").read_text())["status"] == "interrupted"


def test_fresh_starts_over(quick_sweep, tmp_path):
    """--fresh runs everything again instead of reusing (checked on a copy, without running the bursts)."""
    import shutil

    from perftune.engine.plan_load import parse_plan
    from perftune.engine.sweep import Sweep
    from perftune.runner import run_trial

    copy = tmp_path / "copy"
    shutil.copytree(quick_sweep, copy)
    plan = parse_plan(json.loads((copy / "results.json").read_text())["plan"])
    Sweep(plan, copy, run_trial, fresh=True)
    assert not (copy / "trials").exists() and not (copy / "results.json").exists()
