"""Without a terminal (CI logs, ``nohup``) a sweep prints one line per trial as it finishes, with the trials done,
the time elapsed and an estimate of the time left (issue 17 item 4): it printed only the baseline lines for minutes,
because a change's line waited for its verdict, which waits for every baseline run.  Scripted measurements (the
runner of test_sweep_logic); the display is the CLI's own."""

from __future__ import annotations

import re

from perftune.cli import SweepProgressDisplay
from test_sweep_logic import Script, make_sweep


def test_one_line_per_finished_trial_as_it_happens(tmp_path, capsys):
    variables = {"mode": ["pynative"], "jit_level": ["O1"], "num_parallel_workers": [2]}
    scripts = {"baseline": Script(), "+mode=pynative": Script(factor=0.5), "+jit_level=O1": Script(factor=1.0),
               "+num_parallel_workers=2": Script(factor=1.6)}
    sweep, runner = make_sweep(tmp_path, variables, scripts, baseline_runs=2, retry_on_stack=False)
    sweep.progress = SweepProgressDisplay(enabled=True)
    sweep.run()
    lines = capsys.readouterr().err.splitlines()
    finished = [ln for ln in lines if re.search(r"\[\d+/\d+ trials", ln)]
    # one line per trial the runner ran, in the order they ran, each as it finished (numbered 1, 2, ...); then the
    # stack step, which reuses the kept single's measurement
    assert len(finished) == len(runner.calls) + 1 and finished[-1].strip().startswith("stack +num_parallel_workers=2")
    for k, (line, (label, replicate)) in enumerate(zip(finished, runner.calls), start=1):
        assert line.strip().startswith(label), (line, label)
        assert f"[{k}/" in line and "elapsed" in line
    assert all(int(a) <= int(b) for a, b in (re.search(r"\[(\d+)/(\d+)", ln).groups() for ln in finished))
    # a change's line comes when it finishes, before the baseline run after it, and says its verdict is pending
    first_single = next(ln for ln in finished if ln.strip().startswith("+"))
    assert "verdict once every baseline run is in" in first_single
    assert finished.index(first_single) < len(finished) - 1
    assert "left]" in finished[0]  # an estimate of the time left from the first finished trial on
    # the verdicts follow, each on its own line with the ratio and its interval
    verdicts = [ln for ln in lines if ln not in finished and ln.strip().startswith("+")]
    assert {v.split(":")[0].strip() for v in verdicts} >= {"+mode=pynative", "+jit_level=O1", "+num_parallel_workers=2"}
    # in the one ratio convention of every output
    assert all(re.search(r"x\d\.\d\d (faster|slower) \[\d\.\d\d, \d\.\d\d\]", v) for v in verdicts
               if "kept" in v or "slower" in v)
    assert "x2.00 slower [" in next(v for v in verdicts if v.strip().startswith("+mode=pynative"))
    assert not any(re.search(r"x0\.\d", ln) for ln in lines)
