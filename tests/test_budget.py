"""``decision.budget_s`` caps the sweep's wall time: no process starts that would end past it, and the sweep says what
it left unmeasured.  Scripted measurements (``scripted_sweeps``) whose processes take real time (a sleep), so the
cap is measured on the clock it guards."""

from __future__ import annotations

import time
from pathlib import Path

from scripted_sweeps import FIXED_WINDOW, Script, ScriptedRunner

from perftune.engine.sweep import Sweep
from perftune.io.plan import Plan
from perftune.io.records import TrialResult, TrialSpec
from perftune.report.summary import sweep_summary

PROCESS_S = 0.3


class SlowRunner(ScriptedRunner):
    """A scripted process that lasts ``PROCESS_S`` seconds, as a real burst lasts its own length."""

    def __call__(self, spec: TrialSpec, trial_dir: Path) -> TrialResult:
        time.sleep(PROCESS_S)
        return super().__call__(spec, trial_dir)


def budget_sweep(tmp_path: Path, budget_s: float) -> tuple[Sweep, SlowRunner]:
    variables = {"jit_level": ["O1"], "prefetch_size": [4, 8, 32], "mode": ["pynative"]}
    scripts = {"baseline": Script(), "+jit_level=O1": Script(1.01), "+prefetch_size=4": Script(0.99),
               "+prefetch_size=8": Script(1.0), "+prefetch_size=32": Script(1.02), "+mode=pynative": Script(1.01)}
    plan = Plan(name="budget", workload="tiny_mlp", variables=variables, accuracy=FIXED_WINDOW,
                decision={"budget_s": budget_s, "max_runs": 4, "paired": False})
    runner = SlowRunner(scripts)
    return Sweep(plan, tmp_path / "out", runner), runner


def test_no_process_starts_that_would_end_past_the_budget(tmp_path):
    budget = 1.5
    sweep, runner = budget_sweep(tmp_path, budget)
    start = time.perf_counter()
    result = sweep.run()
    wall = time.perf_counter() - start
    # the races alone would take 1 + 2 x 5 processes (3 s) and extra rounds: the cap stops them
    assert len(runner.calls) < 11
    # within the budget plus one process (and the sweep's own bookkeeping between processes)
    assert wall <= budget + PROCESS_S + 0.5, (wall, runner.calls)
    assert result.left_unmeasured and result.status == "complete"
    measured = {label for label, _ in runner.calls}
    assert not measured & set(result.left_unmeasured) - {"baseline"}  # the candidates it names never started


def test_the_summary_says_what_the_budget_left(tmp_path):
    sweep, _ = budget_sweep(tmp_path, 1.0)
    result = sweep.run()
    text = sweep_summary(result, tmp_path / "out", None)
    line = next(ln for ln in text.splitlines() if "decision.budget_s" in ln)
    assert "(1 s) left unmeasured: " in line and result.left_unmeasured[0] in line


def test_without_a_budget_everything_is_measured(tmp_path):
    sweep, runner = budget_sweep(tmp_path, 1e6)
    result = sweep.run()
    assert not result.left_unmeasured
    assert {"+jit_level=O1", "+prefetch_size=4", "+prefetch_size=8", "+prefetch_size=32", "+mode=pynative"} <= \
        {label for label, _ in runner.calls}


def test_the_tables_and_the_report_say_what_the_budget_left(tmp_path):
    from perftune.report.html import build_context, render
    from perftune.report.load import load_folder
    from perftune.report.tables import markdown_report

    sweep, _ = budget_sweep(tmp_path, 1.0)
    result = sweep.run()
    assert "Budget: decision.budget_s (1 s) left unmeasured: " in markdown_report(result)
    html = render(build_context(load_folder(tmp_path / "out")))
    assert "Budget: decision.budget_s (1 s) left unmeasured: " in html


def test_the_seed_runs_of_the_accuracy_gate_are_held_to_the_budget(tmp_path):
    scripts = {"baseline": Script(), "+jit_level=O1": Script(1.2), **{f"baseline seed {n}": Script() for n in range(6)}}
    plan = Plan(name="seeds", workload="tiny_mlp", variables={"jit_level": ["O1"]},
                accuracy=FIXED_WINDOW.model_copy(update={"seeds": 6}), decision={"budget_s": 1.0, "paired": False})
    runner = SlowRunner(scripts)
    start = time.perf_counter()
    result = Sweep(plan, tmp_path / "out", runner).run()
    assert time.perf_counter() - start <= 1.0 + PROCESS_S + 0.5
    seeds = [label for label in result.left_unmeasured if label.startswith("baseline seed")]
    assert len(seeds) == 1 and len(result.accuracy_calibration.runs) < 5  # the first one refused is named
