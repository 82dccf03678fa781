"""One burst, end to end, in a fresh process: real MindSpore, the tiny MLP, seconds each."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import yaml
from conftest import PROFILED, TINY_BURST, TINY_MLP

from perftune.cli import main
from perftune.compat import cli_runner
from perftune.engine.plan_load import accuracy_samples, lr_scale, parse_plan
from perftune.engine.specs import make_spec
from perftune.io.records import Note
from perftune.runner import run_trial


def plan_for(workload: str = "mlp", params=None, burst=None, baseline=None):
    return parse_plan({
        "name": "burst-test",
        "workload": workload,
        "workload_params": TINY_MLP if params is None else params,
        "burst": {**PROFILED, **(burst or {})},
        "baseline": {"batch_size": 32, "mode": "graph", "prefetch_size": 2, **(baseline or {})},
    })


def burst(tmp_path_factory, name: str, knobs=None, **plan_fields):
    plan = plan_for(**plan_fields)
    spec = make_spec(plan, knobs or {}, name, cache_dir=tmp_path_factory.getbasetemp() / "cache")
    folder = tmp_path_factory.mktemp(name)
    return run_trial(spec, folder), folder


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    return burst(tmp_path_factory, "baseline")


@pytest.fixture(scope="module")
def everything(tmp_path_factory):
    """One burst with every data and step knob away from its default, so each one's effect can be read back."""
    knobs = {"train_step": "function", "dataset_format": "mindrecord", "num_parallel_workers": 2,
             "prefetch_size": 4, "grad_accum_steps": 2, "loss_scale": "dynamic", "amp_level": "O2",
             "recompute": True, "kernel_threads": 1, "dispatch_threads": 2, "drop_remainder": False,
             "python_multiprocessing": True, "dataset_sink_mode": True, "jit_level": "O1"}
    # 200 samples: with drop_remainder=false the 7th batch of each pass holds the last 8, and the accuracy window
    # alone crosses a pass (how many drain steps run depends on the machine)
    return burst(tmp_path_factory, "everything", knobs,
                 params={**TINY_MLP, "train_samples": 200, "preprocess_ms": 0.01})


def test_burst_end_to_end(baseline):
    result, folder = baseline
    assert result.status == "ok", (result.reason, result.log_tail)
    on_disk = (folder / "trial.json").read_text()
    assert result.trial_id in on_disk and (folder / "spec.json").exists() and (folder / "burst.log").exists()
    assert len(result.windows) == TINY_BURST["repeats"]
    assert all(w.steps == TINY_BURST["steps"] and w.samples_per_s > 0 for w in result.windows)
    phases = [s.phase for s in result.steps]
    assert phases.count("timed") == TINY_BURST["steps"] * TINY_BURST["repeats"]
    assert phases.count("profiled") in (0, PROFILED["profile_steps"])
    # + the prefetch drain: at least one step, at most DRAIN_CAP_FACTOR x (prefetch_size + 2)
    from perftune.burst.drain import DRAIN_CAP_FACTOR

    assert TINY_BURST["warmup_steps"] + 1 <= result.warmup_steps <= \
        TINY_BURST["warmup_steps"] + DRAIN_CAP_FACTOR * (2 + 2)
    assert phases.index("accuracy") < phases.index("warmup") < phases.index("timed")
    assert result.compile_ms > result.step_ms_median  # the first step compiles
    # one throughput: batch / mean step of the timed windows (not the median of the windows' figures)
    assert result.samples_per_s == pytest.approx(32 / result.step_ms_mean * 1e3, rel=1e-12)
    timed = [s.step_ms for s in result.steps if s.phase == "timed"]
    assert result.step_ms_mean == pytest.approx(float(np.mean(timed)), rel=1e-12)
    assert result.step_ms_p10 <= result.step_ms_median <= result.step_ms_p90
    acc = result.accuracy
    assert acc.samples_seen == 32 * TINY_BURST["steps"]
    assert math.isfinite(acc.val_loss) and acc.perplexity == pytest.approx(math.exp(acc.val_loss))
    assert acc.loss_curve[0][1] > acc.train_loss  # it learns
    assert not acc.nonfinite and acc.max_grad_norm > 0
    assert all(s.data_wait_ms >= 0 and s.step_ms >= s.data_wait_ms for s in result.steps)
    env = result.environment
    assert env.mindspore_version.startswith("2.") and env.device == "CPU" and env.cpu_count >= 1
    assert result.memory.host_rss_peak_bytes > 100 * 2**20
    assert result.parameter_count == 64 * 128 + 128 + 128 * 128 + 128 + 128 * 8 + 8
    assert result.applied["mode"] == "graph" and result.applied["train_step"] == "CellTrainStep"
    assert result.applied["loss_scaler"] == "none" and result.applied["amp_effect"]["method"] == "none"


@pytest.mark.smoke
def test_every_knob_takes_effect_or_says_why(everything, baseline):
    result, _ = everything
    assert result.status == "ok", (result.reason, result.log_tail)
    a = result.applied
    assert a["train_step"] == "function" and a["loss_scaler"] == "DynamicLossScaler"
    assert a["jit_level"] == "O1"
    assert "MindDataset" in a["pipeline"] and "MapDataset" in a["pipeline"]
    assert a["num_parallel_workers"] == 2 and a["python_multiprocessing"] is True
    assert a["prefetch_size"] == 4 and a["drop_remainder"] is False
    assert a["grad_accum_micro_batch"] == 16
    assert a["network_class"] == "_OutputTo32"  # AMP O2 wraps the network to return float32
    assert a["loss_scale_value"] == 2.0**16
    assert a["amp_effect"]["changed"] and a["amp_effect"]["max_abs_output_change"] > 0  # float16 really ran
    assert a["recompute_cells"] == ["_backbone.blocks.0", "_backbone.blocks.1"]
    assert a["kernel_threads_configured"] and a["dispatch_threads_configured"]
    assert Note(kind="no_effect", knob="dataset_sink_mode",
                text="dataset_sink_mode=true has no effect on CPU: MindSpore accepts it and ignores it") in result.notes
    # drop_remainder=false: the last, short batch of each pass really reaches the step
    sizes = {s.samples_seen - prev.samples_seen for prev, s in zip(result.steps, result.steps[1:])}
    assert sizes == {32, 200 % 32}
    # the MindRecord file is written once per dataset, in the shared cache
    files = list(Path(result_cache(everything)).glob("mindrecord/*/data.mindrecord"))
    assert len(files) == 1


def result_cache(everything) -> Path:
    import json

    spec = json.loads((everything[1] / "spec.json").read_text())
    return Path(spec["cache_dir"])


def test_step_forms_give_identical_losses(tmp_path_factory, baseline):
    """The knobs that should not change the maths do not: an exact loss match is a usable correctness check."""
    result, _ = burst(tmp_path_factory, "function", {"train_step": "function"})
    assert result.status == "ok", result.reason
    assert result.accuracy.train_loss == pytest.approx(baseline[0].accuracy.train_loss, rel=1e-6)
    assert result.accuracy.val_loss == pytest.approx(baseline[0].accuracy.val_loss, rel=1e-6)


def test_pynative_mode(tmp_path_factory, baseline):
    result, _ = burst(tmp_path_factory, "pynative", {"mode": "pynative", "jit_level": "O1"})
    assert result.status == "ok", result.reason
    assert result.applied["mode"] == "pynative"
    assert Note(kind="no_effect", knob="jit_level",
                text="jit_level=O1 has no effect in pynative mode (nothing is compiled)") in result.notes
    assert result.accuracy.val_loss == pytest.approx(baseline[0].accuracy.val_loss, rel=1e-3)


def test_graph_kernel_on_cpu_is_unsupported_with_reason(tmp_path_factory):
    result, folder = burst(tmp_path_factory, "graph_kernel", {"graph_kernel": "on"})
    assert result.status == "unsupported"
    assert "graph_kernel=on is not supported on CPU: MindSpore says" in result.reason
    assert result.log_tail and (folder / "trial.json").exists()


def test_jit_level_o2_function_on_cpu_is_unsupported(tmp_path_factory):
    result, _ = burst(tmp_path_factory, "jit_o2", {"jit_level": "O2", "train_step": "function"})
    assert result.status == "unsupported"
    assert "jit_level=O2" in result.reason and "'O0', 'O1'" in result.reason


@pytest.mark.skipif((os.cpu_count() or 1) >= 4, reason="needs a machine with fewer than 4 cores")
def test_more_workers_than_cores_is_unsupported(tmp_path_factory):
    result, _ = burst(tmp_path_factory, "workers4", {"num_parallel_workers": 4})
    assert result.status == "unsupported"
    assert "num_parallel_workers=4" in result.reason and "exceeds the boundary" in result.reason


def test_a_raising_workload_is_recorded(tmp_path_factory):
    result, _ = burst(tmp_path_factory, "raising", workload="tests.workloads_for_tests:raising",
                      params={"why": "checking"})
    assert result.status == "failed"
    assert result.reason == "RuntimeError: this workload is broken on purpose: checking"
    assert "Traceback" in result.log_tail


def test_out_of_memory_is_recorded_as_oom(tmp_path_factory):
    result, _ = burst(tmp_path_factory, "oom", workload="tests.workloads_for_tests:memory_hog", params={})
    assert result.status == "oom", result.reason
    assert "MemoryError" in result.reason


def test_a_hanging_burst_times_out_and_leaves_no_process(tmp_path_factory):
    started = time.monotonic()
    result, folder = burst(tmp_path_factory, "hanging", workload="tests.workloads_for_tests:hanging", params={},
                           burst={"timeout_s": 6})
    assert time.monotonic() - started < 30
    assert result.status == "timeout"
    assert "timeout_s=6" in result.reason
    left = [p for p in psutil.process_iter(["cmdline"]) if str(folder.resolve()) in " ".join(p.info["cmdline"] or [])]
    assert not left, left


@pytest.mark.smoke
def test_run_command_prints_a_summary(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "cli", "workload": "mlp", "workload_params": TINY_MLP,
                                    "burst": {**TINY_BURST, "profile_steps": 0}, "baseline": {"prefetch_size": 2}}))
    runner = cli_runner()
    result = runner.invoke(main, ["run", str(plan), "--set", "batch_size=16", "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    for words in ("samples/s", "step time", "compile", "val loss", "host RSS peak", "no accuracy metric"):
        assert words in result.output
    assert "perplexity" not in result.output  # the mlp is a classifier: perplexity is a language model's figure
    bad = runner.invoke(main, ["run", str(plan), "--set", "batch_size=-1"])
    assert bad.exit_code == 2 and "--set batch_size: -1 is not allowed" in bad.stderr


def test_learning_rate_scaled_with_the_batch_under_the_linear_rule(tmp_path_factory):
    """accuracy.lr_scaling: linear gives batch 64 twice the baseline's (batch 32) rate, and says so in the trial."""
    plan = parse_plan({
        "name": "lr-rule", "workload": "mlp", "workload_params": TINY_MLP,
        "burst": {**TINY_BURST, "profile_steps": 0}, "baseline": {"batch_size": 32, "mode": "graph"},
        "accuracy": {"lr_scaling": "linear"},
    })
    assert lr_scale(plan, 64) == 2.0 and lr_scale(plan, 32) == 1.0
    assert make_spec(plan, {}, "baseline").trial_id == make_spec(
        parse_plan({**plan.model_dump(mode="json"), "accuracy": {"lr_scaling": "none"}}), {}, "baseline").trial_id
    spec = make_spec(plan, {"batch_size": 64}, "+batch_size=64")
    assert spec.lr_scale == 2.0
    result = run_trial(spec, tmp_path_factory.mktemp("lr_rule"))
    assert result.status == "ok", (result.reason, result.log_tail)
    assert any("learning rate scaled x2" in n.text for n in result.notes), result.notes
    base_lr = 1e-3  # the mlp workload's default
    assert all(s.learning_rate == pytest.approx(2 * base_lr) for s in result.steps) and result.steps
    acc = result.accuracy
    assert acc.lr_scale == 2.0 and acc.samples_seen == 64 * acc.updates
    assert acc.updates == math.ceil(accuracy_samples(plan) / 64)


def test_timed_windows_sync_once_and_record_contention(baseline):
    """Each window's time is measured around its steps and one read-back of their losses at the end (the per-step
    times add up to it); the contention guard recorded how busy the rest of the machine was."""
    result, _ = baseline
    timed = [s for s in result.steps if s.phase == "timed"]
    assert len(result.windows) == TINY_BURST["repeats"] and all(s.loss is not None for s in timed)
    for w, window in enumerate(result.windows):
        steps = [s for s in timed if s.window == w]
        assert sum(s.step_ms for s in steps) == pytest.approx(window.total_ms, rel=1e-9)
        assert window.others_cpu_share is not None and 0.0 <= window.others_cpu_share <= 1.0
        assert window.steal_share is not None and window.load_avg_1m is not None
    assert result.contended_windows == sum(w.contended for w in result.windows)


def test_contention_is_others_cpu_over_the_machine():
    from perftune.burst.contention import CONTENDED_SHARE, Reading, between

    cores = psutil.cpu_count()
    start = Reading(wall_s=100.0, busy_s=1000.0, steal_s=5.0, own_s=10.0)
    # 2 s of wall time: all cores busy, of which 1.5 CPU-seconds were ours
    end = Reading(wall_s=102.0, busy_s=1000.0 + 2.0 * cores, steal_s=5.0, own_s=11.5)
    c = between(start, end)
    assert c.others_cpu_share == pytest.approx((2.0 * cores - 1.5) / (2.0 * cores))
    assert c.contended == (c.others_cpu_share > CONTENDED_SHARE) and c.steal_share == 0.0
    quiet = between(start, Reading(wall_s=102.0, busy_s=1001.5, steal_s=5.0, own_s=11.5))
    assert quiet.others_cpu_share == 0.0 and not quiet.contended
    unknown = between(Reading(0.0, None, None, 0.0), Reading(1.0, None, None, 0.5))
    assert unknown.others_cpu_share is None and not unknown.contended


def test_windows_calibrated_to_min_window_s(tmp_path_factory):
    """``burst.min_window_s``: windows get enough steps to last that long, chosen from the warm-up's step time
    (plumbing only: the step count follows from the recorded warm-up, whatever the machine's speed)."""
    result, _ = burst(tmp_path_factory, "calibrated", burst={"steps": 2, "repeats": 2, "min_window_s": 5.0})
    assert result.status == "ok", (result.reason, result.log_tail)
    warm = [s.step_ms for s in result.steps if s.phase == "warmup"][1:]
    expected = min(max(2, math.ceil(5000 / float(np.median(warm)))), 200)
    assert [w.steps for w in result.windows] == [expected, expected]
    assert len([s for s in result.steps if s.phase == "timed"]) == 2 * expected
    if expected > 2:
        assert any(f"calibrated to {expected} steps" in n.text for n in result.notes)


def test_min_window_s_is_part_of_the_trial_id():
    # (plans without it keep their ids: tests/test_schema.py resumes a version-1 sweep without running a burst)
    plain, calibrated = plan_for(), plan_for(burst={"min_window_s": 1.0})
    assert make_spec(plain, {}, "b").trial_id != make_spec(calibrated, {}, "b").trial_id


def test_an_unreadable_trial_file_is_recorded_with_why(tmp_path_factory):
    """Also: the burst runs the ``atexit`` hooks as it ends (the workload's hook wrote that file)."""
    result, folder = burst(tmp_path_factory, "newer", workload="tests.workloads_for_tests:newer_trial_file", params={})
    assert result.status == "failed"
    assert result.reason.startswith("the burst wrote a trial.json this perftune cannot read:"), result.reason
    assert "99" in result.reason


def test_a_repeat_process_skips_the_profile_and_the_accuracy_window(tmp_path_factory):
    """Repeats of a configuration leave the profile and the accuracy window to its first process and warm up until
    their step time settles, for at most the first process's untimed samples; their trial.json is complete
    otherwise, with one step graph compiled."""
    plan = plan_for()
    spec = make_spec(plan, {}, "baseline", replicate=1, cache_dir=tmp_path_factory.getbasetemp() / "cache")
    result = run_trial(spec, tmp_path_factory.mktemp("repeat"))
    assert result.status == "ok", (result.reason, result.log_tail)
    phases = [s.phase for s in result.steps]
    assert "profiled" not in phases and result.profile is None
    assert "accuracy" not in phases and result.accuracy is None
    # the settle's budget (the first process's untimed steps, the compile beside them) and the drain's cap (4 x
    # (prefetch_size + 2)) at most
    assert result.warmup_steps <= spec.accuracy_samples // 32 + TINY_BURST["warmup_steps"] + 1 + 4 * (2 + 2)
    assert len(result.windows) == TINY_BURST["repeats"] and result.samples_per_s
    assert any("repeat process 2" in n.text for n in result.notes)
    assert any(n.text.startswith("warm-up settled") or "did not settle" in n.text for n in result.notes)
    assert sum(v for k, v in result.compiles.items() if k != "build") == 1


def test_the_drain_ends_when_the_queue_runs_dry_is_spent_or_takes_too_long():
    """The warm-up's drain of prefetched batches (scripted step records; ``drain.drain_done``): a slow model stops
    after its time bound (one 20 s ResNet-18 step on CPU, not 18), a fast one drains the whole queue unless two
    steps in a row waited for their batch."""
    from perftune.burst.drain import DRAIN_S, drain_done
    from perftune.io.records import StepRecord

    def steps(*pairs):  # (step ms, data wait ms)
        return [StepRecord(phase="warmup", step_ms=s, data_wait_ms=w) for s, w in pairs]

    full = (2.0, 0.05)  # a batch from a full queue: no wait
    dry = (10.0, 8.0)  # the pipeline is slower than the step: it waits
    assert not drain_done([], 6, DRAIN_S) and drain_done([], 0, DRAIN_S)  # cap 0 (drain_s: 0): no drain step
    assert not drain_done(steps(full, full), 6, DRAIN_S) and drain_done(steps(*[full] * 6), 6, DRAIN_S)
    assert drain_done(steps(full, dry, dry), 6, DRAIN_S)
    assert not drain_done(steps(full, dry), 6, DRAIN_S)  # one wait can be a hiccup of a busy machine
    assert not drain_done(steps(dry, full), 6, DRAIN_S)
    assert not drain_done(steps((2.0, 0.4), (2.0, 0.4)), 6, DRAIN_S)  # below DRY_WAIT_MS
    assert drain_done(steps((20_000.0, 0.1)), 18, DRAIN_S)  # a slow model: one step is past the bound
    assert not drain_done(steps((1000.0, 0.1)), 18, DRAIN_S)
    assert drain_done(steps(*[(1000.0, 0.1)] * 5), 18, DRAIN_S)


def test_a_distributed_burst_drains_its_cap_and_agrees_on_its_windows(tmp_path):
    """Every step of a data-parallel burst is a collective, so its ranks must take the same phase decisions: the
    drain runs its cap (the same on every rank), not until this rank's queue runs dry, and the calibrated window is
    the ranks' longest (``agree``).  Two ranks that drained 5 and 7 steps waited for each other until msrun gave up."""
    from perftune.burst.meter import Meter
    from perftune.io.records import StepRecord

    spec = make_spec(parse_plan({"name": "d", "workload": "mlp", "workload_params": dict(TINY_MLP),
                                 "burst": dict(TINY_BURST)}), {}, "baseline")
    dry = [StepRecord(phase="warmup", step_ms=10.0, data_wait_ms=8.0)] * 3
    asked = []
    alone, ranked = Meter(spec, tmp_path / "a"), Meter(spec, tmp_path / "b", agree=lambda v: asked.append(v) or 3 * v)
    for meter in (alone, ranked):
        meter.arms.drain_cap = 6
    assert alone.arms.drain_over(dry) and not ranked.arms.drain_over(dry) and ranked.arms.drain_over(dry * 2)
    ranked.windows.calibrate(dry)
    alone.windows.calibrate(dry)
    assert asked == [alone.windows.steps] and ranked.windows.steps == 3 * alone.windows.steps
