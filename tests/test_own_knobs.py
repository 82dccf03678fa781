"""Own knobs: a job's own settings (a config file's field, a script option, an environment variable, a workload
parameter) swept like built-in knobs.  The plan checks run on the real files; the sweep, ``perftune run --set`` and
``perftune compare`` run real bursts of ``tests/own_knobs/job.py`` (a JSON-config job written as a user would) and
check what reached the script, never which configuration ran faster."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from perftune.cli import main
from perftune.compat import cli_runner
from perftune.engine.plan_load import PlanError, parse_plan
from perftune.io.config_files import load_config, write_copy
from perftune.routes import script_argv

HERE = Path(__file__).resolve().parent
JOB = HERE / "own_knobs"
EXAMPLE = HERE.parent / "experiments" / "own_knobs"
TINY_BURST = {"warmup_steps": 1, "steps": 6, "repeats": 2, "profile_steps": 0, "timeout_s": 120}  # no split read here


def job_plan(folder: Path, **changes) -> dict:
    workload = {"script": "job.py", "args": ["--config", "job.json", "--extra-config", "extra.yaml"],
                "knob_config": {"width": "job.json:model.width", "dropout": "extra.yaml:model.dropout"},
                "knob_args": {"depth": "--depth", "bias": "--no-bias"},
                "knob_env": {"tag": "JOB_TAG"}}
    workload.update(changes.pop("workload", {}))
    plan = {"name": "own", "workload": workload, "burst": dict(TINY_BURST),
            "baseline": {"mode": "graph", "tag": "a", "bias": True},
            "variables": {"width": [32], "depth": [2], "tag": ["b"]},
            "accuracy": {"samples": 128, "seeds": 1},
            "decision": {"baseline_runs": 2, "max_runs": 2, "retry_on_stack": False}}
    plan.update(changes)
    return plan


@pytest.fixture()
def job_dir(tmp_path) -> Path:
    shutil.copytree(JOB, tmp_path / "job")
    return tmp_path / "job"


def problems_of(plan: dict, folder: Path) -> list[str]:
    with pytest.raises(PlanError) as err:
        parse_plan(plan, "plan", folder)
    return err.value.problems


# -- the plan ---------------------------------------------------------------------------------------------------------
def test_a_plan_of_own_knobs_loads_with_baselines_read_from_the_job(job_dir):
    plan = parse_plan(job_plan(job_dir), "plan", job_dir)
    # width and dropout from job.json / extra.yaml, depth from the option's literal default; the rest as given
    assert plan.baseline["width"] == 16 and plan.baseline["dropout"] == 0.0 and plan.baseline["depth"] == 1
    assert plan.baseline["tag"] == "a" and plan.baseline["bias"] is True
    # a flag's baseline is its absence: --no-bias (store_false) absent is bias=true
    unset = parse_plan(job_plan(job_dir, baseline={"mode": "graph", "tag": "a"}), "plan", job_dir)
    assert unset.baseline["bias"] is True
    # --no-bias is a store_false flag: the boolean knob reaches it by presence
    assert plan.workload.knob_args["bias"].flag == "store_false"


@pytest.mark.parametrize("change, field, words", [
    ({"workload": {"knob_config": {"width": "job.json:model.widht"}}}, "workload.knob_config.width",
     "job.json has no field 'model.widht'"),
    ({"workload": {"knob_config": {"width": "other.json:model.width"}}}, "workload.knob_config.width",
     "'other.json' is not among workload.args"),
    ({"variables": {"width": ["wide"]}}, "variables.width[0]", "cannot go into job.json:model.width"),
    ({"workload": {"knob_env": {"tag": "JOB-TAG"}}}, "workload.knob_env.tag",
     "'JOB-TAG' is not a valid environment variable name"),
    ({"workload": {"knob_env": {"tag": "1TAG"}}}, "workload.knob_env.tag", "not a valid environment variable"),
    ({"baseline": {"mode": "graph", "bias": True}}, "baseline.tag", "the baseline value of your own knob 'tag'"),
    ({"variables": {"depth": ["two"]}}, "workload.knob_args.depth", "--depth takes int"),
    ({"variables": {"bias": [7]}}, "workload.knob_args.bias", "is a flag"),
    ({"variables": {"tag": ["a"]}}, "variables.tag[0]", "repeats the baseline value"),
    ({"knob_params": {"depth": "depth"}}, "knob_params.depth", "is also routed by workload.knob_args"),
    ({"workload": {"knob_config": {"width": "job.json:model"}}}, "variables.width[0]", "holds a mapping"),
    ({"variables": {"seq_len": [64]}}, "variables.seq_len", "a knob of your own needs a route"),
])
def test_validate_refuses_a_bad_own_knob_in_one_line_naming_the_field(job_dir, change, field, words):
    problems = problems_of(job_plan(job_dir, **change), job_dir)
    line = next((p for p in problems if p.startswith(field + ":")), None)
    assert line is not None, problems
    assert len(problems) == 1, problems  # one line for one mistake
    assert words in line, line
    assert "\n" not in line


def test_knob_params_belongs_to_a_workload_and_not_to_a_builtin_name(tmp_path):
    base = {"name": "p", "workload": "mlp", "knob_params": {"width": "hidden", "batch_size": "hidden"},
            "baseline": {"width": 64}, "variables": {"width": [32]}}
    problems = problems_of(base, tmp_path)
    assert any(p.startswith("knob_params.batch_size: 'batch_size' is a built-in knob") for p in problems), problems
    plan = parse_plan({**base, "knob_params": {"width": "hidden"}}, "plan", tmp_path)
    assert plan.baseline["width"] == 64


def test_the_cli_says_one_line_and_exits_2(job_dir):
    path = job_dir / "plan.yaml"
    path.write_text(yaml.safe_dump(job_plan(job_dir, workload={"knob_env": {"tag": "A B"}})))
    result = cli_runner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 2
    assert "workload.knob_env.tag: 'A B' is not a valid environment variable name" in result.stderr
    assert "Traceback" not in result.stderr


def test_knobs_plan_lists_each_own_knob_with_route_type_and_values():
    result = cli_runner().invoke(main, ["knobs", "--plan", str(EXAMPLE / "plan.yaml")])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "hidden\n  route:    workload.knob_config: config field conf/run.yaml:model.hidden\n  type:     int\n" \
           "  baseline: 64\n  values:   32" in text
    assert "tie_embeddings\n  route:    workload.knob_args: the script's option --tie-embeddings\n  type:     bool" in text
    assert "kernel_threads_env\n  route:    workload.knob_env: environment variable LM_KERNEL_THREADS" in text
    assert "batch_size (built-in)\n  route:    workload.knob_config" in text


def test_the_example_plan_validates():
    result = cli_runner().invoke(main, ["validate", str(EXAMPLE / "plan.yaml")])
    assert result.exit_code == 0, result.output + result.stderr


# -- the routes, without a burst --------------------------------------------------------------------------------------
def test_flags_reach_the_script_by_presence():
    args = {"fast": {"arg": "--fast", "flag": "store_true"}, "bias": {"arg": "--no-bias", "flag": "store_false"},
            "depth": "--depth"}
    assert script_argv("s.py", ["-x"], args, {"fast": True, "bias": True, "depth": 3}) == \
        ["s.py", "-x", "--fast", "--depth", "3"]
    assert script_argv("s.py", [], args, {"fast": False, "bias": False, "depth": 3}) == \
        ["s.py", "--no-bias", "--depth", "3"]


def test_a_yaml_copy_keeps_comments_order_and_every_other_field(tmp_path):
    source = EXAMPLE / "conf" / "run.yaml"
    before = source.read_bytes()
    write_copy(source, tmp_path / "run.yaml", {"model.hidden": 128, "train.learning_rate": 0.01})
    assert source.read_bytes() == before
    copy = (tmp_path / "run.yaml").read_text()
    original = before.decode()
    # ruamel keeps each comment at its column
    assert copy == original.replace("hidden: 64 ", "hidden: 128").replace("rate: 0.003", "rate: 0.01 ")
    assert yaml.safe_load(copy)["model"]["hidden"] == 128  # what the script's own PyYAML reads


def test_a_json_copy_keeps_key_order(tmp_path):
    write_copy(JOB / "job.json", tmp_path / "job.json", {"model.width": 64})
    copy = json.loads((tmp_path / "job.json").read_text())
    assert list(copy) == ["model", "train"] and list(copy["model"]) == ["width", "kind"]
    assert copy["model"]["width"] == 64 and copy["train"] == load_config(JOB / "job.json")["train"]


# -- real bursts -------------------------------------------------------------------------------------------------------
def run_cli(*args):
    return cli_runner().invoke(main, [*map(str, args)], catch_exceptions=False)


@pytest.fixture(scope="module")
def own_sweep(tmp_path_factory):
    """One real sweep of job.py over a JSON config field, an option and an environment variable."""
    folder = tmp_path_factory.mktemp("own_sweep")
    shutil.copytree(JOB, folder / "job")
    job = folder / "job"
    originals = {name: (job / name).read_bytes() for name in ("job.json", "extra.yaml", "job.py")}
    (job / "plan.yaml").write_text(yaml.safe_dump(job_plan(job)))
    result = run_cli("sweep", job / "plan.yaml", "--out", folder / "out", "--no-progress")
    assert result.exit_code == 0, result.output
    return job, folder / "out", originals


def job_line(trial_dir: Path) -> str:
    lines = [line for line in (trial_dir / "burst.log").read_text().splitlines() if line.startswith("JOB ")]
    assert lines, (trial_dir / "burst.log").read_text()[-2000:]
    return lines[0]


def test_a_sweep_of_own_knobs_runs_every_trial_with_its_own_values(own_sweep):
    job, out, originals = own_sweep
    for name, data in originals.items():
        assert (job / name).read_bytes() == data, f"{name} was written"
    trials = sorted((out / "trials").iterdir())
    assert len(trials) >= 5
    for trial_dir in trials:
        trial = json.loads((trial_dir / "trial.json").read_text())
        assert trial["status"] == "ok", trial["reason"]
        k = trial["knobs"]
        if trial["pair"] if "pair" in trial else False:
            continue
        copy = trial_dir / trial["applied"]["config"]["job.json"]["copy"]
        assert json.loads(copy.read_text())["model"]["width"] == k["width"]
        assert trial["applied"]["config"]["job.json"]["fields"] == {"model.width": k["width"]}
        assert job_line(trial_dir).startswith(f"JOB width={k['width']} lr=0.01 depth={k['depth']} bias=True "
                                              f"tag={k['tag']}")
        assert trial["applied"]["env"] == {"JOB_TAG": k["tag"]}


def test_own_knobs_get_verdicts_tables_and_the_report(own_sweep):
    _, out, _ = own_sweep
    results = json.loads((out / "results.json").read_text())
    verdicts = {t["label"]: t["verdict"] for t in results["trials"] if t["kind"] == "single"}
    assert set(verdicts) == {"+width=32", "+depth=2", "+tag=b"}, verdicts
    allowed = {"kept", "slower", "not significant", "equivalent", "undecided", "accuracy rejected"}
    assert set(verdicts.values()) <= allowed, verdicts
    table = (out / "ablation.md").read_text()
    assert "+width=32" in table and "+tag=b" in table
    html = (out / "report.html").read_text()
    assert "The config files the trials were given" in html
    assert re.search(r'href="trials/[0-9a-f]{12}/config/job\.json"', html)


@pytest.mark.slow
def test_a_config_the_script_never_opens_is_no_effect_and_run_set_reaches_the_script(own_sweep, tmp_path):
    job, _, _ = own_sweep
    out = tmp_path / "run"
    result = run_cli("run", job / "plan.yaml", "--set", "dropout=0.5", "--set", "depth=3", "--set", "bias=false",
                     "--out", out)
    assert result.exit_code == 0, result.output
    trial = json.loads((out / "trial.json").read_text())
    assert job_line(out).startswith("JOB width=16 lr=0.01 depth=3 bias=False tag=a")
    assert "--no-bias" in trial["applied"]["argv"]
    notes = [n for n in trial["notes"] if n["kind"] == "no_effect" and n["knob"] == "dropout"]
    assert notes and "never opened its copy of extra.yaml" in notes[0]["text"]
    bad = cli_runner().invoke(main, ["run", str(job / "plan.yaml"), "--set", "depth=deep", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "--set depth" in bad.stderr


def test_compare_two_sweeps_of_own_knobs(own_sweep, tmp_path):
    job, out, _ = own_sweep
    plan = job_plan(job, variables={"width": [32]})
    (job / "second.yaml").write_text(yaml.safe_dump(plan))
    second = run_cli("sweep", job / "second.yaml", "--out", tmp_path / "second", "--no-progress", "--no-report")
    assert second.exit_code == 0, second.output
    compared = cli_runner().invoke(main, ["compare", str(out), str(tmp_path / "second")])
    assert compared.exit_code in (0, 1), compared.output + compared.stderr
    assert "+width=32" in compared.output


@pytest.mark.slow
def test_a_builtin_workload_sweeps_its_params_and_environment(tmp_path):
    record = tmp_path / "seen.txt"
    plan = {"name": "params", "workload": "tests.workloads_for_tests:env_recording_mlp",
            "workload_params": {"in_dim": 16, "hidden": 32, "layers": 1, "classes": 4, "train_samples": 256,
                                "val_samples": 64, "env_var": "PERFTUNE_TEST_TAG", "record": str(record)},
            "knob_params": {"width": "hidden"}, "knob_env": {"tag": "PERFTUNE_TEST_TAG"},
            "burst": dict(TINY_BURST), "baseline": {"tag": "x"}, "accuracy": {"samples": 64, "seeds": 1}}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(plan))
    result = run_cli("run", path, "--set", "width=8", "--set", "tag=y", "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    trial = json.loads((tmp_path / "run" / "trial.json").read_text())
    spec = json.loads((tmp_path / "run" / "spec.json").read_text())
    assert spec["workload_params"]["hidden"] == 8 and trial["knobs"]["width"] == 8 and trial["knobs"]["tag"] == "y"
    assert trial["parameter_count"] == 16 * 8 + 8 + 8 * 4 + 4  # the model built with hidden=8
    assert record.read_text() == "y"


def test_a_builtin_change_that_runs_another_model_is_named():
    """A value_map that swaps whole config files (``recompute: {arg: --config, value_map: {true: big.yaml}}``) ran
    another model under the knob's name: the parameter counts, which the bursts record, say so in the reason."""
    from perftune.engine.noop import model_mismatch
    from perftune.io.records import TrialResult
    from perftune.io.sweep_records import SweepTrial, Why
    from perftune.words.reasons import reason_text

    small, big = TrialResult.model_construct(parameter_count=135_044), TrialResult.model_construct(parameter_count=532_228)
    text = model_mismatch({"recompute": True}, big, small)
    assert text == ("the model differs: 532,228 parameters against the reference's 135,044, yet recompute should not "
                    "change the model (does a value_map hand the script another model's config?)")
    assert model_mismatch({"recompute": True}, small, small) == ""
    assert model_mismatch({"hidden": 128}, big, small) == ""  # an own knob may change the model: that is its point
    trial = SweepTrial.model_construct(trial_id="0" * 12, label="+recompute=true", kind="single", verdict="failed",
                                       reason="", why=Why(failure="x", other_model=text))
    assert reason_text(trial).endswith("; warning: " + text)
