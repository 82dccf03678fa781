"""Issue 39: a functional-style script with its own loop (value_and_grad, an ``@ms.jit`` step, a GeneratorDataset with
a map, a validation loop after each epoch) runs unchanged under perftune, with the same phases as its three-line
form (``perftune.steps`` / ``perftune.loss``), which stays and wins where present.  Real bursts of
``experiments/script_workload/functional_train.py`` copied to a temporary folder; nothing here compares speeds.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import REPO
from test_phase_routes import sequence

from perftune.engine.plan_load import parse_plan
from perftune.engine.specs import make_spec
from perftune.io.records import TrialResult
from perftune.runner import run_trial

SCRIPT = REPO / "experiments" / "script_workload" / "functional_train.py"
#: the line of the script's ``--mode`` option, which validation's messages cite
MODE_LINE = next(n for n, line in enumerate(SCRIPT.read_text().splitlines(), 1) if '"--mode"' in line)
BATCH = 32
BURST = {"warmup_steps": 1, "steps": 4, "repeats": 2, "profile_steps": 2, "timeout_s": 240, "drain_s": 1e-6}
FIRST = [("accuracy", None, 3), ("warmup", None, 1 + 1), ("timed", 0, 4), ("timed", 1, 4), ("profiled", None, 2)]
LOOP = ("        for inputs, labels in train_data.create_tuple_iterator():\n"
        "            loss = train_step(inputs, labels)\n")
THREE_LINES = ("        for inputs, labels in perftune.steps(train_data.create_tuple_iterator()):\n"
               "            loss = perftune.loss(train_step(inputs, labels))\n")


def three_line_form(text: str) -> str:
    assert LOOP in text
    return text.replace("import mindspore as ms\n", "import mindspore as ms\nimport perftune\n").replace(LOOP,
                                                                                                      THREE_LINES)


def burst(folder: Path, script: Path, name: str, args=("--epochs", "30", "--samples", "256")) -> TrialResult:
    plan = parse_plan({"name": "loop", "workload": {"script": str(script), "args": list(args),
                                                    "knob_args": {"batch_size": "--batch-size"}},
                       "burst": BURST, "accuracy": {"samples": 3 * BATCH, "seeds": 1},
                       "baseline": {"batch_size": BATCH}})
    return run_trial(make_spec(plan, {}, "baseline"), folder / name)


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict[str, TrialResult]:
    folder = tmp_path_factory.mktemp("loops")
    plain = folder / "functional_train.py"
    shutil.copy(SCRIPT, plain)
    explicit = folder / "three_lines.py"
    explicit.write_text(three_line_form(SCRIPT.read_text()))
    return {"unchanged": burst(folder, plain, "plain"), "three lines": burst(folder, explicit, "explicit")}


def test_the_unchanged_loop_runs_the_phases_of_its_three_line_form(both):
    for name, result in both.items():
        assert result.status == "ok", (name, result.reason, result.log_tail)
        assert sequence(result) == FIRST, (name, sequence(result))
        assert result.samples_per_step == BATCH and result.accuracy.samples_seen == 3 * BATCH, name
        assert result.compile_ms == result.steps[0].step_ms, name
    plain, explicit = both["unchanged"], both["three lines"]
    # the loss found in the loop's `loss` variable is the step's: the same values as perftune.loss was given
    assert all(s.loss is not None for s in plain.steps if s.phase == "accuracy")
    assert [s.loss for s in plain.steps if s.phase == "accuracy"] == \
        [s.loss for s in explicit.steps if s.phase == "accuracy"]
    assert plain.accuracy.train_loss == explicit.accuracy.train_loss
    # the plan does not name mode: knobs.mode is perftune's default, the script ran its own PyNative, and says so
    assert plain.applied["mode"] == "pynative" != plain.knobs["mode"]
    assert any(n.knob == "mode" and "not imposed" in n.text and "applied.mode" in n.text for n in plain.notes)


def test_the_validation_loop_is_not_the_training_loop(tmp_path):
    """One epoch of 6 steps, then the validation loop over 4 batches: it is not counted as training steps; nor is a
    validation before training (``set_train(False)``, in a function named ``evaluate``)."""
    plain = tmp_path / "functional_train.py"
    shutil.copy(SCRIPT, plain)
    result = burst(tmp_path, plain, "short", args=("--epochs", "1", "--samples", "192"))
    assert result.status == "failed" and result.reason.startswith("the script's training ended after 6 step(s)")
    first = burst(tmp_path, plain, "first", args=("--epochs", "1", "--samples", "192", "--validate-first"))
    assert first.status == "failed" and first.reason.startswith("the script's training ended after 6 step(s)")
    assert "before training: val_loss" in (tmp_path / "first" / "burst.log").read_text()


# -- knob_args that the script's options cannot take ------------------------------------------------------------------

def validate(folder: Path, knob_args: dict, variables=None):
    import yaml
    from click.testing import CliRunner

    from perftune.cli import main

    shutil.copy(SCRIPT, folder / "functional_train.py")
    plan = {"name": "args", "workload": {"script": "functional_train.py", "knob_args": knob_args},
            "baseline": {"mode": "pynative"}, "variables": variables or {"mode": ["graph"]}}
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return CliRunner().invoke(main, ["validate", str(path)]), path


def test_validate_refuses_a_knob_value_the_scripts_option_cannot_take(tmp_path):
    run, _ = validate(tmp_path, {"mode": "--mode"})
    assert run.exit_code == 2, run.output
    assert "workload.knob_args.mode: mode=pynative cannot reach the script: --mode takes int " \
           f"(functional_train.py:{MODE_LINE}), not 'pynative'" in run.output, run.output


def test_a_value_map_maps_the_knob_onto_the_scripts_values(tmp_path):
    from perftune.engine.plan_load import load_plan
    from perftune.routes import script_argv

    entry = {"arg": "--mode", "value_map": {"graph": 0, "pynative": 1}}
    run, path = validate(tmp_path, {"mode": entry, "batch_size": "--batch-size"})
    assert run.exit_code == 0, run.output
    plan = load_plan(path)
    spec = make_spec(plan, {"mode": "graph"}, "+mode=graph")
    assert script_argv("s.py", [], plan.workload.knob_args, spec.knobs) == ["s.py", "--mode", "0",
                                                                            "--batch-size", "32"]
    # a value outside the option's choices, even mapped, is refused
    run, _ = validate(tmp_path, {"mode": {"arg": "--mode", "value_map": {"graph": 0, "pynative": 2}}})
    refusal = f"--mode takes one of [0, 1] (functional_train.py:{MODE_LINE}), not '2'"
    assert run.exit_code == 2 and refusal in run.output, run.output
