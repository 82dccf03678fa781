"""The accuracy window's knee and the final stack's check at length (issue 37), from scripted loss curves and
accuracy records (no timing: the decisions are pure functions of the records); one small real end-to-end check."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perftune.engine.accuracy import knee, stack_check
from perftune.engine.accuracy.sizing import check_length
from perftune.engine.plan_load import parse_plan
from perftune.io.accuracy_window import StackCheck
from perftune.io.records import Accuracy, StepRecord, TrialResult
from perftune.io.sweep_records import AccuracyCalibration, SweepResult, WindowSizing


def plateau(tau: float, floor: float = 0.5, top: float = 2.77, samples: int = 20000, batch: int = 32,
            noise: float = 0.0, seed: int = 0) -> list[tuple[int, float]]:
    rng = np.random.default_rng(seed)
    return [(s, floor + (top - floor) * math.exp(-s / tau) + noise * rng.standard_normal())
            for s in range(batch, samples + 1, batch)]


# -- the knee ------------------------------------------------------------------------------------------------------

def test_a_curve_that_flattens_has_its_knee_where_the_last_quarter_adds_little():
    choice = knee.choose(plateau(1000.0), 32, 20000)
    assert not choice.budget_bound and choice.knee.flat and choice.knee.late_share <= knee.FLAT_SHARE
    assert 6000 <= choice.samples <= 9000  # several time constants: past the steep part
    assert 0.75 < choice.knee.fall < 0.82  # a real fall (1 - end / start), not "107%"
    assert choice.after_fall is not None and choice.after_fall < 0.02


def test_the_knee_moves_with_the_curve_and_survives_batch_noise():
    fast, slow = knee.choose(plateau(300.0), 32, 20000), knee.choose(plateau(1500.0), 32, 20000)
    assert fast.samples < slow.samples
    noisy = knee.choose(plateau(1000.0, noise=0.03, seed=3), 32, 20000)
    assert not noisy.budget_bound and 2500 <= noisy.samples <= 11000


def test_a_loss_still_falling_late_on_a_log_scale_runs_to_the_budget():
    # 1.0 -> 0.04 quickly, then on to 0.004 slowly: a precision floor at 0.02 would only show in that second part
    curve = [(s, 0.004 + 1.0 * math.exp(-s / 200) + 0.036 * math.exp(-s / 3000)) for s in range(32, 12001, 32)]
    choice = knee.choose(curve, 32, 6400)
    assert choice.budget_bound and choice.samples == 6400 and not choice.knee.flat
    assert choice.after_fall > 0.2  # the loss kept falling after the window: the report says so
    linear_share = (curve[124][1] - curve[199][1]) / (curve[0][1] - curve[199][1])
    assert linear_share < knee.FLAT_SHARE  # on a linear scale it would have looked flat by 6400
    assert knee.at(curve, 2048).late_share < knee.FLAT_SHARE  # and a share of the log fall alone by 2048


def test_an_early_plateau_the_model_leaves_later_is_not_the_knee():
    # a saddle: 2.77 -> 1.0 by 1000 samples, flat until 4000, then on to 0.3 (flat again by about 9000)
    curve = [(s, 1.0 + 1.77 * math.exp(-s / 200) - (0.7 * (1 - math.exp(-(s - 4000) / 800)) if s > 4000 else 0.0))
             for s in range(32, 20001, 32)]
    assert knee.at(curve, 3200).flat  # flat there, taken alone
    choice = knee.choose(curve, 32, 20000)
    assert choice.samples > 8000 and not choice.budget_bound and choice.after_fall < knee.AFTER_FALL


def test_a_flat_curve_that_never_fell_is_no_knee():
    curve = [(s, 2.77 + 0.01 * math.sin(s)) for s in range(32, 6401, 32)]
    choice = knee.choose(curve, 32, 6400, target=0.15)
    assert choice.budget_bound and choice.samples == 6400 and (choice.knee.fall or 0.0) < 0.15


def test_the_window_is_on_the_unit_grid_and_no_longer_than_the_budget_or_the_curve():
    choice = knee.choose(plateau(1000.0, samples=3000), 96, 100000)
    assert choice.samples % 96 == 0 and choice.samples <= 3000
    assert knee.choose(plateau(5000.0), 96, 1000).samples == 960


# -- the check's length ----------------------------------------------------------------------------------------------

def gate(**kw):
    return parse_plan({"name": "t", "workload": "mlp", "accuracy": {"samples": 1024, **kw}}).accuracy


def test_the_check_is_a_multiple_of_the_window_cut_by_its_budget():
    assert check_length(1024, 32, 1e-4, gate(verify_multiple=4), 5) == (4096, False)
    # 40 s over 5 runs at 2.1 ms per sample: 3809 samples, not 4096
    assert check_length(1024, 32, 2.1e-3, gate(verify_multiple=4, verify_budget_s=40), 5) == (3808, True)
    # a budget that buys no more than the window: no check
    assert check_length(1024, 32, 1e-2, gate(verify_budget_s=40), 5) == (0, True)
    assert check_length(1024, 32, 1e-4, gate(verify_multiple=0), 5) == (0, False)


# -- the check's decision -------------------------------------------------------------------------------------------

def run_at(samples: int, floor: float, seed: int, val_jitter: float = 0.001, nonfinite: bool = False) -> Accuracy:
    points = plateau(400.0 + 20 * (seed % 4), floor=floor, samples=samples, noise=0.002, seed=seed)
    val = floor + val_jitter * (seed % 4 - 1.5)
    return Accuracy(samples_seen=samples, val_loss=val, train_loss=points[-1][1], loss_curve=points,
                    nonfinite=nonfinite)


BASE = [run_at(4096, 0.013, s) for s in range(4)]
GATE = gate(checkpoints=4)


def test_a_stack_on_a_precision_floor_is_refused_in_seed_spreads():
    ok, figures = stack_check.judge(BASE, run_at(4096, 0.035, 0), GATE, 0.95)
    assert not ok
    worst = stack_check.worst(figures)
    assert worst.outcome == "worse" and worst.spreads > 10


def test_a_stack_that_trains_like_another_seed_is_verified():
    ok, figures = stack_check.judge(BASE, run_at(4096, 0.013, 5), GATE, 0.95)
    assert ok and figures and all(f.outcome != "worse" for f in figures)


def test_nan_in_the_stack_refuses_it():
    ok, figures = stack_check.judge(BASE, run_at(4096, 0.013, 0, nonfinite=True), GATE, 0.95)
    assert not ok and figures[0].name == "nonfinite"


def test_the_suspect_is_the_only_change_or_the_one_whose_removal_cures_the_stack():
    from perftune.io.accuracy_window import LeaveOneOutCheck

    assert stack_check.suspects({"amp_level": "O3"}, []) == ([{"amp_level": "O3"}], "only_change")
    both = {"mode": "graph", "amp_level": "O3"}
    loo = [LeaveOneOutCheck(removed={"mode": "graph"}, ok=False), LeaveOneOutCheck(removed={"amp_level": "O3"}, ok=True)]
    assert stack_check.suspects(both, loo) == ([{"amp_level": "O3"}], "leave_one_out")
    assert stack_check.suspects(both, []) == ([{"mode": "graph"}, {"amp_level": "O3"}], "not_run")


# -- verify, on scripted runs ------------------------------------------------------------------------------------------

class Scripted:
    """Accuracy-only runs: the baseline's loss settles at 0.013, AMP O3 at 0.035 (a float16 floor); 2 ms a sample."""

    def __init__(self):
        self.specs = []

    def __call__(self, spec):
        self.specs.append(spec)
        floor = 0.035 if spec.knobs.get("amp_level") == "O3" else 0.013
        acc = run_at(spec.accuracy_samples, floor, spec.seed)
        steps = [StepRecord(phase="accuracy", step_ms=64.0, data_wait_ms=0.0, loss=v, samples_seen=s)
                 for s, v in acc.loss_curve]
        return TrialResult(trial_id=spec.trial_id, status="ok", workload=spec.workload, device="CPU", knobs=spec.knobs,
                           burst=spec.burst, wall_s=2.0, steps=steps, accuracy=acc), False


def sized_plan(**acc):
    return parse_plan({"name": "t", "workload": "mlp", "baseline": {"batch_size": 32, "mode": "pynative"},
                       "variables": {"amp_level": ["O3"], "mode": ["graph"]},
                       "accuracy": {"samples": 1024, "verify_budget_s": 1000, **acc}})


def test_verify_refuses_a_late_floor_and_names_the_change_by_leave_one_out():
    measure = Scripted()
    record = stack_check.verify(sized_plan(), {"mode": "graph", "amp_level": "O3"}, measure, None, 1e-4)
    assert record.status == "refused" and record.samples == 4096 and record.seeds == [0, 1, 2, 3]
    assert record.suspects == [{"amp_level": "O3"}] and record.suspects_by == "leave_one_out"
    assert all(s.accuracy_samples == 4096 for s in measure.specs) and len(measure.specs) == 1 + 4 + 2
    assert len(set(record.trial_ids)) == len(record.trial_ids) and record.cost_s == 2.0 * 7


def test_verify_passes_a_harmless_stack_and_skips_what_it_cannot_check():
    record = stack_check.verify(sized_plan(), {"mode": "graph"}, Scripted(), None, 1e-4)
    assert record.status == "verified" and not record.suspects and len(record.trial_ids) == 5
    assert stack_check.verify(sized_plan(), {}, Scripted(), None, 1e-4).skipped_why == "no_change"
    tight = stack_check.verify(sized_plan(verify_budget_s=1), {"mode": "graph"}, Scripted(), None, 1e-3)
    assert tight.status == "skipped" and tight.skipped_why == "budget"
    late = stack_check.verify(sized_plan(), {"mode": "graph"}, Scripted(), None, 1e-4, out_of_time=True)
    assert late.skipped_why == "out_of_time"


# -- words -------------------------------------------------------------------------------------------------------------

def result_with(check: StackCheck) -> SweepResult:
    cal = AccuracyCalibration(samples=1024, sized=True, sizing=WindowSizing(legacy="1024 samples, sized from the baseline"))
    return SweepResult(plan=sized_plan(), started_utc="2026-01-01T00:00:00+00:00", accuracy_calibration=cal,
                       stack_check=check)


def test_the_summary_says_refused_with_the_suspect_and_what_the_window_cannot_see():
    from perftune.report.stack_check_section import stack_check_plot
    from perftune.words.window_words import limits_line, stack_check_lines

    record = stack_check.verify(sized_plan(), {"amp_level": "O3"}, Scripted(), None, 1e-4)
    lines = stack_check_lines(result_with(record))
    assert "REFUSED at 4096 samples (4.0x the window)" in lines[0] and "seed spreads worse" in lines[0]
    assert "suspect +amp_level=O3 (the only stacked change)" in lines[1]
    assert "accuracy.samples: 4096" in lines[1]
    limits = limits_line(result_with(record))
    assert "after 1024 samples" in limits and "4096 samples" in limits
    assert stack_check_plot(record) is not None
    ok = stack_check.verify(sized_plan(), {"mode": "graph"}, Scripted(), None, 1e-4)
    assert "verified at 4096 samples" in stack_check_lines(result_with(ok))[0]
    skipped = stack_check.verify(sized_plan(), {}, Scripted(), None, 1e-4)
    assert stack_check_lines(result_with(skipped)) == ["stack check: not run: no change was kept (or "
                                                       "accuracy.verify_multiple is 0), nothing to check"]
    assert "nothing in this sweep trained past it" in limits_line(result_with(skipped))


def test_the_plan_refuses_a_negative_multiple_and_a_zero_budget():
    from perftune.engine.plan_load import PlanError

    for field, value in (("verify_multiple", -1), ("verify_budget_s", 0), ("window_budget_s", 0)):
        with pytest.raises(PlanError, match=field):
            parse_plan({"name": "t", "workload": "mlp", "accuracy": {field: value}})


# -- one small real check (about 20-40 s on 2 cores) ----------------------------------------------------------------

@pytest.mark.slow
def test_a_real_stack_check_on_a_float16_floor(tmp_path):
    """The offset regression (experiments/offset_regression.py), graph mode: AMP O3 against 3 seeds of the
    baseline at 2048 samples; only the structure is asserted (statuses, lengths, ids), not which way it went."""
    from perftune.io.seals import TrialSeals
    from perftune.runner import run_trial

    seals = TrialSeals(tmp_path)

    def measure(spec):
        done, _ = seals.reusable(tmp_path / spec.trial_id, spec.trial_id)
        return (done, True) if done is not None else (run_trial(spec, tmp_path / spec.trial_id), False)

    plan = parse_plan({"name": "t", "workload": "experiments.offset_regression:build",
                       "workload_params": {"train_samples": 2048, "val_samples": 256},
                       "baseline": {"batch_size": 32, "mode": "graph"}, "variables": {"amp_level": ["O3"]},
                       "accuracy": {"samples": 512, "seeds": 3, "verify_multiple": 4, "verify_budget_s": 600}})
    record = stack_check.verify(plan, {"amp_level": "O3"}, measure, str(tmp_path), None)
    assert record.status in ("verified", "refused"), record.failed
    assert record.samples == 2048 and record.seeds == [0, 1, 2] and record.stack_run.samples_seen == 2048
    assert {f.name for f in record.figures} >= {"val_loss", "train_loss@2048"}
    again = stack_check.verify(plan, {"amp_level": "O3"}, measure, str(tmp_path), None)
    assert again.trial_ids == record.trial_ids and again.status == record.status  # a resume reuses the runs


def test_the_stack_check_reuses_the_long_probe_as_the_baselines_own_run():
    from perftune.engine.accuracy import seeds

    measure = Scripted()
    plan = parse_plan({"name": "t", "workload": "mlp", "baseline": {"batch_size": 32, "mode": "pynative"},
                       "variables": {"mode": ["graph"]}, "burst": {"steps": 10},
                       "accuracy": {"window_budget_s": 1.0, "verify_budget_s": 25.0}})
    sized, cal = seeds.calibrate(plan, measure, None, say=lambda line: None)
    probe = measure.specs[1]
    record = stack_check.verify(sized, {"mode": "graph"}, measure, None, cal.reach.seconds_per_sample)
    assert record.samples == probe.accuracy_samples == cal.reach.curve_samples > cal.samples
    assert probe.trial_id in record.trial_ids  # the same spec: a sweep's runner reuses the finished probe


def test_one_seed_skips_the_check_and_the_report_section_renders_a_refusal():
    import jinja2

    from perftune.report.html import TEMPLATES
    from perftune.report.stack_check_section import stack_check_context

    skipped = stack_check.verify(sized_plan(seeds=1), {"mode": "graph"}, Scripted(), None, 1e-4)
    assert skipped.status == "skipped" and skipped.skipped_why == "uncalibrated" and not skipped.trial_ids
    refused = stack_check.verify(sized_plan(), {"amp_level": "O3"}, Scripted(), None, 1e-4)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    html = env.get_template("stack_check.html").render(stack_check=stack_check_context(result_with(refused)))
    assert 'id="stack-check"' in html and "REFUSED at 4096 samples" in html and "data:image/png;base64," in html
    assert "What a window of this length cannot see" in html
