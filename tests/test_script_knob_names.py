"""A script plan's knob routes, checked by ``perftune validate`` without running the script
(``engine/script_plan.py``, ``engine/script_args.py``): an option the script does not have is refused with its
options listed (only where its options can all be read), and a built-in knob's name routed as the script's own
option says that the name clashes and what to call it instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from perftune.engine.plan_load import PlanError, parse_plan

SCRIPT = '''import argparse

def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--workers", type=int, default=1, help="GeneratorDataset workers")
    return p.parse_args()
'''


def plan(folder: Path, knob_args: dict, baseline: dict, script: str = SCRIPT, **workload) -> dict:
    (folder / "train.py").write_text(script)
    return {"name": "s", "workload": {"script": "train.py", "knob_args": knob_args, **workload}, "device": "CPU",
            "baseline": baseline, "accuracy": {"metric": "train_loss"}}


def problems(data: dict, folder: Path) -> str:
    with pytest.raises(PlanError) as err:
        parse_plan(data, "plan", folder)
    return str(err.value)


def test_an_option_the_script_does_not_have_is_refused_with_its_options(tmp_path):
    text = problems(plan(tmp_path, {"batch_size": "--batchsize"}, {"batch_size": 8}), tmp_path)
    assert ("workload.knob_args.batch_size: the script has no option '--batchsize' (its options: --batch-size, --lr, "
            "--workers)") in text
    # its own options, and argparse's unique abbreviations, pass
    parse_plan(plan(tmp_path, {"batch_size": "--batch-size"}, {"batch_size": 8}), "plan", tmp_path)
    parse_plan(plan(tmp_path, {"batch_size": "--batch"}, {"batch_size": 8}), "plan", tmp_path)


@pytest.mark.parametrize("script", [
    "import sys\nprint(sys.argv)\n",  # no argparse: nothing to check against
    SCRIPT.replace("return p.parse_args()", "return p.parse_known_args()[0]"),  # the rest may go elsewhere
    SCRIPT.replace("ArgumentParser()", "ArgumentParser(parents=[base_parser()])"),  # options declared elsewhere
    SCRIPT + "\nNAMES = ['--x']\ndef more(p):\n    p.add_argument(*NAMES)\n",  # names computed
])
def test_where_the_options_cannot_all_be_read_nothing_is_refused(tmp_path, script):
    parse_plan(plan(tmp_path, {"batch_size": "--batchsize"}, {"batch_size": 8}, script=script), "plan", tmp_path)


@pytest.mark.parametrize("field", ["knob_args", "knob_env"])
def test_a_builtin_name_routed_as_the_scripts_own_says_the_name_clashes(tmp_path, field):
    routes = {"workers": "--workers"} if field == "knob_args" else {}
    data = plan(tmp_path, routes, {"workers": 1}, **({"knob_env": {"workers": "MY_WORKERS"}} if routes == {} else {}))
    data["variables"] = {"workers": [2]}
    text = problems(data, tmp_path)
    assert ("baseline.workers: knob 'workers' is perftune's built-in knob (ranks launched by msrun), which a script "
            "workload cannot use") in text
    assert "to sweep your script's own option give it another name, e.g. data_workers" in text
    # unrouted, the built-in is refused as before
    data = plan(tmp_path, {}, {"workers": 2})
    assert "knob 'workers' is not supported for a script workload" in problems(data, tmp_path)
