"""Ceilings from the splits: a change confined to one split of the step is not raced where that split is too small
to pay (``cannot gain``), and is raced on the stack once a stack row's own splits raise its ceiling.  Decisions on
scripted measurements (``scripted_sweeps.py``): which configurations ran, in what order, and what was recorded."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner
from scripted_sweeps import Script, make_sweep

from perftune.cli import main
from perftune.engine import ceilings
from perftune.io.records import Splits, TrialResult
from perftune.io.sweep_records import KnobCeiling
from perftune.report import write_report
from perftune.report.summary import sweep_summary
from perftune.report.tables import markdown_report
from perftune.words.ceiling_words import ceiling_line, ceiling_text
from perftune.words.rules import order_rule_text

DATA_KNOBS = {"num_parallel_workers": [2], "dataset_format": ["mindrecord"]}


def raced_labels(runner) -> list[str]:
    return [label for label, _ in runner.calls if label != "baseline"]


def test_data_knobs_on_an_eager_baseline_wait_for_the_stack_that_makes_it_data_bound(tmp_path):
    """The quickstart's shape: an eager baseline that waits 0.5% of its step for data, graph mode making the step
    80% data wait.  The two data knobs are not raced alone, and both are raced on the stack."""
    scripts = {"baseline": Script(data_share=0.005), "+mode=graph": Script(1.8, data_share=0.8),
               "+mode=graph +num_parallel_workers=2": Script(3.0, data_share=0.3),
               "+mode=graph +num_parallel_workers=2 +dataset_format=mindrecord": Script(3.0, data_share=0.3),
               # leave-one-out: the final stack without graph mode (measured there, never raced alone)
               "+num_parallel_workers=2": Script(1.0, data_share=0.005)}
    sweep, runner = make_sweep(tmp_path, {"mode": ["graph"], **DATA_KNOBS}, scripts, baseline={"mode": "pynative"},
                               max_runs=2)
    result = sweep.run()
    ran = raced_labels(runner)
    assert "+dataset_format=mindrecord" not in ran
    assert [t.kind for t in result.trials if t.label == "+num_parallel_workers=2"] == ["leave_one_out"]
    alone = {c.label: c for c in result.ceilings if c.where == "baseline"}
    assert set(alone) == {"+num_parallel_workers=2", "+dataset_format=mindrecord"}
    for c in alone.values():
        assert not c.raced and c.split == "data" and c.ceiling == pytest.approx(1 / (1 - 0.005))
        assert "cannot gain" in ceiling_line(c) and "at most x1.005" in ceiling_text(c)
    # on the graph-mode stack the wait is 80% of the step: raced, kept; then mindrecord on top of that
    stacked = [s.label for s in result.stack]
    assert stacked == ["baseline", "+mode=graph", "+mode=graph +num_parallel_workers=2",
                       "+mode=graph +num_parallel_workers=2 +dataset_format=mindrecord"]
    on_stack = {(c.label, c.where): c for c in result.ceilings if c.where != "baseline"}
    assert on_stack[("+num_parallel_workers=2", "+mode=graph")].raced
    assert on_stack[("+num_parallel_workers=2", "+mode=graph")].ceiling == pytest.approx(5.0)
    assert result.stack[2].kept and result.best_label == "+mode=graph +num_parallel_workers=2"
    assert [t.label for t in result.trials if t.kind == "single"] == ["+mode=graph"]


def test_a_compute_bound_plan_ends_its_data_knobs_cannot_gain(tmp_path):
    """No stack row waits for data: the data knobs are never raced, and the record says where each was judged."""
    scripts = {"baseline": Script(data_share=0.01), "+jit_level=O1": Script(1.5, data_share=0.01)}
    sweep, runner = make_sweep(tmp_path, {"jit_level": ["O1"], **DATA_KNOBS}, scripts, max_runs=2)
    result = sweep.run()
    assert set(raced_labels(runner)) == {"+jit_level=O1"}
    judged = sorted((c.label, c.where, c.raced) for c in result.ceilings)
    assert judged == [("+dataset_format=mindrecord", "+jit_level=O1", False),
                      ("+dataset_format=mindrecord", "baseline", False),
                      ("+num_parallel_workers=2", "+jit_level=O1", False),
                      ("+num_parallel_workers=2", "baseline", False)]
    assert [s.label for s in result.stack] == ["baseline", "+jit_level=O1"]


def test_skipping_can_be_turned_off(tmp_path):
    scripts = {"baseline": Script(data_share=0.01), "+num_parallel_workers=2": Script(1.0),
               "+dataset_format=mindrecord": Script(1.0)}
    sweep, runner = make_sweep(tmp_path, DATA_KNOBS, scripts, max_runs=1, skip_cannot_gain=False)
    result = sweep.run()
    assert {"+num_parallel_workers=2", "+dataset_format=mindrecord"} <= set(raced_labels(runner))
    assert all(c.raced for c in result.ceilings) and len(result.ceilings) == 2


def test_a_data_bound_baseline_races_its_data_knobs_first(tmp_path):
    scripts = {"baseline": Script(data_share=0.6), "+num_parallel_workers=2": Script(1.5),
               "+dataset_format=mindrecord": Script(1.0), "+jit_level=O1": Script(1.0)}
    sweep, runner = make_sweep(tmp_path, {"jit_level": ["O1"], **DATA_KNOBS}, scripts, max_runs=1,
                               retry_on_stack=False)
    result = sweep.run()
    singles = [t.label for t in result.trials if t.kind == "single"]
    assert singles[:2] == ["+num_parallel_workers=2", "+dataset_format=mindrecord"]
    assert order_rule_text(result.order_rule).startswith("baseline waits for data 60%, computes 40%")
    assert "data-pipeline knobs first, then compute" in order_rule_text(result.order_rule)
    assert all(c.raced and c.ceiling == pytest.approx(2.5) for c in result.ceilings)


def result_with(step: float, wait: float, profiled_data: float | None = None, comm: float = 0.0) -> TrialResult:
    splits = None
    if profiled_data is not None:
        rest = step - profiled_data - comm
        splits = Splits(step_ms=step, data_ms=profiled_data, forward_ms=rest / 2, backward_ms=rest / 2,
                        optimizer_ms=0.0, communication_ms=comm, other_ms=0.0, explained_share=1.0)
    return TrialResult(status="ok", trial_id="t", workload="mlp", device="CPU", knobs={}, burst={},
                       step_ms_median=step, data_wait_ms_median=wait,
                       profile={"splits": splits.model_dump()} if splits else None)


def test_the_larger_measure_of_the_split_bounds_the_gain():
    """The timed wait and the profile's data split: the larger one is the ceiling's, so neither is overruled."""
    c = ceilings.ceiling({"prefetch_size": 64}, result_with(40.0, 0.2, profiled_data=4.0))
    assert c.split_ms == 4.0 and c.ceiling == pytest.approx(40 / 36)
    assert ceilings.ceiling({"prefetch_size": 64}, result_with(40.0, 40.0)).ceiling is None  # all wait: no limit
    # not confined (a compute knob, an own knob, two knobs of different splits): always raced
    assert ceilings.ceiling({"mode": "graph"}, result_with(40.0, 0.2)) is None
    assert ceilings.ceiling({"my_flag": 1}, result_with(40.0, 0.2)) is None
    assert ceilings.ceiling({"mode": "graph", "prefetch_size": 64}, result_with(40.0, 0.2)) is None


def test_order_puts_the_plans_own_knobs_last_and_follows_the_shares():
    singles = [{"my_flag": 1}, {"workers": 2}, {"prefetch_size": 64}, {"mode": "graph"}]
    ordered, rule = ceilings.order_singles(singles, result_with(40.0, 0.2, profiled_data=0.2, comm=10.0))
    assert ordered == [{"mode": "graph"}, {"workers": 2}, {"prefetch_size": 64}, {"my_flag": 1}]
    assert rule.groups == ["compute", "distributed", "data"] and rule.first == "compute"
    ordered, rule = ceilings.order_singles(singles, None)  # nothing measured: compute, data, distributed
    assert ordered == [{"mode": "graph"}, {"prefetch_size": 64}, {"workers": 2}, {"my_flag": 1}]
    assert "not measured" in order_rule_text(rule)


def test_ceiling_words():
    c = KnobCeiling(label="+num_parallel_workers=2", changes={"num_parallel_workers": 2}, split="data",
                    split_ms=0.2, step_ms=40.0, ceiling=40 / 39.8, where="baseline", raced=False)
    assert ceiling_text(c) == "the step waits 0.2 of 40 ms for data: at most x1.005"
    on_stack = c.model_copy(update={"where": "+mode=graph", "raced": True, "split_ms": 17.4, "step_ms": 21.6,
                                    "ceiling": 21.6 / 4.2})
    assert ceiling_line(on_stack) == ("+num_parallel_workers=2 on +mode=graph: the step waits 17.4 of 21.6 ms for "
                                      "data: at most x5.143: raced")


def test_every_ceiling_is_in_the_summary_the_tables_and_the_report(tmp_path):
    scripts = {"baseline": Script(data_share=0.01), "+jit_level=O1": Script(1.5, data_share=0.01)}
    sweep, _ = make_sweep(tmp_path, {"jit_level": ["O1"], **DATA_KNOBS}, scripts, max_runs=2)
    result = sweep.run()
    lines = [ceiling_line(c) for c in result.ceilings]
    summary = sweep_summary(result, sweep.out, None)
    assert summary.count("cannot gain: ") == 4 and "+num_parallel_workers=2 alone: the step waits" in summary
    markdown = markdown_report(result)
    assert "### Ceilings from the splits" in markdown and all(line in markdown for line in lines)
    html = write_report(sweep.out).read_text(encoding="utf-8")
    assert 'id="ceilings"' in html and all(line in html for line in lines)


@pytest.mark.parametrize("decision, field", [({"skip_cannot_gain": "maybe"}, "decision.skip_cannot_gain"),
                                             ({"search_steps": 0}, "decision.search_steps")])
def test_a_bad_decision_field_is_one_line_exit_2(tmp_path, decision, field):
    plan = tmp_path / "bad.yaml"
    plan.write_text(yaml.safe_dump({"name": "bad", "workload": "mlp", "decision": decision}))
    run = CliRunner().invoke(main, ["validate", str(plan)])
    assert run.exit_code == 2 and field in run.output and "Traceback" not in run.output, run.output
