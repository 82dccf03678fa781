"""The cumulative ablation table and the one-at-a-time table, as DataFrames, CSV and Markdown.

Columns carry their units.  The Markdown is meant to be pasted into a pull request as it is.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd

from perftune.io.derived import step_compiles
from perftune.io.records import PHASES, TrialResult
from perftune.io.store import write_text_atomic
from perftune.io.sweep_records import SweepResult, SweepTrial
from perftune.report.notes import edge_notes
from perftune.report.process_rows import contention_mark, paired_row, used_process
from perftune.report.summary import comparison_lines, noise_line, paired_lines, quoted_process
from perftune.words import lm
from perftune.words.ceiling_words import ceiling_line
from perftune.words.format import num, rate, speed_text, step_text, validation_figures
from perftune.words.memory_words import memory_ratio_text
from perftune.words.reasons import reason_text, stack_reason
from perftune.words.rules import budget_text, order_rule_text
from perftune.words.search_words import search_line


def _trial_row(trial: Optional[SweepTrial], metric: str, label: str) -> dict:
    row: dict = {"configuration": label}
    if trial is None:
        return row
    r = trial.result
    cmp_ = trial.vs_baseline
    row.update({
        "verdict": trial.verdict,
        "samples_per_s": r.samples_per_s,
        "tokens_per_s": r.tokens_per_s,
        "model_gflop_per_s": lm.model_gflop_per_s(r),
        "speedup": cmp_.ratio if cmp_ else (1.0 if trial.kind == "baseline" else None),
        "speedup_ci_low": cmp_.ci_low if cmp_ else None,
        "speedup_ci_high": cmp_.ci_high if cmp_ else None,
        "step_ms": r.step_ms_mean,  # the mean: what throughput and the splits are of; the median beside it
        "step_ms_median": r.step_ms_median,
        "compile_s": r.compile_ms / 1e3 if r.compile_ms is not None else None,
        "step_graphs": step_graphs(r),
    })
    splits = r.profile.splits if r.profile and r.profile.splits else None
    for phase in PHASES:
        row[f"{phase}_ms"] = getattr(splits, f"{phase}_ms") if splits else None
    row["recompute_ms"] = splits.recompute_ms if splits else None  # a part of backward_ms
    mem = r.memory
    row["peak_mem_mb"] = (mem.allocator_peak_bytes or mem.device_peak_bytes or 0) / 2**20 or None
    row["host_rss_mb"] = (mem.host_rss_peak_bytes or 0) / 2**20 or None
    memory = cmp_.memory if cmp_ else None  # peak memory against the same reference as the speed-up
    row["memory_vs_reference"] = f"{memory_ratio_text(memory)} {memory.measure}" if memory else None
    row["memory_frees_mb"] = memory.frees_mb if memory else None  # under burst.memory_limit_mb
    acc = r.accuracy
    row[metric] = getattr(acc, metric) if acc else None
    if metric == "perplexity" and row[metric] is not None and lm.overflows(row[metric]):
        row[metric] = None  # gated on perplexity: the gate's value, but never a 100-digit number (words/lm.py)
    row[f"{metric}_change"] = trial.accuracy_changes.get(metric) if trial.kind != "baseline" else 0.0
    if metric != "perplexity":  # as the gate's metric it is there already, language model or not
        row["perplexity"] = lm.perplexity(r)
    row["repetition_rate"] = lm.repetition(r)
    row["script_validation"] = validation_text(acc)
    row["reason"] = reason_text(trial)
    row["trial_id"] = trial.trial_id
    return row


def validation_text(acc) -> Optional[str]:
    """A script's own validation figures in one cell (``accuracy 0.812, loss 0.53 @128``); None without any."""
    figures = validation_figures(acc)
    return f"{figures} @{acc.val_metrics_samples}" if figures else None


def _by_id(result: SweepResult) -> dict[str, SweepTrial]:
    """First appearance of each trial: a later row with the same id (leave-one-out) reuses a decided trial."""
    out: dict[str, SweepTrial] = {}
    for t in result.trials:
        out.setdefault(t.trial_id, t)
    return out


def ablation_table(result: SweepResult) -> pd.DataFrame:
    """Baseline, +A, +A+B, ...: one row per stack step (dropped steps included, marked)."""
    metric = result.plan.accuracy.metric
    trials = _by_id(result)
    rows = []
    for step in result.stack:
        shown = used_process(trials.get(step.trial_id), result.trials)  # never a process the sweep did not use
        row = _trial_row(shown, metric, step.label)
        replaced = shown is not None and shown.trial_id != step.trial_id
        if replaced:
            row["reason"] = (f"its run {shown.replicate + 1}: run {trials[step.trial_id].replicate + 1} was not used "
                             f"({trials[step.trial_id].excluded})")
        if shown is not None and row.get("data_ms") is None:
            row.update(profiled_splits(shown, result.trials))
        row["kept"] = step.kept
        if step.label != "baseline":
            row["verdict"] = "kept" if step.kept else "dropped"
            t = trials.get(step.trial_id)
            row["reason"] = stack_reason(step.kept, t, step.reason) + (f"; {row['reason']}" if replaced else "")
        if "splits_from" in row:
            row["reason"] = "; ".join(x for x in (row.get("reason"), row.pop("splits_from")) if x)
        rows.append(row)
    return pd.DataFrame(rows)


def profiled_splits(trial: SweepTrial, trials: Sequence[SweepTrial]) -> dict:
    """A row of ``trial`` whose process has no profile (a repeat process skips the profiler; a contended first
    process is replaced by a repeat in the tables): the splits of its configuration's profiled process, and a
    reason that says which process they are of; nothing where none was profiled."""
    profiled = next((t for t in trials if t.label == trial.label and t.result.profile is not None
                     and t.result.profile.splits is not None and t.result.profile.splits.step_ms), None)
    if profiled is None:
        return {}
    splits = profiled.result.profile.splits
    row: dict = {f"{phase}_ms": getattr(splits, f"{phase}_ms") for phase in PHASES}
    row["recompute_ms"] = splits.recompute_ms
    row["splits_step_ms"] = splits.step_ms  # they add up to that process's step, not to the row's
    row["splits_from"] = (f"splits: its run {profiled.replicate + 1}'s (the profiled process), which add up to that "
                          f"process's mean step {splits.step_ms:.2f} ms, not to the step shown (run "
                          f"{trial.replicate + 1}'s)")
    return row


def paired_figures(row: dict, trial: SweepTrial, reference_sps: Optional[float]) -> dict:
    """A row whose verdict came from paired processes: its samples/s (and tokens/s) are the reference's times the
    paired ratio, so the figures beside the verdict agree with it (a fresh process's own, contended or not, does
    not decide a paired comparison); the first process's own figure is kept in the reason."""
    c = trial.vs_baseline
    if c is None or c.design != "paired" or not reference_sps or not row.get("samples_per_s"):
        return row
    own, implied = row["samples_per_s"], reference_sps * c.ratio
    out = dict(row, samples_per_s=implied, samples_per_s_from="paired", process_samples_per_s=own)
    if row.get("tokens_per_s"):
        out["tokens_per_s"] = row["tokens_per_s"] * implied / own
    note = (f"samples/s: the baseline's {rate(reference_sps)} x the paired ratio {c.ratio:.3f} (its first process "
            f"alone: {rate(own)})")
    out["reason"] = f"{row.get('reason') or ''}; {note}".lstrip("; ")
    return out


def process_label(trial: SweepTrial, trials: Sequence[SweepTrial]) -> str:
    """A process's label in every table and figure: its configuration's, with ``(run N)`` for a candidate's repeat
    and for a baseline measured in more than one process (a lone measured trial is no run of anything)."""
    baseline_runs = len({t.trial_id for t in trials if t.kind == "baseline"})
    if trial.kind == "repeat" or (trial.kind == "baseline" and baseline_runs > 1):
        return f"{trial.label} (run {trial.replicate + 1})"
    return trial.label


def marked_label(trial: SweepTrial, trials: Sequence[SweepTrial]) -> str:
    """``process_label`` with the process's contention marked (``process_rows.contention_mark``)."""
    return process_label(trial, trials) + contention_mark(trial)


def singles_table(result: SweepResult) -> pd.DataFrame:
    """Every process of every one-at-a-time comparison: the baseline's, then each change's first process followed
    by its repeat processes and its paired processes, each on its own line."""
    metric = result.plan.accuracy.metric
    confidence = result.plan.decision.confidence

    def row(t: SweepTrial) -> dict:
        out = _trial_row(t, metric, process_label(t, result.trials))
        out["contended"] = contention_mark(t).strip(" []") or None  # shown beside the label (html, Markdown)
        if t.excluded and t.kind == "single":  # the comparison's verdict stays on its configuration's first line
            out["reason"] = f"{out.get('reason') or ''}; this process: {t.excluded}".lstrip("; ")
        elif t.excluded:
            out.update(verdict="not used", reason=t.excluded, speedup=None)
        return out

    rows = [row(t) for t in result.trials if t.kind == "baseline"]
    quoted = quoted_process(result, "baseline")
    reference_sps = quoted.samples_per_s if quoted is not None else None  # as the summary quotes it
    for single in (t for t in result.trials if t.kind == "single"):
        rows.append(paired_figures(row(single), single, reference_sps))
        used = single.vs_baseline.processes if single.vs_baseline else None
        for t in (t for t in result.trials if t.kind == "repeat" and t.label == single.label):
            rows.append(row(t))
            if used is not None and t.replicate >= used and not t.excluded and not rows[-1].get("reason"):
                rows[-1]["reason"] = (f"not in the verdict above (it used {used} process{'es' if used > 1 else ''}"
                                      "): measured for a later comparison")
        rows += [paired_row(p, confidence) for p in result.paired
                 if p.candidate == single.label and p.reference == "baseline"]
    return pd.DataFrame(rows)


def loo_table(result: SweepResult) -> pd.DataFrame:
    metric = result.plan.accuracy.metric
    return pd.DataFrame([_trial_row(t, metric, t.label) for t in result.trials if t.kind == "leave_one_out"])


def _fmt_speedup(row) -> str:
    if row.get("speedup") is None or pd.isna(row.get("speedup")):
        return ""
    if row.get("verdict") == "baseline":
        return "reference"
    return speed_text(row.get("speedup"), row.get("speedup_ci_low"), row.get("speedup_ci_high"))


#: columns shown only where some row has a value: (header, row key, format, the header they follow).  Language
#: models get tokens/s, perplexity and repetition; a profile that placed recomputed ops gets its part of backward.
OPTIONAL_COLUMNS = [
    ("tokens/s", "tokens_per_s", ".0f", "samples/s"),
    ("graphs compiled by the steps", "step_graphs", ".0f", "compile s"),
    ("peak mem vs reference [95% CI]", "memory_vs_reference", "s", "compile s"),
    ("MB freed of the memory limit", "memory_frees_mb", ".0f", "compile s"),
    ("recompute ms (of bwd)", "recompute_ms", ".2f", "data / fwd / bwd / opt / comm / other ms"),
    ("perplexity", "perplexity", ".2f", "change"),
    ("repetition", "repetition_rate", ".2f", "change"),
    ("script's validation", "script_validation", "s", "change"),
]


def step_graphs(r: TrialResult) -> Optional[int]:
    """The graphs a trial's training steps compiled (one per model: every phase runs the same graph), or None where
    not counted."""
    return sum(step_compiles(r).values()) if r.compiles else None


#: optional columns that say nothing where every row holds this value (no recomputed op placed; one step graph per
#: process, as every process compiles: the trial's own summary still says it); with both always
#: shown, the one-at-a-time table grew past a 1280-pixel page
USUAL = {"recompute_ms": 0.0, "step_graphs": 1.0}


def optional_columns(df: pd.DataFrame, metric: str) -> list[tuple[str, str, str, str]]:
    """The ``OPTIONAL_COLUMNS`` that ``df`` fills (the gate's own metric is a column already), those in ``USUAL``
    only where some row differs from the usual value."""
    def filled(key: str) -> bool:
        values = df[key].dropna()
        return bool((values != USUAL[key]).any()) if key in USUAL else not values.empty

    return [c for c in OPTIONAL_COLUMNS if c[1] != metric and c[1] in df and filled(c[1])]


def _with_optional(values: list[str], head: list[str], extras: list, cell) -> list[str]:
    """``values`` (one per ``head`` column) with ``cell(column)`` inserted after each extra column's anchor."""
    out = list(values)
    for column in sorted(reversed(extras), key=lambda c: -head.index(c[3])):
        out.insert(head.index(column[3]) + 1, cell(column))
    return out


def to_markdown(df: pd.DataFrame, metric: str) -> str:
    if df.empty:
        return "_(none)_\n"
    base_head = ["configuration", "verdict", "samples/s", "vs reference [95% CI]", "step ms: mean (median)",
                 "data / fwd / bwd / opt / comm / other ms", "compile s", "peak mem MB", metric, "change", "reason"]
    extras = optional_columns(df, metric)
    head = _with_optional(base_head, base_head, extras, lambda c: c[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, row in df.iterrows():
        splits = " / ".join(num(row.get(f"{p}_ms"), ".2f") or "-" for p in PHASES) \
            if row.get("data_ms") is not None and not pd.isna(row.get("data_ms")) else ""
        if splits and num(row.get("splits_step_ms"), ".2f"):  # another process's splits: of its own step
            splits += f" (of {num(row.get('splits_step_ms'), '.2f')})"
        change = row.get(f"{metric}_change")
        contended = row.get("contended")
        contended = f"[{contended}] " if isinstance(contended, str) and contended else ""
        cells = [
            md_text(row["configuration"]), md_text(row.get("verdict", "")),
            rate(row.get("samples_per_s")) + (" (paired)" if row.get("samples_per_s_from") == "paired" else ""),
            _fmt_speedup(row), step_text(row.get("step_ms"), row.get("step_ms_median")), splits,
            num(row.get("compile_s"), ".1f"), num(row.get("peak_mem_mb"), ".1f"),
            num(row.get(metric), ".4f"), num(change, "+.1%"),
            md_text(contended + (row.get("reason") if isinstance(row.get("reason"), str) else "")),
        ]
        cells = _with_optional(cells, base_head, extras, lambda c, row=row: num(row.get(c[1]), c[2]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def md_text(value) -> str:
    """A value as Markdown text that renders as written, and reads as written in the file: only what a renderer
    would take for HTML is escaped (``<`` opening a tag, ``&`` opening an entity: an exception message may hold
    tags, and ablation.md goes into pull requests), so ``< 25%`` and ``>=`` stay as they are; ``|`` escaped (table
    cells) and on one line."""
    text = re.sub(r"&(?=#?\w+;)", "&amp;", str(value))
    text = re.sub(r"<(?=[A-Za-z/!?])", "&lt;", text).replace("|", "\\|")
    return " ".join(text.splitlines())


def markdown_report(result: SweepResult) -> str:
    metric = result.plan.accuracy.metric
    parts = [f"## perftune: {md_text(result.plan.name)} ({md_text(result.plan.workload)} on {result.plan.device})",
             ""]
    if result.best_label and result.best_vs_baseline:
        b = result.best_vs_baseline
        parts.append(f"Best configuration: **{md_text(result.best_label)}**, against the baseline: "
                     f"{speed_text(b.ratio, b.ci_low, b.ci_high)} (throughput, 95% interval).")
        parts.append("")
    if result.aa_check:
        a = result.aa_check
        parts.append("A/A check (the baseline's later runs against its earlier ones): "
                     f"{speed_text(a.ratio, a.ci_low, a.ci_high, 3)} -> {a.verdict}.")
        parts.append("")
    for line in paired_lines(result):
        parts += [md_text(line[0].upper() + line[1:]) + ".", ""]
    parts += ["### Cumulative ablation", "", to_markdown(ablation_table(result), metric),
              "### One variable at a time", "", to_markdown(singles_table(result), metric)]
    loo = loo_table(result)
    if not loo.empty:
        parts += ["### Leave one out (final stack minus one change)", "", to_markdown(loo, metric)]
    if result.order_rule:
        parts += [f"Order rule: {md_text(order_rule_text(result.order_rule))}.", ""]
    if result.ceilings:
        parts += ["### Ceilings from the splits", ""]
        parts += [f"- {md_text(ceiling_line(c))}" for c in result.ceilings] + [""]
    if result.searches:
        parts += ["### Searched knobs", "", *[f"- {md_text(search_line(s))}" for s in result.searches], ""]
    parts += [f"Note: {md_text(line)}.\n" for line in edge_notes(result)]
    budget = budget_text(result.plan.decision.budget_s, result.left_unmeasured)
    parts += [f"Budget: {md_text(budget)}.", ""] if budget else []
    parts += ["Ratios: the configuration's speed against its reference, `x1.23 faster` / `x1.10 slower` with the 95% "
              "interval of that same factor.  Step time: the mean over the timed steps (throughput is batch / mean "
              "step, and the splits add up to it), the median beside it.  Compile: the first step.", ""]
    decisions = comparison_lines(result)
    if decisions:
        parts += ["### Decisions (processes used, interval, verdict and why)", "",
                  *[f"- {md_text(line)}" for line in decisions], "", noise_line(result), ""]
    return "\n".join(parts)


def write_tables(result: SweepResult, out_dir: Path) -> dict[str, Path]:
    out_dir = Path(out_dir)
    ablation = ablation_table(result)
    singles = singles_table(result)
    paths = {"ablation_csv": out_dir / "ablation.csv", "singles_csv": out_dir / "singles.csv",
             "ablation_md": out_dir / "ablation.md"}
    write_text_atomic(paths["ablation_csv"], ablation.to_csv(index=False))
    write_text_atomic(paths["singles_csv"], singles.to_csv(index=False))
    write_text_atomic(paths["ablation_md"], markdown_report(result))
    return paths
