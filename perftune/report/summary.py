"""Short human summaries printed at the end of a command."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from perftune.io.derived import step_compiles
from perftune.io.files import RESULTS_NAME
from perftune.io.records import TrialResult
from perftune.io.sweep_records import SweepResult
from perftune.report.accuracy_notes import gate_cannot_judge
from perftune.report.notes import edge_notes
from perftune.words import lm
from perftune.words.ceiling_words import ceiling_line
from perftune.words.format import count_word, mb, speed_text, time_ratio_text, validation_figures, verdict_counts
from perftune.words.format import num as format_num
from perftune.words.reasons import comparison_text, decision_line, phase_gap_text
from perftune.words.rules import budget_text, multiplicity_text
from perftune.words.search_words import search_line
from perftune.words.split_notes import split_notes
from perftune.words.window_words import limits_line, stack_check_lines, window_lines


def _num(value, fmt: str = ".1f") -> str:
    return format_num(value, fmt, missing="n/a")


def _share(value) -> str:
    return "?" if value is None else f"{value:.0%}"


def trial_summary(r: TrialResult, trial_dir: Path) -> str:
    if r.status != "ok":
        lines = [f"trial {r.trial_id}: {r.status.upper()}: {r.reason}"]
        if r.log_tail:
            lines += ["  last lines of the log:"] + ["    " + ln for ln in r.log_tail.splitlines()[-8:]]
        lines.append(f"  folder: {trial_dir}")
        return "\n".join(lines)
    acc = r.accuracy
    others = [w.others_cpu_share for w in r.windows if w.others_cpu_share is not None]
    lines = [
        f"trial {r.trial_id}: ok ({r.workload} on {r.device}, {_num(r.parameter_count, ',')} parameters)",
        f"  throughput   {lm.throughput_text(r)}"
        + (f", model {lm.model_gflop_per_s(r):.2f} GFLOP/s" if lm.model_gflop_per_s(r) else ""),
        f"  step time    mean {_num(r.step_ms_mean, '.2f')} ms (median {r.step_ms_median:.2f}, "
        f"p10 {r.step_ms_p10:.2f}, "
        f"p90 {r.step_ms_p90:.2f}), waiting for data {r.data_wait_ms_median:.2f} ms (median)",
        f"  compile      {_num(r.compile_ms, '.0f')} ms (first step, to its completion)" + compiles_text(r),
        *phase_lines(r),
        f"  machine      others used {_share(max(others, default=None))} "
        f"of the cores at most during a timed window; {r.contended_windows} of {len(r.windows)} windows contended",
        f"  memory       host RSS peak {mb(r.memory.host_rss_peak_bytes)}, allocator peak "
        f"{mb(r.memory.allocator_peak_bytes)}",
    ]
    if acc:
        figures = [f"val loss {_num(acc.val_loss, '.4f')}", lm.perplexity_text(r),
                   f"train loss {_num(acc.train_loss, '.4f')}",
                   f"repetition {lm.repetition(r):.2f}" if lm.repetition(r) is not None else ""]
        lines.append(f"  accuracy     after {acc.samples_seen} samples: {', '.join(f for f in figures if f)}"
                     + (" NON-FINITE" if acc.nonfinite else ""))
        lines += validation_lines(r)
        if acc.sample_text is not None:
            lines.append(f"  sample       {acc.sample_text!r} (greedy, after the accuracy window)")
    p = r.profile
    if p and p.splits:
        s = p.splits
        recompute = f" (of which recompute {s.recompute_ms:.2f})" if s.recompute_ms else ""
        lines.append(f"  splits (ms)  of the mean step {s.step_ms:.2f}: data {s.data_ms:.2f}, "
                     f"forward {s.forward_ms:.2f}, backward {s.backward_ms:.2f}"
                     f"{recompute}, optimizer {s.optimizer_ms:.2f}, communication {s.communication_ms:.2f}, "
                     f"other {s.other_ms:.2f}")
        for text in split_notes(s):
            lines.append(f"  splits note  {text}")
        if p.overhead_ratio:
            lines.append(f"  profiler     profiled steps {time_ratio_text(p.overhead_ratio)} than the timed ones, "
                         f"analyse {_num(p.analyse_s, '.1f')} s")
    elif p and p.error:
        lines.append(f"  profile      failed: {p.error}")
    for note in r.notes:
        lines.append(f"  note         {note.text}")
    lines.append(f"  folder: {trial_dir}")
    return "\n".join(lines)


def phase_lines(r: TrialResult) -> list[str]:
    """The median compute of each phase that ran the same computation: they should agree (``burst/agreement.py``)."""
    a = r.phase_agreement
    if a is None:
        return []
    medians = ", ".join(f"{name} {ms:.2f}" for name, ms in a.medians_ms.items())
    verdict = (f"agree (within x{a.limit:.2f})" if a.agree
               else f"DISAGREE: {phase_gap_text(a)} (allowed x{a.limit:.2f})")
    return [f"  phases       median compute (ms, a step less its wait for data): {medians}; {verdict}"]


def disagreeing_phases(result: SweepResult) -> list[str]:
    """The processes whose phases disagree: their figures were used, so the summary says which."""
    labels = sorted({f"{t.label} (run {t.replicate + 1})" for t in result.trials
                     if t.result.phase_agreement is not None and not t.result.phase_agreement.agree})
    if not labels:
        return []
    return [f"phases disagree in {len(labels)} process(es), whose figures are suspect (each trial's note says "
            f"which phase): {', '.join(labels)}"]


def diverged_processes(result: SweepResult) -> list[str]:
    """The processes whose training loss diverged in the accuracy window (``words.lm.divergence_of``)."""
    labels = sorted({f"{t.label} (run {t.replicate + 1})" for t in result.trials if lm.divergence_of(t.result)})
    return [f"training diverged in {len(labels)} process(es) (the training loss rose over the accuracy window; "
            f"their accuracy figures describe a diverged run): {', '.join(labels)}"] if labels else []


def validation_lines(r: TrialResult) -> list[str]:
    """A script's own validation figures; for a model with none (and no perplexity), a line that says so."""
    acc = r.accuracy
    figures = validation_figures(acc)
    if figures:
        return [f"  validation   the script's own, after {acc.val_metrics_samples} samples: {figures}"]
    if lm.is_language_model(r):
        return []
    return ["  validation   no accuracy metric: this workload reports losses only (a script adds one with "
            "perftune.metric(name, value) or Model.fit's valid_dataset)"]


def noise_line(result: SweepResult) -> str:
    """The process noise the sweep measured, and how its many comparisons are kept honest."""
    if result.noise_sd is None:
        return ""
    observed = result.noise_observed_df or 0
    return (f"noise: two processes of one configuration differ by {result.noise_sd:.1%} (sd of log throughput, "
            f"pooled over the sweep: {observed} observed + {(result.noise_df or 0) - observed} prior degrees of "
            f"freedom)" + (f"; false alarms controlled over {multiplicity_text(result.multiplicity)}"
                           if result.multiplicity else ""))


def paired_lines(result: SweepResult) -> list[str]:
    """The paired design's A/A check and the variance components it rests on (``engine/paired.py``); none when
    the sweep made no paired comparison."""
    lines = []
    a = result.aa_paired
    if a is not None:
        lines.append(f"A/A check in one process: the baseline's pipeline against another of its own, "
                     f"{a.processes} paired processes (both arm orders): {speed_text(a.ratio, a.ci_low, a.ci_high, 3)}"
                     f": {a.verdict} (±{a.resolution:.1%})")
    paired = [c for t in result.trials for c in (t.vs_baseline, t.vs_previous)
              if c is not None and c.design == "paired" and c.block_sd is not None]
    if paired and result.noise_sd is not None:
        block = max(c.block_sd for c in paired)
        between = max(c.process_sd for c in paired if c.process_sd is not None)
        lines.append(f"variance components: two fresh processes differ by {result.noise_sd:.1%}; in one process, "
                     f"an ABBA block's paired ratio by up to {block:.1%}, and paired processes by up to "
                     f"{between:.1%} (sd of log throughput, with their priors)")
    return lines


def comparison_lines(result: SweepResult) -> list[str]:
    """Per comparison (singles against the baseline, stack rows against the stack before): the processes it used,
    its verdict with the reason (interval, runs, what would resolve it) and its contamination flags."""
    return [line for line in map(decision_line, result.trials) if line is not None]


def sweep_summary(result: SweepResult, out_dir: Path, report_path: Path | None) -> str:
    lines = []
    trials = list({t.trial_id: t for t in reversed(result.trials)}.values())[::-1]  # first appearance of each id
    counts = verdict_counts([count_word(t.kind, t.verdict) for t in trials])
    reused = sum(1 for t in trials if t.reused)
    lines.append(f"{len(trials)} trials ({', '.join(f'{n} {v}' for v, n in counts)})"
                 + (f", {reused} reused from an earlier run" if reused else "")
                 + (f" in {result.wall_s:.0f} s" if result.wall_s else ""))
    lines += [f"  {line}" for line in comparison_lines(result)]
    if result.noise_sd is not None:
        lines.append(noise_line(result))
    if result.aa_check:
        a = result.aa_check
        lines.append("A/A check: the baseline's later runs against its earlier ones "
                     f"{speed_text(a.ratio, a.ci_low, a.ci_high, 3)}: {a.verdict}")
    lines += paired_lines(result)
    if result.best_label and result.best_vs_baseline:
        b = result.best_vs_baseline
        lines.append(f"best: {result.best_label}: against the baseline {speed_text(b.ratio, b.ci_low, b.ci_high)} "
                     "(throughput, 95% interval)")
    elif result.best_label:
        lines.append(f"best: {result.best_label}")
    lines += _language_lines(result)
    lines += [f"search: {search_line(s)}" for s in result.searches]
    lines += [f"note: {line}" for line in edge_notes(result)]
    lines += [f"cannot gain: {ceiling_line(c)}" for c in result.ceilings if not c.raced]
    lines += [f"accuracy gate: {line}" for line in window_lines(result) + gate_cannot_judge(result)]
    lines += stack_check_lines(result) + [f"accuracy window cannot see: {x}" for x in [limits_line(result)] if x]
    lines += node_lines(result)
    lines += disagreeing_phases(result) + diverged_processes(result)
    lines += [x for x in [budget_text(result.plan.decision.budget_s, result.left_unmeasured)] if x]
    lines += [f"warning: {line}" for line in result.integrity]  # files set aside, folders that vanished
    lines.append(f"tables: {out_dir / 'ablation.md'}, {out_dir / 'ablation.csv'}; results: {out_dir / RESULTS_NAME}")
    if report_path:
        lines.append(f"report: {report_path}")
    return "\n".join(lines)


def used_processes(result: SweepResult, label: str) -> list[TrialResult]:
    """The processes of configuration ``label`` the verdicts used: finished, timed and not left out (a contended
    process measured again is "not used" in the tables, so the summary does not quote it either)."""
    seen: dict[str, TrialResult] = {}
    for t in result.trials:
        if t.label == label and t.result.status == "ok" and t.result.samples_per_s and not t.excluded:
            seen.setdefault(t.trial_id, t.result)
    return list(seen.values())


def quoted_process(result: SweepResult, label: str) -> Optional[TrialResult]:
    """The process a configuration's throughput is quoted by (summary and tables alike): the median of its used
    processes by samples/s (``median_process``); None where none is used."""
    return median_process(used_processes(result, label))


def median_process(used: list[TrialResult]) -> Optional[TrialResult]:
    """The median of ``used`` by samples/s (the lower one of an even count); None where it is empty."""
    ranked = sorted(used, key=lambda r: r.samples_per_s or 0.0)
    return ranked[(len(ranked) - 1) // 2] if ranked else None


def quoted_text(result: SweepResult, label: str) -> str:
    """A configuration's throughput as its used processes measured it (their median) and, for a language model,
    its first process's accuracy (where the accuracy window ran)."""
    first = next((t.result for t in result.trials if t.label == label and t.result.status == "ok"), None)
    used = used_processes(result, label)
    median = median_process(used)
    if first is None:
        return ""
    if median is None:
        return lm.progress_text(first)
    how = f" (median of the {len(used)} processes used)" if len(used) > 1 else ""
    return ", ".join(p for p in (lm.throughput_text(median) + how, lm.accuracy_text(first)) if p)


def _language_lines(result: SweepResult) -> list[str]:
    """For a language model: tokens/s and perplexity of the baseline and of the best configuration, from the
    processes the verdicts used."""
    base = next((t for t in result.trials if t.kind == "baseline" and t.result.status == "ok"), None)
    if base is None or not lm.is_language_model(base.result):
        return []
    lines = [f"baseline: {quoted_text(result, base.label)}"]
    best = next((t for t in result.trials if t.trial_id == result.best_trial_id), None)
    if best is not None and best.trial_id != base.trial_id and best.result.status == "ok":
        lines.append(f"{result.best_label}: {quoted_text(result, best.label)}")
    return lines


def node_lines(result: SweepResult) -> list[str]:
    """A cluster sweep (``--executor ray``): trials per node, the node effect, each trial against its node's
    baseline."""
    nodes = result.nodes
    if nodes is None:
        return []
    lines = []
    for node, n in sorted(nodes.trials_per_node.items()):
        effect = nodes.node_effect.get(node)
        lines.append(f"node {nodes.hosts.get(node, node)} ({node[:8]}): {n} trial(s)"
                     + (f", baseline x{effect:.3f} of the nodes' mean" if effect is not None else ""))
    for row in nodes.blocked:
        per_node = ", ".join(f"{speed_text(r)} on {nodes.hosts.get(n, n)}" for n, r in row.per_node_ratio.items())
        lines.append(f"  {row.label} vs the baseline of its node: " + (per_node or row.note)
                     + (f" (the sweep: {comparison_text(row.comparison)})" if row.comparison else ""))
    return lines


def compiles_text(r: TrialResult) -> str:
    """``; graphs compiled: 1 by the steps (accuracy 1), 2 elsewhere (build 1, validation 1)``, or nothing where
    the burst could not count them."""
    if not r.compiles:
        return ""
    steps = step_compiles(r)
    other = {k: v for k, v in r.compiles.items() if k not in steps}

    def part(counts: dict[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in counts.items())
    text = f"; graphs compiled: {sum(steps.values())} by the steps" + (f" ({part(steps)})" if steps else "")
    return text + (f", {sum(other.values())} elsewhere ({part(other)})" if other else "")
