"""Plan loading and validation: every user mistake is one line naming the field, the value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from perftune.cli import main
from perftune.compat import cli_runner
from perftune.engine.plan_load import (
    PlanError,
    accuracy_samples,
    baseline_knobs,
    load_plan,
    parse_plan,
    parse_set_options,
)
from perftune.errors import UserError
from perftune.knobs import KNOBS

# plan validation is pydantic's and PyYAML's work: cheap, so checked on the oldest supported set too
pytestmark = pytest.mark.smoke

REPO = Path(__file__).resolve().parent.parent

GOOD = {
    "name": "quickstart",
    "workload": "mlp",
    "workload_params": {},
    "device": "CPU",
    "burst": {"warmup_steps": 3, "steps": 30, "repeats": 3, "profile_steps": 5, "timeout_s": 300},
    "baseline": {"batch_size": 32, "mode": "pynative", "num_parallel_workers": 1, "amp_level": "O0"},
    "variables": {"mode": ["graph"], "num_parallel_workers": [2]},
    "accuracy": {"metric": "val_loss", "rel_tolerance": 0.05},
    "decision": {"min_gain": 0.03},
}


def with_change(path: str, value):
    """GOOD with the field at dotted ``path`` set to ``value`` (``DELETE`` removes it)."""
    import copy

    plan = copy.deepcopy(GOOD)
    node = plan
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    if value == "DELETE":
        node.pop(keys[-1])
    else:
        node[keys[-1]] = value
    return plan


def test_the_issue_example_plan_is_valid():
    plan = parse_plan(GOOD)
    assert baseline_knobs(plan)["mode"] == "pynative"
    assert plan.variables == {"mode": ["graph"], "num_parallel_workers": [2]}
    assert accuracy_samples(plan) == 32 * 30


# (change, words the single error line must contain)
MALFORMED = [
    (("variables.modes", ["graph"]), ["variables.modes", "unknown knob 'modes'", "did you mean 'mode'"]),
    (("variables.mode", ["eager"]), ["variables.mode[0]", "'eager'", "graph | pynative"]),
    (("baseline.amp_level", "O5"), ["baseline.amp_level", "'O5'", "O0 | O1 | O2 | O3"]),
    (("baseline.batch_size", "32"), ["baseline.batch_size", "'32'", "integer from 1 to 65536"]),
    (("baseline.batch_size", 0), ["baseline.batch_size", "0", "integer from 1 to 65536"]),
    (("burst.steps", -5), ["burst.steps", "-5", "greater than or equal to 1"]),
    (("burst.repeats", "three"), ["burst.repeats", "'three'", "integer"]),
    (("burst.timeout_s", 0), ["burst.timeout_s", "greater than 0"]),
    (("variables.mode", ["pynative"]), ["variables.mode[0]", "repeats the baseline value"]),
    (("workload", "nosuch"), ["workload", "unknown workload 'nosuch'", "mlp", "tiny_gpt"]),
    (("workload", "no_such_package.mod:build"), ["workload", "no_such_package.mod", "cannot be found"]),
    (("device", "TPU"), ["device", "'CPU', 'GPU' or 'Ascend'", "'TPU'"]),
    (("accuracy.metric", "accuracy"), ["accuracy.metric", "'val_loss', 'train_loss' or 'perplexity'"]),
    (("accuracy.rel_tolerance", -0.1), ["accuracy.rel_tolerance", "greater than or equal to 0"]),
    (("decision.min_gain", "big"), ["decision.min_gain", "'big'"]),
    (("decision.max_runs", 0), ["decision.max_runs", "greater than or equal to 1"]),
    (("decision.equivalence", 1.5), ["decision.equivalence", "less than 1"]),
    (("decision.budget_s", -1), ["decision.budget_s", "greater than 0"]),
    (("decision.remeasure_contended", 9), ["decision.remeasure_contended", "less than or equal to 5"]),
    (("name", "my plan!"), ["name", "should match pattern"]),
    (("name", "DELETE"), ["name", "required field is missing"]),
    (("burst.warmup", 3), ["burst.warmup", "unknown field"]),
    (("variables.num_parallel_workers", 2), ["variables.num_parallel_workers", "non-empty list"]),
    (("variables.num_parallel_workers", []), ["variables.num_parallel_workers", "non-empty list"]),
    (("variables.num_parallel_workers", [2, 2]), ["variables.num_parallel_workers", "values repeat"]),
    (("variables.drop_remainder", ["yes please"]), ["variables.drop_remainder[0]", "true | false"]),
    (("baseline.grad_accum_steps", 5), ["grad_accum_steps", "5 does not divide batch_size 32"]),
    (("baseline.prefetch_size", 2.5), ["baseline.prefetch_size", "2.5", "integer"]),
    (("colour", "blue"), ["colour", "unknown field"]),
]


@pytest.mark.parametrize("change,words", MALFORMED, ids=[c[0][0] + "=" + repr(c[0][1]) for c in MALFORMED])
def test_malformed_plan_is_refused_naming_the_field(change, words):
    with pytest.raises(PlanError) as info:
        parse_plan(with_change(*change))
    problems = info.value.problems
    assert len(problems) == 1, problems
    for word in words:
        assert word in problems[0], (word, problems[0])


def test_many_problems_are_reported_together():
    bad = with_change("device", "TPU")
    bad["variables"] = {"modes": ["graph"], "amp_level": ["O9"]}
    bad["burst"]["steps"] = 0
    with pytest.raises(PlanError) as info:
        parse_plan(bad)
    text = "\n".join(info.value.problems)
    assert len(info.value.problems) == 4, text
    for field in ("device", "variables.modes", "variables.amp_level[0]", "burst.steps"):
        assert field in text


def test_yaml_on_off_are_read_as_graph_kernel_names():
    plan = parse_plan(with_change("variables", {"graph_kernel": [True]}))
    assert plan.variables == {"graph_kernel": ["on"]}
    assert parse_set_options(["graph_kernel=on"]) == {"graph_kernel": "on"}


def test_set_options_are_checked():
    assert parse_set_options(["mode=graph", "batch_size=64", "recompute=true"]) == {
        "mode": "graph", "batch_size": 64, "recompute": True}
    with pytest.raises(PlanError) as info:
        parse_set_options(["mode=fast", "nosuch=1", "batch_size"])
    text = "\n".join(info.value.problems)
    assert "--set mode: 'fast' is not allowed" in text
    assert "unknown knob 'nosuch'" in text
    assert "--set batch_size: expected knob=value" in text


@pytest.mark.parametrize("content,words", [
    ("name: [unclosed\n", ["not valid YAML", "line"]),
    ("", ["the plan is empty"]),
    ("- just\n- a list\n", ["expected a mapping"]),
    (b"\xff\xfe\x00bad", ["cannot read the plan"]),
])
def test_unreadable_or_non_yaml_file(tmp_path, content, words):
    path = tmp_path / "plan.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(UserError) as info:
        load_plan(path)
    for word in words:
        assert word in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="no such plan file"):
        load_plan(tmp_path / "nope.yaml")


def test_validate_command_exit_codes(tmp_path):
    runner = cli_runner()
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(GOOD))
    result = runner.invoke(main, ["validate", str(good)])
    assert result.exit_code == 0, result.output
    assert "ok" in result.output and "2 one-at-a-time trial(s)" in result.output

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(with_change("variables.mode", ["eager"])))
    result = runner.invoke(main, ["validate", str(bad)])
    assert result.exit_code == 2
    assert "variables.mode[0]: 'eager' is not allowed (allowed: graph | pynative)" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_shipped_plans_are_valid():
    plans = sorted((REPO / "experiments").glob("*.yaml"))
    assert plans, "experiments/ should hold example plans"
    for path in plans:
        load_plan(path)


def test_knobs_command_lists_every_knob_with_backends():
    result = cli_runner().invoke(main, ["knobs"])
    assert result.exit_code == 0
    for name in KNOBS:
        assert f"\n{name}\n" in "\n" + result.output
    assert "dataset_sink_mode" in result.output and "CPU (accepted, no effect)" in result.output
    assert "CPU (not on, O1, O2)" in result.output  # graph_kernel


def test_every_knob_default_is_allowed_and_documented():
    for knob in KNOBS.values():
        assert knob.check(knob.default) is None, knob.name
        assert knob.help and knob.group in ("data", "compute", "distributed")


def test_lr_scaling_names_what_is_allowed(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nworkload: mlp\naccuracy: {lr_scaling: cube}\n")
    with pytest.raises(UserError) as err:
        load_plan(path)
    assert "accuracy.lr_scaling" in str(err.value) and "linear" in str(err.value) and "sqrt" in str(err.value)


@pytest.mark.parametrize("value", ["0", "-1", "601"])
def test_min_window_s_is_bounded_and_named(tmp_path, value):
    path = tmp_path / "p.yaml"
    path.write_text(f"name: p\nworkload: mlp\nburst: {{min_window_s: {value}}}\n")
    with pytest.raises(UserError) as err:
        load_plan(path)
    (line,) = [ln for ln in str(err.value).splitlines() if "burst.min_window_s" in ln]  # one problem line per field
    assert f"(got {value})" in line


@pytest.mark.parametrize("section,field,value", [
    ("burst", "drain_s", "-1"), ("burst", "drain_s", "601"),
    ("accuracy", "window_budget_s", "0"), ("accuracy", "window_budget_s", "3601"),
    ("accuracy", "seeds", "0"), ("accuracy", "seeds", "51"),
    ("accuracy", "checkpoints", "-1"), ("accuracy", "checkpoints", "21")])
def test_the_gate_and_drain_fields_are_bounded_and_named(tmp_path, section, field, value):
    """The fields issue 26 and 28 added: out of range is one line naming the field and the value."""
    path = tmp_path / "p.yaml"
    path.write_text(f"name: p\nworkload: mlp\n{section}: {{{field}: {value}}}\n")
    with pytest.raises(UserError) as err:
        load_plan(path)
    (line,) = [ln for ln in str(err.value).splitlines() if f"{section}.{field}" in ln]
    assert f"(got {value})" in line


def test_burst_windows_names_what_is_allowed(tmp_path):
    """Issue 38's ``burst.windows`` (chosen or fixed): anything else is one line naming the field and both values."""
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nworkload: mlp\nburst: {windows: sometimes}\n")
    with pytest.raises(UserError) as err:
        load_plan(path)
    (line,) = [ln for ln in str(err.value).splitlines() if "burst.windows" in ln]
    assert "'chosen'" in line and "'fixed'" in line and "sometimes" in line


def test_an_empty_seed_arg_is_refused_naming_it(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nworkload: {script: train.py, seed_arg: ''}\n")
    (tmp_path / "train.py").write_text("print('hi')\n")
    with pytest.raises(UserError) as err:
        load_plan(path)
    (line,) = [ln for ln in str(err.value).splitlines() if "seed_arg" in ln and "(got '')" in ln]
    assert "at least 1 character" in line


def test_a_seed_arg_that_is_also_a_knob_arg_is_refused(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nworkload: {script: train.py, seed_arg: '--bs', knob_args: {batch_size: '--bs'}}\n"
                    "variables: {batch_size: [64]}\n")
    (tmp_path / "train.py").write_text("print('hi')\n")
    with pytest.raises(UserError) as err:
        load_plan(path)
    (line,) = [ln for ln in str(err.value).splitlines() if "workload.seed_arg" in ln]
    assert "workload.knob_args.batch_size" in line


def test_the_paired_design_fields_are_refused_out_of_range(tmp_path):
    for field, value in (("paired_blocks", 0), ("paired_window_s", 0), ("paired", "sometimes")):
        path = tmp_path / "p.yaml"
        path.write_text(f"name: p\nworkload: mlp\ndecision: {{{field}: {value}}}\n")
        with pytest.raises(UserError) as err:
            load_plan(path)
        assert any(f"decision.{field}" in ln for ln in str(err.value).splitlines()), (field, str(err.value))
