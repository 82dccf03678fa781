"""``perftune compare`` says ratios one way (issue 17): ``x1.25 slower`` / ``x1.25 faster`` for throughput and step
time alike, in text and Markdown, and the numbers beside a ratio never point the other way (it printed
``step time 675.8 ms -> 714.1 ms x0.984`` and ``(-1.6%)``).

OLD is the real quickstart sweep in ``reports/sample/``; NEW is a copy whose every timed window is scripted to take
``factor`` times as long (a scripted measurement: which of two real runs is faster is the machine's to decide, so
the real-burst comparisons live in test_compare.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perftune.compare.render import render_markdown, render_text
from perftune.compare.run import run_compare

SAMPLE = Path(__file__).resolve().parents[1] / "reports" / "sample" / "results.json"


def scaled_copy(folder: Path, factor: float) -> Path:
    data = json.loads(SAMPLE.read_text())
    for t in data["trials"]:
        for w in t["result"]["windows"]:
            w["total_ms"] *= factor
            w["median_step_ms"] *= factor
            w["samples_per_s"] /= factor
        t["result"]["samples_per_s"] /= factor
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(data))
    return folder


def step_line(text: str, label: str = "baseline") -> str:
    block = text.split(f"\n{label}  (OLD", 1)[1]
    return next(ln for ln in block.splitlines() if ln.strip().startswith("step time"))


@pytest.mark.parametrize("factor, word", [(1.25, "slower"), (0.8, "faster")])
def test_one_ratio_convention_in_text_and_markdown(tmp_path, factor, word):
    new = scaled_copy(tmp_path / "new", factor)
    report = run_compare(SAMPLE, new, threshold=0.05)
    base = next(c for c in report.configurations if c.label == "baseline")
    tp, st = base.metrics["throughput"], base.metrics["step_time"]
    assert tp.ratio == pytest.approx(1 / factor) and st.ratio == pytest.approx(factor)
    # the numbers shown are the centres the ratio is estimated from: NEW / OLD is the ratio, same direction
    assert st.new / st.old == pytest.approx(st.ratio) and tp.new / tp.old == pytest.approx(tp.ratio)
    text = render_text(report)
    line = step_line(text)
    assert "x1.250 " + word in line
    old_ms, new_ms = (float(v) for v in re.findall(r"([\d.]+) ms", line)[:2])
    assert (new_ms > old_ms) == (word == "slower")
    tp_line = next(ln for ln in text.split("\nbaseline  (OLD", 1)[1].splitlines() if "throughput" in ln)
    assert "x1.250 " + word in tp_line  # throughput and time read the same way
    assert not re.search(r"x0\.\d", text)  # no ratio below 1 printed bare
    md = render_markdown(report)
    row = next(ln for ln in md.splitlines() if ln.startswith("| baseline |"))
    assert f"x1.250 {word}" in row
    detail = [ln for ln in md.splitlines() if ln.startswith("| baseline |")][1]
    assert f"(x1.250 {word})" in detail  # the step-time cell: OLD -> NEW (x1.250 slower), no bare signed percent
    assert not re.search(r"\([+-]\d+\.\d%\)", detail)
    assert (report.exit_code == 1) == (word == "slower")
