"""The report's context (what each section shows, already formatted) and its rendering with jinja2.

The tables come from ``tables`` (the same DataFrames as ablation.csv / singles.csv), the figures from
``figures``, the bottleneck lines from ``notes``.  Every string from the results goes through jinja2's autoescape:
op names, reasons and log tails are data, never markup.
"""

from __future__ import annotations

import shlex
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import jinja2
import pandas as pd
import yaml

from perftune.engine.accuracy.seed_band import figure_band
from perftune.engine.accuracy.seeds import band
from perftune.io.records import PHASES
from perftune.io.sweep_records import FAILED_VERDICTS, SweepResult, SweepTrial
from perftune.knobs import label_of
from perftune.report import figures
from perftune.report.accuracy_notes import gate_cannot_judge
from perftune.report.extra import extra_context
from perftune.report.load import SweepFolder
from perftune.report.notes import bottleneck_note, edge_notes, tried_changes
from perftune.report.ops import top_op_rows
from perftune.report.search_section import search_context
from perftune.report.stack_check_section import stack_check_context
from perftune.report.summary import comparison_lines, node_lines, noise_line, paired_lines
from perftune.report.tables import (
    ablation_table,
    loo_table,
    marked_label,
    optional_columns,
    process_label,
    singles_table,
)
from perftune.version import __version__ as perftune_version
from perftune.words import lm
from perftune.words import samples as language
from perftune.words.ceiling_words import ceiling_line
from perftune.words.format import count_word, duration_text, num, rate, speed_text, step_text, verdict_counts
from perftune.words.rules import budget_text, order_rule_text
from perftune.words.split_notes import split_notes

TEMPLATES = Path(__file__).resolve().parent / "templates"
LOG_TAIL_LINES = 40
TOP_OPS = 10
WIDE_INTERVAL = 1.5  # A/A interval high/low above this: the machine is too noisy to see small effects


# -- formatting ------------------------------------------------------------------------------------------------------
def utc_text(stamp: Optional[str]) -> str:
    if not stamp:
        return ""
    try:
        return datetime.fromisoformat(stamp).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return stamp


def verdict_class(verdict: str) -> str:
    if verdict == "kept":
        return "good"
    if verdict in ("slower", "accuracy rejected") or verdict in FAILED_VERDICTS:
        return "bad"
    if verdict == "baseline":
        return "base"
    return "muted"


# -- tables ----------------------------------------------------------------------------------------------------------
#: where the Markdown tables' optional columns go in the HTML ones (which have no splits column)
HTML_ANCHORS = {"samples/s": "samples_per_s", "data / fwd / bwd / opt / comm / other ms": "step_ms",
                "change": "change", "compile s": "compile_s"}


def table(df: pd.DataFrame, metric: str) -> dict:
    """A ``perftune.report.tables`` DataFrame as header + formatted rows (empty columns are left out)."""
    columns = [("configuration", "configuration"), ("verdict", "verdict"), ("samples/s", "samples_per_s"),
               ("vs reference [95% CI]", "speedup"), ("step ms: mean (median)", "step_ms"),
               ("compile (s)", "compile_s"), (metric, metric),
               (f"{metric} change", "change"), ("verdict reason", "reason")]
    extras = optional_columns(df, metric)  # tokens/s, recompute, perplexity, repetition: where there are values
    for header, key, _, after in reversed(extras):  # inserted right after the anchor: reversed keeps their order
        anchor = next(i for i, (_, k) in enumerate(columns) if k == HTML_ANCHORS[after])
        columns.insert(anchor + 1, (header, key))
    rows = []
    for _, r in df.iterrows():
        verdict = str(r.get("verdict") or "")
        rows.append({
            "configuration": str(r["configuration"]) + contended_text(r.get("contended")),
            "verdict": verdict, "class": verdict_class(verdict),
            "samples_per_s": rate(r.get("samples_per_s")),
            "speedup": "reference" if verdict == "baseline" else
            speed_text(r.get("speedup"), r.get("speedup_ci_low"), r.get("speedup_ci_high")),
            "step_ms": step_text(r.get("step_ms"), r.get("step_ms_median")) if not pd.isna(r.get("step_ms"))
            or not pd.isna(r.get("step_ms_median")) else "",
            "compile_s": num(r.get("compile_s"), ".1f"), metric: num(r.get(metric), ".4f"),
            "change": num(r.get(f"{metric}_change"), "+.1%"), "reason": str(r.get("reason") or ""),
            "trial_id": str(r.get("trial_id") or ""),
            **{key: num(r.get(key), fmt) for _, key, fmt, _ in extras},
        })
    keep = [(h, k) for h, k in columns if k in ("configuration", "verdict", "reason") or any(row[k] for row in rows)]
    return {"columns": keep, "rows": rows}


def contended_text(value: Any) -> str:
    """`` [contended: 1 of 3 windows]`` beside a process's label (``tables``' ``contended`` column), or ``""``."""
    return f" [{value}]" if isinstance(value, str) and value else ""


def _per_trial_frame(folder: SweepFolder, singles: pd.DataFrame, ablation: pd.DataFrame,
                    loo: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct trial, in sweep order, from the tables' DataFrames."""
    frames = [f for f in (singles, ablation, loo) if not f.empty and "trial_id" in f]
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True).dropna(subset=["trial_id"]).drop_duplicates("trial_id")
    order = {t.trial_id: i for i, t in enumerate(folder.trials)}
    df = df[df["trial_id"].isin(order)].copy()
    df["order"] = df["trial_id"].map(order)
    return df.sort_values("order").set_index("trial_id")


# -- sections --------------------------------------------------------------------------------------------------------
def _counts(folder: SweepFolder) -> dict:
    """Trials by verdict, in the words the tables use (first appearance order); nothing is lumped together."""
    verdicts = [count_word(t.kind, t.verdict) for t in folder.trials]
    return {
        "run": len(folder.trials),
        "by_verdict": [{"verdict": v, "n": n, "class": verdict_class(v)} for v, n in verdict_counts(verdicts)],
        "failed": sum(v in FAILED_VERDICTS for v in verdicts),
        "baseline_runs": sum(t.kind == "baseline" for t in folder.trials),
        "leave_one_out": sum(t.kind == "leave_one_out" for t in folder.trials),
        "reused": sum(t.reused for t in folder.trials),
    }


def _summary(folder: SweepFolder, metric: str) -> dict:
    res = folder.result
    by_id = folder.by_id
    best = by_id.get(res.best_trial_id or "")
    base = next((t for t in folder.trials if t.kind == "baseline" and t.result.status == "ok"), None)
    b = res.best_vs_baseline
    acc = None
    if best is not None and base is not None and best.trial_id != base.trial_id:
        base_value = getattr(base.result.accuracy, metric, None) if base.result.accuracy else None
        best_value = getattr(best.result.accuracy, metric, None) if best.result.accuracy else None
        change = best.accuracy_changes.get(metric)
        acc = f"{metric} {num(base_value, '.4f') or 'n/a'} -> {num(best_value, '.4f') or 'n/a'}" + \
              (f" ({change:+.1%})" if change is not None else "")
    env = res.environment or next((t.result.environment for t in folder.trials if t.result.environment), None)
    aa = res.aa_check
    aa_text = aa_note = None
    aa_class = "muted"
    if aa is not None:
        aa_text = f"{speed_text(aa.ratio, aa.ci_low, aa.ci_high, 3)}: {aa.verdict}"
        if aa.verdict in ("faster", "slower"):
            aa_class, aa_note = "bad", ("the same configuration measured twice differed: the machine was not steady, "
                                        "so treat small gains with care")
        elif aa.ci_low > 0 and aa.ci_high / aa.ci_low > WIDE_INTERVAL:
            aa_class, aa_note = "warn-text", ("consistent, but the interval is wide: the machine is noisy and only "
                                              "large effects can be told apart (more baseline_runs or longer bursts "
                                              "narrow it)")
        else:
            aa_class, aa_note = "good", "the baseline measured again agrees with itself within the noise"
    tolerance = res.plan.accuracy.rel_tolerance
    return {
        "best_label": res.best_label or "none (the baseline failed)",
        "best_is_baseline": res.best_label == "baseline",
        "speedup": speed_text(b.ratio, b.ci_low, b.ci_high) if b else None,
        "speedup_ratio": speed_text(b.ratio) if b else None,
        "accuracy": acc,
        "tolerance": f"{tolerance:.0%}" if tolerance is not None else None,
        "lr_rule": LR_RULES[res.plan.accuracy.lr_scaling],
        "counts": _counts(folder),
        "wall": duration_text(res.wall_s),
        "started": utc_text(res.started_utc), "finished": utc_text(res.finished_utc), "status": res.status,
        "machine": f"{env.cpu_model}, {env.cpu_count} cores" if env else "unknown",
        "device": env.device if env else res.plan.device,
        "host": env.host if env else None,
        "mindspore": env.mindspore_version if env else "unknown",
        "python": env.python_version if env else None,
        "git_commit": env.git_commit if env else None,
        "aa": aa_text, "aa_class": aa_class, "aa_note": aa_note, "paired": paired_lines(res),
        "order_rule": order_rule_text(res.order_rule),
        "ceilings": [ceiling_line(c) for c in res.ceilings],
        "noise": noise_line(res),
        "decisions": comparison_lines(res),
        "edges": edge_notes(res),  # a best value at the edge of those tried, its split still dominant
        "budget": budget_text(res.plan.decision.budget_s, res.left_unmeasured),
        "nodes": node_lines(res),  # a sweep on a Ray cluster: trials per node, node effect, within-node comparisons
    }


def _trial_rows(folder: SweepFolder, frame: pd.DataFrame) -> list[dict]:
    """Per distinct trial: figure inputs, the bottleneck note and the trace link."""
    rows = []
    tried = tried_changes(folder.trials)
    for t in folder.trials:
        r = t.result
        f = frame.loc[t.trial_id] if t.trial_id in frame.index else pd.Series(dtype=object)
        windows = [w.samples_per_s for w in r.windows]
        href = folder.trace_href(t)
        splits = r.profile.splits if r.profile else None
        note = bottleneck_note(r, tried, repeat=t.replicate > 0)
        rows.append({
            "trial_id": t.trial_id, "label": marked_label(t, folder.trials), "kind": t.kind, "verdict": t.verdict,
            "class": verdict_class(t.verdict), "status": r.status,
            "samples_per_s": f.get("samples_per_s"), "step_ms": r.step_ms_mean, "step_ms_median": r.step_ms_median,
            "data_wait_ms": r.data_wait_ms_median,
            "compile_s": r.compile_ms / 1e3 if r.compile_ms is not None else None,
            "window_min": min(windows) if windows else None, "window_max": max(windows) if windows else None,
            "speedup_text": speed_text(f.get("speedup"), f.get("speedup_ci_low"), f.get("speedup_ci_high"))
            if t.kind != "baseline" else ("reference" if t.replicate == 0 and t.verdict == "baseline" else ""),
            **{f"{p}_ms": f.get(f"{p}_ms") for p in PHASES},
            "host_rss_mb": f.get("host_rss_mb"), "peak_mem_mb": f.get("peak_mem_mb"),
            "note": note.text, "note_kind": note.kind, "note_source": note.source,
            "splits_text": " / ".join(f"{getattr(splits, p + '_ms'):.2f}" for p in PHASES) if splits else "",
            "explained": f"{splits.explained_share:.0%}" if splits else "",
            "scale_cause": "; ".join(split_notes(splits)) if splits else None,
            "trace_href": href,
            "trace_exists": href is not None and (folder.out_dir / href).is_file(),
            "profile_error": r.profile.error if r.profile else None,
            "diverged": lm.divergence_of(r),
        })
    return rows


def _top_ops(trial: Optional[SweepTrial], label: str) -> Optional[dict]:
    if trial is None or trial.result.profile is None:
        return None
    rows, source = top_op_rows(trial.result.profile, TOP_OPS)
    if not rows:
        return None
    return {"label": label, "ops": rows, "source": source}


def _failed(folder: SweepFolder) -> list[dict]:
    out = []
    for t in folder.trials:
        r = t.result
        if t.verdict in FAILED_VERDICTS or r.status != "ok":
            tail = "\n".join((r.log_tail or "").splitlines()[-LOG_TAIL_LINES:])
            out.append({"label": process_label(t, folder.trials), "trial_id": t.trial_id, "status": r.status,
                        "reason": t.reason or r.reason or "", "log_tail": tail})
    return out


def accuracy_curves(folder: SweepFolder, metric: str) -> list[dict]:
    """Every measured configuration's accuracy window (its first process: repeats measure speed only), the baseline
    first: an accuracy failure is drawn whatever the trial's speed verdict (it outranks speed), failures marked."""
    base = next((t for t in folder.trials if t.kind == "baseline"), None)
    others = [t for t in folder.trials if t is not base and t.replicate == 0 and t.kind != "baseline"]
    curves, seen = [], set()
    for t in ([base] if base is not None else []) + others:
        acc = t.result.accuracy
        if t.result.status != "ok" or acc is None or t.trial_id in seen:
            continue
        seen.add(t.trial_id)
        rejected = t.verdict == "accuracy rejected"
        curves.append({"label": t.label + (" (rejected)" if rejected else ""),
                       "points": folder.loss_curve(t.trial_id), "rejected": rejected,
                       "value": getattr(acc, metric, None), "samples_seen": acc.samples_seen})
    return curves


#: how the report states the plan's ``accuracy.lr_scaling`` (trials are judged at equal samples seen)
LR_RULES = {
    "none": "batch-size changes keep the workload's learning rate (fewer updates per sample with a larger batch)",
    "linear": "batch-size changes scale the learning rate linearly with the batch (lr x b / b0)",
    "sqrt": "batch-size changes scale the learning rate with the square root of the batch (lr x sqrt(b / b0))",
}


def _reproduce(folder: SweepFolder) -> dict:
    res = folder.result
    plan_yaml = yaml.safe_dump(res.plan.model_dump(mode="json"), sort_keys=False, allow_unicode=True,
                               default_flow_style=False)
    plan_file = res.plan_path or f"{res.plan.name}.yaml"
    recorded = res.command or None  # the command line of a ``perftune sweep``; empty for a sweep started from Python
    return {"plan_yaml": plan_yaml, "recorded": recorded, "plan_file": Path(plan_file).name,
            "command": shlex.join(["perftune", "sweep", Path(plan_file).name, "--out", str(folder.out_dir), "--fresh"]),
            "copies": config_copies(folder)}


def config_copies(folder: SweepFolder) -> list[dict]:
    """Each configuration's copy of a config file its own knobs set (``workload.knob_config``): what the script was
    given (its first process's copy; the later ones hold the same fields)."""
    out, seen = [], set()
    for t in folder.trials:
        if t.label in seen:
            continue
        seen.add(t.label)
        for file, copy in ((t.result.applied or {}).get("config") or {}).items():
            fields = ", ".join(f"{k}={v}" for k, v in copy.get("fields", {}).items())
            out.append({"label": t.label, "file": file, "fields": fields,
                        "path": f"{folder.trial_dir(t.trial_id)}/{copy.get('copy', '')}"})
    return out


def seed_band_of(res: SweepResult) -> Optional[dict]:
    """The baseline's seed band for the accuracy figure (None for a sweep without seed runs)."""
    base = next((t.result.accuracy for t in res.trials if t.kind == "baseline"), None)
    gate = res.plan.accuracy
    return figure_band(base, band(res), gate.metric, gate.tolerances.get(gate.metric, gate.rel_tolerance),
                       res.plan.decision.confidence, gate.checkpoints)


def build_context(folder: SweepFolder) -> dict:
    res = folder.result
    metric = res.plan.accuracy.metric
    tolerance = res.plan.accuracy.rel_tolerance
    ablation, singles, loo = ablation_table(res), singles_table(res), loo_table(res)
    frame = _per_trial_frame(folder, singles, ablation, loo)
    trials = _trial_rows(folder, frame)
    measured = [t for t in trials if t["status"] == "ok"]
    if not ablation.empty:
        ablation = ablation.assign(change_label=[label_of(s.change or {}) for s in res.stack])
    b = res.best_vs_baseline
    figs = {
        "waterfall": figures.waterfall_figure(ablation, (b.ratio, b.ci_low, b.ci_high) if b else None),
        "throughput": figures.throughput_figure(measured),
        "splits": figures.splits_figure(measured),
        "compile": figures.compile_figure(measured),
        "loss": figures.loss_figure(accuracy_curves(folder, metric), metric, tolerance, seed_band_of(res)),
        "memory": figures.memory_figure(measured),
    }
    return {
        "title": f"perftune: {res.plan.name}",
        "plan": {"name": res.plan.name, "workload": res.plan.workload, "device": res.plan.device},
        "metric": metric,
        "summary": _summary(folder, metric),
        "ablation": table(ablation, metric), "singles": table(singles, metric), "loo": table(loo, metric),
        "figures": figs,
        "extra": extra_context(folder),
        "stack_check": stack_check_context(res),
        "searches": search_context(res),
        "trials": trials,
        "any_splits": any(t["splits_text"] for t in trials),
        "top_ops": [x for x in (_top_ops(t, process_label(t, folder.trials)) for t in folder.trials
                                if t.result.status == "ok") if x],
        "samples": language.samples(res),
        "cannot_judge": gate_cannot_judge(res),
        "failed": _failed(folder),
        "integrity": folder.integrity_record(),
        "reproduce": _reproduce(folder),
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "perftune_version": perftune_version,
    }


def render(context: dict) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("report.html").render(**context)
