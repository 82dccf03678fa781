"""Faults and hostile folders (issue 15): one writer per folder, only perftune's own files touched, trials complete
or absent, nothing a trial started survives it.  Real sweeps of a baseline-only tiny plan (one burst each)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import PROFILED, TINY_BURST, TINY_MLP, run_sweep_cli, tmpfs, write_plan

REPO = Path(__file__).resolve().parent.parent


def one_trial_plan(folder: Path, name: str = "one", **fields) -> Path:
    """Baseline only, one run asked (the sequential rule may add a repeat process of the baseline), profiled: the
    faults here include the profiler's (its folder left by a kill, its analysis processes on a full disk)."""
    return write_plan(folder, name=name, decision={"baseline_runs": 1}, **{"burst": dict(PROFILED), **fields})


def sweep_process(plan: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "perftune.cli", "sweep", str(plan), "--out", str(out),
                             "--no-progress", "--no-report", *extra], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def processes_with(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.pid != os.getpid() and marker in " ".join(p.info["cmdline"] or []) and \
                    p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def bursts_under(out: Path) -> list[psutil.Process]:
    return [p for p in processes_with(str(out.resolve())) if "perftune.burst" in " ".join(p.cmdline())]


def wait_for(condition, what: str, proc: subprocess.Popen | None = None, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the sweep ended before {what}: {proc.communicate()}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def none_left(marker: str, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while processes_with(marker) and time.monotonic() < end:
        time.sleep(0.1)
    return not processes_with(marker)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """One real, finished sweep folder of one trial (with its profile)."""
    folder = tmp_path_factory.mktemp("finished")
    out = folder / "out"
    result = run_sweep_cli(one_trial_plan(folder), out, "--no-report")
    assert result.exit_code == 0, result.output
    return out


def copy_of(out: Path, dest: Path) -> Path:
    shutil.copytree(out, dest)
    (dest / ".perftune.lock").unlink(missing_ok=True)
    return dest


# -- one writer per folder ----------------------------------------------------------------------------------------

def test_a_second_sweep_into_a_busy_folder_exits_2_and_a_dead_owners_lock_is_taken_over(tmp_path):
    plan = one_trial_plan(tmp_path, workload_params={**TINY_MLP, "preprocess_ms": 2.0})
    out = tmp_path / "out"
    first = sweep_process(plan, out)
    try:
        wait_for(lambda: bursts_under(out), "a burst of the first sweep", first)
        trial_dirs = sorted((out / "trials").iterdir())
        second = run_sweep_cli(plan, out, "--no-report", "--fresh")
        assert second.exit_code == 2, second.output
        line = second.stderr.strip()
        assert "\n" not in line and "another sweep is writing this folder" in line
        assert f"process {first.pid} on host " in line
        assert sorted((out / "trials").iterdir()) == trial_dirs  # --fresh of the refused sweep deleted nothing
        first.send_signal(signal.SIGKILL)  # the owner dies without releasing its lock
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert none_left(str(out.resolve()))  # its burst died with it (PR_SET_PDEATHSIG)
    resumed = run_sweep_cli(plan, out, "--no-report")
    assert resumed.exit_code == 0, resumed.output
    assert f"took over the stale lock of process {first.pid} on host" in resumed.stderr
    saved = json.loads((out / "results.json").read_text())
    assert saved["status"] == "complete" and saved["trials"][0]["result"]["status"] == "ok"
    assert not (out / ".perftune.lock").exists()  # released at the end


# -- only perftune's own files ------------------------------------------------------------------------------------

def test_a_folder_of_someone_elses_files_is_refused_and_left_as_it_was(tmp_path):
    victim = tmp_path / "victim"
    (victim / "trials").mkdir(parents=True)
    (victim / "trials" / "important.txt").write_text("not perftune's")
    plan = one_trial_plan(tmp_path / "plans", output_dir="../victim")
    from click.testing import CliRunner

    from perftune.cli import main

    result = CliRunner().invoke(main, ["sweep", str(plan), "--fresh", "--no-progress"])
    assert result.exit_code == 2, result.output
    assert "holds files perftune did not write (trials)" in result.stderr and result.stderr.count("\n") == 1
    assert (victim / "trials" / "important.txt").read_text() == "not perftune's"
    assert sorted(p.name for p in victim.iterdir()) == ["trials"]  # no lock, no marker left in it


def test_a_foreign_results_json_is_never_overwritten(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    foreign = b'{"accuracy": 0.93, "model": "someone else\'s"}\n'
    (out / "results.json").write_bytes(foreign)
    (out / ".perftune-sweep").write_text("even with a marker\n")
    for extra in ((), ("--fresh",)):
        result = run_sweep_cli(one_trial_plan(tmp_path), out, "--no-report", *extra)
        assert result.exit_code == 2 and "was not written by a perftune sweep" in result.stderr, result.output
        assert (out / "results.json").read_bytes() == foreign


def test_fresh_deletes_only_what_perftune_wrote(finished, tmp_path):
    from perftune.engine.plan_load import parse_plan
    from perftune.engine.sweep import Sweep
    from perftune.runner import run_trial

    copy = copy_of(finished, tmp_path / "copy")
    (copy / "trials" / "important.txt").write_text("mine")
    (copy / "notes.md").write_text("mine too")
    plan = parse_plan(json.loads((copy / "results.json").read_text())["plan"])
    Sweep(plan, copy, run_trial, fresh=True)
    assert not (copy / "results.json").exists() and not (copy / "ablation.md").exists()
    assert [p.name for p in (copy / "trials").iterdir()] == ["important.txt"]
    assert (copy / "notes.md").read_text() == "mine too"


def test_a_profiler_refused_out_path_is_refused_before_anything_runs(tmp_path):
    out = tmp_path / "out+1"
    result = run_sweep_cli(one_trial_plan(tmp_path), out, "--no-report")
    assert result.exit_code == 2 and "profiler refuses the character(s) '+'" in result.stderr, result.output
    assert not out.exists()


# -- trials complete or absent ------------------------------------------------------------------------------------

def test_a_trial_cut_off_while_profiling_is_redone_whole(finished, tmp_path):
    """What kill -9 during profiling leaves: the profiler's folder, no trial.json.  The redone trial must not find
    the old profile ("two profiler folders for rank 0") and keep its splits."""
    copy = copy_of(finished, tmp_path / "copy")
    before = json.loads((copy / "results.json").read_text())["trials"]
    first = before[0]  # the one with the profile
    trial_dir = copy / "trials" / first["trial_id"]
    (trial_dir / "trial.json").unlink()
    assert len(list((trial_dir / "profile").iterdir())) == 1
    result = run_sweep_cli(Path(json.loads((copy / "results.json").read_text())["plan_path"]), copy, "--no-report")
    assert result.exit_code == 0, result.output
    trial = json.loads((trial_dir / "trial.json").read_text())
    assert trial["status"] == "ok" and trial["profile"]["error"] is None, trial["profile"]
    assert trial["profile"]["splits"] is not None
    assert len(list((trial_dir / "profile").iterdir())) == 1
    saved = json.loads((copy / "results.json").read_text())
    assert saved["trials"][0]["reused"] is False
    kept = {t["trial_id"] for t in before[1:]}
    # the complete ones were kept; the redone trial's new numbers may make the sequential rule ask one more process
    assert all(t["reused"] for t in saved["trials"] if t["trial_id"] in kept)
    assert kept <= {t["trial_id"] for t in saved["trials"]}


def test_a_burst_killed_by_someone_else_is_not_called_oom_and_is_retried(tmp_path):
    plan = one_trial_plan(tmp_path, workload_params={**TINY_MLP, "preprocess_ms": 2.0})
    out = tmp_path / "out"
    sweep = sweep_process(plan, out)
    (burst,) = wait_for(lambda: bursts_under(out), "the burst", sweep)
    burst.send_signal(signal.SIGKILL)
    _, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 1, err  # the baseline failed
    trial = json.loads((out / "results.json").read_text())["trials"][0]
    assert trial["result"]["status"] == "failed" and trial["result"]["retry_on_resume"] is True
    reason = trial["result"]["reason"]
    assert "SIGKILL" in reason and "perftune did not send" in reason and "out of memory" not in reason
    resumed = run_sweep_cli(plan, out, "--no-report")
    assert resumed.exit_code == 0, resumed.output
    again = json.loads((out / "results.json").read_text())["trials"][0]
    assert again["result"]["status"] == "ok" and again["reused"] is False


# -- nothing a trial started survives it --------------------------------------------------------------------------

def escaping_plan(tmp_path: Path, marker: str, timeout_s: float, ignore_term: bool = False) -> Path:
    return one_trial_plan(tmp_path, workload="tests.workloads_for_tests:escaping_sleeper",
                          workload_params={"marker": marker, "started_file": str(tmp_path / "started"),
                                           "ignore_term": ignore_term},
                          burst={"warmup_steps": 1, "steps": 4, "repeats": 1, "profile_steps": 0,
                                 "timeout_s": timeout_s})


def test_a_setsid_grandchild_does_not_survive_the_time_out(tmp_path):
    marker = f"perftune-test-escapee-{os.getpid()}-timeout"
    sweep = sweep_process(escaping_plan(tmp_path, marker, timeout_s=25), tmp_path / "out")
    _, err = sweep.communicate(timeout=180)
    assert (tmp_path / "started").exists(), err  # the grandchild really ran
    assert sweep.returncode == 1 and "timeout_s=25" in err, err
    assert none_left(marker), [p.cmdline() for p in processes_with(marker)]


def test_a_second_ctrl_c_shortens_the_grace_period_but_still_kills_everything(tmp_path):
    marker = f"perftune-test-escapee-{os.getpid()}-sigint"
    out = tmp_path / "out"
    sweep = sweep_process(escaping_plan(tmp_path, marker, timeout_s=300, ignore_term=True), out)
    wait_for(lambda: (tmp_path / "started").exists(), "the grandchild", sweep)
    sweep.send_signal(signal.SIGINT)
    time.sleep(0.5)
    sweep.send_signal(signal.SIGINT)  # during the burst's grace period (it ignores SIGTERM)
    _, err = sweep.communicate(timeout=60)
    assert sweep.returncode == 130, err
    assert none_left(marker), [p.cmdline() for p in processes_with(marker)]
    assert none_left(str(out.resolve()))


# -- every failure one line, the right exit code ------------------------------------------------------------------

def test_a_read_only_out_is_one_line_exit_2_and_results_stay_as_they_were(finished, tmp_path):
    with tmpfs(tmp_path / "ro", "64m") as mount:
        copy = copy_of(finished, mount / "out")
        before = (copy / "results.json").read_bytes()
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        plan = Path(json.loads(before)["plan_path"])
        for out in (copy, mount / "new"):
            result = run_sweep_cli(plan, out, "--no-report")
            assert result.exit_code == 2, result.output
            assert "cannot be written (Read-only file system)" in result.stderr
            assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
        assert (copy / "results.json").read_bytes() == before


def test_a_full_disk_is_one_line_exit_2(tmp_path):
    with tmpfs(tmp_path / "full", "64k") as mount:
        started = time.monotonic()
        result = run_sweep_cli(one_trial_plan(tmp_path), mount / "out", "--no-report")
        # within seconds, not at the burst's timeout_s (120 s): burst.log's pump keeps draining the pipe once the file
        # cannot be written (it stopped reading, and the profiler's analysis processes blocked on their stderr)
        assert time.monotonic() - started < TINY_BURST["timeout_s"] / 2
        assert result.exit_code == 2, result.output
        assert "cannot be written (No space left on device)" in result.stderr and result.stderr.count("\n") == 1
        assert not (mount / "out" / ".perftune.lock").exists()
        if (mount / "out" / "results.json").exists():  # what is there is whole
            json.loads((mount / "out" / "results.json").read_text())


def test_a_disk_that_filled_up_and_was_freed_resumes_to_a_complete_sweep(tmp_path):
    """Full disk mid-sweep, room made, same command again: the sweep completes, nothing half-written is taken."""
    plan = one_trial_plan(tmp_path)
    with tmpfs(tmp_path / "filling", "64k") as mount:
        out = mount / "out"
        first = run_sweep_cli(plan, out, "--no-report")
        assert first.exit_code == 2, first.output
        assert "No space left on device" in first.stderr and first.stderr.count("\n") == 1
        subprocess.run(["mount", "-o", "remount,size=256m", str(mount)], check=True)
        again = run_sweep_cli(plan, out, "--no-report")
        assert again.exit_code == 0, again.output
        results = json.loads((out / "results.json").read_text())
        assert results["status"] == "complete"
        assert results["trials"] and all(t["result"]["status"] == "ok" for t in results["trials"])
        for t in results["trials"]:
            assert json.loads((out / "trials" / t["trial_id"] / "trial.json").read_text())["status"] == "ok"
        assert not (out / ".perftune.lock").exists()


def test_ctrl_c_while_the_report_is_written_exits_130(finished, tmp_path):
    copy = copy_of(finished, tmp_path / "copy")
    proc = subprocess.Popen([sys.executable, "-m", "perftune.cli", "report", str(copy)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def drawing() -> bool:  # matplotlib is loaded: the report is being written
        try:
            return "ft2font" in Path(f"/proc/{proc.pid}/maps").read_text()
        except OSError:
            return False

    wait_for(drawing, "the report to start drawing", proc, timeout=60)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert err.strip() == "perftune: interrupted"
    assert not (copy / "report.html").exists()


def test_ablation_md_shows_html_from_exception_messages_as_text(finished):
    from perftune.io.files import read_sweep
    from perftune.report.tables import markdown_report

    result = read_sweep(finished)
    for trial in result.trials:  # every process: under load the first may be a contended one measured again
        trial.verdict = "failed"
        trial.reason = "RuntimeError: <img src=x onerror=alert(1)> | <script>x</script>"
    text = markdown_report(result)
    assert "<img" not in text and "<script>" not in text
    assert "&lt;img src=x onerror=alert(1)> \\| &lt;script>" in text
