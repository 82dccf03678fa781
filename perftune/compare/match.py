"""Matching the two sides by effective knob values, and the checks that refuse a comparison or warn about it."""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

from perftune import knobs as knob_registry
from perftune.compare.sides import Entry, Side
from perftune.errors import UserError

MISSING = "<not recorded>"


def config_label(knobs: dict, reference: dict, base_label: str) -> str:
    """``+k=v`` for every knob that differs from ``reference``; ``base_label`` where none does."""
    return knob_registry.label_of({k: v for k, v in knobs.items() if reference.get(k, MISSING) != v}, base_label)


def knob_names(old: Side, new: Side) -> tuple[list[str], list[str]]:
    """All knob names, and those some trial lacks (results of perftune versions with different knob sets)."""
    sets = [set(e.result.knobs) for s in (old, new) for e in s.entries]
    union, inter = set().union(*sets), set.intersection(*sets)
    return sorted(union), sorted(union - inter)


def knobs_of(entry: Entry, names: list[str]) -> dict[str, Any]:
    out = {}
    for n in names:
        if n in entry.result.knobs:
            out[n] = entry.result.knobs[n]
        else:  # a knob this result's perftune did not know: it ran at the knob's default
            out[n] = knob_registry.KNOBS[n].default if n in knob_registry.KNOBS else MISSING
    return out


def key_of(knobs: dict) -> str:
    return json.dumps(knobs, sort_keys=True, default=str)


def group_entries(side: Side, names: list[str]) -> dict[str, list[Entry]]:
    groups: dict[str, list[Entry]] = {}
    for e in side.entries:
        groups.setdefault(key_of(knobs_of(e, names)), []).append(e)
    return groups


def closest_difference(old_groups: dict, new_groups: dict) -> str:
    best: Optional[tuple[int, str]] = None
    for ko in old_groups:
        a = json.loads(ko)
        for kn in new_groups:
            b = json.loads(kn)
            diff = [k for k in a if a[k] != b.get(k)]
            fmt = knob_registry.format_value
            text = ", ".join(f"{k} {fmt(a[k])} vs {fmt(b.get(k))}" for k in diff[:4])
            if best is None or len(diff) < best[0]:
                best = (len(diff), text)
    return best[1] if best else ""


def distinct_values(side: Side, get: Callable[[Entry], Any]) -> list[Any]:
    out = []
    for e in side.entries:
        v = get(e)
        if v is not None and v not in out:
            out.append(v)
    return out


def _show(values: list) -> str:
    return ", ".join(str(v) for v in values) if values else "unknown"


def check_comparable(old: Side, new: Side) -> None:
    for what, get in (("workload", lambda e: e.result.workload), ("device", lambda e: e.result.device)):
        a, b = distinct_values(old, get), distinct_values(new, get)
        if len(a) > 1 or len(b) > 1 or a != b:
            raise UserError(f"OLD runs {what} {_show(a)}, NEW runs {what} {_show(b)}: results of different "
                            f"{what}s cannot be compared")


def _dict_diff(a: dict, b: dict) -> str:
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k, MISSING) != b.get(k, MISSING)]
    return ", ".join(f"{k} {a.get(k, '(default)')} vs {b.get(k, '(default)')}" for k in keys)


def side_warnings(old: Side, new: Side, missing_knobs: list[str]) -> list[str]:
    """What a reader of the comparison must know about the two sides: unfinished or busy, other versions or
    machines, other workloads, bursts or seeds."""
    return [*_state_warnings(old, new), *_environment_warnings(old, new), *_workload_warnings(old, new),
            *_setting_warnings(old, new, missing_knobs)]


def _state_warnings(old: Side, new: Side) -> list[str]:
    w: list[str] = []
    for side in (old, new):
        unfinished = [s for s in side.sweep_status if s != "complete"]
        if unfinished:
            w.append(f"{side.name} {side.path}: sweep {'/'.join(sorted(set(unfinished)))}, not complete: comparing "
                     "the trials it finished")
        failed = [e for e in side.entries if not e.ok]
        if failed:
            w.append(f"{side.name}: {len(failed)} of {len(side.entries)} trial(s) did not measure throughput "
                     f"({', '.join(sorted({e.result.status for e in failed}))})")
        busy = [e for e in side.entries if e.result.contended_windows]
        if busy:
            windows = sum(e.result.contended_windows for e in busy)
            w.append(f"{side.name}: {len(busy)} of {len(side.entries)} process(es) measured on a busy machine "
                     f"({windows} timed window(s) where other processes used over a quarter of the cores): its "
                     "throughput is less trustworthy; measure both sides on an otherwise idle machine")
    return w


def _environment_warnings(old: Side, new: Side) -> list[str]:
    """Versions and machine."""
    w: list[str] = []

    def env_values(side: Side, attr: str) -> list:
        return distinct_values(side, lambda e: getattr(e.result.environment, attr) if e.result.environment else None)

    for attr, what in (("perftune_version", "perftune versions"), ("mindspore_version", "MindSpore versions"),
                       ("python_version", "Python versions")):
        a, b = env_values(old, attr), env_values(new, attr)
        if a and b and set(a) != set(b):
            w.append(f"{what} differ: OLD {_show(a)}, NEW {_show(b)}")

    def machine(side: Side) -> list[str]:
        return distinct_values(side, lambda e: (f"{e.result.environment.host} ({e.result.environment.cpu_model}, "
                                        f"{e.result.environment.cpu_count} CPUs)") if e.result.environment else None)

    a, b = machine(old), machine(new)
    if a and b and (set(a) != set(b) or len(a) > 1):
        w.append(f"machines differ: OLD {_show(a)}, NEW {_show(b)}: throughput from different machines says "
                 "little about the change; run both sides on the same machine in the same job")
    for side in (old, new):
        if not env_values(side, "host"):
            w.append(f"{side.name}: no environment recorded: cannot check machine and versions")
    return w


def _workload_warnings(old: Side, new: Side) -> list[str]:
    w: list[str] = []
    ma, mb = (distinct_values(side, lambda e: e.result.parameter_count) for side in (old, new))
    if ma and mb and set(ma) != set(mb):
        w.append(f"models differ: OLD {_show([f'{n:,}' for n in ma])} parameters, NEW "
                 f"{_show([f'{n:,}' for n in mb])}: the same knobs are compared, but not the same model")
    pa = distinct_values(old, lambda e: key_of(e.workload_params) if e.workload_params is not None else None)
    pb = distinct_values(new, lambda e: key_of(e.workload_params) if e.workload_params is not None else None)
    if len(pa) == 1 and len(pb) == 1 and pa != pb:
        w.append(f"workload params differ: {_dict_diff(json.loads(pa[0]), json.loads(pb[0]))} (OLD vs NEW): the "
                 "same knobs are compared, but not the same workload")
    elif len(pa) > 1 or len(pb) > 1:
        w.append(f"workload params vary within a side (OLD {len(pa)}, NEW {len(pb)} different sets): trials with "
                 "the same knobs are pooled anyway")
    for side in (old, new):
        unknown = [e for e in side.entries if e.workload_params is None]
        if unknown:
            w.append(f"{side.name}: workload params unknown for {len(unknown)} trial(s) (trial.json without its "
                     "spec.json): cannot check that the workloads match")
    return w


def _setting_warnings(old: Side, new: Side, missing_knobs: list[str]) -> list[str]:
    """Burst settings, seeds and knob sets."""
    w: list[str] = []

    def burst(e: Entry) -> Optional[str]:
        """The settings the plan chose: a repeat's ``repeats`` (chosen by perftune from the noise) left out."""
        if e.chosen_windows:
            return None
        return key_of({k: v for k, v in e.result.burst.model_dump().items() if k != "timeout_s"})

    ba, bb = distinct_values(old, burst), distinct_values(new, burst)
    if set(ba) != set(bb):
        if len(ba) == 1 and len(bb) == 1:
            w.append(f"burst settings differ: {_dict_diff(json.loads(ba[0]), json.loads(bb[0]))} (OLD vs NEW)")
        else:
            w.append("burst settings differ between or within the sides")
    sa, sb = distinct_values(old, lambda e: e.seed), distinct_values(new, lambda e: e.seed)
    if sa and sb and set(sa) != set(sb):
        w.append(f"seeds differ: OLD {_show(sa)}, NEW {_show(sb)}: accuracy changes include the seed's")
    if missing_knobs:
        w.append(f"knob sets differ (results of different perftune versions): {', '.join(missing_knobs)} not "
                 "recorded everywhere; a missing knob is taken at its default")
    return w
