"""MFU against the cached peak, ``perftune peak`` itself, and the report's drift and loss-difference sections.

The report tests write the peak into the cache file themselves (``PERFTUNE_CACHE_DIR`` points at a tmp folder):
the peak measurement never runs inside a timed test.  ``perftune peak`` runs once, for real, in a child process
with a small matrix.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from perftune.io.peak_cache import CACHE_ENV, PeakRecord, cache_path, peak_key, read_peak, write_peak
from perftune.report import write_report
from perftune.report.efficiency import efficiency, trial_mfu
from perftune.report.extra import sweep_environment
from perftune.report.figures_extra import loss_difference
from perftune.report.load import load_folder
from perftune.report.tables import process_label

PEAK = 123.4e9


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(folder))
    return folder


def fake_peak(env, flops=PEAK) -> PeakRecord:
    return PeakRecord(host=env.host, device=env.device, mindspore_version=env.mindspore_version, flops_per_s=flops,
                      median_flops_per_s=flops * 0.9, method="written by the test", size=64, repeats=3, seconds=0.1,
                      load_avg_1m=0.5, measured_utc="2026-01-01T00:00:00+00:00")


def section(html: str, name: str) -> str:
    start = html.index(f'<section id="{name}"')
    return html[start:html.index("</section>", start)]


def cells(html: str, table_id: str) -> list[list[str]]:
    body = html[html.index(f'id="{table_id}"'):]
    body = body[:body.index("</table>")]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr data-trial.*?</tr>|<tr><td.*?</tr>",
                                                                           body, re.S)]


def test_report_states_the_peak_and_every_trials_mfu(quick_sweep, tmp_path, cache):
    out = tmp_path / "sweep"
    shutil.copytree(quick_sweep, out, ignore=shutil.ignore_patterns("cache"))
    folder = load_folder(out)
    env = sweep_environment(folder)
    html = write_report(out).read_text()
    assert "MFU unknown: no peak measured for" in section(html, "efficiency") and "perftune peak" in html

    write_peak(fake_peak(env))
    html = write_report(out).read_text()
    eff = section(html, "efficiency")
    assert "peak 123.4 GFLOP/s" in eff and "written by the test" in eff and "load average 0.5" in eff
    rows = {r[0]: r for r in cells(eff, "mfu-table")}
    ok = [t for t in folder.trials if t.result.status == "ok"]
    assert len(rows) == len(ok) >= 5
    for t in ok:
        expected = t.result.flops_per_sample * t.result.samples_per_s / PEAK
        label = process_label(t, folder.trials)  # as every table labels a process: repeats are "(run N)" too
        assert rows[label][-1] == f"{expected:.2%}", label
    assert 'alt="MFU per trial"' in eff

    drift = section(html, "drift")
    assert 'alt="Throughput drift' in drift and "<img" in drift
    diff = section(html, "loss-difference")
    # each change's first process (the one with an accuracy window): how many repeats a change needed is the machine's
    changes = [t for t in ok if t.kind != "baseline" and t.replicate == 0]
    assert 'alt="Loss difference' in diff and len(cells(diff, "loss-difference-table")) == len(changes)


def test_mfu_is_unknown_without_flops_or_peak(quick_sweep, cache):
    folder = load_folder(quick_sweep)
    env = sweep_environment(folder)
    trial = next(t for t in folder.trials if t.result.status == "ok")
    blind = trial.model_copy(update={"result": trial.result.model_copy(update={"flops_per_sample": None})})
    assert trial_mfu(trial.result, PEAK) == pytest.approx(trial.result.flops_per_sample * trial.result.samples_per_s
                                                          / PEAK)
    assert efficiency([blind], env, {}).rows[0]["mfu_text"] == "unknown (the workload gives no FLOPs per sample)"
    assert efficiency([trial], env, {}).rows[0]["mfu_text"] == "unknown (no peak)"
    write_peak(fake_peak(env))
    other = env.model_copy(update={"mindspore_version": "0.0.1"})
    assert efficiency([trial], other, {}).peak is None  # a peak never stands in for another MindSpore version


def test_cache_keeps_other_machines_and_refuses_a_corrupt_file_in_one_line(cache):
    first = PeakRecord(host="a", device="CPU", mindspore_version="2.10.0", flops_per_s=1e9, median_flops_per_s=1e9,
                       method="m", size=16, repeats=3, seconds=0.1, measured_utc="t")
    write_peak(first)
    write_peak(first.model_copy(update={"host": "b", "flops_per_s": 2e9}))
    assert read_peak("a", "CPU", "2.10.0").flops_per_s == 1e9 and read_peak("b", "CPU", "2.10.0").flops_per_s == 2e9
    assert set(json.loads(cache_path().read_text())["peaks"]) == {peak_key("a", "CPU", "2.10.0"),
                                                                  peak_key("b", "CPU", "2.10.0")}
    cache_path().write_text("{not json")
    from perftune.errors import UserError

    with pytest.raises(UserError, match="unreadable peak cache"):
        read_peak("a", "CPU", "2.10.0")


@pytest.mark.slow
def test_perftune_peak_measures_once_and_then_reads_the_cache(tmp_path):
    env = {**os.environ, CACHE_ENV: str(tmp_path / "cache"), "PYTHONPATH": str(REPO), "GLOG_v": "3"}
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "peak.json").write_text("[]")  # corrupt: refused in one line, replaced by --refresh

    def peak(*args):
        return subprocess.run([sys.executable, "-m", "perftune.cli", "peak", *args], capture_output=True, text=True,
                              env=env, timeout=300, stdin=subprocess.DEVNULL)

    bad = peak()
    assert bad.returncode == 2 and "not a perftune peak cache" in bad.stderr and len(bad.stderr.splitlines()) == 1
    fresh = peak("--refresh", "--size", "256", "--seconds", "0.2")
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert "measured now" in fresh.stdout and "ops.MatMul 256x256x256 float32" in fresh.stdout
    (record,) = json.loads((tmp_path / "cache" / "peak.json").read_text())["peaks"].values()
    assert record["flops_per_s"] >= record["median_flops_per_s"] > 0 and record["repeats"] >= 3
    cached = peak()
    assert cached.returncode == 0 and "cached" in cached.stdout
    gpu = peak("--device", "GPU", "--refresh", "--size", "64")  # the CPU wheel of MindSpore this project pins
    assert gpu.returncode == 2 and gpu.stderr.strip().splitlines()[-1].startswith(
        "perftune: --device GPU: MindSpore cannot run on it here (")
    assert json.loads((tmp_path / "cache" / "peak.json").read_text())["peaks"] == {
        peak_key(record["host"], "CPU", record["mindspore_version"]): record}


def test_loss_difference_is_flat_for_identical_curves_and_interpolates_between_batch_sizes():
    base = [(32, 2.0), (64, 1.8), (96, 1.6), (128, 1.5)]
    assert [y for _, y in loss_difference(base, base)] == [0.0, 0.0, 0.0, 0.0]
    bigger_batch = [(64, 1.9), (128, 1.7), (192, 1.6)]  # 192 is past the baseline's last point: left out
    assert loss_difference(base, bigger_batch) == [(64, pytest.approx(0.1)), (128, pytest.approx(0.2))]
    halfway = loss_difference(base, [(48, 1.9)])
    assert halfway == [(48, pytest.approx(0.0))]  # baseline at 48 is 1.9 by linear interpolation
