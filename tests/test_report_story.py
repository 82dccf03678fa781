"""The report, ablation.md and the terminal summary tell one story (issue 17, items 1, 2 and 4; issue 14 part 3).

Read from the real quickstart sweep in ``reports/sample/`` (copied; the only edits are to copies, each saying which
case it scripts): counts by verdict in the tables' words, one ratio convention, one step statistic (the mean, the
median beside it), compile time in the tables and as a figure, top operators by type, notes that never recommend a
refused change, and a gate plot whose axis holds every point.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from perftune.io.files import read_sweep
from perftune.report import write_report
from perftune.report.figures import loss_plot
from perftune.report.notes import bottleneck_note, tried_changes
from perftune.report.summary import sweep_summary, trial_summary
from perftune.report.tables import markdown_report
from perftune.words.format import count_word, speed_text, time_ratio_text, verdict_counts

SAMPLE = Path(__file__).resolve().parents[1] / "reports" / "sample"


@pytest.fixture()
def sample(tmp_path) -> Path:
    out = tmp_path / "sample"
    out.mkdir()
    shutil.copy(SAMPLE / "results.json", out / "results.json")
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> tuple[Path, str]:
    """The sample copied and its report written once (rendering the figures takes seconds on 2 cores)."""
    out = tmp_path_factory.mktemp("rendered")
    shutil.copy(SAMPLE / "results.json", out / "results.json")
    return out, write_report(out).read_text()


def edit(folder: Path, change) -> None:
    data = json.loads((folder / "results.json").read_text())
    change(data)
    (folder / "results.json").write_text(json.dumps(data))


def test_ratio_convention():
    assert speed_text(1.23) == "x1.23 faster"
    assert speed_text(0.5, 0.4, 0.625) == "x2.00 slower [1.60, 2.50]"  # the interval of the factor shown
    assert speed_text(1.1, 0.95, 1.3) == "x1.10 faster [0.95, 1.30]"
    assert time_ratio_text(1.25) == "x1.25 slower" and time_ratio_text(0.8) == "x1.25 faster"
    assert time_ratio_text(714.1 / 675.8, digits=3) == "x1.057 slower"  # the compare case of issue 17
    assert speed_text(None) == "" and speed_text(float("nan")) == ""
    assert speed_text(1.0004, 0.9, 1.1) == "x1.00 (no change) [0.90, 1.10]"


def test_counts_by_verdict_are_the_tables_words(rendered):
    sample, html = rendered
    result = read_sweep(sample)
    firsts = list({t.trial_id: t for t in reversed(result.trials)}.values())[::-1]
    counts = verdict_counts([count_word(t.kind, t.verdict) for t in firsts])
    words = dict(counts)  # the sample has each of these (graph and 2 workers kept, MindRecord dropped on the stack)
    assert words.get("kept") == 2 and words.get("slower") == 1 and words.get("accuracy rejected") == 1
    assert words.get("dropped") == 1
    repeats = sum(t.kind == "repeat" for t in firsts)
    assert repeats and ("repeat", repeats) in counts and "measured" not in dict(counts)  # not configurations
    card = re.search(r'id="trial-counts">(.*?)</div>', html, re.S).group(1)
    text = re.sub(r"<[^>]+>", "", card)
    assert text.startswith(f"{len(firsts)} trials run:")
    for verdict, n in counts:
        assert f"{n} {verdict}" in text
    assert "rejected" not in text.replace("1 accuracy rejected", "")  # nothing lumped: "not significant" is not
    # "rejected"; the one refusal is the accuracy gate's, named as such
    summary = sweep_summary(result, sample, None)
    assert summary.splitlines()[0].startswith(f"{len(firsts)} trials (")
    assert ", ".join(f"{n} {v}" for v, n in counts) in summary.splitlines()[0]


def test_one_ratio_convention_and_one_step_statistic(rendered):
    sample, html = rendered
    result = read_sweep(sample)
    md = markdown_report(result)
    b = result.best_vs_baseline
    assert speed_text(b.ratio, b.ci_low, b.ci_high) in md and speed_text(b.ratio, b.ci_low, b.ci_high) in html
    slower = next(t for t in result.trials if t.verdict == "slower")
    c = slower.vs_baseline
    assert c.ratio < 1 and speed_text(c.ratio, c.ci_low, c.ci_high) in md  # "x1.77 slower [..]", not "0.57x"
    assert re.search(r"\d\.\d\dx", md) is None  # the old "1.23x" form is gone
    row = next(ln for ln in md.splitlines() if ln.startswith(f"| {slower.label} |"))
    assert row.count(speed_text(c.ratio, c.ci_low, c.ci_high)) == 2  # the ratio column and the reason agree
    assert re.search(r"x0\.\d", md) is None and re.search(r"x0\.\d", html) is None
    assert "step ms: mean (median)" in md and "step ms: mean (median)" in html
    base = result.trials[0].result
    assert f"{base.step_ms_mean:.2f} (median {base.step_ms_median:.2f})" in md
    # the splits add up to that same mean step
    s = base.profile.splits
    assert s.step_ms == pytest.approx(base.step_ms_mean, rel=1e-9)
    summary = sweep_summary(result, sample, None)
    assert speed_text(b.ratio, b.ci_low, b.ci_high) in summary
    assert speed_text(result.aa_check.ratio, result.aa_check.ci_low, result.aa_check.ci_high, 3) in summary
    terminal = trial_summary(base, sample)
    assert f"mean {base.step_ms_mean:.2f} ms (median {base.step_ms_median:.2f}" in terminal
    assert f"of the mean step {s.step_ms:.2f}" in terminal


def test_compile_time_in_tables_and_figure(rendered):
    sample, html = rendered
    result = read_sweep(sample)
    md = markdown_report(result)
    assert "| compile s |" in md
    base = result.trials[0].result
    row = next(ln for ln in md.splitlines() if ln.startswith("| baseline |"))
    assert f"| {base.compile_ms / 1e3:.1f} |" in row
    assert "compile (s)" in html and 'alt="Compile time and step time per trial"' in html


def test_top_operators_by_type_per_trial(rendered):
    sample, html = rendered
    blocks = re.findall(r"<h3>Top operators: (.*?)</h3>.*?<tbody>(.*?)</tbody>", html, re.S)
    # every profiled process (repeat processes leave the profile to their configuration's first one)
    measured = [t for t in read_sweep(sample).trials if t.result.status == "ok" and t.result.profile is not None]
    assert len(blocks) == len({t.trial_id for t in measured})
    for _, body in blocks:
        types = re.findall(r'<td class="op">(.*?)</td>', body)
        assert types and len(types) == len(set(types))  # one row per operator type
        assert not any(re.search(r"-op\d+$|/", t) for t in types)  # no instance names (Default/Conv2D-op9)


@pytest.mark.slow
def test_notes_never_recommend_a_refused_change(sample):
    """The sample kept mode=graph; a copy where the sweep refused it (accuracy rejected, as the mindcv sweep did)."""
    def refuse_graph(data):
        for t in data["trials"]:
            if t["changes"] == {"mode": "graph"} and t["kind"] == "single":
                t["verdict"], t["reason"] = "accuracy rejected", "faster (x3.17) but val_loss +97.2%"
    edit(sample, refuse_graph)
    result = read_sweep(sample)
    base = result.trials[0].result
    assert base.knobs["mode"] == "pynative"
    assert "mode=graph" in bottleneck_note(base).text  # with no sweep context it is a fine suggestion
    note = bottleneck_note(base, tried_changes(result.trials)).text
    assert "try mode=graph" not in note and "/ mode=graph" not in note
    assert "mode=graph was tried: accuracy rejected" in note
    html = write_report(sample).read_text()
    assert "try mode=graph" not in html and "mode=graph was tried: accuracy rejected" in html


def test_gate_plot_axis_holds_every_point():
    """The mindcv case of issue 17: a far-off rejected point (1.338) next to a baseline at 0.571."""
    curves = [
        {"label": "baseline", "points": [(32, 2.3), (64, 1.9)], "value": 0.571, "samples_seen": 320},
        {"label": "mode=graph (rejected)", "points": [(32, 2.3), (64, 1.9)], "value": 1.127, "rejected": True},
        {"label": "batch_size=64 (rejected)", "points": [(64, 2.2)], "value": 1.338, "rejected": True},
    ]
    fig = loss_plot(curves, "val_loss", 0.05)
    gate = fig.axes[1]
    lo, hi = gate.get_xlim()
    xs = [x for line in gate.get_lines() for x in line.get_xdata()]
    assert xs and all(lo < x < hi for x in xs)
    assert lo < 0.571 * 1.05 < hi  # the gate's limit as well


def test_the_accuracy_figure_draws_every_configuration(tmp_path):
    """Issue 18 item 3: not only the baseline, kept steps and rejections: a `no effect` change is drawn too, once."""
    from perftune.report.html import accuracy_curves
    from perftune.report.load import load_folder

    sample = tmp_path / "v1"
    shutil.copytree(Path(__file__).parent / "data" / "results_v1", sample)
    folder = load_folder(sample)
    curves = accuracy_curves(folder, "val_loss")
    assert [c["label"] for c in curves] == ["baseline", "+dataset_sink_mode=true"]
    assert all(c["points"] and c["value"] is not None for c in curves)
    assert not any(c["rejected"] for c in curves)


def test_coinciding_training_losses_with_different_validation_say_why():
    same = [(32, 2.3), (64, 1.9)]
    differ = loss_plot([{"label": "baseline", "points": same, "value": 0.571},
                        {"label": "mode=graph (rejected)", "points": same, "value": 1.127, "rejected": True}],
                       "val_loss", 0.05)
    text = " ".join(t.get_text() for t in differ.axes[0].texts)
    assert "validation metric does not" in text and "BatchNorm" in text
    equal = loss_plot([{"label": "baseline", "points": same, "value": 0.5}, {"label": "x", "points": same, "value": 0.5}],
                      "val_loss", 0.05)
    assert "identical training losses" in " ".join(t.get_text() for t in equal.axes[0].texts)
