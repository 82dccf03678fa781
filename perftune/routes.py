"""How a knob's value reaches the job: a script's option (``knob_args``), a field of a config file the script reads
(``knob_config``), an environment variable (``knob_env``) or a workload parameter (``knob_params``).

Shared by the plan's checks (``perftune.engine.own_knobs``), the sweep's specs and the burst, so that what
``perftune validate`` accepts is exactly what a trial passes.  A knob that is not in the registry
(``perftune.knobs``) but has one of these routes is the user's own knob: the sweep treats it like any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from perftune import knobs
from perftune.io.plan import Plan, ScriptWorkload

Route = Literal["option", "config", "env", "param"]


@dataclass(frozen=True)
class OwnRoute:
    """One knob's route: ``target`` is the option (``--seq-len``), ``FILE:dotted.path``, the variable or the
    workload parameter."""

    name: str
    route: Route
    target: str
    where: str  # the plan's field that declares it: ``workload.knob_args``, ``knob_env``, ...

    def describe(self) -> str:
        what = {"option": "the script's option", "config": "config field", "env": "environment variable",
                "param": "workload parameter"}[self.route]
        return f"{what} {self.target}"


def routes(plan: Plan) -> dict[str, OwnRoute]:
    """Every knob the plan routes itself (own knobs, and built-in knobs routed to a config field)."""
    out: dict[str, OwnRoute] = {}
    script = plan.workload if isinstance(plan.workload, ScriptWorkload) else None
    for name, var in plan.knob_env.items():
        out[name] = OwnRoute(name, "env", var, "knob_env")
    if script is not None:
        for name, entry in script.knob_args.items():
            out[name] = OwnRoute(name, "option", str(option_of(entry)), "workload.knob_args")
        for name, target in script.knob_config.items():
            out[name] = OwnRoute(name, "config", target, "workload.knob_config")
        for name, var in script.knob_env.items():
            out[name] = OwnRoute(name, "env", var, "workload.knob_env")
    for name, param in plan.knob_params.items():
        out[name] = OwnRoute(name, "param", param, "knob_params")
    return out


def split_target(target: str) -> tuple[str, str]:
    """``"conf/run.yaml:model.hidden"`` -> (``conf/run.yaml``, ``model.hidden``)."""
    file, _, dotted = target.rpartition(":")
    return file, dotted


def config_arg_index(args: list[str], file: str, folder: Path) -> Optional[tuple[int, str]]:
    """Where ``file`` stands in a script's ``args`` (index, and the ``--opt=`` prefix it had), or None.  Paths are
    compared as the script sees them: relative to its own folder, where it runs."""
    want = (folder / file).resolve()
    for i, arg in enumerate(args):
        prefix, _, value = arg.rpartition("=") if arg.startswith("-") and "=" in arg else ("", "", arg)
        if value and (value == file or (folder / value).resolve() == want):
            return i, prefix + ("=" if prefix else "")
    return None


def config_fields(script: ScriptWorkload, values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """FILE (as written in ``knob_config``) -> {dotted path: value} for one trial's knob values."""
    out: dict[str, dict[str, Any]] = {}
    for name, target in script.knob_config.items():
        file, dotted = split_target(target)
        out.setdefault(file, {})[dotted] = values[name]
    return out


def env_values(plan: Plan, values: dict[str, Any]) -> dict[str, Optional[str]]:
    """Variable -> the string a trial's process gets (None: the variable is removed)."""
    return {r.target: None if values.get(r.name) is None else knobs.format_value(values[r.name])
            for r in routes(plan).values() if r.route == "env"}


def param_values(plan: Plan, values: dict[str, Any]) -> dict[str, Any]:
    """Workload parameter -> value, for the knobs routed with ``knob_params``."""
    return {param: values[name] for name, param in plan.knob_params.items() if name in values}


def option_of(entry: Any) -> Any:
    """The script option of a ``knob_args`` entry: ``"--mode"`` or ``{arg: "--mode", value_map: ...}``."""
    if isinstance(entry, dict):
        return entry.get("arg")
    return getattr(entry, "arg", entry)


def flag_of(entry: Any) -> Optional[str]:
    """``store_true`` / ``store_false`` where the entry's option is a flag, else None."""
    return entry.get("flag") if isinstance(entry, dict) else getattr(entry, "flag", None)


def given_value(entry: Any, value: Any) -> str:
    """What the script's option is given for the knob's ``value`` (through the entry's ``value_map``, if any)."""
    mapping = entry.get("value_map") if isinstance(entry, dict) else getattr(entry, "value_map", None)
    mapping = mapping if isinstance(mapping, dict) else {}
    for key in (value, knobs.format_value(value)):
        if not isinstance(key, (dict, list)) and key in mapping:
            return knobs.format_value(mapping[key])
    return knobs.format_value(value)


def option_argv(entry: Any, value: Any) -> list[str]:
    """The words one knob adds to the script's argv: ``--opt VALUE``, or a flag by its presence."""
    flag = flag_of(entry)
    if flag is None:
        return [option_of(entry), given_value(entry, value)]
    present = bool(value) if flag == "store_true" else not bool(value)
    return [option_of(entry)] if present else []


def script_argv(script: str, args: list[str], knob_args: dict[str, Any], knob_values: dict[str, Any]) -> list[str]:
    """``sys.argv`` of the script's run: its path, its own arguments, then the words of every mapped knob."""
    argv = [script, *args]
    for name, entry in knob_args.items():
        argv += option_argv(entry, knob_values[name])
    return argv
