"""The plan rules of a script workload (``workload: {script: train.py, args: [...], knob_args: {...}}``).

A knob reaches a user's script either from outside (its registry ``script_route``: the context, the dataset
config, ``mindspore.train.Model``) or through one of the script's own options (``knob_args``).  A knob the plan
sets or varies with neither route would be measured as "no change" while nothing changed: refuse it before anything
runs, naming the knob and the way to give it a route.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Collection, Optional

from perftune import knobs
from perftune.engine.script_args import (
    FLAG_VALUE_ACTIONS,
    all_options,
    refusal,
    script_trees,
    trees_options,
    unknown_option,
)
from perftune.errors import UserError
from perftune.io.plan import ScriptWorkload
from perftune.routes import given_value, option_of

#: knobs a script burst cannot run at any value but the default (the burst of a script is one process)
SCRIPT_UNSUPPORTED = {"workers": "ranks launched by msrun"}  # built-ins a script cannot use: what each is
#: an own knob's name to suggest where the plan routes a built-in's name (``SCRIPT_UNSUPPORTED``) into the script
OWN_NAME_HINT = {"workers": "data_workers"}


def knobs_in_play(data: dict) -> list[tuple[str, str]]:
    """(field path, knob) for every knob the plan sets in ``baseline`` or varies in ``variables``."""
    out = []
    for section in ("baseline", "variables", "ranges"):  # ranges: moved out of variables (``engine.plan_ranges``)
        values = data.get(section)
        if isinstance(values, dict):
            out += [(f"{'variables' if section == 'ranges' else section}.{name}", name) for name in values
                    if name in knobs.KNOBS]
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
    generate = work.get("generate")
    if isinstance(generate, str) and generate:
        target, generate_problem = generate_target(generate, base_dir)
        problems += [generate_problem] if generate_problem else []
        data = {**data, "workload": {**data["workload"], "generate": target}}
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
    env = [n for field in (work.get("knob_env"), data.get("knob_env")) if isinstance(field, dict) for n in field]
    problems += route_problems(knobs_in_play(data), {**knob_config, **knob_args}, env)
    if data.get("workload_params"):  # a script takes no parameters from perftune: it would be silently ignored
        problems.append("workload_params: a script workload takes its settings from its own arguments: put them in "
                        "workload.args, or sweep them as your own knobs (workload.knob_args, workload.knob_config)")
    problems += _check_metric(data)
    data = _default_metric(data)
    return data, problems


def generate_target(generate: str, base_dir: Path) -> tuple[str, Optional[str]]:
    """``workload.generate`` with its file made absolute, and what is wrong with it (None: a top-level function of
    that name is in that file)."""
    where, _, name = generate.rpartition(":")
    path = (base_dir / where).resolve() if where else None
    usage = "expected FILE.py:function, the file relative to the plan, e.g. sample.py:generate"
    if path is None or not name.isidentifier():
        return generate, f"workload.generate: {generate!r}: {usage}"
    if not path.is_file():
        return generate, f"workload.generate: {where!r} is not a file (looked for {path}; {usage})"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, OSError) as exc:
        return generate, f"workload.generate: {where} cannot be read as Python: {exc}"
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if name not in names:
        return generate, (f"workload.generate: {where} has no top-level function {name!r} (its functions: "
                          f"{', '.join(sorted(names)) or 'none'})")
    return f"{path}:{name}", None


def route_problems(in_play: list[tuple[str, str]], routed: dict, env: Collection[str] = ()) -> list[str]:
    """One line per built-in knob (named at ``path``) that has no way into the script: no registry route and none
    of the plan's (``routed``: its ``knob_args`` and ``knob_config``).  A built-in a script cannot use, routed by the
    plan (``routed`` or ``env``: its ``knob_env`` names) as if it were the script's own option, is a name clash:
    the line says so and how to name the own knob instead."""
    problems, seen = [], set()
    for path, name in in_play:
        if name in seen:
            continue
        seen.add(name)
        if name in SCRIPT_UNSUPPORTED and (name in routed or name in env):
            own = OWN_NAME_HINT.get(name, f"script_{name}")
            problems.append(f"{path}: knob {name!r} is perftune's built-in knob ({SCRIPT_UNSUPPORTED[name]}), "
                            "which a script workload cannot use (a script burst is one process); to sweep your "
                            f"script's own option give it another name, e.g. {own}, in the plan's knob_args, "
                            "knob_config or knob_env and its baseline and variables")
        elif name in SCRIPT_UNSUPPORTED:
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
    searched = data.get("ranges", {}).get(name) if isinstance(data.get("ranges"), dict) else None
    out += list(searched["range"]) if isinstance(searched, dict) else []  # its two ends (``engine.plan_ranges``)
    return [v for i, v in enumerate(out) if v not in out[:i]]


def knob_arg_problems(data: dict, script: Path, knob_args: dict) -> tuple[dict, list[str]]:
    """A knob value the script's option cannot take as given (``script_args``): refused, with the field named.  A
    boolean knob reaches a ``store_true`` / ``store_false`` option by its presence: the entry gets its ``flag``."""
    trees = script_trees(script)  # read and parsed once: the options and whether they are all known
    options = trees_options(trees)
    known = all_options(trees, options)
    problems, entries = [], dict(knob_args)
    for name, entry in knob_args.items():
        option = options.get(option_of(entry))
        missing = unknown_option(option_of(entry), known)
        if missing:
            problems.append(f"workload.knob_args.{name}: {missing}")
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
