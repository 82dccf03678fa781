"""The sweep's decisions on scripted measurements: every verdict and branch, without depending on machine timing.

Real bursts cannot test decisions on a shared, noisy machine (which of two configurations runs faster is the
machine's choice, not the code's).  Here a scripted runner stands in for ``launch.run_trial``: it returns real,
valid ``TrialResult`` records whose window throughputs, accuracy, notes and status the test chooses per
configuration (with fixed, seeded noise), and writes ``trial.json`` atomically like a burst, so resume is real.
"""

from __future__ import annotations

import json

import pytest
from scripted_sweeps import Script, make_sweep

from perftune.engine.sweep import Sweep
from perftune.io.records import Note
from perftune.io.sweep_records import SweepResult
from perftune.words.reasons import decision_line
from perftune.words.rules import multiplicity_text, order_rule_text


def singles(result: SweepResult) -> dict:
    return {t.label: t for t in result.trials if t.kind == "single"}


def on_disk(sweep: Sweep) -> SweepResult:
    return SweepResult.model_validate_json((sweep.out / "results.json").read_text())


# -- one-at-a-time verdicts -------------------------------------------------------------------------------------
def test_every_single_verdict(tmp_path):
    variables = {"mode": ["pynative"], "jit_level": ["O1"], "graph_kernel": ["on"], "kernel_threads": [1, 2, 3, 4],
                 "batch_size": [64], "num_parallel_workers": [2]}
    scripts = {
        "baseline": Script(),
        "+mode=pynative": Script(factor=0.5),  # slower
        "+jit_level=O1": Script(factor=1.0),  # no change: raced to decision.max_runs, then undecided
        "+graph_kernel=on": Script(factor=1.6, val_loss=2.5),  # faster but worse accuracy
        "+kernel_threads=1": Script(status="failed", reason="boom"),
        "+kernel_threads=2": Script(status="timeout"),
        "+kernel_threads=3": Script(status="oom"),
        "+kernel_threads=4": Script(status="unsupported"),
        "+batch_size=64": Script(factor=0.5, val_loss=2.5),  # slower and worse accuracy
        "+num_parallel_workers=2": Script(factor=1.6),  # kept
    }
    sweep, runner = make_sweep(tmp_path, variables, scripts, retry_on_stack=False)
    result = sweep.run()
    s = singles(result)
    assert {label: t.verdict for label, t in s.items()} == {
        "+mode=pynative": "slower", "+jit_level=O1": "undecided", "+graph_kernel=on": "accuracy rejected",
        "+kernel_threads=1": "failed", "+kernel_threads=2": "timeout", "+kernel_threads=3": "oom",
        "+kernel_threads=4": "unsupported", "+batch_size=64": "accuracy rejected", "+num_parallel_workers=2": "kept"}
    # undecided says how far it got and what would resolve it; only it got the extra rounds (a clear answer, a
    # failure, an accuracy failure need no more timing)
    assert "undecided after 4 runs: noise" in s["+jit_level=O1"].reason and "runs would" in s["+jit_level=O1"].reason
    assert s["+jit_level=O1"].vs_baseline.processes == 4 and runner.calls.count(("+jit_level=O1", 3)) == 1
    for label in ("+mode=pynative", "+graph_kernel=on", "+kernel_threads=1", "+batch_size=64",
                  "+num_parallel_workers=2"):
        assert [c for c in runner.calls if c[0] == label] == [(label, 0)], label
    assert "val_loss" in s["+graph_kernel=on"].reason and s["+graph_kernel=on"].accuracy_changes["val_loss"] == \
        pytest.approx(0.25)
    # an accuracy failure is the verdict whatever the speed (issue 18): the speed verdict is kept in the reason
    assert s["+batch_size=64"].reason.startswith("val_loss") and "speed: slower (x2.01 slower [" in s["+batch_size=64"].reason
    assert s["+kernel_threads=1"].reason == "boom"
    assert s["+num_parallel_workers=2"].vs_baseline.ci_low > 1.0
    # only the kept change stacks; with one kept change there is nothing to stack on top or leave out
    assert [(st.label, st.kept) for st in result.stack] == [("baseline", True), ("+num_parallel_workers=2", True)]
    assert result.best_label == "+num_parallel_workers=2"
    assert not [t for t in result.trials if t.kind in ("stack", "leave_one_out")]
    assert result.status == "complete" and on_disk(sweep) == result


def test_gain_below_min_gain_is_not_significant(tmp_path):  # a real change, too small to be worth it
    sweep, _ = make_sweep(tmp_path, {"mode": ["pynative"]}, {"baseline": Script(), "+mode=pynative": Script(1.4)},
                          min_gain=0.5)
    t = singles(sweep.run())["+mode=pynative"]
    assert t.vs_baseline.ci_low > 1.0  # the interval excludes 1 ...
    assert t.verdict == "not significant" and "below min_gain 50%" in t.reason  # ... but the gain is too small


# -- issue 12 item 1: a known no-op is never a win -----------------------------------------------------------------
def test_known_noop_is_no_effect_even_when_timed_clearly_faster(tmp_path):
    note = Note(kind="no_effect", knob="dataset_sink_mode",
                text="dataset_sink_mode=true has no effect on CPU: MindSpore accepts it and ignores it")
    scripts = {
        "baseline": Script(),
        "+dataset_sink_mode=true": Script(factor=1.8, notes=[note]),
        # read back shows the requested value was not applied
        "+num_parallel_workers=2": Script(factor=1.8, applied={"num_parallel_workers": 1}),
        # a no-effect note about another knob does not make this change a no-op
        "+mode=pynative": Script(factor=1.8, notes=[Note(kind="no_effect", knob="jit_level", text="jit_level=O1 has no effect in pynative mode")],
                                 applied={"mode": "pynative"}),
    }
    sweep, runner = make_sweep(tmp_path, {"dataset_sink_mode": [True], "num_parallel_workers": [2],
                                          "mode": ["pynative"]}, scripts)
    result = sweep.run()
    s = singles(result)
    sink = s["+dataset_sink_mode=true"]
    assert sink.vs_baseline.verdict == "faster"  # the timing says faster ...
    assert sink.verdict == "no effect" and sink.reason == note.text  # ... the verdict does not believe it
    workers = s["+num_parallel_workers=2"]
    assert workers.vs_baseline.verdict == "faster"
    assert workers.verdict == "no effect" and "was not applied" in workers.reason
    assert s["+mode=pynative"].verdict == "kept"
    # a known no-op needs no more timing: it is not raced
    assert runner.calls.count(("+dataset_sink_mode=true", 1)) == 0
    assert [st.label for st in result.stack] == ["baseline", "+mode=pynative"]
    assert result.best_label == "+mode=pynative"


# -- stacking, dropped, retry_on_stack, leave-one-out ---------------------------------------------------------------
STACK_VARS = {"mode": ["pynative"], "num_parallel_workers": [2], "prefetch_size": [32], "jit_level": ["O1"]}


def stack_scripts() -> dict[str, Script]:
    return {
        "baseline": Script(),
        "+mode=pynative": Script(2.0),  # kept, largest gain: stacked first
        "+num_parallel_workers=2": Script(1.6),  # kept
        "+prefetch_size=32": Script(1.4),  # kept alone, but nothing on top of the stack: dropped
        "+jit_level=O1": Script(1.0),  # undecided alone; helps once stacked
        "+mode=pynative +num_parallel_workers=2": Script(3.2),
        "+mode=pynative +num_parallel_workers=2 +prefetch_size=32": Script(3.2),
        "+mode=pynative +num_parallel_workers=2 +jit_level=O1": Script(5.0),
        # leave-one-out: the final stack without each change
        "+num_parallel_workers=2 +jit_level=O1": Script(2.0),
        "+mode=pynative +jit_level=O1": Script(3.0),
    }


def test_stack_dropped_retry_and_leave_one_out(tmp_path):
    sweep, runner = make_sweep(tmp_path, STACK_VARS, stack_scripts())
    result = sweep.run()
    s = singles(result)
    assert [s[k].verdict for k in ("+mode=pynative", "+num_parallel_workers=2", "+prefetch_size=32",
                                   "+jit_level=O1")] == ["kept", "kept", "kept", "undecided"]
    assert [(st.label, st.kept) for st in result.stack] == [
        ("baseline", True),
        ("+mode=pynative", True),
        ("+mode=pynative +num_parallel_workers=2", True),
        ("+mode=pynative +num_parallel_workers=2 +prefetch_size=32", False),
        ("+mode=pynative +num_parallel_workers=2 +jit_level=O1", True),  # retried on the stack, and it helped
    ]
    stacks = {t.label: t for t in result.trials if t.kind == "stack"}
    dropped = stacks["+mode=pynative +num_parallel_workers=2 +prefetch_size=32"]
    assert dropped.verdict == "dropped" and dropped.reason.startswith("undecided")
    assert dropped.vs_previous.reference == "+mode=pynative +num_parallel_workers=2"
    # the stack is raced against the stack before it by the same rule: P S P S P ..., blocks between its neighbours
    start = runner.calls.index((dropped.label, 0)) - 1
    calls = [c for c in runner.calls[start:] if c[0] in (dropped.label, dropped.vs_previous.reference)]
    assert [label for label, _ in calls[:9]] == [dropped.vs_previous.reference, dropped.label] * 4 + \
        [dropped.vs_previous.reference]
    assert dropped.vs_previous.processes == 4
    assert dropped.vs_baseline.verdict == "faster"  # faster than the baseline, but not than the stack before it
    assert result.best_label == "+mode=pynative +num_parallel_workers=2 +jit_level=O1"
    assert result.best_vs_baseline.ratio == pytest.approx(5.0, rel=0.05)
    # leave-one-out: one trial per kept change, each says how much the final stack gains over it
    loo = {t.label: t for t in result.trials if t.kind == "leave_one_out"}
    assert set(loo) == {"+num_parallel_workers=2 +jit_level=O1", "+mode=pynative +jit_level=O1",
                        "+mode=pynative +num_parallel_workers=2"}
    assert all(t.verdict == "measured" and t.reason.startswith("removing ") for t in loo.values())
    assert loo["+num_parallel_workers=2 +jit_level=O1"].vs_previous.ratio == pytest.approx(2.5, rel=0.05)
    assert loo["+mode=pynative +jit_level=O1"].vs_previous.ratio == pytest.approx(5 / 3, rel=0.05)
    # the configuration without jit_level is the earlier stack row: reused from its trial.json, not run again
    assert runner.calls.count(("+mode=pynative +num_parallel_workers=2", 0)) == 1
    assert not any(t.reused for t in result.trials)  # reused means "from an earlier run" only
    assert on_disk(sweep) == result


def test_retry_on_stack_off_skips_undecided_changes(tmp_path):
    sweep, runner = make_sweep(tmp_path, STACK_VARS, stack_scripts(), retry_on_stack=False)
    result = sweep.run()
    assert [st.label for st in result.stack] == [
        "baseline", "+mode=pynative", "+mode=pynative +num_parallel_workers=2",
        "+mode=pynative +num_parallel_workers=2 +prefetch_size=32"]
    assert not any("+jit_level=O1" in label and label != "+jit_level=O1" for label, _ in runner.calls)
    assert result.best_label == "+mode=pynative +num_parallel_workers=2"


def test_a_slower_data_change_is_retried_on_the_stack_and_a_slower_compute_change_is_not(tmp_path):
    """Against a compute-bound baseline a data-pipeline change can be slower (its worker threads take cores from the
    step) and still help once graph mode made the step data-bound; a slower compute change is not retried."""
    variables = {"mode": ["pynative"], "num_parallel_workers": [2], "jit_level": ["O1"]}
    scripts = {"baseline": Script(), "+mode=pynative": Script(2.0), "+num_parallel_workers=2": Script(0.8),
               "+jit_level=O1": Script(0.8), "+mode=pynative +num_parallel_workers=2": Script(3.2)}
    sweep, runner = make_sweep(tmp_path, variables, scripts, baseline_runs=2)
    result = sweep.run()
    s = singles(result)
    assert [s[k].verdict for k in ("+mode=pynative", "+num_parallel_workers=2", "+jit_level=O1")] == \
        ["kept", "slower", "slower"]
    assert [(st.label, st.kept) for st in result.stack] == [
        ("baseline", True), ("+mode=pynative", True), ("+mode=pynative +num_parallel_workers=2", True)]
    assert not any("+jit_level=O1" in label and label != "+jit_level=O1" for label, _ in runner.calls)
    assert result.best_label == "+mode=pynative +num_parallel_workers=2"


def test_undecided_single_is_not_the_first_stack_row(tmp_path):
    # retry_on_stack with nothing kept: an undecided change has nothing to be stacked on
    sweep, runner = make_sweep(tmp_path, {"jit_level": ["O1"]}, {"baseline": Script(), "+jit_level=O1": Script()},
                               max_runs=2, baseline_runs=2)
    result = sweep.run()
    assert [st.label for st in result.stack] == ["baseline"] and result.best_label == "baseline"
    assert result.best_vs_baseline is None
    assert singles(result)["+jit_level=O1"].verdict == "undecided"
    assert runner.calls == [("baseline", 0), ("+jit_level=O1", 0), ("baseline", 1), ("+jit_level=O1", 1),
                            ("baseline", 2)]


# -- issue 12: sequential decisions: racing, equivalent, undecided, drift, contention, budget ----------------------
def test_round_one_interleaves_the_baseline_and_open_comparisons_race_until_equivalent(tmp_path):
    variables = {"kernel_threads": [1, 2, 3, 4]}
    scripts = {"baseline": Script(), **{f"+kernel_threads={n}": Script() for n in (1, 2, 3, 4)}}
    sweep, runner = make_sweep(tmp_path, variables, scripts, max_runs=8)
    result = sweep.run()
    labels = [label for label, _ in runner.calls]
    # R C1 R C2 R C3 R C4 R, then "C R" rounds: every candidate process sits between two baseline processes
    assert labels[:9] == ["baseline", "+kernel_threads=1", "baseline", "+kernel_threads=2", "baseline",
                          "+kernel_threads=3", "baseline", "+kernel_threads=4", "baseline"]
    assert labels[0::2] == ["baseline"] * (len(labels) // 2 + 1) and labels[-1] == "baseline"
    assert [t.replicate for t in result.trials if t.kind == "baseline"] == list(range(labels.count("baseline")))
    s = singles(result)
    for label, t in s.items():
        assert t.verdict == "equivalent" and "equivalent within ±3%" in t.reason, t.reason
        c = t.vs_baseline
        assert 1 / 1.03 <= c.ci_low <= 1 <= c.ci_high <= 1.03
        assert 1 < c.processes < 8 and labels.count(label) == c.processes  # decided before the budget
        assert [r for lab, r in runner.calls if lab == label] == list(range(c.processes))
    repeats = [t for t in result.trials if t.kind == "repeat"]
    assert repeats and all(t.replicate > 0 and t.verdict == "measured" for t in repeats)
    # the noise the sweep measured is recorded, with the prior's and the observed degrees of freedom
    assert 0 < result.noise_sd < 0.07 and result.noise_df == result.noise_observed_df + 4
    assert "Benjamini-Hochberg" in multiplicity_text(result.multiplicity)
    assert "4 one-at-a-time comparisons" in multiplicity_text(result.multiplicity)
    # the A/A check: the baseline's later half of processes against its earlier half, all of them used; a steady
    # (scripted) machine comes out equivalent
    aa, base_runs = result.aa_check, [t for t in result.trials if t.label == "baseline"]
    assert aa.reference == "baseline (earlier runs)" and aa.verdict == "equivalent"
    assert aa.reference_processes == len(base_runs) // 2 and aa.processes == len(base_runs) - len(base_runs) // 2
    assert on_disk(sweep) == result


def test_a_modest_gain_gets_extra_rounds_and_a_clear_one_does_not(tmp_path):
    scripts = {"baseline": Script(), "+jit_level=O1": Script(1.08), "+kernel_threads=2": Script(2.0),
               "+kernel_threads=2 +jit_level=O1": Script(2.16)}
    sweep, runner = make_sweep(tmp_path, {"jit_level": ["O1"], "kernel_threads": [2]}, scripts)
    s = singles(sweep.run())
    assert s["+kernel_threads=2"].verdict == "kept" and s["+kernel_threads=2"].vs_baseline.processes == 1
    modest = s["+jit_level=O1"]
    assert modest.verdict == "kept" and 1 < modest.vs_baseline.processes <= 4
    assert "runs: faster" in modest.reason
    assert runner.calls[:5] == [("baseline", 0), ("+jit_level=O1", 0), ("baseline", 1), ("+kernel_threads=2", 0),
                                ("baseline", 2)]
    assert runner.calls[5:7] == [("+jit_level=O1", 1), ("baseline", 3)]  # only the open comparison races on


def test_undecided_at_the_budget_says_what_would_resolve_it(tmp_path):
    sweep, runner = make_sweep(tmp_path, {"jit_level": ["O1"]}, {"baseline": Script(), "+jit_level=O1": Script(1.02)},
                               max_runs=3, baseline_runs=2)
    t = singles(sweep.run())["+jit_level=O1"]
    assert t.verdict == "undecided" and t.vs_baseline.verdict == "undecided"
    assert "undecided after 3 runs: noise" in t.reason and "cannot resolve" in t.reason and "runs would" in t.reason
    assert runner.calls.count(("+jit_level=O1", 2)) == 1 and len(runner.calls) == 7  # R C R C R C R: the budget


def test_a_borderline_gain_that_is_no_discovery_across_the_sweep_is_not_significant(tmp_path):
    # +4.5%: its own interval clears 1 just, but with three unchanged knobs beside it, Benjamini-Hochberg at 5% asks
    # for p <= 1.25% of the smallest p-value of four
    variables = {"jit_level": ["O1"], "kernel_threads": [1, 2, 3]}
    scripts = {"baseline": Script(), "+jit_level=O1": Script(1.045), **{f"+kernel_threads={n}": Script(1.0)
                                                                       for n in (1, 2, 3)}}
    sweep, _ = make_sweep(tmp_path, variables, scripts, retry_on_stack=False)
    result = sweep.run()
    t = singles(result)["+jit_level=O1"]
    assert t.vs_baseline.verdict == "faster" and 0.0125 < t.vs_baseline.p_value < 0.05
    assert t.verdict == "not significant"
    assert "not a discovery across the 4 one-at-a-time comparisons (Benjamini-Hochberg" in t.reason
    assert result.best_label == "baseline"


def test_baseline_runs_is_a_minimum_for_sweeps_with_few_candidates(tmp_path):
    scripts = {"baseline": Script(), "+jit_level=O1": Script(2.0)}
    sweep, runner = make_sweep(tmp_path, {"jit_level": ["O1"]}, scripts, baseline_runs=4)
    sweep.run()
    assert runner.calls == [("baseline", 0), ("baseline", 1), ("baseline", 2), ("+jit_level=O1", 0), ("baseline", 3)]
    sweep, runner = make_sweep(tmp_path / "none", {}, {"baseline": Script()}, baseline_runs=2)
    assert sweep.run().aa_check is not None and runner.calls == [("baseline", 0), ("baseline", 1)]


def test_persistent_contention_is_not_measured_again_and_again(tmp_path):
    # every process contended: the first is measured again, then contention is the machine's state, and measuring
    # again would only double the cost; the comparison says how many of its processes were contended
    everything = tuple(range(20))
    scripts = {"baseline": Script(contended=everything), "+jit_level=O1": Script(2.0, contended=everything)}
    sweep, runner = make_sweep(tmp_path, {"jit_level": ["O1"]}, scripts, baseline_runs=2)
    t = singles(sweep.run())["+jit_level=O1"]
    assert runner.calls == [("baseline", 0), ("baseline", 1), ("+jit_level=O1", 0), ("baseline", 2)]
    assert t.verdict == "kept" and t.vs_baseline.contended == 4


def test_aa_check_counts_its_contended_processes(tmp_path):
    # the A/A check compares two processes as they were measured: contended ones say so (it used to count 0)
    everything = tuple(range(20))
    scripts = {"baseline": Script(contended=everything), "+jit_level=O1": Script(2.0)}
    sweep, _ = make_sweep(tmp_path, {"jit_level": ["O1"]}, scripts, baseline_runs=2)
    aa = sweep.run().aa_check
    assert aa is not None and aa.processes == 1 and aa.reference_processes == 1 and aa.contended == 2


def test_a_spent_wall_time_budget_starts_no_process_past_it(tmp_path):
    scripts = {"baseline": Script(), "+jit_level=O1": Script(1.02, contended=(0,))}
    sweep, runner = make_sweep(tmp_path, {"jit_level": ["O1"]}, scripts, budget_s=1e-9, baseline_runs=2)
    result = sweep.run()
    # out of time from the start: the baseline's first process only (no process starts that would end past the
    # budget), and the sweep says what it left unmeasured
    assert runner.calls == [("baseline", 0)]
    assert "+jit_level=O1" not in singles(result) and result.left_unmeasured == ["+jit_level=O1"]


def test_blocks_cancel_drift_that_the_a_a_check_shows(tmp_path):
    # the machine slows by 3% per process: the baseline's last run is far slower than its first, but each candidate
    # process is compared with the baseline processes on either side of it, so an unchanged candidate is not slower
    scripts = {"baseline": Script(), "+jit_level=O1": Script(1.0)}
    sweep, _ = make_sweep(tmp_path, {"jit_level": ["O1"]}, scripts, drift=0.03)
    result = sweep.run()
    assert result.aa_check.verdict == "slower" and result.aa_check.ratio < 0.85
    t = singles(result)["+jit_level=O1"]
    assert t.verdict == "undecided" and t.vs_baseline.ratio == pytest.approx(1.0, abs=0.01)


def test_contended_process_is_measured_again_and_is_not_a_look(tmp_path):
    scripts = {"baseline": Script(contended=(1, 2, 3, 4, 5)), "+jit_level=O1": Script(2.0, contended=(0,))}
    sweep, runner = make_sweep(tmp_path, {"jit_level": ["O1"]}, scripts, baseline_runs=2)
    result = sweep.run()
    # the candidate's first process was contended: measured again at once (its accuracy and profile stay on the
    # first); the baseline's second one too, and its third, contended again, is used: re-measures are bounded
    assert runner.calls == [("baseline", 0), ("+jit_level=O1", 0), ("+jit_level=O1", 1), ("baseline", 1),
                            ("baseline", 2)]
    t = singles(result)["+jit_level=O1"]
    assert t.verdict == "kept" and t.replicate == 0 and "contended" in t.excluded
    c = t.vs_baseline
    assert c.processes == 1 and c.reference_processes == 2 and c.contended == 3 and c.remeasured == 2
    # the summary's line counts the comparison's own processes: 1 used although contended, 2 measured again
    assert decision_line(t) == (f"+jit_level=O1: kept (1 + 2 processes vs baseline; 1 of them measured under "
                                f"contention; 2 contended processes measured again, not used): {t.reason}")
    base = [x for x in result.trials if x.kind == "baseline"]
    assert [bool(x.excluded) for x in base] == [False, True, False]
    assert on_disk(sweep) == result


@pytest.mark.parametrize("data_share,first", [(0.5, "+prefetch_size=32"), (0.1, "+mode=pynative")])
def test_order_rule(tmp_path, data_share, first):
    variables = {"prefetch_size": [32], "mode": ["pynative"], "num_parallel_workers": [2]}
    scripts = {"baseline": Script(data_share=data_share), "+prefetch_size=32": Script(),
               "+mode=pynative": Script(), "+num_parallel_workers=2": Script()}
    sweep, runner = make_sweep(tmp_path, variables, scripts, max_runs=1)
    result = sweep.run()
    measured = [c[0] for c in runner.calls if c[0] != "baseline" and "(A/A, paired" not in c[0]]
    if data_share >= 0.25:
        assert "waits for data 50%" in order_rule_text(result.order_rule)
        assert "data-pipeline knobs first" in order_rule_text(result.order_rule)
        assert measured == ["+prefetch_size=32", "+num_parallel_workers=2", "+mode=pynative"]
    else:
        assert "compute knobs first" in order_rule_text(result.order_rule)
        assert measured == ["+mode=pynative", "+prefetch_size=32", "+num_parallel_workers=2"]
    assert [t.label for t in result.trials if t.kind == "single"][0] == first


def test_failed_baseline_stops_the_sweep(tmp_path):
    scripts = {"baseline": Script(status="oom", reason="killed")}
    sweep, runner = make_sweep(tmp_path, {"mode": ["pynative"]}, scripts)
    result = sweep.run()
    assert runner.calls == [("baseline", 0)]
    assert len(result.trials) == 1 and result.trials[0].verdict == "oom"
    assert result.trials[0].reason == "the baseline itself failed: killed"
    assert result.stack == [] and result.best_label is None and result.status == "complete"
    assert on_disk(sweep) == result


# -- interruption and resume -------------------------------------------------------------------------------------
def test_resume_after_interrupt_reuses_finished_trials(tmp_path):
    # interrupted in the middle of the races (call 12: an extra round of the undecided single)
    sweep, runner = make_sweep(tmp_path, STACK_VARS, stack_scripts(), interrupt_at=12)
    with pytest.raises(KeyboardInterrupt):
        sweep.run()
    first_calls = list(runner.calls)
    assert len(first_calls) == 11 and first_calls[-2] == ("+jit_level=O1", 1)
    interrupted = on_disk(sweep)
    assert interrupted.status == "interrupted" and len(interrupted.trials) == 11

    again, runner2 = make_sweep(tmp_path, STACK_VARS, stack_scripts())
    result = again.run()
    reference, full = make_sweep(tmp_path / "uninterrupted", STACK_VARS, stack_scripts())
    expected = reference.run()
    assert runner2.calls == full.calls[11:]  # only what was missing ran, replicate indices and all
    assert [t.label for t in result.trials if t.reused] == [label for label, _ in first_calls]
    assert [(t.label, t.kind, t.verdict) for t in result.trials] == \
        [(t.label, t.kind, t.verdict) for t in expected.trials]
    assert [(s.label, s.kept) for s in result.stack] == [(s.label, s.kept) for s in expected.stack]
    assert result.status == "complete" and on_disk(again) == result
    for t in result.trials:  # results.json agrees with every trial file
        on_file = json.loads((again.store.trials_dir / t.trial_id / "trial.json").read_text())
        assert on_file["trial_id"] == t.trial_id and on_file["windows"] == [w.model_dump() for w in t.result.windows]
