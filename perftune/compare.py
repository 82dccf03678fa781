"""``perftune compare OLD NEW``: did a change make training slower, with the noise taken into account?

Each side is a sweep's ``results.json``, a single ``trial.json``, a folder holding either, or a folder of such
folders (several runs of the same plan, e.g. interleaved CI rounds: ``runs/base/1``, ``runs/base/2``), pooled.

Trials are matched by their effective knob values.  Every trial is one process; the processes of one configuration
on one side (a sweep's baseline runs, or the same plan run twice) are pooled as one ``stats.Measurement``, and every
configuration measured more than once on either side feeds the between-process noise estimate (``stats.Noise``).
Throughput and step time come with a confidence interval from the recorded windows (``stats.compare``); splits,
memory and accuracy are one number per process without windows, so for them the threshold applies to the relative
change of the means and the comparison says it has no interval.

Exit codes (``run_compare(...).exit_code``; the CLI exits with it):
    0  no significant regression beyond the threshold in the chosen metric
    1  a significant regression beyond the threshold (or a configuration that ran on OLD fails on NEW)
    2  unusable input: missing, empty, corrupted or wrong-version file, different workload or device, nothing in
       common, or the chosen metric measured on neither side (``UserError``, one line)

Differences that do not stop a comparison (perftune, MindSpore or Python versions, machine, workload params, burst
settings, seed, incomplete sweeps, no repeated configuration) are in ``CompareReport.warnings``; the CLI prints each
as a ``perftune: warning:`` line on stderr.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from perftune import knobs as knob_registry
from perftune import stats
from perftune.errors import UserError
from perftune.records import PHASES, TrialResult
from perftune.results import read_sweep, read_trial
from perftune.store import finite, write_text_atomic

COMPARE_JSON_VERSION = 1
ACCURACY_METRICS = ("val_loss", "train_loss", "perplexity")
MEMORY_FIELDS = {"device": "device_peak_bytes", "allocator": "allocator_peak_bytes", "host_rss": "host_rss_peak_bytes"}
MEMORY_NAMES = {"device": "device peak", "allocator": "allocator peak", "host_rss": "host RSS peak"}
METRICS_HELP = ("throughput | step_time | data_wait | split.<data|forward|backward|optimizer|communication|other> | "
                "memory | memory.<host_rss|allocator|device> | val_loss | train_loss | perplexity")
INTERVAL_VERDICTS = {"faster": "faster", "slower": "slower", "not significant": "no significant change"}


# -- reading the two sides ------------------------------------------------------------------------------------------
@dataclass
class Entry:
    """One trial (one process) as read from a file."""

    result: TrialResult
    source: str
    label: Optional[str] = None  # the sweep's label ("baseline", "+mode=graph"); None for a lone trial.json
    kind: Optional[str] = None  # the sweep's trial kind
    workload_params: Optional[dict] = None  # None: unknown (a trial.json without its spec.json)
    seed: Optional[int] = None

    @property
    def ok(self) -> bool:
        return self.result.status == "ok" and bool(self.result.windows)


@dataclass
class Side:
    name: str  # "OLD" / "NEW"
    path: str
    files: list[str] = field(default_factory=list)
    file_kinds: list[str] = field(default_factory=list)  # "sweep" / "trial", per file
    entries: list[Entry] = field(default_factory=list)
    sweep_status: list[str] = field(default_factory=list)


def _read_json(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not raw.strip():
        raise UserError(f"{path}: empty file (expected a perftune results.json or trial.json)")
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file (expected a perftune results.json or trial.json)") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: corrupted or truncated JSON ({exc.msg} at line {exc.lineno}, "
                        f"column {exc.colno})") from None


def _spec_fields(trial_file: Path) -> tuple[Optional[dict], Optional[int]]:
    """Workload params and seed of a lone trial, from the ``spec.json`` the launcher writes next to it."""
    try:
        spec = json.loads((trial_file.parent / "spec.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None, None
    if not isinstance(spec, dict) or not isinstance(spec.get("workload_params"), dict):
        return None, None
    return spec["workload_params"], spec.get("seed")


def _load_file(side: Side, path: Path) -> None:
    data = _read_json(path)
    if isinstance(data, dict) and data.get("kind") == "perftune-sweep":
        sweep = read_sweep(path)
        params = sweep.plan.get("workload_params") or {}
        seed = sweep.plan.get("seed")
        seen: set[str] = set()
        for t in sweep.trials:
            if t.trial_id in seen:  # leave-one-out rows reuse the single's (or the stack's) process
                continue
            seen.add(t.trial_id)
            side.entries.append(Entry(t.result, str(path), t.label, t.kind, params, seed))
        side.file_kinds.append("sweep")
        side.sweep_status.append(sweep.status)
    elif isinstance(data, dict) and "trial_id" in data:
        result = read_trial(path)
        params, seed = _spec_fields(path)
        side.entries.append(Entry(result, str(path), None, None, params, seed))
        side.file_kinds.append("trial")
    else:
        raise UserError(f"{path}: neither a perftune results.json (\"kind\": \"perftune-sweep\") nor a trial.json")
    side.files.append(str(path))


def load_side(path: str | Path, name: str) -> Side:
    """Read one side: a file, a folder holding results.json / trial.json, or a folder of such folders (pooled)."""
    p = Path(path)
    side = Side(name=name, path=str(p))
    if not p.exists():
        raise UserError(f"{name} {p}: no such file or folder")
    if p.is_dir():
        files = [p / n for n in ("results.json", "trial.json") if (p / n).is_file()][:1]
        if not files:
            subs = sorted(d for d in p.iterdir() if d.is_dir())
            files = ([d / "results.json" for d in subs if (d / "results.json").is_file()]
                     or [d / "trial.json" for d in subs if (d / "trial.json").is_file()])
        if not files:
            raise UserError(f"{name} {p}: no results.json or trial.json in this folder or the folders below it")
    else:
        files = [p]
    for f in files:
        _load_file(side, f)
    if not side.entries:
        raise UserError(f"{name} {p}: holds no trials (a sweep that has not finished its first trial?)")
    return side


# -- the report -------------------------------------------------------------------------------------------------------
@dataclass
class MetricChange:
    """One metric of one configuration, OLD vs NEW.  ``ratio`` is NEW/OLD; ``interval`` says whether it has a CI."""

    name: str
    unit: str
    old: Optional[float] = None
    new: Optional[float] = None
    ratio: Optional[float] = None
    change: Optional[float] = None  # ratio - 1
    ci_low: Optional[float] = None  # of the ratio NEW/OLD
    ci_high: Optional[float] = None
    p_value: Optional[float] = None
    interval: bool = False
    verdict: str = "not measured"
    regression: bool = False
    note: str = ""


@dataclass
class ConfigComparison:
    label: str
    knobs: dict[str, Any]
    old_runs: int  # processes with timed windows
    new_runs: int
    verdict: str  # of the chosen metric, or "failed on NEW" / "failed on both sides" / "runs again on NEW"
    regression: bool
    metrics: dict[str, MetricChange] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class SideSummary:
    name: str
    path: str
    files: list[str]
    kinds: str  # "1 results.json", "3 results.json files", "1 trial.json", ...
    trials: int
    configurations: int
    git_commits: list[str]
    mindspore_versions: list[str]
    hosts: list[str]


@dataclass
class NoiseSummary:
    between_sd: float  # of log throughput between processes (~ relative sd)
    df: int
    configurations: int  # configurations measured more than once that fed it
    from_prior_only: bool


@dataclass
class CompareReport:
    old: SideSummary
    new: SideSummary
    metric: str
    threshold: float
    confidence: float
    noise: NoiseSummary
    configurations: list[ConfigComparison]
    only_old: list[str]
    only_new: list[str]
    warnings: list[str]
    regressions: list[str]
    exit_code: int
    summary: str

    def to_dict(self) -> dict:
        return {"kind": "perftune-compare", "version": COMPARE_JSON_VERSION, **finite(asdict(self))}


# -- matching ----------------------------------------------------------------------------------------------------------
def _fmt_value(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _label(knobs: dict, reference: dict, base_label: str) -> str:
    diff = {k: v for k, v in knobs.items() if reference.get(k, _MISSING) != v}
    return " ".join(f"+{k}={_fmt_value(v)}" for k, v in diff.items()) or base_label


_MISSING = "<not recorded>"


def _knob_names(old: Side, new: Side) -> tuple[list[str], list[str]]:
    """All knob names, and those some trial lacks (results of perftune versions with different knob sets)."""
    sets = [set(e.result.knobs) for s in (old, new) for e in s.entries]
    union, inter = set().union(*sets), set.intersection(*sets)
    return sorted(union), sorted(union - inter)


def _knobs_of(entry: Entry, names: list[str]) -> dict[str, Any]:
    out = {}
    for n in names:
        if n in entry.result.knobs:
            out[n] = entry.result.knobs[n]
        else:  # a knob this result's perftune did not know: it ran at the knob's default
            out[n] = knob_registry.KNOBS[n].default if n in knob_registry.KNOBS else _MISSING
    return out


def _key(knobs: dict) -> str:
    return json.dumps(knobs, sort_keys=True, default=str)


def _group(side: Side, names: list[str]) -> dict[str, list[Entry]]:
    groups: dict[str, list[Entry]] = {}
    for e in side.entries:
        groups.setdefault(_key(_knobs_of(e, names)), []).append(e)
    return groups


def _closest_difference(old_groups: dict, new_groups: dict) -> str:
    best: Optional[tuple[int, str]] = None
    for ko in old_groups:
        a = json.loads(ko)
        for kn in new_groups:
            b = json.loads(kn)
            diff = [k for k in a if a[k] != b.get(k)]
            text = ", ".join(f"{k} {_fmt_value(a[k])} vs {_fmt_value(b.get(k))}" for k in diff[:4])
            if best is None or len(diff) < best[0]:
                best = (len(diff), text)
    return best[1] if best else ""


# -- checks that refuse or warn ----------------------------------------------------------------------------------------
def _values(side: Side, get: Callable[[Entry], Any]) -> list[Any]:
    out = []
    for e in side.entries:
        v = get(e)
        if v is not None and v not in out:
            out.append(v)
    return out


def _show(values: list) -> str:
    return ", ".join(str(v) for v in values) if values else "unknown"


def _refusals(old: Side, new: Side) -> None:
    for what, get in (("workload", lambda e: e.result.workload), ("device", lambda e: e.result.device)):
        a, b = _values(old, get), _values(new, get)
        if len(a) > 1 or len(b) > 1 or a != b:
            raise UserError(f"OLD runs {what} {_show(a)}, NEW runs {what} {_show(b)}: results of different "
                            f"{what}s cannot be compared")


def _dict_diff(a: dict, b: dict) -> str:
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k, _MISSING) != b.get(k, _MISSING)]
    return ", ".join(f"{k} {a.get(k, '(default)')} vs {b.get(k, '(default)')}" for k in keys)


def _warnings(old: Side, new: Side, missing_knobs: list[str]) -> list[str]:
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
    # environment: versions and machine
    def env_values(side: Side, attr: str) -> list:
        return _values(side, lambda e: getattr(e.result.environment, attr) if e.result.environment else None)

    for attr, what in (("perftune_version", "perftune versions"), ("mindspore_version", "MindSpore versions"),
                       ("python_version", "Python versions")):
        a, b = env_values(old, attr), env_values(new, attr)
        if a and b and set(a) != set(b):
            w.append(f"{what} differ: OLD {_show(a)}, NEW {_show(b)}")

    def machine(side: Side) -> list[str]:
        return _values(side, lambda e: (f"{e.result.environment.host} ({e.result.environment.cpu_model}, "
                                        f"{e.result.environment.cpu_count} CPUs)") if e.result.environment else None)

    a, b = machine(old), machine(new)
    if a and b and (set(a) != set(b) or len(a) > 1):
        w.append(f"machines differ: OLD {_show(a)}, NEW {_show(b)}: throughput from different machines says "
                 "little about the change; run both sides on the same machine in the same job")
    for side in (old, new):
        if not env_values(side, "host"):
            w.append(f"{side.name}: no environment recorded: cannot check machine and versions")
    # workload params, burst settings, seed
    pa = _values(old, lambda e: _key(e.workload_params) if e.workload_params is not None else None)
    pb = _values(new, lambda e: _key(e.workload_params) if e.workload_params is not None else None)
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

    def burst(e: Entry) -> str:
        return _key({k: v for k, v in e.result.burst.items() if k != "timeout_s"})

    ba, bb = _values(old, burst), _values(new, burst)
    if set(ba) != set(bb):
        if len(ba) == 1 and len(bb) == 1:
            w.append(f"burst settings differ: {_dict_diff(json.loads(ba[0]), json.loads(bb[0]))} (OLD vs NEW)")
        else:
            w.append("burst settings differ between or within the sides")
    sa, sb = _values(old, lambda e: e.seed), _values(new, lambda e: e.seed)
    if sa and sb and set(sa) != set(sb):
        w.append(f"seeds differ: OLD {_show(sa)}, NEW {_show(sb)}: accuracy changes include the seed's")
    if missing_knobs:
        w.append(f"knob sets differ (results of different perftune versions): {', '.join(missing_knobs)} not "
                 "recorded everywhere; a missing knob is taken at its default")
    return w


# -- metrics -----------------------------------------------------------------------------------------------------------
def _throughput_windows(e: Entry) -> list[float]:
    return [w.samples_per_s for w in e.result.windows]


def _step_rate_windows(e: Entry) -> list[float]:
    """Steps per second from each window's median step time: the step-time comparison runs on its inverse."""
    return [1e3 / w.median_step_ms for w in e.result.windows if w.median_step_ms > 0]


def _measurement(entries: list[Entry], windows: Callable[[Entry], list[float]]) -> Optional[stats.Measurement]:
    procs = [windows(e) for e in entries if e.ok]
    procs = [p for p in procs if p]
    for e in entries:
        bad = [v for v in (windows(e) if e.ok else []) if v is None or not math.isfinite(v) or v <= 0]
        if bad:
            raise UserError(f"{e.source}: trial {e.result.trial_id} has an unusable window throughput ({bad[0]!r}; "
                            "expected finite numbers > 0): the file is corrupted or was edited")
    return stats.Measurement.of(procs) if procs else None


def _noise(groups: list[dict[str, list[Entry]]], windows: Callable[[Entry], list[float]]) -> stats.Noise:
    """Between-process noise from every configuration measured in more than one process, on either side."""
    ms = []
    for g in groups:
        for entries in g.values():
            m = _measurement(entries, windows)
            if m is not None and len(m.processes) > 1:
                ms.append(m)
    return stats.Noise.estimate(ms)


def _interval_metric(name: str, unit: str, old: list[Entry], new: list[Entry], noise: stats.Noise,
                     windows: Callable[[Entry], list[float]], threshold: float, confidence: float,
                     invert: bool) -> MetricChange:
    mc = MetricChange(name=name, unit=unit, interval=True)
    ref, cand = _measurement(old, windows), _measurement(new, windows)
    if ref is None or cand is None:
        mc.interval = False
        mc.note = "no timed windows on " + ("both sides" if ref is None and cand is None else
                                            ("OLD" if ref is None else "NEW"))
        return mc
    c = stats.compare(ref, cand, noise, confidence, min_gain=threshold)
    if invert:  # step time: the ratio of times is the inverse of the ratio of rates
        mc.old, mc.new = 1e3 / ref.median, 1e3 / cand.median
        mc.ratio, mc.ci_low, mc.ci_high = 1 / c.ratio, 1 / c.ci_high, 1 / c.ci_low
    else:
        mc.old, mc.new = ref.median, cand.median
        mc.ratio, mc.ci_low, mc.ci_high = c.ratio, c.ci_low, c.ci_high
    mc.change, mc.p_value = mc.ratio - 1, c.p_value
    mc.verdict = INTERVAL_VERDICTS[c.verdict]
    mc.regression = c.verdict == "slower"
    if c.verdict == "not significant":
        if c.ci_low <= 1 <= c.ci_high:
            mc.note = "interval includes 1"
        else:
            mc.note = f"significant but below the {threshold:.0%} threshold"
    return mc


def _threshold_metric(name: str, unit: str, old_vals: list[float], new_vals: list[float], threshold: float,
                      words: tuple[str, str], reduce: Callable = np.mean) -> MetricChange:
    """A lower-is-better number without windows: the threshold on the relative change of the means; no interval."""
    mc = MetricChange(name=name, unit=unit, interval=False, note="no interval: threshold on the relative change")
    if not old_vals or not new_vals:
        mc.old = float(reduce(old_vals)) if old_vals else None
        mc.new = float(reduce(new_vals)) if new_vals else None
        mc.note = "not measured on " + ("both sides" if not old_vals and not new_vals else
                                        ("OLD" if not old_vals else "NEW"))
        return mc
    mc.old, mc.new = float(reduce(old_vals)), float(reduce(new_vals))
    better, worse = words
    if mc.old == 0:
        mc.change = 0.0 if mc.new == 0 else None
        mc.ratio = 1.0 if mc.new == 0 else None
        grew = mc.new > 0
        mc.verdict = worse if grew else "no significant change"
        mc.regression = grew
        if grew:
            mc.note = "was 0 on OLD"
        return mc
    mc.ratio = mc.new / mc.old
    mc.change = mc.ratio - 1
    if mc.change > threshold:
        mc.verdict, mc.regression = worse, True
    elif mc.change < -threshold:
        mc.verdict = better
    else:
        mc.verdict = "no significant change"
    return mc


def _values_of(entries: list[Entry], get: Callable[[TrialResult], Optional[float]]) -> list[float]:
    out = []
    for e in entries:
        if e.result.status != "ok":
            continue
        v = get(e.result)
        if v is not None and math.isfinite(v):
            out.append(float(v))
    return out


def _split_getter(phase: str) -> Callable[[TrialResult], Optional[float]]:
    def get(r: TrialResult) -> Optional[float]:
        s = r.profile.splits if r.profile else None
        return getattr(s, f"{phase}_ms") if s is not None else None

    return get


def _memory_getter(kind: str) -> Callable[[TrialResult], Optional[float]]:
    attr = MEMORY_FIELDS[kind]
    return lambda r: getattr(r.memory, attr)


def _accuracy_metric(metric: str, old: list[Entry], new: list[Entry], threshold: float) -> MetricChange:
    def samples(entries):
        return sorted({e.result.accuracy.samples_seen for e in entries
                       if e.result.status == "ok" and e.result.accuracy})

    mc = _threshold_metric(metric, "", _values_of(old, lambda r: getattr(r.accuracy, metric) if r.accuracy else None),
                           _values_of(new, lambda r: getattr(r.accuracy, metric) if r.accuracy else None),
                           threshold, ("better", "worse"))
    so, sn = samples(old), samples(new)
    if so and sn and so != sn:
        return MetricChange(name=metric, unit="", old=mc.old, new=mc.new, verdict="not comparable",
                            note=f"measured after {'/'.join(map(str, so))} samples on OLD, "
                                 f"{'/'.join(map(str, sn))} on NEW")
    nonfinite_new = any(e.result.accuracy and e.result.accuracy.nonfinite for e in new if e.result.status == "ok")
    nonfinite_old = any(e.result.accuracy and e.result.accuracy.nonfinite for e in old if e.result.status == "ok")
    if nonfinite_new and not nonfinite_old:
        mc.verdict, mc.regression, mc.note = "worse", True, "NaN/Inf in NEW's losses or gradients"
    return mc


def parse_metric(metric: str) -> str:
    m = metric.strip()
    if m in ("throughput", "step_time", "data_wait", "memory") or m in ACCURACY_METRICS:
        return m
    if m.startswith("split.") and m[len("split."):] in PHASES:
        return m
    if m.startswith("memory.") and m[len("memory."):] in MEMORY_FIELDS:
        return m
    raise UserError(f"--metric {metric!r}: unknown metric (allowed: {METRICS_HELP})")


def _memory_metrics(old: list[Entry], new: list[Entry], threshold: float) -> dict[str, MetricChange]:
    out = {}
    for kind in MEMORY_FIELDS:
        a, b = _values_of(old, _memory_getter(kind)), _values_of(new, _memory_getter(kind))
        if a or b:
            out[f"memory.{kind}"] = _threshold_metric(f"memory.{kind}", "MB", [v / 2**20 for v in a],
                                                      [v / 2**20 for v in b], threshold, ("better", "worse"),
                                                      reduce=np.median)
    for kind in MEMORY_FIELDS:  # "memory": the most specific figure measured on both sides
        mc = out.get(f"memory.{kind}")
        if mc is not None and mc.old is not None and mc.new is not None:
            out["memory"] = MetricChange(**{**asdict(mc), "name": "memory", "note": f"{MEMORY_NAMES[kind]}; {mc.note}"})
            break
    return out


def _compare_config(label: str, knobs: dict, old: list[Entry], new: list[Entry], metric: str, threshold: float,
                    confidence: float, noise: stats.Noise, step_noise: stats.Noise) -> ConfigComparison:
    old_ok, new_ok = [e for e in old if e.ok], [e for e in new if e.ok]
    cc = ConfigComparison(label=label, knobs=knobs, old_runs=len(old_ok), new_runs=len(new_ok), verdict="",
                          regression=False)
    for name, entries in (("OLD", old), ("NEW", new)):
        bad = [e for e in entries if not e.ok]
        if bad and len(bad) < len(entries):
            cc.notes.append(f"{len(bad)} of {len(entries)} {name} run(s) did not measure: "
                            + "; ".join(f"{e.result.status}: {e.result.reason or 'no windows'}" for e in bad[:2]))
    if not old_ok or not new_ok:
        if old_ok and not new_ok:
            cc.verdict, cc.regression = "failed on NEW", True
            cc.notes.append("runs on OLD, fails on NEW: " + "; ".join(
                f"{e.result.status}: {e.result.reason or 'no windows'}" for e in new[:2]))
        elif new_ok:
            cc.verdict = "runs again on NEW"
        else:
            cc.verdict = "failed on both sides"
        return cc
    m = cc.metrics
    m["throughput"] = _interval_metric("throughput", "samples/s", old_ok, new_ok, noise, _throughput_windows,
                                       threshold, confidence, invert=False)
    m["step_time"] = _interval_metric("step_time", "ms", old_ok, new_ok, step_noise, _step_rate_windows,
                                      threshold, confidence, invert=True)
    # waiting for data in the timed steps (median): the profiled steps' split can miss it, because the prefetch
    # queue fills up while the profiler starts
    m["data_wait"] = _threshold_metric("data_wait", "ms", _values_of(old_ok, lambda r: r.data_wait_ms_median),
                                       _values_of(new_ok, lambda r: r.data_wait_ms_median), threshold,
                                       ("faster", "slower"))
    for phase in PHASES:
        get = _split_getter(phase)
        mc = _threshold_metric(f"split.{phase}", "ms", _values_of(old_ok, get), _values_of(new_ok, get), threshold,
                               ("faster", "slower"))
        if mc.old is not None or metric == f"split.{phase}":
            m[f"split.{phase}"] = mc
    m.update(_memory_metrics(old_ok, new_ok, threshold))
    for acc in ACCURACY_METRICS:
        mc = _accuracy_metric(acc, old_ok, new_ok, threshold)
        if mc.old is not None or mc.new is not None or metric == acc:
            m[acc] = mc
    chosen = m.get(metric) or MetricChange(name=metric, unit="", note="not measured on either side")
    m.setdefault(metric, chosen)
    cc.verdict, cc.regression = chosen.verdict, chosen.regression
    return cc


# -- the whole comparison ---------------------------------------------------------------------------------------------
def _side_summary(side: Side, groups: dict) -> SideSummary:
    kinds = {k: side.file_kinds.count(k) for k in ("sweep", "trial") if side.file_kinds.count(k)}
    env = lambda attr: [str(v) for v in _values(  # noqa: E731
        side, lambda e: getattr(e.result.environment, attr) if e.result.environment else None)]
    return SideSummary(name=side.name, path=side.path, files=side.files,
                       kinds=", ".join(f"{n} {'results.json' if k == 'sweep' else 'trial.json'}"
                                       f"{' files' if n > 1 else ''}" for k, n in kinds.items()),
                       trials=len(side.entries), configurations=len(groups), git_commits=env("git_commit"),
                       mindspore_versions=env("mindspore_version"), hosts=env("host"))


def run_compare(old: str | Path, new: str | Path, threshold: float = 0.05, metric: str = "throughput",
                markdown: Optional[str | Path] = None, json_out: Optional[str | Path] = None,
                confidence: float = 0.95) -> CompareReport:
    """Compare NEW against OLD; write ``markdown`` / ``json_out`` when given.  Raises ``UserError`` (exit 2)."""
    if not (0 <= threshold < 1) or not math.isfinite(threshold):
        raise UserError(f"--threshold {threshold!r}: expected a relative change in [0, 1), e.g. 0.05 or 5%")
    metric = parse_metric(metric)
    old_side, new_side = load_side(old, "OLD"), load_side(new, "NEW")
    _refusals(old_side, new_side)
    names, missing = _knob_names(old_side, new_side)
    old_groups, new_groups = _group(old_side, names), _group(new_side, names)
    common = [k for k in old_groups if k in new_groups]
    if not common:
        raise UserError(f"nothing in common: none of OLD's {len(old_groups)} configuration(s) was measured in NEW "
                        f"({len(new_groups)}); closest pair differs in {_closest_difference(old_groups, new_groups)}")
    warnings = _warnings(old_side, new_side, missing)

    # labels relative to OLD's baseline (or its first trial)
    ref_entry = next((e for e in old_side.entries if e.kind == "baseline"), old_side.entries[0])
    reference = _knobs_of(ref_entry, names)
    base_label = "baseline" if ref_entry.kind == "baseline" else "reference"

    def label(key: str) -> str:
        return _label(json.loads(key), reference, base_label)

    noise = _noise([old_groups, new_groups], _throughput_windows)
    step_noise = _noise([old_groups, new_groups], _step_rate_windows)
    repeated = sum(1 for g in (old_groups, new_groups) for es in g.values() if sum(e.ok for e in es) > 1)
    if not repeated:
        warnings.append(f"no configuration was measured more than once on either side: the intervals assume a "
                        f"between-process noise of {stats.PRIOR_BETWEEN_SD:.0%}; measure the baseline at least "
                        "twice (decision.baseline_runs) for an estimate from your machine")
    configs = [_compare_config(label(k), json.loads(k), old_groups[k], new_groups[k], metric, threshold, confidence,
                               noise, step_noise) for k in common]
    for cc in configs:
        for note in cc.notes:
            if "did not measure" in note:
                warnings.append(f"{cc.label}: {note}")
    not_comparable = next((mc.note for cc in configs for mc in cc.metrics.values()
                           if mc.name in ACCURACY_METRICS and mc.verdict == "not comparable"), None)
    if not_comparable:
        warnings.append(f"accuracy {not_comparable}: accuracy changes are not compared")
    usable = [c for c in configs if c.regression or c.metrics.get(metric) is not None
              and c.metrics[metric].verdict not in ("not measured", "not comparable")]
    if not usable:
        why = "; ".join(f"{c.label}: {c.metrics[metric].note if metric in c.metrics else c.verdict}"
                        for c in configs[:3])
        raise UserError(f"nothing measurable in common for --metric {metric} ({why})")
    regressions = [c.label for c in configs if c.regression]
    exit_code = 1 if regressions else 0
    faster = [c.label for c in configs if c.verdict in ("faster", "better")]
    if regressions:
        summary = (f"REGRESSION in {metric}: {', '.join(regressions)} "
                   f"({len(regressions)} of {len(configs)} configuration(s))")
    else:
        summary = (f"no significant regression in {metric} beyond {threshold:.0%} "
                   f"({len(configs)} configuration(s) compared"
                   + (f"; improved: {', '.join(faster)}" if faster else "") + ")")
    report = CompareReport(
        old=_side_summary(old_side, old_groups), new=_side_summary(new_side, new_groups), metric=metric,
        threshold=threshold, confidence=confidence,
        noise=NoiseSummary(between_sd=math.sqrt(noise.between_var), df=noise.df, configurations=repeated,
                           from_prior_only=not repeated),
        configurations=configs,
        only_old=[f"{label(k)} ({sum(e.ok for e in old_groups[k])} run(s))" for k in old_groups if k not in new_groups],
        only_new=[f"{label(k)} ({sum(e.ok for e in new_groups[k])} run(s))" for k in new_groups if k not in old_groups],
        warnings=warnings, regressions=regressions, exit_code=exit_code, summary=summary)
    if markdown is not None:
        _write(Path(markdown), render_markdown(report))
    if json_out is not None:
        _write(Path(json_out), json.dumps(report.to_dict(), indent=1, allow_nan=False) + "\n")
    return report


def _write(path: Path, text: str) -> None:
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise UserError(f"{path}: cannot be written ({exc.strerror or exc})") from None


# -- rendering ---------------------------------------------------------------------------------------------------------
def _num(v: Optional[float], unit: str = "") -> str:
    if v is None:
        return "n/a"
    a = abs(v)
    text = f"{v:,.0f}" if a >= 1000 else f"{v:.1f}" if a >= 100 else f"{v:.2f}" if a >= 1 else f"{v:.4f}" if a else "0"
    return f"{text} {unit}".rstrip()


def _pct(change: Optional[float]) -> str:
    return "n/a" if change is None else f"{change:+.1%}"


def _interval_text(mc: MetricChange) -> str:
    if mc.interval and mc.ci_low is not None:
        return f"[{mc.ci_low:.3f}, {mc.ci_high:.3f}]"
    return "none (threshold only)"


def _metric_line(mc: MetricChange) -> str:
    if mc.old is None and mc.new is None:
        return f"{mc.verdict}" + (f" ({mc.note})" if mc.note else "")
    ratio = f"x{mc.ratio:.3f}" if mc.ratio is not None else "n/a"
    ci = f" {_interval_text(mc)}" if mc.interval else ""
    note = f"; {mc.note}" if mc.note and mc.interval else (f" ({mc.note})" if mc.note and not mc.interval
                                                           and mc.verdict == "not comparable" else "")
    return f"{_num(mc.old, mc.unit)} -> {_num(mc.new, mc.unit)}  {ratio}{ci}  {mc.verdict}{note}"


def _header(report: CompareReport) -> list[str]:
    lines = []
    for s in (report.old, report.new):
        commits = f"; commit {', '.join(s.git_commits)}" if s.git_commits else ""
        lines.append(f"{s.name}  {s.path}  ({s.kinds}, {s.trials} trial(s), {s.configurations} configuration(s)"
                     f"{commits})")
    n = report.noise
    src = ("assumed (no configuration measured twice)" if n.from_prior_only else
           f"from {n.configurations} configuration(s) measured more than once")
    lines.append(f"metric {report.metric}, threshold {report.threshold:.0%}, {report.confidence:.0%} intervals; "
                 f"between-process noise {n.between_sd:.1%} ({src}, df {n.df})")
    return lines


def _detail_lines(cc: ConfigComparison) -> list[str]:
    m = cc.metrics
    lines = [f"{cc.label}  (OLD {cc.old_runs} run(s), NEW {cc.new_runs} run(s)): {cc.verdict}"]
    for name, title in (("throughput", "throughput"), ("step_time", "step time")):
        if name in m:
            lines.append(f"  {title:<12} {_metric_line(m[name])}")
    wait = m.get("data_wait")
    if wait is not None and wait.old is not None:
        lines.append(f"  data wait    {_num(wait.old, 'ms')} -> {_num(wait.new, 'ms')} ({_pct(wait.change)}), "
                     "median of the timed steps (no interval)")
    splits = [m[f"split.{p}"] for p in PHASES if f"split.{p}" in m and m[f"split.{p}"].old is not None]
    if splits:
        lines.append("  splits (ms)  " + ", ".join(
            f"{s.name[6:]} {_num(s.old)} -> {_num(s.new)} ({_pct(s.change)})" for s in splits)
            + "  (profiled steps, no interval)")
    mem = [m[f"memory.{k}"] for k in MEMORY_FIELDS if f"memory.{k}" in m]
    if mem:
        lines.append("  peak memory  " + ", ".join(  # median over runs of each run's peak
            f"{MEMORY_NAMES[x.name[7:]]} {_num(x.old, 'MB')} -> {_num(x.new, 'MB')} ({_pct(x.change)})" for x in mem))
    acc = [m[a] for a in ACCURACY_METRICS if a in m]
    if acc:
        lines.append("  accuracy     " + ", ".join(
            f"{a.name} {_num(a.old)} -> {_num(a.new)} ({_pct(a.change) if a.verdict != 'not comparable' else a.note})"
            for a in acc))
    for note in cc.notes:
        lines.append(f"  note         {note}")
    return lines


def _table_row(cc: ConfigComparison, metric: str) -> list[str]:
    mc = cc.metrics.get(metric)
    if mc is None or (mc.old is None and mc.new is None):
        return [cc.label, "n/a", "n/a", "n/a", "n/a", cc.verdict]
    ratio = f"x{mc.ratio:.3f}" if mc.ratio is not None else "n/a"
    return [cc.label, f"{_num(mc.old)} ({cc.old_runs})", f"{_num(mc.new)} ({cc.new_runs})", ratio,
            _interval_text(mc), cc.verdict]


def _columns(report: CompareReport) -> list[str]:
    unit = next((c.metrics[report.metric].unit for c in report.configurations if report.metric in c.metrics), "")
    what = {"throughput": "samples/s", "step_time": "step ms"}.get(report.metric) or (
        f"{report.metric}" + (f" {unit}" if unit else ""))
    return ["configuration", f"OLD {what} (runs)", f"NEW {what} (runs)", "NEW/OLD", "95% interval", "verdict"]


def render_text(report: CompareReport) -> str:
    lines = _header(report) + [""]
    cols = _columns(report)
    rows = [_table_row(c, report.metric) for c in report.configurations]
    widths = [max(len(r[i]) for r in rows + [cols]) for i in range(len(cols))]
    for r in [cols] + rows:
        lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    lines.append("")
    for cc in report.configurations:
        lines += _detail_lines(cc)
    if report.only_old:
        lines.append(f"only in OLD: {'; '.join(report.only_old)}")
    if report.only_new:
        lines.append(f"only in NEW: {'; '.join(report.only_new)}")
    lines.append(f"result: {report.summary} (exit {report.exit_code})")
    return "\n".join(lines)


def _md(v: str) -> str:
    return v.replace("|", "\\|")


def render_markdown(report: CompareReport) -> str:
    status = "regression" if report.exit_code else "no significant regression"
    out = [f"### perftune compare: {status}", "", f"**{_md(report.summary)}**", ""]
    out += [f"- {_md(line)}" for line in _header(report)]
    out.append("")
    cols = _columns(report)
    out.append("| " + " | ".join(cols) + " |")
    out.append("|" + "|".join(["---"] + ["---:"] * 4 + ["---"]) + "|")
    for cc in report.configurations:
        row = _table_row(cc, report.metric)
        if cc.regression:
            row[-1] = f"**{row[-1]}**"
        out.append("| " + " | ".join(_md(v) for v in row) + " |")
    out.append("")
    # where the time moved, memory and accuracy, one row per configuration
    detail_cols = ["configuration", "step time ms", "data wait ms"] + [f"{p} ms (profiled)" for p in PHASES] + \
        ["peak memory MB"] + list(ACCURACY_METRICS)
    out.append("<details><summary>step time, splits, memory, accuracy (OLD → NEW)</summary>")
    out.append("")
    out.append("| " + " | ".join(detail_cols) + " |")
    out.append("|" + "|".join(["---"] + ["---:"] * (len(detail_cols) - 1)) + "|")

    def cell(mc: Optional[MetricChange]) -> str:
        if mc is None or mc.old is None or mc.new is None:
            return "n/a"
        return f"{_num(mc.old)} → {_num(mc.new)} ({_pct(mc.change)})"

    for cc in report.configurations:
        m = cc.metrics
        out.append("| " + " | ".join(_md(v) for v in [cc.label, cell(m.get("step_time")), cell(m.get("data_wait"))]
                                      + [cell(m.get(f"split.{p}")) for p in PHASES] + [cell(m.get("memory"))]
                                      + [cell(m.get(a)) for a in ACCURACY_METRICS]) + " |")
    out += ["", "Data wait, splits, memory and accuracy have no interval: the threshold applies to their relative "
            "change.  Data wait is the median over the timed steps; the splits come from the few profiled steps.",
            "", "</details>", ""]
    if report.warnings:
        out.append("**Warnings**")
        out.append("")
        out += [f"- {_md(w)}" for w in report.warnings]
        out.append("")
    if report.only_old or report.only_new:
        if report.only_old:
            out.append(f"Only in OLD: {_md('; '.join(report.only_old))}")
        if report.only_new:
            out.append(f"Only in NEW: {_md('; '.join(report.only_new))}")
        out.append("")
    return "\n".join(out)
