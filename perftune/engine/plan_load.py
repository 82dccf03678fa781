"""Loading and validating ``plan.yaml`` into a typed ``Plan``.

Every problem is reported at once, one line each, naming the field path, the bad value and what is allowed, before
anything runs: a sweep that dies an hour in on a typo is the worst outcome a tuning tool can have.
"""

from __future__ import annotations

import multiprocessing
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from perftune import knobs
from perftune.engine.own_knobs import check_own_knobs, declared, own_value_problem
from perftune.engine.plan_ranges import split_ranges
from perftune.engine.plan_yaml import MAX_PLAN_BYTES, PlanYAMLError, load_bounded
from perftune.engine.script_plan import check_script_workload
from perftune.errors import UserError
from perftune.io.files import check_regular
from perftune.io.plan import Plan
from perftune.workloads import check_reference


class PlanError(UserError):
    def __init__(self, problems: list[str], source: str = "plan"):
        self.problems = problems
        super().__init__(f"{source}: {len(problems)} problem(s)\n" + "\n".join(f"  {p}" for p in problems))


def baseline_knobs(plan: Plan) -> dict[str, Any]:
    """Every knob's value in the baseline: the registry's defaults overlaid with the plan's ``baseline``."""
    return knobs.effective(plan.baseline)


def accuracy_samples(plan: Plan) -> int:
    """Samples every trial has seen when its accuracy is measured: ``accuracy.samples``, else one baseline window."""
    if plan.accuracy.samples:
        return plan.accuracy.samples
    return int(baseline_knobs(plan)["batch_size"]) * plan.burst.steps


def lr_scale(plan: Plan, batch_size: int) -> float:
    """The factor on the workload's learning rate for a trial of ``batch_size`` (``accuracy.lr_scaling``)."""
    ratio = int(batch_size) / int(baseline_knobs(plan)["batch_size"])
    return {"none": 1.0, "linear": ratio, "sqrt": ratio ** 0.5}[plan.accuracy.lr_scaling]


def _format_pydantic(err: ValidationError, data: dict) -> list[str]:
    lines = []
    for e in err.errors():
        loc = list(e["loc"])
        if len(loc) >= 2 and loc[0] in ("baseline", "variables"):
            continue  # knob values are checked against the registry, with better messages
        if len(loc) >= 2 and loc[0] == "workload" and loc[1] in ("str", "ScriptWorkload"):
            # the workload is a name or a script's mapping: say only what is wrong with the form that was given
            if (loc[1] == "str") == isinstance(data.get("workload"), dict):
                continue
            loc = [loc[0], *loc[2:]]
        path = ".".join(str(p) for p in loc) or "(top level)"
        if e["type"] == "extra_forbidden":
            lines.append(f"{path}: unknown field")
            continue
        if e["type"] == "missing":
            lines.append(f"{path}: required field is missing")
            continue
        lines.append(f"{path}: {e['msg']} (got {e['input']!r})")
    return lines


def _check_knob_values(plan_dict: dict, own: set[str], searched: dict[str, list[int]] | None = None) -> list[str]:
    """Registry knobs against the registry; ``own``: the names the plan routes itself (``engine.own_knobs`` checks
    their values once the plan is typed); ``searched``: the values each range may try (``engine.plan_ranges``)."""
    problems: list[str] = []
    baseline = plan_dict.get("baseline") or {}
    variables = plan_dict.get("variables") or {}
    if isinstance(baseline, dict):
        for name, value in baseline.items():
            if name not in own or name in knobs.KNOBS:
                problems += _check_one(f"baseline.{name}", name, value)
    if isinstance(variables, dict):
        effective_base = knobs.effective({k: v for k, v in baseline.items() if k in knobs.KNOBS}) if isinstance(
            baseline, dict) else knobs.defaults()
        for name, values in variables.items():
            if name not in knobs.KNOBS and name not in own:
                problems += _check_one(f"variables.{name}", name, None)
                continue
            if not isinstance(values, list) or not values:
                problems.append(f"variables.{name}: expected a non-empty list of values, or for a numeric knob "
                                f"{{range: [lo, hi]}} (got {values!r})")
                continue
            if name not in knobs.KNOBS:
                continue
            for i, value in enumerate(values):
                msg = _check_one(f"variables.{name}[{i}]", name, value)
                if msg:
                    problems += msg
                elif value == effective_base[name]:
                    problems.append(
                        f"variables.{name}[{i}]: {value!r} repeats the baseline value; a variable must change something"
                    )
            if len(set(map(repr, values))) != len(values):
                problems.append(f"variables.{name}: values repeat ({values!r})")
        problems += _check_combinations(effective_base, {**variables, **(searched or {})})
    return problems


def _check_one(path: str, name: str, value: Any) -> list[str]:
    knob = knobs.KNOBS.get(name)
    if knob is None:
        close = [k for k in knobs.KNOBS if k.startswith(name[:4])] if len(name) >= 4 else []
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return [f"{path}: unknown knob {name!r}{hint} (a knob of your own needs a route: workload.knob_args, "
                f"workload.knob_config or workload.knob_env for a script, knob_params or knob_env for a workload; "
                f"built-in: {', '.join(sorted(knobs.KNOBS))})"]
    why = knob.check(value)
    return [f"{path}: {value!r} is not allowed ({why})"] if why else []


def _check_combinations(base: dict, variables: dict) -> list[str]:
    """Cross-knob rules that hold for every one-at-a-time trial."""
    problems = []
    batches = [base["batch_size"]] + [v for v in variables.get("batch_size", []) if isinstance(v, int)]
    accums = [base["grad_accum_steps"]] + [v for v in variables.get("grad_accum_steps", []) if isinstance(v, int)]
    for b in batches:
        for k in accums:
            if isinstance(b, int) and isinstance(k, int) and k > 0 and b % k:
                problems.append(
                    f"grad_accum_steps: {k} does not divide batch_size {b} (micro-batches must be equal)"
                )
    workers = [base["workers"]] + [v for v in variables.get("workers", []) if isinstance(v, int)]
    for w in workers:
        if not isinstance(w, int) or isinstance(w, bool) or w < 2:
            continue
        for b in batches:
            if not isinstance(b, int) or isinstance(b, bool):
                continue
            if b % w:
                problems.append(f"workers: batch_size {b} does not split evenly over {w} workers (batch_size is the "
                                f"global batch; each rank takes batch_size / workers)")
                continue
            for k in accums:
                if isinstance(k, int) and k > 0 and (b // w) % k:
                    problems.append(f"grad_accum_steps: {k} does not divide the per-rank batch {b // w} "
                                    f"(batch_size {b} over {w} workers)")
    return problems


def _check_machine(data: dict) -> list[str]:
    """Knob values this machine cannot take, where the bound is known: MindSpore refuses ``num_parallel_workers``
    above ``multiprocessing.cpu_count()`` (its own check), so such a value fails every trial it is in.  A Ray
    cluster's nodes are other machines: not checked there."""
    if data.get("executor") == "ray":
        return []
    cores = multiprocessing.cpu_count()
    baseline = data.get("baseline") if isinstance(data.get("baseline"), dict) else {}
    variables = data.get("variables") if isinstance(data.get("variables"), dict) else {}
    values = [("baseline.num_parallel_workers", baseline.get("num_parallel_workers"))]
    listed = variables.get("num_parallel_workers")
    values += [(f"variables.num_parallel_workers[{i}]", v) for i, v in enumerate(listed if isinstance(listed, list)
                                                                                 else [])]
    return [f"{path}: {v} is more than this machine's {cores} cores (MindSpore refuses more dataset workers than "
            f"cores in every trial; allowed: 1 to {cores})"
            for path, v in values if isinstance(v, int) and not isinstance(v, bool) and v > cores
            and not knobs.KNOBS["num_parallel_workers"].check(v)]  # a value the registry refuses is said once


def _check_distributed(data: dict) -> list[str]:
    """Cross-field rules of the ``distributed`` section (types and ranges are pydantic's)."""
    dist = data.get("distributed")
    if not isinstance(dist, dict):
        return []
    nodes, node_rank = dist.get("nodes", 1), dist.get("node_rank", 0)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (nodes, node_rank)) or nodes < 1:
        return []
    problems = []
    if node_rank >= nodes:
        problems.append(f"distributed.node_rank: {node_rank} must be below nodes ({nodes}); machines are numbered "
                        f"0 .. {nodes - 1}, 0 being the master")
    if nodes > 1:
        if dist.get("master_port") is None:
            problems.append(f"distributed.master_port: required when nodes > 1 (all {nodes} machines must name the "
                            "same port of the master)")
        baseline = data.get("baseline") if isinstance(data.get("baseline"), dict) else {}
        variables = data.get("variables") if isinstance(data.get("variables"), dict) else {}
        values = [("baseline.workers", baseline.get("workers", knobs.KNOBS["workers"].default))]
        values += [(f"variables.workers[{i}]", v) for i, v in enumerate(variables.get("workers") or [])
                   if isinstance(variables.get("workers"), list)]
        for path, w in values:
            if isinstance(w, int) and not isinstance(w, bool) and (w < nodes or w % nodes):
                problems.append(f"{path}: {w} workers cannot be spread over distributed.nodes={nodes} machines "
                                f"(workers is the total number of ranks: use a multiple of {nodes})")
    return problems


def _normalize_knobs(data: dict) -> dict:
    data = dict(data)
    if isinstance(data.get("baseline"), dict):
        data["baseline"] = {k: knobs.KNOBS[k].normalize(v) if k in knobs.KNOBS else v
                            for k, v in data["baseline"].items()}
    if isinstance(data.get("variables"), dict):
        data["variables"] = {
            k: [knobs.KNOBS[k].normalize(v) for v in vs] if k in knobs.KNOBS and isinstance(vs, list) else vs
            for k, vs in data["variables"].items()
        }
    return data


def parse_plan(data: Any, source: str = "plan", base_dir: Path | None = None) -> Plan:
    """``base_dir``: the plan file's folder, against which a script workload's path is resolved (default: cwd)."""
    if not isinstance(data, dict):
        raise PlanError([f"(top level): expected a mapping of fields, got {type(data).__name__}"], source)
    data = _normalize_knobs(data)
    own, problems = declared(data)
    data, range_problems, searched = split_ranges(data, own)
    problems += range_problems + _check_knob_values(data, own, searched)
    problems += _check_distributed(data)
    problems += _check_machine(data)
    if isinstance(data.get("workload"), str):
        why = check_reference(data["workload"])
        if why:
            problems.append(f"workload: {why}")
    elif isinstance(data.get("workload"), dict):
        data, script_problems = check_script_workload(data, base_dir or Path.cwd())
        problems += script_problems
    try:
        plan = Plan.model_validate(data)
    except ValidationError as err:
        problems = _format_pydantic(err, data) + problems
        raise PlanError(problems, source) from None
    named = {name for name in own if any(re.match(rf"^(?:[\w.]+\.)?{re.escape(name)}(?:\[\d+\])?:", p)
                                           for p in problems)}
    plan, own_problems = check_own_knobs(plan, skip=named)  # one line per mistake: a knob named above is not again
    problems += own_problems
    if problems:
        raise PlanError(problems, source)
    return plan


def load_plan(path: str | Path) -> Plan:
    path = Path(path)
    if path.exists():
        check_regular(path)  # before opening: a FIFO without a writer would block
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_PLAN_BYTES + 1)  # never more: a plan of gigabytes is refused, not read
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such plan file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read the plan ({exc.__class__.__name__}: {exc})") from None
    if len(raw) > MAX_PLAN_BYTES:
        raise UserError(f"{path}: the plan is larger than {MAX_PLAN_BYTES} bytes; a plan is a short hand-written "
                        "file")
    try:
        data = load_bounded(text)
    except PlanYAMLError as exc:
        raise UserError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{path}: not valid YAML{where}: {problem}") from None
    if data is None:
        raise UserError(f"{path}: the plan is empty; it needs at least 'name' and 'workload'")
    return parse_plan(data, str(path), path.resolve().parent)


def parse_set_options(pairs: tuple[str, ...] | list[str], plan: Plan | None = None) -> dict[str, Any]:
    """``--set knob=value`` pairs (values parsed as YAML scalars), checked against the registry, or, for the plan's
    own knobs, against their routes (``engine.own_knobs``)."""
    out: dict[str, Any] = {}
    problems = []
    for pair in pairs:
        if "=" not in pair:
            problems.append(f"--set {pair}: expected knob=value")
            continue
        name, _, raw = pair.partition("=")
        value = yaml.safe_load(raw) if raw.strip() else None
        if name.strip() in knobs.KNOBS:
            value = knobs.KNOBS[name.strip()].normalize(value)
        own = plan is not None and name.strip() in plan.baseline and name.strip() not in knobs.KNOBS
        why = own_value_problem(plan, name.strip(), value) if own else None
        msg = [f"--set {name}: {why}"] if why else [] if own else _check_one(f"--set {name}", name.strip(), value)
        msg = msg or [line.replace("baseline.", "--set ", 1) for line in _check_machine({"baseline": {name: value}})]
        if msg:
            problems += msg
        else:
            out[name.strip()] = value
    if problems:
        raise PlanError(problems, "--set")
    return out

