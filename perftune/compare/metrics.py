"""One configuration, OLD vs NEW: throughput and step time with intervals (``stats.compare``: the noise model,
interval and verdict of every perftune comparison, looked at once), and the metrics
without windows (data wait, splits, memory, accuracy) by a threshold on their relative change."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from perftune.compare.sides import Entry
from perftune.engine import stats
from perftune.errors import UserError
from perftune.io.plan import ACCURACY_METRICS
from perftune.io.records import PHASES, Note, TrialResult
from perftune.words import lm

MEMORY_FIELDS = {"device": "device_peak_bytes", "allocator": "allocator_peak_bytes", "host_rss": "host_rss_peak_bytes"}
MEMORY_NAMES = {"device": "device peak", "allocator": "allocator peak", "host_rss": "host RSS peak"}
METRICS_HELP = ("throughput | step_time | data_wait | split.<data|forward|backward|optimizer|communication|other> | "
                "memory | memory.<host_rss|allocator|device> | val_loss | train_loss | perplexity")
INTERVAL_VERDICTS = {"faster": "faster", "slower": "slower", "not significant": "no significant change"}


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
    notes: list[Note] = field(default_factory=list)


def step_rate_windows(result: TrialResult) -> list[float]:
    """Steps per second from each window's mean step (its time / its steps, the one step statistic of every
    output): the step-time comparison runs on its inverse."""
    return [w.steps * 1e3 / w.total_ms for w in result.windows if w.total_ms > 0 and w.steps > 0]


def process_runs(config: Any, entries: list[Entry],
                 windows: Callable[[TrialResult], list[float]]) -> list[stats.ProcessRun]:
    """The usable processes of one configuration on one side, in file order."""
    for e in entries:
        bad = [v for v in (windows(e.result) if e.ok else []) if v is None or not math.isfinite(v) or v <= 0]
        if bad:
            raise UserError(f"{e.source}: trial {e.result.trial_id} has an unusable window throughput ({bad[0]!r}; "
                            "expected finite numbers > 0): the file is corrupted or was edited")
    return stats.runs_of(config, (e.result for e in entries), windows=windows)


def noise_of(groups: list[dict[str, list[Entry]]], windows: Callable[[TrialResult], list[float]]) -> stats.Noise:
    """Between-process noise from every configuration measured in more than one process, on either side."""
    return stats.Noise.pooled([r for side, g in enumerate(groups) for key, entries in g.items()
                               for r in process_runs((side, key), entries, windows)])


def _interval_metric(name: str, unit: str, old: list[Entry], new: list[Entry], noise: stats.Noise,
                     windows: Callable[[TrialResult], list[float]], threshold: float, confidence: float,
                     invert: bool) -> MetricChange:
    mc = MetricChange(name=name, unit=unit, interval=True)
    ref, cand = process_runs("OLD", old, windows), process_runs("NEW", new, windows)
    if not ref or not cand:
        mc.interval = False
        mc.note = "no timed windows on " + ("both sides" if not ref and not cand else ("OLD" if not ref else "NEW"))
        return mc
    c = stats.compare(ref, cand, noise, stats.Policy(confidence=confidence, equivalence=0.0, max_runs=1,
                                                      min_gain=threshold))
    # the values shown are the centres the ratio is estimated from (geometric mean of the processes' window
    # means), so NEW / OLD is the ratio exactly and the numbers never point the other way from it
    old_centre, new_centre = math.exp(stats.centre(ref)), math.exp(stats.centre(cand))
    if invert:  # step time: the ratio of times is the inverse of the ratio of rates
        mc.old, mc.new = 1e3 / old_centre, 1e3 / new_centre
        mc.ratio, mc.ci_low, mc.ci_high = 1 / c.ratio, 1 / c.ci_high, 1 / c.ci_low
    else:
        mc.old, mc.new = old_centre, new_centre
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


def known_metric(metric: str) -> Optional[str]:
    """``metric`` as a name this comparison knows (stripped), or None (see ``METRICS_HELP``)."""
    m = metric.strip()
    if m in ("throughput", "step_time", "data_wait", "memory") or m in ACCURACY_METRICS:
        return m
    if m.startswith("split.") and m[len("split."):] in PHASES:
        return m
    if m.startswith("memory.") and m[len("memory."):] in MEMORY_FIELDS:
        return m
    return None


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


def compare_config(label: str, knobs: dict, old: list[Entry], new: list[Entry], metric: str, threshold: float,
                    confidence: float, noise: stats.Noise, step_noise: stats.Noise) -> ConfigComparison:
    old_ok, new_ok = [e for e in old if e.ok], [e for e in new if e.ok]
    cc = ConfigComparison(label=label, knobs=knobs, old_runs=len(old_ok), new_runs=len(new_ok), verdict="",
                          regression=False)
    for name, entries in (("OLD", old), ("NEW", new)):
        bad = [e for e in entries if not e.ok]
        if bad and len(bad) < len(entries):
            cc.notes.append(Note(kind="warning", text=f"{len(bad)} of {len(entries)} {name} run(s) did not measure: "
                                 + "; ".join(f"{e.result.status}: {e.result.reason or 'no windows'}" for e in bad[:2])))
    if not old_ok or not new_ok:
        if old_ok and not new_ok:
            cc.verdict, cc.regression = "failed on NEW", True
            cc.notes.append(Note(kind="info", text="runs on OLD, fails on NEW: " + "; ".join(
                f"{e.result.status}: {e.result.reason or 'no windows'}" for e in new[:2])))
        elif new_ok:
            cc.verdict = "runs again on NEW"
        else:
            cc.verdict = "failed on both sides"
        return cc
    m = cc.metrics
    m["throughput"] = _interval_metric("throughput", "samples/s", old_ok, new_ok, noise, stats.throughput_windows,
                                       threshold, confidence, invert=False)
    m["step_time"] = _interval_metric("step_time", "ms", old_ok, new_ok, step_noise, step_rate_windows,
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
    language_model = any(lm.is_language_model(e.result) for e in (*old_ok, *new_ok))
    for acc in ACCURACY_METRICS:
        if acc == "perplexity" and not language_model and metric != acc:
            continue  # exp(loss) is a perplexity only for a token cross-entropy (words/lm.py, the one rule)
        mc = _accuracy_metric(acc, old_ok, new_ok, threshold)
        if mc.old is not None or mc.new is not None or metric == acc:
            m[acc] = mc
    chosen = m.get(metric) or MetricChange(name=metric, unit="", note="not measured on either side")
    m.setdefault(metric, chosen)
    cc.verdict, cc.regression = chosen.verdict, chosen.regression
    return cc
