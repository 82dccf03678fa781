"""The plan's own knobs: the settings a job is really tuned on (its script's options, its config file's fields, its
environment, its workload's parameters), declared by their route (``perftune.routes``) and checked here before
anything runs, one line per problem naming the field.

An own knob's type is the type of the values the plan gives (int, float, bool or string), checked against what
perftune can read of the target: the script's ``add_argument`` (``script_args``), the config file's field.  Its
baseline is the plan's ``baseline`` value, else what the job runs with today where perftune can read it (the config
file's field, the option's literal default, the workload parameter the plan sets).
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Optional

from perftune import knobs
from perftune.engine.script_args import script_options
from perftune.errors import UserError
from perftune.io.config_files import MISSING, get_field, load_config, plain, type_refusal
from perftune.io.plan import Plan, ScriptWorkload
from perftune.routes import OwnRoute, config_arg_index, routes, split_target

#: a variable name a shell (and ``os.environ``) takes
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SCALARS = (bool, int, float, str)
#: where a plan declares routes: (field path, route)
ROUTE_FIELDS = (("workload.knob_args", "option"), ("workload.knob_config", "config"), ("workload.knob_env", "env"),
                ("knob_env", "env"), ("knob_params", "param"))


def declared(data: dict) -> tuple[set[str], list[str]]:
    """The knob names the raw plan routes itself, and one line per knob routed twice."""
    seen: dict[str, str] = {}
    problems = []
    for path, _route in ROUTE_FIELDS:
        node: Any = data
        for key in path.split("."):
            node = node.get(key) if isinstance(node, dict) else None
        for name in node if isinstance(node, dict) else ():
            if name in seen and seen[name] != path:
                problems.append(f"{path}.{name}: {name!r} is also routed by {seen[name]}; give each knob one route")
            seen.setdefault(name, path)
    return set(seen), problems


def family(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "string" if isinstance(value, str) else "other"


def type_name(values: list[Any]) -> str:
    """An own knob's type, from its values: ``int``, ``float``, ``bool`` or ``str``."""
    if all(isinstance(v, bool) for v in values):
        return "bool"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "int"
    return "float" if all(family(v) == "number" for v in values) else "str"


class OwnKnobCheck:
    """Checks one plan's routes and fills the baselines perftune can read; ``problems`` holds the lines."""

    def __init__(self, plan: Plan, skip: frozenset[str] = frozenset()):
        self.plan = plan
        self.skip = skip  # knobs whose mistake was already said
        self.script = plan.workload if isinstance(plan.workload, ScriptWorkload) else None
        self.baseline = dict(plan.baseline)
        self.problems: list[str] = []
        self.options = script_options(Path(self.script.script)) if self.script else {}
        self.configs: dict[str, Any] = {}

    def run(self) -> Plan:
        for route in routes(self.plan).values():
            if route.name in self.skip:
                continue
            before = len(self.problems)
            getattr(self, f"check_{route.route}")(route)
            if route.name not in knobs.KNOBS and len(self.problems) == before:  # one line per knob: its route's first
                self.check_values(route)
        return self.plan.model_copy(update={"baseline": self.baseline})

    def refuse(self, route: OwnRoute, text: str) -> None:
        self.problems.append(f"{route.where}.{route.name}: {text}")

    def default(self, route: OwnRoute, value: Any) -> None:
        """The baseline perftune read, where the plan gives none: a built-in knob routed to a config field too
        (its registry default would otherwise overwrite the job's own value in every copy)."""
        if route.name in self.baseline or value is None or isinstance(value, (list, dict)):
            return
        builtin = knobs.KNOBS.get(route.name)
        if builtin is None or (route.route == "config" and builtin.check(value) is None):
            self.baseline[route.name] = plain(value)

    def check_option(self, route: OwnRoute) -> None:
        option = self.options.get(route.target)
        if option is not None:  # a flag's baseline is its absence: store_true's false, store_false's true
            flags = {"store_true": False, "store_false": True}
            self.default(route, flags[option.action] if option.action in flags else None if option.flag
                         else option.default)

    def check_env(self, route: OwnRoute) -> None:
        if not ENV_NAME.match(route.target):
            self.refuse(route, f"{route.target!r} is not a valid environment variable name (letters, digits and "
                               "_, not starting with a digit)")
        if route.name in knobs.KNOBS:
            self.refuse(route, f"{route.name!r} is a built-in knob, which perftune sets itself; give your own knob "
                               "a name of its own")

    def check_param(self, route: OwnRoute) -> None:
        if self.script is not None:
            self.refuse(route, "a script workload takes its settings through workload.knob_args, "
                               "workload.knob_config or workload.knob_env")
        elif route.name in knobs.KNOBS:
            self.refuse(route, f"{route.name!r} is a built-in knob, which perftune sets itself; give your own knob "
                               "a name of its own")
        else:
            self.default(route, self.plan.workload_params.get(route.target))

    def check_config(self, route: OwnRoute) -> None:
        file, dotted = split_target(route.target)
        if not file or not dotted:
            return self.refuse(route, f"expected FILE:dotted.path (e.g. 'conf/run.yaml:model.hidden'), got "
                                      f"{route.target!r}")
        folder = Path(self.script.script).parent
        if config_arg_index(self.script.args, file, folder) is None:
            return self.refuse(route, f"{file!r} is not among workload.args ({self.script.args}): perftune passes "
                                      "the script a copy in place of the file it names there")
        if file not in self.configs:
            try:
                self.configs[file] = load_config(folder / file)
            except UserError as exc:
                self.configs[file] = exc
        data = self.configs[file]
        if isinstance(data, UserError):
            return self.refuse(route, str(data))
        current = get_field(data, dotted)
        if current is MISSING:
            return self.refuse(route, f"{file} has no field {dotted!r}")
        self.default(route, current)  # a list or mapping is no baseline (``default`` leaves it)
        for path, value in self.values_of(route.name):
            why = type_refusal(current, value)
            if why:
                return self.problems.append(f"{path}: {value!r} cannot go into {file}:{dotted}, which holds "
                                            f"{current!r} (allowed: {why})")
        return None

    def values_of(self, name: str) -> list[tuple[str, Any]]:
        out = [(f"baseline.{name}", self.baseline[name])] if name in self.baseline else []
        listed = self.plan.variables.get(name)
        searched = self.plan.ranges.get(name)  # a range's two ends stand for its values (``engine.plan_ranges``)
        return out + [(f"variables.{name}[{i}]", v) for i, v in enumerate(listed or [])] + [
            (f"variables.{name}.range[{i}]", v) for i, v in enumerate(searched.range if searched else [])]

    def check_values(self, route: OwnRoute) -> None:
        name = route.name
        if name not in self.baseline:
            close = difflib.get_close_matches(name, knobs.KNOBS, n=1, cutoff=0.8)
            hint = f"; or did you mean the built-in knob {close[0]!r}?" if close else ""
            return self.problems.append(
                f"baseline.{name}: the baseline value of your own knob {name!r} is needed ({route.describe()}: "
                f"perftune cannot read what the job uses today){hint}")
        values = self.values_of(name)
        for path, value in values:
            if not isinstance(value, SCALARS) and not (value is None and route.route == "env"):
                return self.problems.append(f"{path}: {value!r} is not allowed (allowed: one value: an integer, a "
                                            "number, true | false or a string)")
        if name in self.plan.ranges and type_name([self.baseline[name]]) != "int":
            return self.problems.append(f"variables.{name}: a range needs an integer knob; the baseline of {name} "
                                        f"is {self.baseline[name]!r}")
        kinds = {family(v) for _, v in values if v is not None}
        if len(kinds) > 1:
            return self.problems.append(f"variables.{name}: values of different types ({[v for _, v in values]}); "
                                        "one knob takes one type")
        listed = self.plan.variables.get(name)
        if listed is not None:
            for path, value in values[1:]:
                if value == self.baseline[name] and family(value) == family(self.baseline[name]):
                    self.problems.append(f"{path}: {value!r} repeats the baseline value; a variable must change "
                                         "something")
            if len({repr(v) for v in listed}) != len(listed):
                self.problems.append(f"variables.{name}: values repeat ({listed!r})")
        return None


def check_own_knobs(plan: Plan, skip: set[str] | frozenset[str] = frozenset()) -> tuple[Plan, list[str]]:
    """The plan with every own knob's baseline filled where perftune can read it, and one line per problem
    (``skip``: knobs an earlier check already refused)."""
    check = OwnKnobCheck(plan, frozenset(skip))
    plan = check.run()
    return plan, check.problems


def own_value_problem(plan: Plan, name: str, value: Any) -> Optional[str]:
    """``perftune run --set NAME=VALUE`` for an own knob: why the value cannot be used, or None."""
    trial = plan.model_copy(update={"variables": {name: [value]}})
    _, problems = check_own_knobs(trial)
    problems = [p for p in problems if "repeats the baseline" not in p]
    return problems[0].split(": ", 1)[1] if problems else None


def own_knob_rows(plan: Plan) -> list[dict[str, Any]]:
    """``perftune knobs --plan``: each knob the plan routes itself, with its route, type, baseline and values."""
    rows = []
    for route in routes(plan).values():
        searched = plan.ranges.get(route.name)
        values = [plan.baseline.get(route.name)] + list(plan.variables.get(route.name, [])) + list(
            searched.range if searched else [])
        rows.append({"name": route.name, "route": f"{route.where}: {route.describe()}",
                     "own": route.name not in knobs.KNOBS, "type": type_name([v for v in values if v is not None]),
                     "baseline": plan.baseline.get(route.name), "values": plan.variables.get(route.name, [])})
    return rows
