"""Script workloads (issue 13): the user's own training script, unchanged, under perftune.

Real bursts run ``experiments/script_workload/train.py`` (a plain MindSpore script: argparse, its own
``set_context(mode=PYNATIVE_MODE)``, a GeneratorDataset with a per-sample Python map, Model.train with LossMonitor,
TimeMonitor and a callback of its own), copied to a temporary folder so that nothing it writes lands in the repo.
They check what ran (``applied``), the files and the step accounting, never which configuration was faster.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import REPO, run_sweep_cli
from workloads_for_tests import model_job

from perftune.cli import main
from perftune.engine.plan_load import PlanError, load_plan
from perftune.engine.specs import make_spec
from perftune.io.records import TrialResult, TrialSpec
from perftune.io.sweep_records import SweepResult
from perftune.runner import run_trial
from perftune.words.format import rate

EXAMPLE = REPO / "experiments" / "script_workload"
#: drain_s of a microsecond: exactly one drain step (its time bound ends it), so the step counts are known
BURST = {"warmup_steps": 1, "steps": 5, "repeats": 2, "profile_steps": 2, "timeout_s": 150, "drain_s": 1e-6}
ACCURACY_SAMPLES = 128  # 4 steps of 32
TOTAL_STEPS = 4 + 1 + 1 + 5 * 2 + 2


@pytest.fixture(scope="module")
def scripts(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("scripts")
    for name in ("train.py", "custom_loop.py"):
        shutil.copy(EXAMPLE / name, folder / name)
    return folder


def write_plan(folder: Path, name: str, script: str = "train.py", args=("--epochs", "50", "--samples", "256", "--log-every", "1"),
               **fields) -> Path:
    plan = {"name": name,
            "workload": {"script": script, "args": list(args), "knob_args": {"batch_size": "--batch-size"}},
            "burst": BURST, "accuracy": {"samples": ACCURACY_SAMPLES, "seeds": 1},
            "baseline": {"batch_size": 32, "mode": "pynative"}, "decision": {"baseline_runs": 1}}
    plan.update(fields)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def one_burst(folder: Path, plan_path: Path, name: str, knobs=None) -> tuple[TrialResult, Path]:
    spec = make_spec(load_plan(plan_path), knobs or {}, name)
    out = folder / "runs" / name
    return run_trial(spec, out), out


# -- the plan ---------------------------------------------------------------------------------------------------------

def test_script_plan_resolves_the_script_and_gates_on_training_loss(scripts):
    plan = load_plan(write_plan(scripts, "p1", accuracy={"samples": 64}, variables={"mode": ["graph"]}))
    assert plan.workload.script == str(scripts / "train.py") and str(plan.workload) == "script:train.py"
    assert plan.accuracy.metric == "train_loss"  # the default for a script: its own losses
    spec = make_spec(plan, {"mode": "graph"}, "+mode=graph")
    assert spec.workload == "script:train.py" and spec.script == plan.workload
    assert spec.script_knobs == ["batch_size", "mode"]
    again = TrialSpec.model_validate_json(spec.model_dump_json())
    assert again == spec and make_spec(plan, {"mode": "graph"}, "x").trial_id == spec.trial_id


@pytest.mark.parametrize("change, expected", [
    ({"variables": {"train_step": ["function"]}},
     "variables.train_step: knob 'train_step' has no route into the script"),
    ({"baseline": {"mode": "pynative", "recompute": True}},
     "baseline.recompute: knob 'recompute' has no route into the script"),
    ({"workload": {"script": "missing.py"}}, "workload.script: 'missing.py' is not a file"),
    ({"workload": {"script": "train.py", "knob_args": {"batch_sise": "--b"}}},
     "baseline.batch_sise: the baseline value of your own knob 'batch_sise' is needed (the script's option --b: "
     "perftune cannot read what the job uses today); or did you mean the built-in knob 'batch_size'?"),
    ({"accuracy": {"metric": "val_loss"}}, "accuracy.metric: 'val_loss' needs perftune's own validation pass"),
    ({"variables": {"workers": [2]}}, "variables.workers: knob 'workers' is not supported for a script workload"),
    ({"workload": {"script": "train.py", "seq_len": 32}}, "workload.seq_len: unknown field"),
    ({"workload": {"script": "train.py", "generate": "sample.py:generate"}},
     "workload.generate: 'sample.py' is not a file"),
    ({"workload": {"script": "train.py", "generate": "train.py:generate"}},
     "workload.generate: train.py has no top-level function 'generate' (its functions: "),
    ({"workload": {"script": "train.py", "generate": "train.py"}},
     "workload.generate: 'train.py': expected FILE.py:function"),
    ({"workload_params": {"tokens_per_sample": 32}}, "workload_params: a script workload takes its settings from its "
     "own arguments: put them in workload.args"),
])
def test_validate_refuses_with_one_line(scripts, change, expected):
    path = write_plan(scripts, "bad", **change)
    with pytest.raises(PlanError) as err:
        load_plan(path)
    assert any(p.startswith(expected) for p in err.value.problems), err.value.problems
    run = CliRunner().invoke(main, ["validate", str(path)])
    assert run.exit_code == 2 and expected in run.output and "Traceback" not in run.output
    assert "Input should be a valid string" not in run.output  # the union's other form is not the user's mistake


def test_run_set_refuses_a_knob_without_route(scripts):
    run = CliRunner().invoke(main, ["run", str(write_plan(scripts, "set")), "--set", "train_step=function"])
    assert run.exit_code == 2 and "--set train_step: knob 'train_step' has no route into the script" in run.output


def test_a_knob_with_knob_args_has_a_route(scripts):
    path = write_plan(scripts, "ok", variables={"batch_size": [64], "num_parallel_workers": [2]})
    run = CliRunner().invoke(main, ["validate", str(path)])
    assert run.exit_code == 0 and "script:train.py" in run.output


# -- the pipeline read-back --------------------------------------------------------------------------------------------

def test_pipeline_read_back_names_the_operators_a_script_pins():
    import mindspore.dataset as ds
    import numpy as np

    from perftune.burst.script_hooks import pinned_notes, pipeline_ops

    def slow_decode(x):
        return x

    source = ds.NumpySlicesDataset(np.zeros((8, 2), np.float32), column_names=["x"], shuffle=False)
    free = source.map(slow_decode, input_columns=["x"]).batch(4)
    ops = {o["op"]: o["num_parallel_workers"] for o in pipeline_ops(free)}
    assert ops["map(slow_decode)"] is None and ops["BatchDataset"] is None  # the config's value: the knob's
    assert pinned_notes(pipeline_ops(free), 4) == []
    pinned = source.map(slow_decode, input_columns=["x"], num_parallel_workers=1).batch(4)
    (note,) = pinned_notes(pipeline_ops(pinned), 4)
    assert note.kind == "no_effect" and note.knob == "num_parallel_workers"
    assert "num_parallel_workers=1 on map(slow_decode)" in note.text


# -- the meter, driven by scripted steps -------------------------------------------------------------------------------

def test_meter_runs_the_burst_phases_in_order(tmp_path):
    from perftune.burst.meter import Meter

    no_drain = {**BURST, "drain_s": 0}  # scripted steps take microseconds: no drain, so the counts are exact
    spec = make_spec(load_plan(write_plan(tmp_path, "m", script=str(EXAMPLE / "train.py"),
                                          burst={**no_drain, "profile_steps": 0})), {}, "baseline")
    meter = Meter(spec, tmp_path)
    meter.start()
    n = 0
    while not meter.done:
        meter.begin()
        meter.end((2.0 - 0.01 * n, False, 1024.0), 32)  # a loss-scaled net_outputs tuple
        n += 1
    assert n == 4 + 1 + 5 * 2
    result = meter.result
    assert [r.phase for r in result.steps] == ["accuracy"] * 4 + ["warmup"] + ["timed"] * 10
    assert result.accuracy.samples_seen == 128 and result.accuracy.train_loss == pytest.approx(1.985)
    assert len(result.windows) == 2 and result.samples_per_step == 32 and result.step_ms_median is not None
    assert result.warmup_steps == 1
    # a repeat process of the same configuration: no accuracy window (the gate reads the first process's) and no
    # profile; its warm-up goes on until its step times settle (``test_async_steps`` times the rule on a clock)
    repeat = Meter(make_spec(load_plan(write_plan(tmp_path, "m", script=str(EXAMPLE / "train.py"), burst=no_drain)),
                             {}, "baseline", replicate=1), tmp_path)
    repeat.start()
    while not repeat.done:
        repeat.begin()
        repeat.end(1.0, 32)
    warm = repeat.result.warmup_steps
    assert warm == 128 // 32 + 1  # the budget: the first process's accuracy window and warm-up step
    assert [r.phase for r in repeat.records] == ["warmup"] * warm + ["timed"] * 10
    assert repeat.result.profile is None and repeat.result.accuracy is None
    assert repeat.result.compile_ms == repeat.records[0].step_ms
    assert any(n.text.startswith(f"warm-up settled after {warm} steps") or "did not settle" in n.text
               for n in repeat.result.notes)
    assert any("repeat process 2" in n.text for n in repeat.result.notes)
    # dataset sinking: one call for four steps gives four records of a quarter of the time each
    sink = Meter(spec, tmp_path)
    sink.start()
    sink.begin()
    sink.end(1.0, 128, steps=4)
    assert len(sink.records) == 4 and len({r.step_ms for r in sink.records}) == 1 and sink.phase == "warmup"
    # burst.min_window_s: windows calibrated from the warm-up steps, as a perftune burst does
    long = make_spec(load_plan(write_plan(tmp_path, "m", script=str(EXAMPLE / "train.py"),
                                          burst={**no_drain, "warmup_steps": 2, "profile_steps": 0,
                                                 "min_window_s": 60})), {}, "baseline", replicate=1)
    meter = Meter(long, tmp_path)
    meter.start()
    while meter.phase != "timed":
        meter.begin()
        meter.end(1.0, 32)
    assert meter.windows.steps == 100 * BURST["steps"]  # 60 s of sub-millisecond steps: the 100x cap
    assert any("calibrated to 500 steps" in n.text for n in meter.result.notes)


# -- real bursts of the example script ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sweep(scripts) -> Path:
    """Baseline as the script has it (PyNative) with two data workers, and one trial: mode=graph."""
    path = write_plan(scripts, "sweep", baseline={"batch_size": 32, "mode": "pynative", "num_parallel_workers": 2},
                      variables={"mode": ["graph"]})
    out = scripts / "sweep-out"
    run = run_sweep_cli(path, out, "--no-report")
    assert run.exit_code == 0, run.output
    return out


def trials_by_label(out: Path):
    """Each configuration's first process (replicate 0: the one with the accuracy window and the profile)."""
    result = SweepResult.model_validate_json((out / "results.json").read_text())
    first: dict = {}
    for t in result.trials:
        first.setdefault(t.label, t)
    return result, first


def test_sweep_of_the_unchanged_script_keeps_the_knob_under_test(sweep, scripts):
    result, trials = trials_by_label(sweep)
    base, graph = trials["baseline"].result, trials["+mode=graph"].result
    for r in (base, graph):
        assert r.status == "ok", r.reason
        assert r.applied["script_asked"]["set_context"] == [{"mode": 1}]  # the script's PYNATIVE_MODE, recorded
        assert r.applied["num_parallel_workers"] == 2  # the dataset config, read back ...
        ops = {o["op"]: o["num_parallel_workers"] for o in r.applied["pipeline_ops"]}
        assert ops["map(slow_decode)"] is None  # ... which the script's map takes (it sets no value of its own)
    assert base.applied["mode"] == "pynative" and graph.applied["mode"] == "graph"  # the knob won
    assert not (scripts / "toy.ckpt").exists()  # the script stopped after the burst: no checkpoint written
    # the gate judged the script's own training losses, at equal samples
    assert trials["+mode=graph"].accuracy_changes["train_loss"] is not None
    assert graph.accuracy.samples_seen == base.accuracy.samples_seen == ACCURACY_SAMPLES


def test_the_scripts_own_callbacks_ran_and_the_steps_add_up(sweep):
    _, trials = trials_by_label(sweep)
    folder = sweep / "trials" / trials["baseline"].trial_id
    r = TrialResult.model_validate_json((folder / "trial.json").read_text())  # results.json leaves out the steps
    log = (folder / "burst.log").read_text()
    assert f"StepCounter: {TOTAL_STEPS} steps" in log  # its on_train_end ran after perftune's request_stop
    assert "trained " not in log  # ... and the code after model.train did not
    assert [s.phase for s in r.steps].count("timed") == 10 and len(r.steps) == TOTAL_STEPS
    # the losses perftune recorded are the losses the script's LossMonitor printed (--log-every 1: every step)
    printed = [float(m) for m in re.findall(r"step: \d+, loss is ([0-9.eE+-]+)", log)]
    assert printed == pytest.approx([s.loss for s in r.steps], rel=1e-6)
    for w, window in enumerate(r.windows):
        steps = [s for s in r.steps if s.window == w]
        assert sum(s.step_ms for s in steps) == pytest.approx(window.total_ms, rel=1e-9)
    splits = r.profile.splits
    assert r.profile.error is None and splits is not None
    parts = sum(getattr(splits, f"{p}_ms") for p in ("data", "forward", "backward", "optimizer", "communication",
                                                     "other"))
    assert parts == pytest.approx(splits.step_ms, rel=1e-6)


def test_a_pinned_map_is_named_and_has_no_effect(scripts):
    path = write_plan(scripts, "pinned", args=("--epochs", "50", "--samples", "256", "--pin-decode-workers"),
                      baseline={"batch_size": 32, "mode": "graph"}, burst={**BURST, "profile_steps": 0})
    result, _ = one_burst(scripts, path, "pinned", {"num_parallel_workers": 2})
    assert result.status == "ok", result.reason
    (note,) = [n for n in result.notes if n.knob == "num_parallel_workers"]
    assert note.kind == "no_effect" and "num_parallel_workers=1 on map(slow_decode)" in note.text


@pytest.mark.parametrize("args, expected", [
    (["--fail", "raise"], "the script raised RuntimeError: the script's data folder is missing after 0 step(s)"),
    (["--fail", "exit"], "the script exited with code 4 after 0 step(s)"),
    (["--fail", "no-train"], "the script finished without training: it never called mindspore.train.Model.train"),
    (["--epochs", "1", "--samples", "64"], "the script's training ended after 2 step(s), before the burst had"),
], ids=["raises", "exits", "never-trains", "too-short"])
def test_a_failing_script_gives_a_recorded_trial_with_the_reason(scripts, args, expected):
    name = f"fail-{len(expected)}"
    path = write_plan(scripts, name, args=args)
    result, folder = one_burst(scripts, path, name)
    assert result.status == "failed" and result.reason.startswith(expected), result.reason
    assert TrialResult.model_validate_json((folder / "trial.json").read_text()).reason == result.reason


def test_model_knobs_reach_the_scripts_model(scripts):
    """loss_scale reaches the Model the script builds: MindSpore's Model refuses a dynamic scale on CPU, and the
    trial is unsupported with that reason; what the script itself passed is recorded."""
    path = write_plan(scripts, "model-knobs", baseline={"batch_size": 32, "mode": "graph"})
    result, _ = one_burst(scripts, path, "model-knobs", {"loss_scale": "dynamic"})
    assert result.status == "unsupported", result.reason
    assert result.reason.startswith("loss_scale=dynamic: mindspore.train.Model refuses it on CPU")
    assert result.applied["script_asked"]["Model"] == [{"amp_level": "O0", "loss_scale_manager": None}]


def test_model_fit_validation_reaches_the_gate_at_equal_samples(scripts):
    """``Model.fit(valid_dataset=...)``: perftune's callback goes into fit too, and the script's validation runs once,
    at the accuracy window's end, its metrics (Model's own ``accuracy`` and ``loss``) in the trial's accuracy."""
    path = write_plan(scripts, "fit", args=("--epochs", "5", "--samples", "1024", "--fit"))
    result, _ = one_burst(scripts, path, "fit")
    assert result.status == "ok", result.reason
    acc = result.accuracy
    assert acc.val_metrics_samples == acc.samples_seen == ACCURACY_SAMPLES
    assert set(acc.val_metrics) == {"accuracy", "loss"} and acc.val_loss == acc.val_metrics["loss"]
    assert result.applied["script_asked"]["Model.train"][0]["method"] == "fit"
    assert len(result.windows) == 2


def test_a_custom_loop_with_the_two_lines(scripts):
    path = write_plan(scripts, "loop", script="custom_loop.py", args=("--epochs", "20"),
                      baseline={"batch_size": 32, "mode": "graph"}, burst={**BURST, "profile_steps": 0})
    result, _ = one_burst(scripts, path, "loop")
    assert result.status == "ok", result.reason
    assert len(result.windows) == 2 and result.samples_per_step == 32
    acc = result.accuracy
    assert acc.samples_seen == ACCURACY_SAMPLES and acc.updates == 4 and acc.train_loss is not None
    assert all(s.loss is not None for s in result.steps)
    # the loop's own validation (perftune.metric every 4 steps): the report at the accuracy window's end is kept
    assert acc.val_metrics_samples == ACCURACY_SAMPLES
    assert set(acc.val_metrics) == {"val_loss", "accuracy"} and acc.val_loss == acc.val_metrics["val_loss"]
    assert 0.0 <= acc.val_metrics["accuracy"] <= 1.0
    # a Model knob cannot reach a custom loop: refused at the loop's first step, with the reason
    refused, _ = one_burst(scripts, path, "loop-amp", {"amp_level": "O2"})
    assert refused.status == "unsupported" and refused.reason.startswith(
        "amp_level=O2: the script trains with a custom loop, without mindspore.train.Model"), refused.reason


JOB = model_job(16, "[LossMonitor(100), Count(), perftune.Callback(out=sys.argv[1], warmup_steps=1, steps=4, "
                    "repeats=2, profile_steps=2)]", epochs=8, tail='print(f"trained {len(done)} steps")')


def test_the_callback_by_hand_writes_a_trial_that_compare_reads(tmp_path):
    """``perftune.Callback(out=DIR)`` added by hand to a job: DIR/trial.json (with a profile), training goes on."""
    job = tmp_path / "job.py"
    job.write_text(JOB)
    run = subprocess.run([sys.executable, str(job), str(tmp_path / "a")], cwd=tmp_path, capture_output=True,
                         text=True, timeout=150, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-2000:]
    # not stopped: 8 epochs of 16 steps (enough for the drain's cap, 4 x (prefetch 16 + 2) steps, on a busy machine
    # where the queue never runs dry: 3 epochs were not)
    assert "trained 128 steps" in run.stdout
    result = TrialResult.model_validate_json((tmp_path / "a" / "trial.json").read_text())
    assert result.status == "ok" and len(result.windows) == 2 and result.workload == "script:job.py"
    assert result.samples_per_step == 16 and result.accuracy.samples_seen == 16 * 4
    assert result.profile is not None and result.profile.splits is not None, result.profile
    compare = CliRunner().invoke(main, ["compare", str(tmp_path / "a"), str(tmp_path / "a")])
    assert compare.exit_code == 0, compare.output
    # and `perftune report DIR` reads the lone trial folder: the job is the report's one configuration
    report = CliRunner().invoke(main, ["report", str(tmp_path / "a")])
    assert report.exit_code == 0, report.output
    html = (tmp_path / "a" / "report.html").read_text()
    assert "job.py" in html and rate(result.samples_per_s) in html
    assert 'alt="Time splits' in html or "Time splits" in html
    trace = result.profile.trace_file
    if trace:
        assert f'href="{trace}"' in html and (tmp_path / "a" / trace).is_file()


def test_import_perftune_stays_light_and_the_two_lines_do_nothing_outside_a_burst():
    run = subprocess.run([sys.executable, "-c", "import sys, perftune; assert 'mindspore' not in sys.modules; "
                          "assert perftune.loss(3.0) == 3.0"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr
    import perftune

    assert list(perftune.steps(iter([1, 2, 3]))) == [1, 2, 3]
