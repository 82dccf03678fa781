"""User-facing failures without a burst (issue 15 item 15): hostile labels reach matplotlib as plain text, files of
another tool or schema are named precisely, compare's Markdown escapes HTML."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from perftune.cli import main


@pytest.mark.parametrize("label", ["$\\undefinedcommand{x}$", "cost in $ and $$", "$x^{$"])
def test_labels_with_dollars_are_drawn_as_written(label):
    from perftune.report.figures import throughput_figure

    rows = [{"label": label, "verdict": "kept", "samples_per_s": 100.0, "window_min": 90.0, "window_max": 110.0,
             "speedup_text": "$1.00$"}, {"label": "baseline", "verdict": "baseline", "samples_per_s": 80.0}]
    assert throughput_figure(rows).startswith("data:image/png;base64,")


def test_a_folder_of_someone_elses_trial_json_files_is_named_precisely(tmp_path):
    for side in ("old", "new"):
        (tmp_path / side / "run1").mkdir(parents=True)
        (tmp_path / side / "run1" / "trial.json").write_text(json.dumps({"run": 1, "loss": 0.5}))
    result = CliRunner().invoke(main, ["compare", str(tmp_path / "old"), str(tmp_path / "new")])
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "\n" not in line and "old/run1/trial.json: neither a perftune results.json" in line
    assert "its fields are loss, run (another tool's file or another schema)" in line


def test_compare_markdown_escapes_html():
    from perftune.compare.render import _md  # noqa: PLC2701 - the one escaping function of the renderer

    assert _md("<b>x</b> | y & z") == "&lt;b&gt;x&lt;/b&gt; \\| y &amp; z"


def test_run_refuses_a_folder_of_someone_elses_files(tmp_path):
    import yaml

    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "r", "workload": "mlp"}))
    mine = tmp_path / "mine"
    (mine / "profile").mkdir(parents=True)
    (mine / "profile" / "keep.txt").write_text("mine")
    result = CliRunner().invoke(main, ["run", str(plan), "--out", str(mine)])
    assert result.exit_code == 2 and "holds files perftune did not write" in result.stderr, result.output
    assert (mine / "profile" / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("content,expected", [
    (json.dumps({"run": 1, "loss": 0.5}), "trial.json: not a perftune trial.json"),
    ("{not json", "trial.json"),
])
def test_report_on_a_folder_with_someone_elses_trial_json_is_one_line_exit_2(tmp_path, content, expected):
    """``perftune report DIR`` reads a lone trial folder (a hand-added perftune.Callback's): a trial.json that is
    not perftune's, or not JSON, is one line naming the file, and no report is written."""
    (tmp_path / "trial.json").write_text(content)
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert expected in result.stderr and result.stderr.count("\n") == 1 and "Traceback" not in result.output
    assert not (tmp_path / "report.html").exists()


def test_report_on_an_empty_folder_names_both_files_it_reads(tmp_path):
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 2
    assert "no results.json or trial.json in it (not a perftune sweep or trial folder)" in result.stderr


def test_a_mindspore_message_that_announces_its_cause_keeps_the_cause_in_one_line():
    """MindSpore's CPU message for an Ascend-only op begins with a line that only announces the next (as reported
    with mindformers' overflow check on CPU): the op's name must reach the reason, not only the log tail."""
    from perftune.burst.failures import one_line

    exc = RuntimeError("- Kernel select failed:\n----------------------------------------------------\n"
                       "- Unsupported op [NPUGetFloatStatusV2] on CPU\n\n----------\n- C++ Call Stack:\n")
    assert one_line(exc) == "RuntimeError: Kernel select failed: Unsupported op [NPUGetFloatStatusV2] on CPU"
    assert one_line(ValueError("bad value\nmore")) == "ValueError: bad value"


def test_ablation_markdown_escapes_only_what_renders_as_html():
    """ablation.md reads as written: ``< 25%`` and ``>=`` stay; a tag or an entity is escaped."""
    from perftune.report.tables import md_text

    assert md_text("waits for data 0% of the step (< 25%), x >= 1") == "waits for data 0% of the step (< 25%), x >= 1"
    assert md_text("<b>x</b> | y &amp; z & w") == "&lt;b>x&lt;/b> \\| y &amp;amp; z & w"
