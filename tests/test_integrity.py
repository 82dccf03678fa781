"""Issue 40's battery as tests: a changed trial file is never believed (sealed, set aside, measured again), a results
folder emptied mid-sweep is noticed and its lock and marker restored, compare and report say what export says of
damaged files, burst.log is capped; real sweeps and real files.  (The SIGKILLed driver and the script that leaves its
cgroup: tests/test_containment.py.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, TINY_MLP, run_sweep_cli, write_plan

from perftune.io.files import SEALS_NAME
from perftune.io.seals import folder_doubts, read_seals
from perftune.runner.logcap import CappedLog


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perftune.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def sealed(tmp_path_factory) -> tuple[Path, Path]:
    """A real finished sweep of two baseline processes (plan, folder), with its seals."""
    folder = tmp_path_factory.mktemp("sealed")
    plan = write_plan(folder, name="sealed", burst={"warmup_steps": 1, "steps": 8, "repeats": 2, "profile_steps": 0,
                                                    "timeout_s": 120})
    out = folder / "out"
    result = run_sweep_cli(plan, out, "--no-report")
    assert result.exit_code == 0, result.output
    return plan, out


@pytest.fixture
def copy(sealed, tmp_path) -> tuple[Path, Path]:
    plan, out = sealed
    shutil.copytree(out, tmp_path / "out")
    return plan, tmp_path / "out"


def edit(trial: Path, **fields) -> str:
    data = json.loads(trial.read_text())
    data.update(fields)
    trial.write_text(json.dumps(data, indent=1))
    return trial.read_text()


def test_every_accepted_trial_file_is_sealed(sealed):
    _, out = sealed
    seals = read_seals(out)
    trials = sorted(p.name for p in (out / "trials").iterdir())
    assert sorted(seals) == trials and not folder_doubts(out)


@pytest.mark.parametrize("fields", [{"samples_per_s": 1e9}, {"step_ms_median": 0.5}],
                         ids=["throughput", "a-figure-only-the-seal-catches"])
def test_a_trial_file_edited_after_the_sweep_is_kept_and_measured_again_on_resume(copy, fields):
    plan, out = copy
    before = {p.name for p in (out / "trials").iterdir()}
    trial = sorted((out / "trials").iterdir())[0] / "trial.json"
    edited = edit(trial, **fields)
    report = cli("report", str(out))
    assert report.returncode == 0 and "left out" in report.stderr and str(trial) in report.stderr, report.stderr
    compared = cli("compare", str(out), str(out))
    assert "trial.json" in compared.stderr and "not used" in compared.stderr, compared.stderr
    exported = cli("export", str(out), "--csv", str(out.parent / "steps.csv"))
    assert exported.returncode == 0 and "left out" in exported.stderr, exported.stderr
    assert "changed after the sweep accepted it" in exported.stderr or "its timed windows give" in exported.stderr
    lone = cli("compare", str(trial.parent), str(out))
    assert lone.returncode == 2 and lone.stderr.count("\n") == 1, lone.stderr  # it would rest on the edited file
    resumed = run_sweep_cli(plan, out, "--no-report")
    assert resumed.exit_code == 0, resumed.output
    assert "trial.set-aside-1.json" in resumed.output, resumed.output
    assert (trial.parent / "trial.set-aside-1.json").read_text() == edited  # kept as it was
    results = json.loads((out / "results.json").read_text())
    assert [t["reused"] for t in results["trials"] if t["trial_id"] == trial.parent.name] == [False]
    # Under load the measured-again process may be contended and measured once more (a new trial, not reused): only
    # the trials the first sweep left are checked.
    assert all(t["reused"] for t in results["trials"] if t["trial_id"] in before - {trial.parent.name})
    assert before <= {t["trial_id"] for t in results["trials"]}
    assert len(results["integrity"]) == 1 and trial.parent.name in results["integrity"][0]
    value = next(iter(fields.values()))
    shown = [t["result"][next(iter(fields))] for t in results["trials"]]
    # as the tables write each figure (a bare "0.5" also appears as another column's figure)
    written = {"samples_per_s": f"{value:,.0f}", "step_ms_median": f"(median {value:.2f})"}[next(iter(fields))]
    assert value not in shown and written not in (out / "ablation.md").read_text()
    assert json.loads(trial.read_text())[next(iter(fields))] != value and not folder_doubts(out)


def test_a_damaged_trial_file_is_said_by_report_and_compare_and_measured_again(copy):
    """Issue 35 point 4 and the battery's fifth: compare and report say what export says (NaN: test_schema.py)."""
    plan, out = copy
    trial = sorted((out / "trials").iterdir())[-1] / "trial.json"
    damaged = trial.read_text()[:3000]
    trial.write_text(damaged)
    for args in (("report", str(out)), ("compare", str(out), str(out))):
        done = cli(*args)
        assert done.returncode == 0 and str(trial) in done.stderr, (args, done.stderr)
    assert cli("compare", str(trial), str(out)).returncode == 2
    resumed = run_sweep_cli(plan, out, "--no-report")
    assert resumed.exit_code == 0 and "trial.set-aside-1.json" in resumed.output, resumed.output
    assert (trial.parent / "trial.set-aside-1.json").read_text() == damaged and not folder_doubts(out)


def test_an_edited_results_json_figure_is_refused_by_report_and_compare(copy):
    _, out = copy
    results = out / "results.json"
    data = json.loads(results.read_text())
    data["trials"][0]["result"]["samples_per_s"] = 1e9
    results.write_text(json.dumps(data))
    for args in (("report", str(out)), ("compare", str(out), str(out)), ("export", str(out), "--csv",
                                                                          str(out.parent / "x.csv"))):
        done = cli(*args)
        assert done.returncode == 2 and "its timed windows give" in done.stderr, (args, done.stderr)


def test_a_results_folder_emptied_mid_sweep_is_noticed_and_its_lock_and_marker_restored(tmp_path):
    plan = write_plan(tmp_path, name="vandal", workload="tests.integrity_workloads:vandal_trainer",
                      burst={"warmup_steps": 1, "steps": 8, "repeats": 2, "profile_steps": 0, "timeout_s": 120})
    out = tmp_path / "out"
    done = cli("sweep", str(plan), "--out", str(out), "--no-progress", "--no-report")
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    for what in ("lock .perftune.lock vanished", "marker .perftune-sweep vanished while the sweep ran (written again)",
                 "results.json vanished", "vanished while the sweep ran (results.json keeps its result"):
        assert what in said, said
    assert "lock .perftune.lock vanished or was replaced while the sweep held it (restored)" in said
    assert (out / ".perftune-sweep").is_file() and (out / SEALS_NAME).is_file()
    results = json.loads((out / "results.json").read_text())
    assert len(results["trials"]) >= 2 and len(results["integrity"]) >= 4, results["integrity"]
    assert all(f"warning: {line}" in said for line in results["integrity"])


def test_burst_log_is_capped_with_its_tail_kept(tmp_path):
    log = tmp_path / "burst.log"
    printer = "import sys\nfor i in range(10 * 1024): sys.stdout.write('%09d' % i + 'x' * 1014 + '\\n')\nprint('end')"
    with CappedLog(log, cap=1024 * 1024) as capped:
        proc = subprocess.Popen([sys.executable, "-c", printer], stdout=capped.fd, stderr=subprocess.STDOUT)
        capped.launched()
        assert proc.wait(timeout=60) == 0
    text = log.read_text()
    assert log.stat().st_size <= 1024 * 1024 and text.endswith("000010239" + "x" * 1014 + "\nend\n")
    assert text.startswith("[perftune: ") and "bytes of earlier output dropped" in text.splitlines()[0]
    assert all(len(line) == 1023 for line in text.splitlines()[1:-1])  # cut at a line start


def test_a_loud_burst_keeps_a_capped_log_and_its_result(tmp_path):
    plan = write_plan(tmp_path, name="loud", workload="tests.integrity_workloads:loud_trainer",
                      workload_params={**TINY_MLP, "megabytes": 10}, decision={"baseline_runs": 1},
                      burst={"warmup_steps": 1, "steps": 8, "repeats": 2, "profile_steps": 0, "timeout_s": 120})
    out = tmp_path / "out"
    done = cli("run", str(plan), "--out", str(out))
    assert done.returncode == 0, done.stderr
    log = out / "burst.log"
    assert log.stat().st_size <= 4 * 1024 * 1024 and "the last line of the loud workload" in log.read_text()


def test_a_scripts_folder_is_never_the_results_folder(tmp_path):
    """A script runs in its own folder (burst/script.py): a sweep refuses an output folder that holds it."""
    (tmp_path / "train.py").write_text("print('never run')\n")
    plan = write_plan(tmp_path, name="here", workload={"script": "train.py"}, workload_params={}, output_dir=".",
                      baseline={})
    done = cli("sweep", str(plan), "--no-progress", "--no-report")
    assert done.returncode == 2 and "holds files perftune did not write" in done.stderr, done.stderr
    assert not (tmp_path / "results.json").exists() and not (tmp_path / "trials").exists()


def times_ten(trial: Path) -> float:
    """A consistent edit: the trial's throughput and every window's x10 (its own windows give the edited figure)."""
    data = json.loads(trial.read_text())
    data["samples_per_s"] *= 10
    for w in data["windows"]:
        w["samples_per_s"], w["total_ms"], w["median_step_ms"] = \
            w["samples_per_s"] * 10, w["total_ms"] / 10, w["median_step_ms"] / 10
    trial.write_text(json.dumps(data))
    return data["samples_per_s"]


def test_the_trial_folders_own_seal_catches_a_consistent_edit_with_the_seals_file_and_results_json_gone(copy):
    """The second witness: each accepted trial.json's digest also beside it (``trial.sha256``, as ``sha256sum``
    writes it).  With the seals file and results.json deleted, a consistently edited trial.json is still named,
    set aside and measured again; the untouched trial is reused as it was."""
    plan, out = copy
    edited_dir, *kept = sorted((out / "trials").iterdir())
    kept_dir = kept[0]
    for folder in (edited_dir, *kept):
        checked = subprocess.run(["sha256sum", "-c", "trial.sha256"], cwd=folder, capture_output=True, text=True)
        assert checked.returncode == 0 and "trial.json: OK" in checked.stdout, checked
    (out / SEALS_NAME).unlink()
    (out / "results.json").unlink()
    kept_before = (kept_dir / "trial.json").read_bytes()
    edited = times_ten(edited_dir / "trial.json")
    named = f"{edited_dir / 'trial.json'}: changed after the sweep accepted it"
    doubts = folder_doubts(out)
    assert any(named in d and "in its folder's own trial.sha256" in d for d in doubts), doubts

    resumed = run_sweep_cli(plan, out, "--no-report")
    assert resumed.exit_code == 0, resumed.output
    assert "this folder was sealed, and its seals are gone" in resumed.output, resumed.output
    assert named in resumed.output and "in its folder's own trial.sha256" in resumed.output, resumed.output
    assert (edited_dir / "trial.set-aside-1.json").is_file() and not (kept_dir / "trial.set-aside-1.json").exists()
    assert (kept_dir / "trial.json").read_bytes() == kept_before  # vouched for by its own seal: reused
    results = json.loads((out / "results.json").read_text())
    assert edited not in [t["result"]["samples_per_s"] for t in results["trials"]]
    assert not folder_doubts(out) and sorted(read_seals(out)) == sorted(p.name for p in (edited_dir, *kept))


def test_an_own_seal_that_is_not_a_file_is_no_seal_and_never_opened(tmp_path):
    import os

    from perftune.io.seals import own_seal

    os.mkfifo(tmp_path / "trial.sha256")  # opened for reading, a FIFO would wait for a writer
    assert own_seal(tmp_path) is None
    (tmp_path / "trial.sha256").unlink()
    (tmp_path / "trial.sha256").write_text("not a digest  trial.json\n")
    assert own_seal(tmp_path) is None
