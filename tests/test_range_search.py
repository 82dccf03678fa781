"""Range search (issue 48): the plan's ranges and their messages, the search's decisions on scripted comparisons, the
fits search on scripted statuses, and whole sweeps on the scripted runner (the found value a single, OOM trials
recorded, resume, the report's curve and lines).  No real process: which value is faster is the script's."""

from __future__ import annotations

import json

import pytest
from scripted_sweeps import FIXED_WINDOW, Script, ScriptedRunner

from perftune.engine.plan_load import PlanError, parse_plan
from perftune.engine.search import Space, ValueState, search, start
from perftune.engine.stats import Noise, ProcessRun
from perftune.engine.sweep import Sweep
from perftune.io.plan import KnobRange, Plan
from perftune.io.sweep_records import ComparisonRecord, SweepResult
from perftune.report import write_report
from perftune.report.summary import sweep_summary
from perftune.report.tables import markdown_report


# -- the plan ------------------------------------------------------------------------------------------------------
def plan_with(variables: dict, **fields) -> Plan:
    return parse_plan({"name": "r", "workload": "mlp", "variables": variables, **fields})


def test_a_range_is_a_typed_record_beside_the_listed_variables():
    plan = plan_with({"kernel_threads": {"range": [1, 8]}, "mode": ["pynative"],
                      "batch_size": {"range": [16, 1024], "scale": "log2", "until": "fits"}})
    assert plan.variables == {"mode": ["pynative"]}
    assert plan.ranges["kernel_threads"] == KnobRange(range=[1, 8])
    assert plan.ranges["kernel_threads"].values() == list(range(1, 9))
    assert plan.ranges["batch_size"].values() == [16, 32, 64, 128, 256, 512, 1024]
    assert plan.ranges["batch_size"].until == "fits"


@pytest.mark.parametrize("variables, words", [
    ({"mode": {"range": [1, 2]}}, ["variables.mode:", "a range needs a numeric knob", "graph | pynative"]),
    ({"kernel_threads": {"range": [8, 1]}}, ["variables.kernel_threads.range:", "lo < hi", "[8, 1]"]),
    ({"kernel_threads": {"range": [1, 8.5]}}, ["variables.kernel_threads.range:", "two integers"]),
    ({"kernel_threads": {"range": [1, 8], "scale": "log3"}}, ["variables.kernel_threads.scale:", "'log3'",
                                                              "linear | log2"]),
    ({"kernel_threads": {"range": [1, 8], "until": "oom"}}, ["variables.kernel_threads.until:", "'oom'", "fits"]),
    ({"kernel_threads": {"range": [1, 8], "step": 2}}, ["variables.kernel_threads.step:", "unknown field",
                                                        "range, scale, until"]),
    ({"kernel_threads": {"scale": "log2"}}, ["variables.kernel_threads.range:", "required field is missing"]),
    ({"kernel_threads": {"range": [-1, 8]}}, ["variables.kernel_threads.range[0]:", "-1 is not allowed",
                                              "from 0 to 256"]),
    ({"kernel_threads": {"range": [3, 7], "scale": "log2"}}, ["variables.kernel_threads.range:",
                                                               "fewer than two powers of two"]),
    ({"batch_size": {"range": [16, 64]}}, ["variables.batch_size.scale:", "needs scale: log2"]),
    ({"num_parallel_workers": {"range": [1, 4096]}}, ["variables.num_parallel_workers.range[1]:"]),
    ({"kernel_thread": {"range": [1, 8]}}, ["variables.kernel_thread:", "unknown knob", "kernel_threads"]),
    ({"kernel_threads": {}}, ["variables.kernel_threads.range:", "required field is missing"]),
])
def test_a_bad_range_is_one_line_naming_the_field_and_what_is_allowed(variables, words):
    with pytest.raises(PlanError) as info:
        plan_with(variables)
    problems = info.value.problems
    assert len(problems) == 1, problems
    for word in words:
        assert word in problems[0], (word, problems[0])


def test_a_range_of_batch_sizes_is_checked_against_grad_accum_steps():
    with pytest.raises(PlanError) as info:
        plan_with({"batch_size": {"range": [16, 64], "scale": "log2"}}, baseline={"grad_accum_steps": 3})
    assert any("grad_accum_steps: 3 does not divide batch_size 16" in p for p in info.value.problems)


def test_a_plan_with_ranges_round_trips_through_results_json():
    """results.json keeps the typed plan (``ranges`` beside ``variables``): resume, ``--fresh`` and the report parse
    it again."""
    plan = parse_plan({"name": "r", "workload": "mlp", "variables": {"kernel_threads": {"range": [1, 4]},
                                                                    "mode": ["pynative"]}})
    again = parse_plan(json.loads(plan.model_dump_json()))
    assert again == plan and again.ranges["kernel_threads"].values() == [1, 2, 3, 4]
    with pytest.raises(PlanError) as info:
        parse_plan({"name": "r", "workload": "mlp", "variables": {"kernel_threads": [1]},
                    "ranges": {"kernel_threads": {"range": [1, 2]}}})
    assert info.value.problems == ["ranges.kernel_threads: 'kernel_threads' is also in variables; give each knob one "
                                   "list or one range"]


def test_an_own_knob_takes_a_range_when_its_baseline_is_an_integer():
    plan = plan_with({"width": {"range": [16, 64], "scale": "log2"}}, knob_params={"width": "hidden"},
                     baseline={"width": 32})
    assert plan.ranges["width"].values() == [16, 32, 64]
    with pytest.raises(PlanError) as info:
        plan_with({"act": {"range": [1, 4]}}, knob_params={"act": "activation"}, baseline={"act": "relu"})
    assert any(p.startswith("variables.act") and "integer" in p for p in info.value.problems), info.value.problems


def test_validate_describes_a_range(tmp_path):
    from click.testing import CliRunner

    from perftune.cli import main

    path = tmp_path / "p.yaml"
    path.write_text("name: r\nworkload: mlp\nvariables:\n  kernel_threads: {range: [1, 8]}\n  mode: [pynative]\n")
    out = CliRunner().invoke(main, ["validate", str(path)])
    assert out.exit_code == 0, out.output
    assert "kernel_threads searched over [1, 8]" in out.output
    path.write_text("name: r\nworkload: mlp\nvariables:\n  kernel_threads: {range: [1, 8], scale: log3}\n")
    out = CliRunner().invoke(main, ["validate", str(path)])
    assert out.exit_code == 2 and "variables.kernel_threads.scale: 'log3' is not allowed" in out.output


# -- the search on scripted comparisons -----------------------------------------------------------------------------
class FakeSide:
    """``SearchSide`` with a known speed per value: a comparison is faster / slower beyond 1% and equivalent inside;
    ``status``: a value's first process's status (default ok); ``rejected``: values the accuracy gate refuses."""

    def __init__(self, speed: dict[int, float], status: dict[int, str] | None = None, rejected: set = frozenset()):
        self.speed, self.status, self.rejected = speed, status or {}, rejected
        self.measured: dict[int, ValueState] = {}
        self.races: list[tuple[int, int]] = []

    def state(self, knob, value):
        return self.measured.get(value)

    def measure_value(self, knob, value):
        if value not in self.measured:
            status = self.status.get(value, "ok")
            self.measured[value] = (ValueState(status, f"t{value}", f"scripted {status}", "failed") if status != "ok"
                                    else ValueState("ok", f"t{value}", "val_loss worse", "accuracy rejected")
                                    if value in self.rejected else ValueState("ok", f"t{value}"))
        return self.measured[value]

    def race_value(self, knob, candidate, reference):
        self.races.append((candidate, reference))
        if self.measure_value(knob, candidate).status != "ok":
            return None
        ratio = self.speed[candidate] / self.speed[reference]
        verdict = "faster" if ratio > 1.01 else "slower" if ratio < 0.99 else "equivalent"
        return ComparisonRecord(reference=str(reference), ratio=ratio, ci_low=ratio * 0.99, ci_high=ratio * 1.01,
                                p_value=0.001, verdict=verdict, df=10)

    def out_of_time(self):
        return False

    def processes(self):
        return len(self.measured) + len(self.races)

    def value_runs(self, knob, value):
        return [ProcessRun(value, (self.speed[value],))] if self.measured.get(value, ValueState("x", "")).status == \
            "ok" else []

    def noise(self):
        return Noise(0.03 ** 2, 20)


def peaked(at: int, n: int = 8, fall: float = 0.1) -> dict[int, float]:
    return {v: 100.0 * (1 - fall * abs(v - at)) for v in range(1, n + 1)}


@pytest.mark.parametrize("peak", [1, 2, 3, 4, 5, 6, 7, 8])
def test_the_search_finds_a_unimodal_curves_peak_with_fewer_comparisons_than_values(peak):
    side = FakeSide(peaked(peak))
    record = search(side, "kernel_threads", KnobRange(range=[1, 8]), budget=8, min_gain=0.03)
    assert record.found == peak
    assert record.stopped == ("edge" if peak in (1, 8) else "peak")
    assert record.start == 4 and record.start_rule == "middle"
    assert len(record.steps) <= 5 and len(set(side.races)) == len(side.races)  # no comparison made twice
    assert record.tried[0] == 4 and record.found in record.tried
    assert [p.value for p in record.curve] == sorted(record.tried)
    found = next(p for p in record.curve if p.value == peak)
    assert found.ci_low < found.samples_per_s < found.ci_high


def test_a_flat_curve_stops_at_the_start_after_both_neighbours():
    side = FakeSide({v: 100.0 for v in range(1, 9)})
    record = search(side, "kernel_threads", KnobRange(range=[1, 8]), budget=8, min_gain=0.03)
    assert (record.found, record.stopped, [(s.candidate, s.outcome) for s in record.steps]) == \
        (4, "peak", [(5, "not better"), (3, "not better")])


def test_a_gain_below_min_gain_does_not_move_the_search():
    side = FakeSide({v: 100.0 * (1.02 if v == 5 else 1.0) for v in range(1, 9)})
    record = search(side, "kernel_threads", KnobRange(range=[1, 8]), budget=8, min_gain=0.03)
    assert record.found == 4 and record.steps[0].outcome == "not better"
    assert record.steps[0].comparison.verdict == "faster"  # faster, but below min_gain


def test_the_comparison_budget_stops_the_search_at_the_best_so_far():
    side = FakeSide(peaked(1))
    record = search(side, "kernel_threads", KnobRange(range=[1, 8]), budget=2, min_gain=0.03)
    assert (record.found, record.stopped, len(record.steps)) == (3, "budget", 2)


def test_a_wide_range_starts_with_large_steps_and_brackets_the_peak():
    speed = {v: 100.0 * (1 - 0.01 * abs(v - 11)) for v in range(1, 65)}
    side = FakeSide(speed)
    record = search(side, "prefetch_size", KnobRange(range=[1, 64]), budget=20, min_gain=0.005)
    assert record.found == 11 and record.stopped == "peak"
    assert abs(record.steps[0].candidate - record.steps[0].reference) == 15  # a quarter of the range
    assert len(record.steps) < 16


def test_workers_start_at_three_quarters_of_the_cores():
    space = Space("num_parallel_workers", tuple(range(1, 9)), 6, 0.03, cores=8)
    assert start(space, 7) == (5, "cores")  # value 6
    assert start(Space("num_parallel_workers", (1, 2), 6, 0.03, cores=2), 1) == (0, "cores")  # 1.5: the lower
    assert start(Space("kernel_threads", tuple(range(1, 9)), 6, 0.03, cores=8), 7) == (3, "middle")


def test_a_faster_value_the_gate_refuses_or_that_fails_is_never_the_answer():
    side = FakeSide(peaked(6), status={6: "oom"}, rejected={5})
    record = search(side, "kernel_threads", KnobRange(range=[1, 8]), budget=8, min_gain=0.03)
    outcomes = {s.candidate: s.outcome for s in record.steps}
    assert outcomes[5] == "accuracy rejected" and record.found == 4
    assert "val_loss worse" in next(s.reason for s in record.steps if s.candidate == 5)


def test_the_search_is_deterministic_given_its_measurements():
    first = search(FakeSide(peaked(6)), "kernel_threads", KnobRange(range=[1, 8]), budget=8, min_gain=0.03)
    again = search(FakeSide(peaked(6)), "kernel_threads", KnobRange(range=[1, 8]), budget=8, min_gain=0.03)
    assert first == again


# -- until: fits ----------------------------------------------------------------------------------------------------
def test_fits_doubles_until_oom_then_searches_speed_below_the_largest_that_fits():
    speed = {2 ** k: 100.0 * 2 ** k for k in range(4, 11)}  # larger batches faster
    side = FakeSide(speed, status={v: "oom" for v in (256, 512, 1024)})
    record = search(side, "batch_size", KnobRange(range=[16, 1024], scale="log2", until="fits"), 6, 0.03)
    assert [(f.value, f.status) for f in record.fits] == [(16, "ok"), (32, "ok"), (64, "ok"), (128, "ok"),
                                                          (256, "oom")]
    assert record.largest_fit == 128 and record.found == 128 and record.stopped == "fits"
    assert record.start == 128 and record.start_rule == "largest fit"
    assert all(s.candidate < 128 for s in record.steps)
    assert 256 in record.tried and 256 not in [p.value for p in record.curve]


def test_fits_bisects_a_linear_range_and_finds_speed_below_it():
    speed = {v: 100.0 * (1 - 0.02 * abs(v - 30)) for v in range(1, 101)}
    side = FakeSide(speed, status={v: "oom" for v in range(38, 101)})
    record = search(side, "width", KnobRange(range=[1, 100], until="fits"), 12, 0.01)
    assert record.largest_fit == 37
    assert [f.value for f in record.fits][:7] == [1, 2, 4, 8, 16, 32, 64]
    assert record.found == 30 and record.stopped == "peak"


def test_nothing_fits_ends_the_search_with_nothing_found():
    side = FakeSide({16: 1.0, 32: 1.0}, status={16: "oom", 32: "oom"})
    record = search(side, "batch_size", KnobRange(range=[16, 32], scale="log2", until="fits"), 6, 0.03)
    assert (record.found, record.stopped, record.largest_fit) == (None, "failed", None)


def test_every_value_fitting_ends_at_the_ranges_edge():
    side = FakeSide({2 ** k: 100.0 * 2 ** k for k in range(4, 7)})
    record = search(side, "batch_size", KnobRange(range=[16, 64], scale="log2", until="fits"), 6, 0.03)
    assert (record.largest_fit, record.found, record.stopped) == (64, 64, "edge")


# -- whole sweeps on the scripted runner ----------------------------------------------------------------------------
def threads_scripts(curve: dict[int, float]) -> dict[str, Script]:
    return {"baseline": Script(), **{f"+kernel_threads={k}": Script(v) for k, v in curve.items()}}


def range_sweep(tmp_path, ranges: dict, scripts: dict, variables: dict | None = None, **decision):
    plan = Plan(name="scripted", workload="tiny_mlp", ranges=ranges, variables=variables or {},
                accuracy=FIXED_WINDOW, decision=decision)
    runner = ScriptedRunner(scripts)
    return Sweep(plan, tmp_path / "out", runner), runner


def test_a_sweep_searches_the_range_and_its_found_value_is_a_single_that_stacks(tmp_path):
    curve = {1: 1.0, 2: 1.3, 3: 1.6, 4: 1.5, 5: 1.2, 6: 1.0, 7: 0.9, 8: 0.8}
    scripts = {**threads_scripts(curve), "+mode=pynative": Script(1.5),
               "+kernel_threads=3 +mode=pynative": Script(2.4)}
    sweep, runner = range_sweep(tmp_path, {"kernel_threads": KnobRange(range=[1, 8])}, scripts,
                                {"mode": ["pynative"]})
    result = sweep.run()
    (record,) = result.searches
    assert record.found == 3 and record.stopped == "peak" and record.tried[:2] == [4, 5]
    single = next(t for t in result.trials if t.kind == "single" and t.changes == {"kernel_threads": 3})
    assert single.replicate == 0 and single.verdict == "kept" and single.vs_baseline.reference == "baseline"
    assert single.trial_id == record.found_trial_id
    searched = {t.label for t in result.trials if t.kind == "search"}
    assert "+kernel_threads=4" in searched and "+kernel_threads=3" not in searched
    assert 0 < record.processes < len(runner.calls)
    assert [s.label for s in result.stack if s.kept] == ["baseline", "+kernel_threads=3", "+kernel_threads=3 +mode=pynative"]
    on_disk = SweepResult.model_validate_json((sweep.out / "results.json").read_text())
    assert on_disk.searches == result.searches
    again = ScriptedRunner(scripts)
    rerun = Sweep(sweep.plan, sweep.out, again).run()
    assert again.calls == [] and rerun.searches[0].found == 3  # every trial reused: the same comparisons again


def test_a_fits_sweep_records_oom_trials_and_goes_on(tmp_path):
    scripts = {"baseline": Script(), "+batch_size=16": Script(0.6), "+batch_size=64": Script(1.5),
               "+batch_size=128": Script(1.6), "+batch_size=256": Script(status="oom", reason="out of memory"),
               "+batch_size=512": Script(status="oom")}
    sweep, _ = range_sweep(tmp_path, {"batch_size": KnobRange(range=[16, 512], scale="log2", until="fits")},
                           scripts)
    result = sweep.run()
    (record,) = result.searches
    assert result.status == "complete"
    assert [(f.value, f.status) for f in record.fits] == [(16, "ok"), (32, "ok"), (64, "ok"), (128, "ok"),
                                                          (256, "oom")]
    oom = [t for t in result.trials if t.label == "+batch_size=256"]
    assert len(oom) == 1 and oom[0].verdict == "oom" and oom[0].kind == "search"
    assert record.largest_fit == 128 and record.found == 128
    assert next(t for t in result.trials if t.kind == "single").changes == {"batch_size": 128}


def test_the_report_draws_the_curve_and_says_why_the_search_stopped(tmp_path):
    sweep, _ = range_sweep(tmp_path, {"kernel_threads": KnobRange(range=[1, 8])},
                           threads_scripts({1: 1.0, 2: 1.3, 3: 1.6, 4: 1.5, 5: 1.2, 6: 1.0, 7: 0.9, 8: 0.8}))
    result = sweep.run()
    summary = sweep_summary(result, sweep.out, None)
    line = next(x for x in summary.splitlines() if x.startswith("search: "))
    assert "kernel_threads searched over [1, 8] from 4 (the middle of the range)" in line
    assert "tried 4, 5, 3, 2" in line and "found 3 (no neighbour of 3 is faster by min_gain 3%)" in line
    assert "### Searched knobs" in markdown_report(result)
    html = write_report(sweep.out).read_text()
    section = html.split('<section id="searches">')[1].split("</section>")[0]
    assert "kernel_threads searched over [1, 8]" in section and 'src="data:image/png;base64,' in section


def test_an_interrupted_search_resumes_with_the_same_comparisons_and_runs_only_what_is_missing(tmp_path):
    curve = {1: 1.0, 2: 1.3, 3: 1.6, 4: 1.5, 5: 1.2, 6: 1.0, 7: 0.9, 8: 0.8}
    ranges = {"kernel_threads": KnobRange(range=[1, 8])}
    whole, whole_runner = range_sweep(tmp_path / "whole", ranges, threads_scripts(curve))
    expected = whole.run().searches
    plan = whole.plan
    first = ScriptedRunner(threads_scripts(curve), interrupt_at=9)  # inside the search's second comparison
    with pytest.raises(KeyboardInterrupt):
        Sweep(plan, tmp_path / "out", first).run()
    rest = ScriptedRunner(threads_scripts(curve))
    resumed = Sweep(plan, tmp_path / "out", rest).run()
    assert [s.model_dump(exclude={"curve"}) for s in resumed.searches] == \
        [s.model_dump(exclude={"curve"}) for s in expected]
    assert sorted(first.calls + rest.calls) == sorted(whole_runner.calls)  # nothing measured twice


def test_a_pairable_knobs_search_compares_in_paired_processes(tmp_path):
    scripts = {"baseline": Script(), "+num_parallel_workers=2": Script(1.3), "+num_parallel_workers=3": Script(1.1)}
    sweep, runner = range_sweep(tmp_path, {"num_parallel_workers": KnobRange(range=[1, 3])}, scripts)
    result = sweep.run()
    (record,) = result.searches
    assert record.start_rule == "cores" and record.cores
    assert any(s.comparison is not None and s.comparison.design == "paired" for s in record.steps), record.steps
    assert any(label.endswith("(paired)") or "paired" in label for label, _ in runner.calls)


def test_a_confined_knob_that_cannot_gain_is_not_searched_but_tried_on_the_stack(tmp_path):
    """The baseline waits 1% of its step for data: no worker count can pay ``min_gain``, so the range is not
    searched; graph mode makes the step data-bound, and the search's start value is raced on that stack."""
    scripts = {"baseline": Script(data_share=0.01), "+mode=graph": Script(1.8, data_share=0.8),
               "+mode=graph +num_parallel_workers=2": Script(3.0, data_share=0.3),
               "+num_parallel_workers=2": Script(1.0, data_share=0.01)}  # leave-one-out's row
    plan = Plan(name="scripted", workload="tiny_mlp", ranges={"num_parallel_workers": KnobRange(range=[1, 3])},
                variables={"mode": ["graph"]}, baseline={"mode": "pynative"}, accuracy=FIXED_WINDOW,
                decision={"max_runs": 2})
    sweep = Sweep(plan, tmp_path / "out", ScriptedRunner(scripts))
    result = sweep.run()
    assert result.searches == [] and not [t for t in result.trials if t.kind == "search"]
    (alone,) = [c for c in result.ceilings if c.where == "baseline"]
    assert alone.label == "+num_parallel_workers=2" and not alone.raced
    assert [s.label for s in result.stack] == ["baseline", "+mode=graph", "+mode=graph +num_parallel_workers=2"]
