"""``perftune compare OLD NEW``: did a change make training slower, with the noise taken into account?

Each side is a sweep's ``results.json``, a single ``trial.json``, a folder holding either, or a folder of such
folders (several runs of the same plan, e.g. interleaved CI rounds: ``runs/base/1``, ``runs/base/2``), pooled.

Trials are matched by their effective knob values.  Every trial is one process; the processes of one configuration
on one side (a sweep's baseline runs, or the same plan run twice) are pooled, and every
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
from dataclasses import asdict, dataclass
from pathlib import Path

from perftune.compare.match import (
    check_comparable,
    closest_difference,
    config_label,
    distinct_values,
    group_entries,
    knob_names,
    knobs_of,
    side_warnings,
)
from perftune.compare.metrics import (
    METRICS_HELP,
    ConfigComparison,
    compare_config,
    known_metric,
    noise_of,
    step_rate_windows,
)
from perftune.compare.sides import Side, load_side
from perftune.engine import stats
from perftune.errors import UserError
from perftune.io.plan import ACCURACY_METRICS
from perftune.io.store import finite

COMPARE_JSON_VERSION = 1


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
class ProcessNoiseSummary:
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
    noise: ProcessNoiseSummary
    configurations: list[ConfigComparison]
    only_old: list[str]
    only_new: list[str]
    warnings: list[str]
    regressions: list[str]
    exit_code: int
    summary: str

    def to_dict(self) -> dict:
        return {"kind": "perftune-compare", "version": COMPARE_JSON_VERSION, **finite(asdict(self))}


def side_summary(side: Side, groups: dict) -> SideSummary:
    kinds = {k: side.file_kinds.count(k) for k in ("sweep", "trial") if side.file_kinds.count(k)}
    env = lambda attr: [str(v) for v in distinct_values(  # noqa: E731
        side, lambda e: getattr(e.result.environment, attr) if e.result.environment else None)]
    return SideSummary(name=side.name, path=side.path, files=side.files,
                       kinds=", ".join(f"{n} {'results.json' if k == 'sweep' else 'trial.json'}"
                                       f"{' files' if n > 1 else ''}" for k, n in kinds.items()),
                       trials=len(side.entries), configurations=len(groups), git_commits=env("git_commit"),
                       mindspore_versions=env("mindspore_version"), hosts=env("host"))


def run_compare(old: str | Path, new: str | Path, threshold: float = 0.05, metric: str = "throughput",
                confidence: float = 0.95) -> CompareReport:
    """Compare NEW against OLD.  Raises ``UserError`` (exit 2) for unusable input; writes nothing."""
    if not (0 <= threshold < 1) or not math.isfinite(threshold):
        raise UserError(f"threshold {threshold!r}: expected a relative change in [0, 1), e.g. 0.05")
    known = known_metric(metric)
    if known is None:
        raise UserError(f"metric {metric!r}: unknown metric (allowed: {METRICS_HELP})")
    metric = known
    old_side, new_side = load_side(old, "OLD"), load_side(new, "NEW")
    check_comparable(old_side, new_side)
    names, missing = knob_names(old_side, new_side)
    old_groups, new_groups = group_entries(old_side, names), group_entries(new_side, names)
    common = [k for k in old_groups if k in new_groups]
    if not common:
        raise UserError(f"nothing in common: none of OLD's {len(old_groups)} configuration(s) was measured in NEW "
                        f"({len(new_groups)}); closest pair differs in {closest_difference(old_groups, new_groups)}")
    warnings = side_warnings(old_side, new_side, missing) + [f"{s.name}: {d}" for s in (old_side, new_side)
                                                             for d in s.doubts]
    warnings += [same] if (same := same_runs(old_side, new_side)) else []

    # labels relative to OLD's baseline (or its first trial)
    ref_entry = next((e for e in old_side.entries if e.kind == "baseline"), old_side.entries[0])
    reference = knobs_of(ref_entry, names)
    base_label = "baseline" if ref_entry.kind == "baseline" else "reference"

    def label(key: str) -> str:
        return config_label(json.loads(key), reference, base_label)

    noise = noise_of([old_groups, new_groups], stats.throughput_windows)
    step_noise = noise_of([old_groups, new_groups], step_rate_windows)
    repeated = sum(1 for g in (old_groups, new_groups) for es in g.values() if sum(e.ok for e in es) > 1)
    if not repeated:
        warnings.append(f"no configuration was measured more than once on either side: the intervals assume a "
                        f"between-process noise of {stats.PRIOR_SD:.0%}; measure the baseline at least "
                        "twice (decision.baseline_runs) for an estimate from your machine")
    configs = [compare_config(label(k), json.loads(k), old_groups[k], new_groups[k], metric, threshold, confidence,
                               noise, step_noise) for k in common]
    warnings += config_warnings(configs)
    require_usable(configs, metric)
    regressions = [c.label for c in configs if c.regression]
    exit_code = 1 if regressions else 0
    report = CompareReport(
        old=side_summary(old_side, old_groups), new=side_summary(new_side, new_groups), metric=metric,
        threshold=threshold, confidence=confidence,
        noise=ProcessNoiseSummary(between_sd=noise.sd, df=noise.df, configurations=repeated,
                           from_prior_only=not repeated),
        configurations=configs,
        only_old=[f"{label(k)} ({sum(e.ok for e in old_groups[k])} run(s))" for k in old_groups if k not in new_groups],
        only_new=[f"{label(k)} ({sum(e.ok for e in new_groups[k])} run(s))" for k in new_groups if k not in old_groups],
        warnings=warnings, regressions=regressions, exit_code=exit_code,
        summary=summary_line(configs, metric, threshold))
    return report


def same_runs(old: Side, new: Side) -> str:
    """One line where OLD and NEW hold the very same runs (the same trial ids with the same timed windows: the same
    folder twice, or a copy of it), else "": such a comparison always passes, so a CI step wired to compare a
    results folder with itself must not pass silently."""
    def runs(side: Side) -> set[str]:
        return {json.dumps([e.result.trial_id, [w.model_dump(mode="json") for w in e.result.windows]])
                for e in side.entries}

    if runs(old) != runs(new):
        return ""
    return (f"OLD and NEW are the same runs ({len(old.entries)} trial(s) with the same ids and timed windows): this "
            "compares a measurement with itself and cannot find a regression; compare a new measurement with OLD")


def config_warnings(configs: list[ConfigComparison]) -> list[str]:
    """The configurations' own warnings, and one when accuracy cannot be compared."""
    out = [f"{cc.label}: {note.text}" for cc in configs for note in cc.notes if note.kind == "warning"]
    not_comparable = next((mc.note for cc in configs for mc in cc.metrics.values()
                           if mc.name in ACCURACY_METRICS and mc.verdict == "not comparable"), None)
    if not_comparable:
        out.append(f"accuracy {not_comparable}: accuracy changes are not compared")
    return out


def require_usable(configs: list[ConfigComparison], metric: str) -> None:
    """Exit 2 when no configuration measured ``metric`` on both sides."""
    usable = [c for c in configs if c.regression or c.metrics.get(metric) is not None
              and c.metrics[metric].verdict not in ("not measured", "not comparable")]
    if not usable:
        why = "; ".join(f"{c.label}: {c.metrics[metric].note if metric in c.metrics else c.verdict}"
                        for c in configs[:3])
        raise UserError(f"nothing measurable in common for the metric {metric} ({why})")


def summary_line(configs: list[ConfigComparison], metric: str, threshold: float) -> str:
    regressions = [c.label for c in configs if c.regression]
    if regressions:
        return (f"REGRESSION in {metric}: {', '.join(regressions)} "
                f"({len(regressions)} of {len(configs)} configuration(s))")
    faster = [c.label for c in configs if c.verdict in ("faster", "better")]
    return (f"no significant regression in {metric} beyond {threshold:.0%} ({len(configs)} configuration(s) compared"
            + (f"; improved: {', '.join(faster)}" if faster else "") + ")")
