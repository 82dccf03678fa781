"""Without a terminal (CI logs, ``nohup``) a sweep prints each line as it happens (issue 17 item 4): a process as it
finishes, a verdict as it is decided, flushed, with the lines done of those expected, the time elapsed and an
estimate of the time left, and ratios in the one convention of every output.  Scripted measurements (the runner of
test_sweep_logic); the display is the CLI's own."""

from __future__ import annotations

import re

from scripted_sweeps import Script, make_sweep

from perftune.cli import SweepProgressDisplay

T = r"(?:\d+ min )?\d+ s"
COUNTER = re.compile(rf"\[(\d+)/(\d+) done, {T} elapsed(, ~{T} left(, at most ~{T})?|, at most ~{T} left|, none left)?\]$")


def test_one_line_per_finished_trial_as_it_happens(tmp_path, capsys):
    variables = {"mode": ["pynative"], "jit_level": ["O1"], "num_parallel_workers": [2]}
    scripts = {"baseline": Script(), "+mode=pynative": Script(factor=0.5), "+jit_level=O1": Script(factor=1.0),
               "+num_parallel_workers=2": Script(factor=1.6)}
    sweep, runner = make_sweep(tmp_path, variables, scripts, baseline_runs=2, retry_on_stack=False)
    sweep.store.progress = SweepProgressDisplay(enabled=True)
    sweep.run()
    lines = capsys.readouterr().err.splitlines()
    counters = [COUNTER.search(ln) for ln in lines]
    assert all(counters), [ln for ln, c in zip(lines, counters) if not c]
    done = [int(c.group(1)) for c in counters]
    assert done == list(range(1, len(lines) + 1))  # one line at a time, counted as it happens
    assert all(int(c.group(1)) <= int(c.group(2)) for c in counters)
    assert "left" in lines[0]  # an estimate of the time left from the first line on
    assert len(lines) <= sweep.store.progress.most  # engine.progress.most_lines: an upper bound of the lines
    # the races may still run extra rounds once the lines expected without them are done: never "none left" then
    assert all("at most" in ln for ln in lines[:-1] if int(COUNTER.search(ln).group(1)) >=
               int(COUNTER.search(ln).group(2))), lines
    # every process the runner ran has its line, in the order it ran, as it finished
    measured = [ln.strip() for ln in lines if "samples/s" in ln]
    fresh = [c for c in runner.calls if "(A/A, paired" not in c[0]]  # the paired A/A check's lines: below
    assert len(measured) == len(fresh)
    for line, (label, replicate) in zip(measured, fresh):
        assert line.startswith(label + (f" (run {replicate + 1})" if replicate else "") + ":"), (line, label)
    # verdicts, each with the ratio and its interval in the one convention
    verdicts = [ln for ln in lines if re.search(r": (kept|slower|undecided|not significant|equivalent):", ln)]
    assert {v.split(":")[0].strip() for v in verdicts} >= {"+mode=pynative", "+num_parallel_workers=2"}
    assert "x2.00 slower [" in next(v for v in verdicts if v.strip().startswith("+mode=pynative"))
    assert re.search(r"x1\.\d\d faster \[", next(v for v in verdicts if v.strip().startswith("+num_parallel")))
    assert not any(re.search(r"x0\.\d", ln) for ln in lines)
