"""The integrity battery's second pass as tests: results.json checked against the sealed trial files (report, compare,
resume), a refused resume that changes nothing, report on a read-only folder, bursts started from the parent of a
clone, a dead burst's last error, the log cap's count, the integrity record in the report, compare X X."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, TINY_MLP, run_sweep_cli, tmpfs, write_plan

from perftune.runner.logcap import CappedLog

BURST = {"warmup_steps": 1, "steps": 8, "repeats": 2, "profile_steps": 0, "timeout_s": 120}
PERFTUNE = str(Path(sys.executable).parent / "perftune")  # the installed command, as a user runs it


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([PERFTUNE, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> tuple[Path, Path]:
    """A real finished sweep (plan, folder): the baseline and one candidate, sealed."""
    folder = tmp_path_factory.mktemp("golden")
    plan = write_plan(folder, name="golden", burst=BURST, variables={"prefetch_size": [4]})
    out = folder / "out"
    result = run_sweep_cli(plan, out, "--no-report")
    assert result.exit_code == 0, result.output
    return plan, out


@pytest.fixture
def copy(golden, tmp_path) -> tuple[Path, Path]:
    plan, out = golden
    shutil.copytree(out, tmp_path / "out", symlinks=True)
    return plan, tmp_path / "out"


def folder_state(out: Path) -> dict[str, str]:
    """Every entry under ``out``: a regular file's SHA-256, a link's target, a folder's mark (nothing else opened)."""
    state = {}
    for root, dirs, files in os.walk(out):
        for name in dirs + files:
            path = Path(root) / name
            rel = str(path.relative_to(out))
            if path.is_symlink():
                state[rel] = f"-> {os.readlink(path)}"
            elif path.is_dir():
                state[rel] = "folder"
            else:
                state[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


def times_ten(results: Path, trial_id: str) -> None:
    """Edit results.json as the battery did: one trial's throughput and every window x10, consistently."""
    data = json.loads(results.read_text())
    for t in data["trials"]:
        if t["trial_id"] == trial_id:
            t["result"]["samples_per_s"] *= 10
            for w in t["result"]["windows"]:
                w["samples_per_s"] *= 10
                w["total_ms"] /= 10
                w["median_step_ms"] /= 10
    results.write_text(json.dumps(data))


def test_a_consistent_results_json_edit_is_named_and_the_trial_files_win(copy, golden):
    plan, out = copy
    results = json.loads((out / "results.json").read_text())
    single = next(t for t in results["trials"] if t["kind"] == "single")
    sealed_figure = single["result"]["samples_per_s"]
    times_ten(out / "results.json", single["trial_id"])
    named = f"disagrees with the sealed trials/{single['trial_id']}/trial.json"

    report = cli("report", str(out))
    assert report.returncode == 0 and report.stderr.count(named) == 1, report.stderr
    from perftune.report.load import load_folder

    assert load_folder(out).by_id[single["trial_id"]].result.samples_per_s == sealed_figure
    assert named in (out / "report.html").read_text()  # the report's integrity record

    compared = cli("compare", str(golden[1]), str(out))
    assert compared.returncode == 0 and named in compared.stderr, compared.stderr
    assert "improved" not in compared.stdout and "x1.000 (no change)" in compared.stdout, compared.stdout

    resumed = run_sweep_cli(plan, out, "--no-report")
    assert resumed.exit_code == 0 and named in resumed.output, resumed.output
    after = json.loads((out / "results.json").read_text())
    assert [t["result"]["samples_per_s"] for t in after["trials"] if t["trial_id"] == single["trial_id"]] == \
        [sealed_figure]
    assert any(named in line for line in after["integrity"])
    shown = cli("report", str(out))  # the folder's integrity record, as the sweep logged it
    assert shown.returncode == 0 and all(f"warning: {line}" in shown.stderr for line in after["integrity"])


@pytest.mark.parametrize("bad", ["folder", "dev-zero"])
def test_a_refused_resume_leaves_the_folder_byte_identical(copy, bad):
    plan, out = copy
    seals = out / ".perftune-seals.json"
    seals.unlink()
    if bad == "folder":
        seals.mkdir()
    else:
        seals.symlink_to("/dev/zero")
    before = folder_state(out)
    resumed = run_sweep_cli(plan, out, "--no-report")
    assert resumed.exit_code == 2 and resumed.stderr.count("\n") == 1, resumed.output
    assert ".perftune-seals.json" in resumed.stderr and "Traceback" not in resumed.output
    assert folder_state(out) == before


def test_report_on_a_read_only_folder_is_one_line_exit_2(golden, tmp_path):
    with tmpfs(tmp_path / "ro", "64m") as mount:
        shutil.copytree(golden[1], mount / "out", symlinks=True)
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        done = cli("report", str(mount / "out"))
        assert done.returncode == 2 and "cannot be written (Read-only file system)" in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_compare_of_the_same_runs_says_so_in_one_line(golden):
    _, out = golden
    done = cli("compare", str(out), str(out))
    assert done.returncode == 0, done.stderr  # the exit code as before: the same runs are no regression
    said = [line for line in done.stderr.splitlines() if "OLD and NEW are the same runs" in line]
    assert len(said) == 1, done.stderr


def test_a_sweep_run_from_the_parent_of_a_clone_uses_the_installed_perftune(tmp_path):
    (tmp_path / "perftune").mkdir()
    (tmp_path / "perftune" / "__init__.py").write_text("# another perftune's source tree, not the installed one\n")
    plan = write_plan(tmp_path / "plans", name="clone", burst=BURST)
    done = cli("run", str(plan), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((tmp_path / "run" / "trial.json").read_text())["status"] == "ok"


def test_a_burst_that_died_before_its_trial_names_the_logs_last_error(tmp_path):
    (tmp_path / "dying.py").write_text(
        "import os, sys\n"
        "def build(params, seed):\n"
        "    print('Traceback (most recent call last):', file=sys.stderr)\n"
        "    print('RuntimeError: the workload lost its device', file=sys.stderr)\n"
        "    print('cleaning up', file=sys.stderr, flush=True)\n"
        "    os._exit(3)\n")
    plan = write_plan(tmp_path, name="dying", workload="dying:build", workload_params=dict(TINY_MLP), burst=BURST)
    done = cli("run", str(plan), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert done.returncode != 0
    reason = json.loads((tmp_path / "run" / "trial.json").read_text())["reason"]
    assert "without writing trial.json" in reason and "RuntimeError: the workload lost its device" in reason, reason


def test_the_log_cap_counts_every_byte_it_dropped(tmp_path):
    log = tmp_path / "burst.log"
    printer = "import sys\nfor i in range(10 * 1024): sys.stdout.write('%09d' % i + 'x' * 1014 + '\\n')\nprint('end')"
    with CappedLog(log, cap=1024 * 1024) as capped:
        proc = subprocess.Popen([sys.executable, "-c", printer], stdout=capped.fd, stderr=subprocess.STDOUT)
        capped.launched()
        assert proc.wait(timeout=60) == 0
    first, _, tail = log.read_bytes().partition(b"\n")
    dropped = int(first.split(b"[perftune: ")[1].split(b" bytes")[0])
    printed = 10 * 1024 * 1024 + len(b"end\n")
    assert dropped + len(tail) == printed and dropped > 8 * 1024 * 1024, (dropped, len(tail))


@pytest.mark.parametrize("damage, own", [("missing", "kept"), ("truncated", "kept"), ("deep", "kept"),
                                         ("missing", "rewritten")])
def test_an_edited_trial_is_never_believed_after_its_seals_were_lost(copy, damage, own):
    """The trial folder's own seal (``trial.sha256``) names the edit; where it was rewritten to the edited file's
    digest too, the earlier results.json does."""
    plan, out = copy
    seals = out / ".perftune-seals.json"
    if damage == "missing":
        seals.unlink()
    else:
        seals.write_text(seals.read_text()[:40] if damage == "truncated" else "[" * 200_000)
    trial = sorted((out / "trials").iterdir())[0] / "trial.json"
    data = json.loads(trial.read_text())
    data["samples_per_s"] *= 10  # consistent: the file's own windows give the edited figure
    for w in data["windows"]:
        w["samples_per_s"], w["total_ms"], w["median_step_ms"] = \
            w["samples_per_s"] * 10, w["total_ms"] / 10, w["median_step_ms"] / 10
    trial.write_text(json.dumps(data))
    edited = data["samples_per_s"]
    if own == "rewritten":
        (trial.parent / "trial.sha256").write_text(f"{hashlib.sha256(trial.read_bytes()).hexdigest()}  trial.json\n")

    report = cli("report", str(out))
    assert report.returncode == 0 and "this folder was sealed" in report.stderr, report.stderr
    resumed = run_sweep_cli(plan, out, "--no-report")
    assert resumed.exit_code == 0, resumed.output
    assert "this folder was sealed, and its seals are gone" in resumed.output, resumed.output
    named = (f"{trial}: its seal was lost and it disagrees with the earlier results.json" if own == "rewritten" else
             f"{trial}: changed after the sweep accepted it")
    assert named in resumed.output, resumed.output
    assert own == "rewritten" or "in its folder's own trial.sha256" in resumed.output
    assert (trial.parent / "trial.set-aside-1.json").is_file()
    results = json.loads((out / "results.json").read_text())
    assert edited not in [t["result"]["samples_per_s"] for t in results["trials"]]
    assert f"{edited:,.0f}" not in (out / "ablation.md").read_text()
    from perftune.io.seals import folder_doubts

    assert not folder_doubts(out)  # sealed again, from what was measured again or confirmed
