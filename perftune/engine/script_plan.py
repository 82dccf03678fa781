"""The plan rules of a script workload (``workload: {script: train.py, args: [...], knob_args: {...}}``).

A knob reaches a user's script either from outside (its registry ``script_route``: the context, the dataset
config, ``mindspore.train.Model``) or through one of the script's own options (``knob_args``).  A knob the plan
sets or varies with neither route would be measured as "no change" while nothing changed: refuse it before anything
runs, naming the knob and the way to give it a route.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perftune import knobs
from perftune.engine.script_args import FLAG_VALUE_ACTIONS, refusal, script_options
from perftune.errors import UserError
from perftune.io.plan import ScriptWorkload
from perftune.routes import given_value, option_of

#: knobs a script burst cannot run at any value but the default (the burst of a script is one process)
SCRIPT_UNSUPPORTED = ("workers",)


def knobs_in_play(data: dict) -> list[tuple[str, str]]:
    """(field path, knob) for every knob the plan sets in ``baseline`` or varies in ``variables``."""
    out = []
    for section in ("baseline", "variables"):
        values = data.get(section)
        if isinstance(values, dict):
            out += [(f"{section}.{name}", name) for name in values if name in knobs.KNOBS]
    return out


def check_script_workload(data: dict, base_dir: Path) -> tuple[dict, list[str]]:
    """The plan data with the script's path made absolute, and one line per problem."""
    work = data["workload"]
    problems: list[str] = []
    script = work.get("script")
    if isinstance(script, str) and script:
        path = (base_dir / script).resolve()
        if not path.is_file():
            problems.append(f"workload.script: {script!r} is not a file (looked for {path}; a script's path is "
                            "relative to the plan file)")
        data = {**data, "workload": {**work, "script": str(path)}}
    knob_args = work.get("knob_args") if isinstance(work.get("knob_args"), dict) else {}
    for name, entry in knob_args.items():
        option = option_of(entry)
        if not isinstance(option, str) or not option.strip():
            problems.append(f"workload.knob_args.{name}: expected the script's option as a string, e.g. "
                            f"'--{name.replace('_', '-')}', or {{arg: '--{name.replace('_', '-')}', value_map: "
                            f"{{...}}}} (got {entry!r})")
    if not problems and isinstance(script, str) and script:
        data, arg_problems = knob_arg_problems(data, Path(data["workload"]["script"]), knob_args)
        problems += arg_problems
    seed_arg = work.get("seed_arg")
    clash = [name for name, entry in knob_args.items() if option_of(entry) == seed_arg]
    if isinstance(seed_arg, str) and clash:  # the seed runs would set the knob, and the knob the seed
        problems.append(f"workload.seed_arg: {seed_arg!r} is also workload.knob_args.{clash[0]}; the script's seed "
                        "option must be its own")
    knob_config = work.get("knob_config") if isinstance(work.get("knob_config"), dict) else {}
    problems += route_problems(knobs_in_play(data), {**knob_config, **knob_args})
    if data.get("workload_params"):  # a script takes no parameters from perftune: it would be silently ignored
        problems.append("workload_params: a script workload takes its settings from its own arguments: put them in "
                        "workload.args, or sweep them as your own knobs (workload.knob_args, workload.knob_config)")
    problems += _check_metric(data)
    data = _default_metric(data)
    return data, problems


def route_problems(in_play: list[tuple[str, str]], routed: dict) -> list[str]:
    """One line per built-in knob (named at ``path``) that has no way into the script: no registry route and none
    of the plan's (``routed``: its ``knob_args`` and ``knob_config``)."""
    problems, seen = [], set()
    for path, name in in_play:
        if name in seen:
            continue
        seen.add(name)
        if name in SCRIPT_UNSUPPORTED:
            problems.append(f"{path}: knob {name!r} is not supported for a script workload (a script burst is "
                            "one process; run the script under msrun yourself and measure it with "
                            "perftune.Callback)")
        elif not knobs.KNOBS[name].script_route and name not in routed:
            option = f"--{name.replace('_', '-')}"
            problems.append(f"{path}: knob {name!r} has no route into the script: perftune cannot set it from "
                            f"outside; name the script's option for it in workload.knob_args (e.g. {name}: "
                            f"\"{option}\"), or the config field it sets in workload.knob_config, or drop it "
                            "from the plan")
    return problems


def check_set_routes(workload: ScriptWorkload, values: dict[str, Any]) -> None:
    """``perftune run --set``: the same refusal as the plan's."""
    in_play = [(f"--set {name}", name) for name in values if name in knobs.KNOBS]
    problems = route_problems(in_play, {**workload.knob_config, **workload.knob_args})
    if problems:
        raise UserError(problems[0] if len(problems) == 1 else "\n".join(problems))


def _check_metric(data: dict) -> list[str]:
    acc = data.get("accuracy")
    if isinstance(acc, dict) and acc.get("metric") in ("val_loss", "perplexity"):
        return [f"accuracy.metric: {acc['metric']!r} needs perftune's own validation pass, which a script workload "
                "does not have; use train_loss (the script's own losses at equal samples)"]
    return []


def _default_metric(data: dict) -> dict:
    """A script's accuracy is its training loss at equal samples: make that the gate's default metric."""
    acc = data.get("accuracy")
    if acc is None:
        return {**data, "accuracy": {"metric": "train_loss"}}
    if isinstance(acc, dict) and "metric" not in acc:
        return {**data, "accuracy": {**acc, "metric": "train_loss"}}
    return data


def values_in_play(data: dict, name: str) -> list[Any]:
    """The knob's values a sweep of this plan passes: the baseline's (or the registry default) and the variables'.
    An own knob's baseline may be left to the script (its option's default): then only the variables'."""
    baseline = data.get("baseline") if isinstance(data.get("baseline"), dict) else {}
    variables = data.get("variables") if isinstance(data.get("variables"), dict) else {}
    default = knobs.KNOBS[name].default if name in knobs.KNOBS else None
    out = [baseline[name]] if name in baseline else [default] if name in knobs.KNOBS else []
    listed = variables.get(name)
    out += listed if isinstance(listed, list) else []
    return [v for i, v in enumerate(out) if v not in out[:i]]


def knob_arg_problems(data: dict, script: Path, knob_args: dict) -> tuple[dict, list[str]]:
    """A knob value the script's option cannot take as given (``script_args``): refused, with the field named.  A
    boolean knob reaches a ``store_true`` / ``store_false`` option by its presence: the entry gets its ``flag``."""
    options = script_options(script)
    problems, entries = [], dict(knob_args)
    for name, entry in knob_args.items():
        option = options.get(option_of(entry))
        if option is None:  # not declared literally: cannot be checked here (script_args says what it misses)
            continue
        values = values_in_play(data, name)
        if option.action in FLAG_VALUE_ACTIONS and values and all(isinstance(v, bool) for v in values):
            entries[name] = {**(entry if isinstance(entry, dict) else {"arg": entry}), "flag": option.action}
            continue
        for value in values:
            why = refusal(option, given_value(entry, value))
            if why:
                hint = (" (a flag: give the knob true | false)" if option.flag and option.action in
                        FLAG_VALUE_ACTIONS else "")
                problems.append(f"workload.knob_args.{name}: {name}={knobs.format_value(value)} cannot reach the "
                                f"script: {why}{hint}; map the knob's values with value_map, e.g. {{arg: "
                                f"'{option.option}', value_map: {{{knobs.format_value(value)}: ...}}}}")
                break
    if entries != knob_args:
        data = {**data, "workload": {**data["workload"], "knob_args": entries}}
    return data, problems
