"""``perftune compare`` on REAL results: the same plan run twice, a genuinely slower workload, broken inputs.

Once per session (about 40 s on 2 cores): the same tiny plan (baseline only) swept four times, interleaved
A, B, A, B, so each side holds two processes measured at alternating times; a genuinely slower variant of it (two
processes); one ``perftune run`` burst with other knobs.  Interleaving matters on a shared machine: two sweeps run
one after the other were seen to differ by 4x when other test suites started in between, and no statistics can
tell such a machine slow-down from a regression when it hits one side only (see experiments/ci/perftune-compare.yml).
The only hand edits are to copies, for inputs that must be refused or warned about (truncated, empty, wrong schema
version, another workload, another machine).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import PROFILED, REPO, TINY_MLP, run_sweep_cli, write_plan

from perftune.cli import main
from perftune.compare.run import run_compare
from perftune.compat import cli_runner


@pytest.fixture(scope="session")
def compare_runs(tmp_path_factory) -> dict[str, Path]:
    """``same_a``/``same_b``: folders of two sweeps each (``1/``, ``2/``) of one plan, run A, B, A, B;
    ``slow``: the same knobs with a per-sample sleep in the data map (8 ms x 32 samples per batch with 1 worker: a
    data-bound step of 256 ms+ instead of a few ms, far beyond what the machine's load does to the plain plan, which
    at load 15-20 was seen 6x slower than idle), baseline measured twice; ``other_knobs``: one ``perftune run``
    burst with batch_size 16 (nothing in common with the sweeps)."""
    folder = tmp_path_factory.mktemp("compare")
    # no re-measuring of contended processes: the number of processes per side must not depend on the machine's load
    # profiled: ``--metric split.forward`` compares the profiles' splits
    plan = write_plan(folder / "plans", name="same", output_dir=str(folder / "scratch"), burst=dict(PROFILED),
                      decision={"baseline_runs": 1, "remeasure_contended": 0})
    slow_plan = write_plan(folder / "plans", name="slow", output_dir=str(folder / "scratch"), burst=dict(PROFILED),
                           workload_params={**TINY_MLP, "preprocess_ms": 8.0},
                           decision={"baseline_runs": 2, "max_runs": 2, "remeasure_contended": 0})
    runs = {"same_a": folder / "same_a", "same_b": folder / "same_b", "slow": folder / "slow"}
    for out, p in ((runs["same_a"] / "1", plan), (runs["same_b"] / "1", plan), (runs["same_a"] / "2", plan),
                   (runs["same_b"] / "2", plan), (runs["slow"], slow_plan)):
        result = run_sweep_cli(p, out, "--no-report")
        assert result.exit_code == 0, result.output
    other = folder / "other_knobs"
    result = cli_runner().invoke(main, ["run", str(plan), "--set", "batch_size=16", "--out", str(other)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    runs["other_knobs"] = other
    return runs


def compare_cli(*args: str):
    return cli_runner().invoke(main, ["compare", *map(str, args)], catch_exceptions=False)


def error_lines(result) -> list[str]:
    return [ln for ln in result.stderr.splitlines() if ln.strip() and not ln.startswith("perftune: warning:")]


def assert_refused(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    lines = error_lines(result)
    assert len(lines) == 1 and lines[0].startswith("perftune: "), result.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def baseline_trial(sweep_dir: Path, replicate: int = 0) -> Path:
    data = json.loads((sweep_dir / "results.json").read_text())
    t = next(t for t in data["trials"] if t["kind"] == "baseline" and t["replicate"] == replicate)
    return sweep_dir / "trials" / t["trial_id"] / "trial.json"


# -- the real comparisons -------------------------------------------------------------------------------------------
def test_same_configuration_twice_compares_as_one_configuration(compare_runs):
    # Same plan twice: which side ran faster is the machine's answer (on a shared 2-core machine with a busy core,
    # two processes of one configuration were seen x1.6 apart, every window contended), so this checks the
    # comparison's logic: both sides pooled, the noise measured from them, the verdict and the exit code following
    # the interval, and the training bit-for-bit equal.  How often an A/A comparison false-alarms is measured by
    # experiments/benchmarks/aa_false_alarms.py, not asserted here.
    result = compare_cli(compare_runs["same_a"], compare_runs["same_b"], "--threshold", "50%")
    report = run_compare(compare_runs["same_a"], compare_runs["same_b"], threshold=0.5)
    (cc,) = report.configurations
    assert cc.label == "baseline" and (cc.old_runs, cc.new_runs) == (2, 2)
    tp = cc.metrics["throughput"]
    assert tp.interval and tp.ci_low < tp.ratio < tp.ci_high
    if tp.ci_low <= 1 <= tp.ci_high:
        assert cc.verdict == "no significant change" and "no significant change" in result.stdout
    assert not cc.regression or (tp.ci_high < 1 and tp.ratio <= 0.5)  # a regression: significant, beyond 50%
    assert result.exit_code == (1 if cc.regression else 0), result.output
    # each side pools its two sweeps: the noise comes from them, not only from the prior
    assert report.old.kinds == "2 results.json files" and report.new.kinds == "2 results.json files"
    assert report.noise.configurations == 2 and not report.noise.from_prior_only
    # same plan, same machine: nothing to warn about but the load, and accuracy is bit-for-bit the same training
    assert not [w for w in report.warnings if "differ" in w], report.warnings
    assert cc.metrics["val_loss"].verdict == "no significant change"
    # the mlp is a classifier: no "perplexity" (exp of its loss) in compare's figures, as everywhere else
    assert "perplexity" not in cc.metrics and "perplexity" not in result.stdout


def test_genuinely_slower_workload_is_slower_with_a_warning(compare_runs):
    result = compare_cli(compare_runs["same_a"], compare_runs["slow"])
    assert result.exit_code == 1, result.output
    assert "slower" in result.stdout and "REGRESSION" in result.stdout
    warning = [ln for ln in result.stderr.splitlines() if "workload params differ" in ln]
    assert warning and "preprocess_ms" in warning[0] and warning[0].startswith("perftune: warning:")
    report = run_compare(compare_runs["same_a"], compare_runs["slow"])
    (cc,) = report.configurations
    assert cc.regression and cc.verdict == "slower"
    tp = cc.metrics["throughput"]
    assert tp.ci_high < 0.95 and tp.ratio < 0.5  # 256 ms of sleeping per batch against a few ms of compute
    assert cc.metrics["step_time"].verdict == "slower" and cc.metrics["step_time"].ratio > 2
    # where the time moved: the timed steps wait for data
    wait = cc.metrics["data_wait"]
    assert wait.new > 40 > wait.old and wait.verdict == "slower"
    # the other direction is an improvement, exit 0
    back = compare_cli(compare_runs["slow"], compare_runs["same_a"])
    assert back.exit_code == 0, back.output
    assert "faster" in back.stdout
    # metrics without windows: threshold only, said so
    wait = compare_cli(compare_runs["same_a"], compare_runs["slow"], "--metric", "data_wait")
    assert wait.exit_code == 1 and "none (threshold only)" in wait.stdout
    split = compare_cli(compare_runs["same_a"], compare_runs["slow"], "--metric", "split.forward")
    assert split.exit_code in (0, 1) and "none (threshold only)" in split.stdout


def test_trial_json_against_trial_json(compare_runs):
    a, b = baseline_trial(compare_runs["same_a"] / "1"), baseline_trial(compare_runs["same_b"] / "1")
    result = compare_cli(a, b)
    assert result.exit_code in (0, 1), result.output  # one process a side: the verdict is the noise's to make
    assert "no configuration was measured more than once" in result.stderr
    report = run_compare(a.parent, b.parent)  # the folders work as well
    (cc,) = report.configurations
    assert (cc.old_runs, cc.new_runs) == (1, 1) and report.noise.from_prior_only
    slow = compare_cli(a, baseline_trial(compare_runs["slow"]))
    assert slow.exit_code == 1 and "slower" in slow.stdout
    assert "workload params differ" in slow.stderr  # read from the spec.json next to each trial.json


def test_a_folder_of_runs_is_pooled(compare_runs, tmp_path):
    pool = tmp_path / "pool"
    for i, run in enumerate(compare_runs[side] / r for side in ("same_a", "same_b") for r in ("1", "2")):
        shutil.copytree(run, pool / str(i))
    report = run_compare(pool, compare_runs["slow"])
    (cc,) = report.configurations
    assert cc.old_runs == 4 and report.old.kinds == "4 results.json files"
    assert report.exit_code == 1
    # a single sweep folder works as a side too
    single = run_compare(compare_runs["same_a"] / "1", compare_runs["slow"] / "results.json")
    assert single.configurations[0].old_runs == 1 and single.exit_code == 1


def test_markdown_and_json_are_written_and_parse(compare_runs, tmp_path):
    md, js = tmp_path / "out" / "summary.md", tmp_path / "out" / "compare.json"
    result = compare_cli(compare_runs["same_a"], compare_runs["slow"], "--markdown", md, "--json", js)
    assert result.exit_code == 1, result.output
    data = json.loads(js.read_text())
    assert data["kind"] == "perftune-compare" and data["exit_code"] == 1 and data["metric"] == "throughput"
    tp = data["configurations"][0]["metrics"]["throughput"]
    assert tp["verdict"] == "slower" and tp["ci_low"] < tp["ratio"] < tp["ci_high"] < 1
    assert any("preprocess_ms" in w for w in data["warnings"])
    text = md.read_text()
    assert text.startswith("### perftune compare: regression")
    table = [ln for ln in text.splitlines() if ln.startswith("| baseline ")]
    assert table and "**slower**" in table[0] and table[0].count("|") == 7
    assert "| configuration |" in text and "data ms" in text


@pytest.mark.smoke
def test_options_are_checked(compare_runs):
    ten = compare_cli(compare_runs["same_a"], compare_runs["same_b"], "--threshold", "10%")
    assert ten.exit_code in (0, 1) and "threshold 10%" in ten.stdout
    assert_refused(compare_cli(compare_runs["same_a"], compare_runs["same_b"], "--threshold", "5"), "--threshold")
    assert_refused(compare_cli(compare_runs["same_a"], compare_runs["same_b"], "--metric", "speed"),
                   "unknown metric", "split.<data|")
    mem = compare_cli(compare_runs["same_a"], compare_runs["same_b"], "--metric", "memory")
    assert mem.exit_code in (0, 1) and "peak memory" in mem.stdout


def test_help_documents_exit_codes():
    result = cli_runner().invoke(main, ["compare", "--help"])
    assert result.exit_code == 0
    for text in ("0  no significant regression", "1  a significant regression", "2  unusable input"):
        assert text in result.output


# -- unusable inputs: exit 2, one line ---------------------------------------------------------------------------------
@pytest.mark.smoke
def test_missing_empty_and_truncated_files(compare_runs, tmp_path):
    good = compare_runs["slow"] / "results.json"
    assert_refused(compare_cli(tmp_path / "nope", good), "OLD", "no such file or folder")
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert_refused(compare_cli(good, empty), "empty file")
    truncated = tmp_path / "truncated" / "results.json"
    truncated.parent.mkdir()
    text = good.read_text()
    truncated.write_text(text[: len(text) // 2])
    assert_refused(compare_cli(good, truncated.parent), "corrupted or truncated JSON")
    not_ours = tmp_path / "other.json"
    not_ours.write_text('{"hello": 1}')
    assert_refused(compare_cli(not_ours, good), "neither a perftune results.json")
    (tmp_path / "nothing_here").mkdir()
    assert_refused(compare_cli(tmp_path / "nothing_here", good), "no results.json or trial.json")


def test_wrong_schema_version(compare_runs, tmp_path):
    data = json.loads((compare_runs["same_b"] / "1" / "results.json").read_text())
    data["schema_version"] = 99
    newer = tmp_path / "results.json"
    newer.write_text(json.dumps(data))
    assert_refused(compare_cli(compare_runs["same_a"], newer), "schema version 99")
    trial = json.loads(baseline_trial(compare_runs["same_b"] / "1").read_text())
    trial["schema_version"] = 0
    old_trial = tmp_path / "trial.json"
    old_trial.write_text(json.dumps(trial))
    assert_refused(compare_cli(old_trial, baseline_trial(compare_runs["same_a"] / "1")), "trial schema version 0")


def test_nothing_in_common(compare_runs):
    result = compare_cli(compare_runs["same_a"], compare_runs["other_knobs"])
    assert_refused(result, "nothing in common", "batch_size 32 vs 16")


def test_different_workload_is_refused(compare_runs, tmp_path):
    data = json.loads((compare_runs["same_b"] / "1" / "results.json").read_text())
    for t in data["trials"]:
        t["result"]["workload"] = "tiny_gpt"
    (tmp_path / "results.json").write_text(json.dumps(data))
    assert_refused(compare_cli(compare_runs["same_a"], tmp_path), "different workloads")


@pytest.mark.smoke
def test_other_machine_and_versions_warn_but_compare(compare_runs, tmp_path):
    data = json.loads((compare_runs["same_b"] / "1" / "results.json").read_text())
    for t in data["trials"]:
        env = t["result"]["environment"]
        env["host"], env["cpu_model"], env["mindspore_version"] = "elsewhere", "Other CPU", "2.9.0"
    (tmp_path / "results.json").write_text(json.dumps(data))
    result = compare_cli(compare_runs["same_a"], tmp_path)
    assert result.exit_code in (0, 1), result.output
    warnings = [ln for ln in result.stderr.splitlines() if ln.startswith("perftune: warning:")]
    assert any("machines differ" in w and "elsewhere" in w for w in warnings), warnings
    assert any("MindSpore versions differ" in w and "2.9.0" in w for w in warnings), warnings
    assert "baseline" in result.stdout


def test_ci_plan_is_valid_and_small():
    from perftune.engine.plan_load import load_plan

    plan = load_plan(REPO / "experiments" / "ci" / "tiny.yaml")
    assert plan.workload == "mlp" and len(plan.variables) <= 1
    assert plan.burst.steps * plan.burst.repeats <= 200


@pytest.mark.parametrize("value", [0.0, -5.0])
def test_unusable_throughput_is_exit_2_not_a_regression(compare_runs, tmp_path, value):
    """CI reads exit 1 as "regression": a corrupted or edited number must be exit 2 with one line, never a traceback."""
    source = baseline_trial(compare_runs["same_a"] / "1")
    data = json.loads(source.read_text())
    data["windows"][0]["samples_per_s"] = value
    bad = tmp_path / "bad" / "trial.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps(data))
    assert_refused(compare_cli(source, bad), "unusable window throughput", "finite numbers > 0")


def test_a_side_measured_on_a_busy_machine_is_warned_about(compare_runs, tmp_path):
    """The contention guard's record reaches compare: processes with contended windows are named per side."""
    data = json.loads((compare_runs["same_b"] / "1" / "results.json").read_text())
    for t in data["trials"]:
        t["result"]["contended_windows"] = 0
    busy = data["trials"][0]["result"]
    busy["contended_windows"] = 2
    (tmp_path / "results.json").write_text(json.dumps(data))
    report = run_compare(compare_runs["same_a"], tmp_path, threshold=0.5)
    new = [w for w in report.warnings if w.startswith("NEW:") and "busy machine" in w]
    assert len(new) == 1 and f"1 of {len(data['trials'])} process(es)" in new[0] and "2 timed window(s)" in new[0]

