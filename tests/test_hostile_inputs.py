"""Outputs never land on inputs or on what perftune does not own; hostile files are one line and exit 2 (issue 27).

No bursts: the version-1 sweep in tests/data (copied), files made hostile by hand, the real commands."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from test_faults import tmpfs

from perftune.cli import main
from perftune.compat import cli_runner

V1 = REPO / "tests" / "data" / "results_v1"
DEEP = 200_000


def cli(*args: str):
    return cli_runner().invoke(main, list(args), catch_exceptions=False)


def one_line_exit_2(result, *words: str) -> str:
    line = result.stderr.strip()
    assert result.exit_code == 2, (result.output, result.stderr)
    assert "\n" not in line and "Traceback" not in line, line
    for w in words:
        assert w in line, line
    return line


@pytest.fixture
def sweep(tmp_path) -> Path:
    return Path(shutil.copytree(V1, tmp_path / "sweep"))


def trial_json(sweep: Path) -> Path:
    return next((sweep / "trials").glob("*/trial.json"))


# -- outputs never land on inputs or on what perftune does not own --------------------------------------------------

def test_export_and_compare_never_overwrite_an_input(sweep):
    before = {p: p.read_bytes() for p in (sweep / "results.json", trial_json(sweep))}
    one_line_exit_2(cli("export", str(sweep), "--csv", str(sweep / "results.json")), "--csv", "an input")
    one_line_exit_2(cli("export", str(sweep), "--csv", str(sweep / "steps.csv")), "lies inside")
    one_line_exit_2(cli("export", str(sweep), "--tensorboard", str(sweep / "tb")), "--tensorboard", "lies inside")
    one_line_exit_2(cli("compare", str(sweep), str(sweep), "--json", str(sweep / "results.json")), "--json")
    one_line_exit_2(cli("compare", str(trial_json(sweep)), str(sweep), "--markdown", str(trial_json(sweep))),
                    "--markdown", "is an input")
    assert {p: p.read_bytes() for p in before} == before


def test_an_output_that_is_a_device_fifo_or_folder_is_refused(sweep, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target, kind in (("/dev/full", "character device"), (str(fifo), "FIFO")):  # (a folder: click refuses it)
        one_line_exit_2(cli("export", str(sweep), "--csv", target), kind, "regular files")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode) and stat.S_ISFIFO(os.stat(fifo).st_mode)
    one_line_exit_2(cli("compare", str(sweep), str(sweep), "--markdown", "/dev/full"), "character device")
    one_line_exit_2(cli("compare", str(sweep), str(sweep), "--markdown", str(tmp_path / "same"),
                        "--json", str(tmp_path / "same")), "the same file")


def test_a_new_export_deletes_only_the_files_perftune_wrote(sweep, tmp_path):
    tb = tmp_path / "tb"
    assert cli("export", str(sweep), "--tensorboard", str(tb)).exit_code == 0
    mine = tb / "baseline" / "my_analysis.ipynb"
    mine.write_text("{}")
    first = {p.name for p in (tb / "baseline").iterdir()}
    assert cli("export", str(sweep), "--tensorboard", str(tb)).exit_code == 0
    after = {p.name for p in (tb / "baseline").iterdir()}
    assert mine.read_text() == "{}"
    assert len([n for n in after if n.startswith("events.")]) == 1  # replaced, not doubled
    assert first != after or len(first) == 2


def test_fresh_keeps_a_users_file_inside_a_trial_folder(tmp_path):
    from perftune.io.outdir import clear_own

    out = Path(shutil.copytree(V1, tmp_path / "sweep"))
    (out / ".perftune-sweep").write_text("")
    trial = trial_json(out).parent
    (trial / "spec.json").write_text("{}")
    (trial / "notes.txt").write_text("mine")
    kept = clear_own(out)
    assert (trial / "notes.txt").read_text() == "mine" and not (trial / "trial.json").exists()
    assert kept == [str(trial / "notes.txt")]


# -- hostile files: one line, exit 2 ---------------------------------------------------------------------------------

def test_deeply_nested_files_are_refused_everywhere(sweep, tmp_path):
    deep = "[" * DEEP + "]" * DEEP
    (sweep / "results.json").write_text(deep)
    one_line_exit_2(cli("report", str(sweep)), "nested more than")
    one_line_exit_2(cli("export", str(sweep), "--csv", str(tmp_path / "x.csv")), "nested more than")
    one_line_exit_2(cli("compare", str(sweep), str(V1)), "nested more than")
    plan = tmp_path / "plan.yaml"
    plan.write_text(json.dumps({"name": "t", "workload": "mlp"}))
    # a sweep into that folder (a resume) refuses it as a results.json perftune did not write
    one_line_exit_2(cli("sweep", str(plan), "--out", str(sweep), "--no-progress"), "not written by a perftune sweep")
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "trial.json").write_text('{"trial_id": ' + deep + "}")
    one_line_exit_2(cli("report", str(lone)), "nested more than")
    one_line_exit_2(cli("compare", str(lone), str(V1)), "nested more than")


def test_report_and_compare_refuse_the_same_unusable_throughputs(sweep):
    data = json.loads((sweep / "results.json").read_text())
    data["trials"][0]["result"]["windows"][0]["samples_per_s"] = 0.0
    (sweep / "results.json").write_text(json.dumps(data))
    report = one_line_exit_2(cli("report", str(sweep)), "unusable window throughput")
    compare = one_line_exit_2(cli("compare", str(V1), str(sweep)), "unusable window throughput")
    assert report.split(": ", 2)[2] == compare.split(": ", 2)[2]
    text = (sweep / "results.json").read_text().replace('"samples_per_s": 0.0', '"samples_per_s": NaN', 1)
    (sweep / "results.json").write_text(text)
    one_line_exit_2(cli("report", str(sweep)), "NaN", "never writes")
    one_line_exit_2(cli("compare", str(V1), str(sweep)), "NaN", "never writes")


def test_non_regular_inputs_are_refused_before_opening(tmp_path):
    fifo = tmp_path / "plan.yaml"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "perftune.cli", "validate", str(fifo)], capture_output=True,
                          text=True, timeout=60, cwd=REPO)  # a FIFO without a writer must not block
    assert done.returncode == 2 and "a FIFO, not a regular file" in done.stderr, done.stderr
    sides = tmp_path / "sides"
    sides.mkdir()
    os.mkfifo(sides / "trial.json")
    one_line_exit_2(cli("compare", str(sides / "trial.json"), str(V1)), "a FIFO")
    one_line_exit_2(cli("report", str(sides)), "no results.json or trial.json in it")


def test_a_corrupt_peak_cache_never_blocks_a_report(sweep, tmp_path, monkeypatch):
    from perftune.io.peak_cache import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "peak.json").write_text("[" * DEEP)
    result = cli("report", str(sweep))
    assert result.exit_code == 0, result.stderr
    html = (sweep / "report.html").read_text()
    assert "the cached peak was ignored" in html and "unreadable peak cache" in html


def test_tensorboard_export_onto_a_full_or_read_only_disk_is_one_line(sweep, tmp_path):
    with tmpfs(tmp_path / "disk", "256k") as disk:
        (disk / "filler").write_bytes(b"\0" * (256 * 1024 - 4096 * 2))
        while True:  # fill what is left to the last block
            try:
                with open(disk / f"more{os.urandom(4).hex()}", "wb") as fh:
                    fh.write(b"\0" * 4096)
            except OSError:
                break
        done = subprocess.run([sys.executable, "-m", "perftune.cli", "export", str(sweep), "--tensorboard",
                               str(disk / "tb")], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert done.returncode == 2 and "No space left on device" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        done = subprocess.run([sys.executable, "-m", "perftune.cli", "export", str(sweep), "--tensorboard",
                               str(disk / "tb2")], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert done.returncode == 2 and "Read-only file system" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def test_a_repeated_set_of_one_knob_is_refused(tmp_path):
    from conftest import write_plan

    plan = write_plan(tmp_path)
    one_line_exit_2(cli("run", str(plan), "--set", "batch_size=16", "--set", "batch_size=64"),
                    "--set batch_size: given twice")


@pytest.mark.slow
def test_the_first_eager_op_prints_no_numpy_traceback():
    done = subprocess.run([sys.executable, "-c", "from perftune.compat import first_eager_op; first_eager_op(); "
                           "import sys; sys.stderr.write('still here')"], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0 and "Traceback" not in done.stderr and "still here" in done.stderr, done.stderr
