"""Plans are bounded and strict (issue 15 items 5, 7, 8, 13): hostile or sloppy YAML is one line naming the field,
before anything runs, and validation never executes a workload's module."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from perftune.engine.plan_load import load_plan
from perftune.errors import UserError

REPO = Path(__file__).resolve().parent.parent
HEAD = "name: strict\nworkload: mlp\n"


def problem(tmp_path: Path, text: str) -> str:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        load_plan(path)
    return str(err.value)


def test_the_ci_plan_still_loads():
    plan = load_plan(REPO / "experiments" / "ci" / "tiny.yaml")
    assert plan.burst.steps == 25 and plan.burst.timeout_s == 120


@pytest.mark.parametrize("value", ['"10"', "10.0", "true"])
def test_steps_must_be_an_integer(tmp_path, value):
    message = problem(tmp_path, HEAD + f"burst: {{steps: {value}}}\n")
    assert "burst.steps: Input should be a valid integer" in message


@pytest.mark.parametrize("field,value,expected", [
    ("burst", "{timeout_s: .inf}", "burst.timeout_s: Input should be a finite number"),
    ("burst", "{timeout_s: .nan}", "burst.timeout_s: Input should be a finite number"),
    ("burst", "{timeout_s: 1.0e+9}", "burst.timeout_s: Input should be less than or equal to 604800"),
    ("burst", "{steps: 1000000000}", "burst.steps: Input should be less than or equal to 100000"),
    ("seed", "100000000000000000000000000", "seed: Input should be less than or equal to 4294967295"),
    ("seed", "-1", "seed: Input should be greater than or equal to 0"),
    ("baseline", "{batch_size: 1000000000}", "baseline.batch_size: 1000000000 is not allowed (allowed: an integer "
                                              "from 1 to 65536)"),
    ("accuracy", "{rel_tolerance: .inf}", "accuracy.rel_tolerance: Input should be a finite number"),
])
def test_numbers_are_bounded(tmp_path, field, value, expected):
    assert expected in problem(tmp_path, HEAD + f"{field}: {value}\n")


def test_a_duplicate_key_is_refused_naming_it(tmp_path):
    message = problem(tmp_path, HEAD + "burst:\n  steps: 10\n  steps: 20\n")
    assert "key 'steps' appears twice in one mapping at line 5" in message and "first at line 4" in message
    assert "\n" not in message


def test_a_billion_laughs_is_refused_at_once(tmp_path):
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    text = HEAD + "workload_params:\n" + "\n".join("  " + ln for ln in lines) + "\n"
    started = time.perf_counter()
    message = problem(tmp_path, text)
    assert time.perf_counter() - started < 2
    assert "YAML alias *a0 at line 5" in message and "aliases are not allowed" in message


def test_deep_nesting_is_one_line(tmp_path):
    message = problem(tmp_path, HEAD + "workload_params: {x: " + "[" * 500 + "]" * 500 + "}\n")
    assert "nesting deeper than 32 levels" in message and "\n" not in message


def test_a_huge_plan_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / "plan.yaml"
    with open(path, "w") as fh:
        fh.write(HEAD + "workload_params: {x: \"")
        fh.write("a" * (50 << 20))
        fh.write("\"}\n")
    with pytest.raises(UserError, match="larger than 1048576 bytes"):
        load_plan(path)


def test_knob_types_are_strict_too(tmp_path):
    assert "baseline.batch_size: '32' is not allowed" in problem(tmp_path, HEAD + "baseline: {batch_size: '32'}\n")


def validate(tmp_path: Path, workload: str) -> subprocess.CompletedProcess:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "w", "workload": workload}))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "perftune.cli", "validate", str(plan)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_validate_finds_a_workload_module_without_running_it(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("open(__file__ + '.RAN', 'w').close()\n")
    (pkg / "train.py").write_text("open(__file__ + '.RAN', 'w').close()\n\ndef build(params, seed):\n    pass\n")
    ok = validate(tmp_path, "mypkg.train:build")
    assert ok.returncode == 0 and "ok (mypkg.train:build" in ok.stdout, ok.stderr
    assert not list(pkg.glob("*.RAN"))  # neither the package nor the module was executed
    missing = validate(tmp_path, "mypkg.nothere:build")
    assert missing.returncode == 2 and "module 'mypkg.nothere' cannot be found" in missing.stderr
    assert not list(pkg.glob("*.RAN"))


def test_validate_does_not_import_the_standard_librarys_easter_egg(tmp_path):
    result = validate(tmp_path, "this.x:f")
    assert result.returncode == 2 and "Zen of Python" not in result.stdout + result.stderr
    assert result.stderr.count("\n") == 2  # the header and the one problem


def test_main_is_not_a_workload_module(tmp_path):
    result = validate(tmp_path, "__main__:main")
    assert result.returncode == 2 and "__main__ is the running program" in result.stderr
