"""Ranges in a plan: ``variables: {kernel_threads: {range: [1, 8]}}`` (optional ``scale: log2``, ``until: fits``),
checked field by field with one line per problem, as every other field, and moved from ``variables`` to
``Plan.ranges`` as ``KnobRange`` records, so ``variables`` keeps holding lists alone.

Only integer knobs take a range: a built-in knob of kind ``int`` (``perftune knobs``) whose two ends the registry
allows, or the plan's own knob (its baseline an integer: ``engine.own_knobs`` checks it once the plan is typed).
``batch_size`` and ``workers`` need ``scale: log2``: every trial's accuracy window ends at the same samples seen, a
multiple of every batch a search may try (``engine.accuracy.sizing.step_unit``), which stays the range's top with
powers of two and would be the product of all the integers of a linear range.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from perftune import knobs
from perftune.io.plan import KnobRange

#: the fields of a range
RANGE_FIELDS = ("range", "scale", "until")
#: knobs whose every value divides the accuracy window: log2 ranges only
LOG2_ONLY = ("batch_size", "workers")


def is_range(value: Any) -> bool:
    """Whether a ``variables`` entry is written as a range (a mapping) rather than a list."""
    return isinstance(value, dict)


def split_ranges(data: dict, own: set[str]) -> tuple[dict, list[str], dict[str, list[int]]]:
    """The plan data with each range moved from ``variables`` to ``ranges``, one line per problem, and every value
    each well-formed range may try (for the cross-knob checks).  A dumped plan's ``ranges`` (results.json) are read
    back as if written in ``variables``, so a plan round-trips.  A range of a knob that is neither built in nor
    routed stays in ``variables``, where the unknown knob is named."""
    problems: list[str] = []
    variables = data.get("variables", {})
    dumped = data.get("ranges")  # a plan as results.json keeps it (``Plan.ranges``): its ranges go back in place
    if dumped is not None and not isinstance(dumped, dict):
        problems.append("ranges: expected knob -> range (a range is written in variables: {knob: {range: [lo, hi]}})")
    elif dumped and isinstance(variables, dict):
        problems += [f"ranges.{name}: {name!r} is also in variables; give each knob one list or one range"
                     for name in dumped if name in variables]
        variables = {**variables, **dumped}
    if not isinstance(variables, dict):
        return data, problems, {}
    kept: dict[str, Any] = {}
    ranges: dict[str, dict] = {}
    searched: dict[str, list[int]] = {}
    for name, value in variables.items():
        if not is_range(value) or (name not in knobs.KNOBS and name not in own):
            kept[name] = value
            continue
        lines = range_problems(name, value, executor=data.get("executor"))
        problems += lines
        if not lines:
            ranges[name] = value
            searched[name] = KnobRange.model_validate(value).values()
    data = {k: v for k, v in data.items() if k != "ranges"}
    return {**data, "variables": kept, "ranges": ranges}, problems, searched


def range_problems(name: str, value: dict, executor: Any = None) -> list[str]:
    """One line per mistake in the range of knob ``name`` (``value``: the plan's mapping)."""
    where = f"variables.{name}"
    knob = knobs.KNOBS.get(name)
    if knob is not None and knob.kind != "int":
        return [f"{where}: a range needs a numeric knob ({name} takes {knob.values_text()}: list its values "
                f"instead, e.g. [{knobs.format_value(knob.choices[0] if knob.choices else True)}])"]
    problems = [f"{where}.{k}: unknown field (allowed: {', '.join(RANGE_FIELDS)})" for k in value
                if k not in RANGE_FIELDS]
    scale, until = value.get("scale", "linear"), value.get("until")
    if scale not in ("linear", "log2"):
        problems.append(f"{where}.scale: {scale!r} is not allowed (allowed: linear | log2)")
    if until is not None and until != "fits":
        problems.append(f"{where}.until: {until!r} is not allowed (allowed: fits)")
    ends = value.get("range")
    if ends is None:
        return problems + [f"{where}.range: required field is missing (a range is {{range: [lo, hi]}}, integers)"]
    if not (isinstance(ends, list) and len(ends) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                               for v in ends) and ends[0] < ends[1]):
        return problems + [f"{where}.range: expected [lo, hi], two integers with lo < hi (got {ends!r})"]
    if knob is not None:
        problems += [f"{where}.range[{i}]: {v!r} is not allowed ({knob.check(v)})" for i, v in enumerate(ends)
                     if knob.check(v)]
        cores = multiprocessing.cpu_count()
        if name == "num_parallel_workers" and executor != "ray" and ends[1] > cores and not knob.check(ends[1]):
            problems.append(f"{where}.range[1]: {ends[1]} is more than this machine's {cores} cores (MindSpore "
                            f"refuses more dataset workers than cores in every trial; allowed: 1 to {cores})")
    if scale == "log2" and len(KnobRange.model_construct(range=ends, scale="log2").values()) < 2:
        problems.append(f"{where}.range: {ends!r} holds fewer than two powers of two (scale: log2 tries the powers "
                        "of two between lo and hi)")
    if name in LOG2_ONLY and scale == "linear":
        problems.append(f"{where}.scale: a range of {name} needs scale: log2 (every trial's accuracy window is a "
                        f"multiple of every {name} a search may try)")
    return problems
