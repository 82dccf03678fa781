"""The comparison as text (the terminal) and Markdown (a pull request, ``$GITHUB_STEP_SUMMARY``)."""

from __future__ import annotations

import html
from typing import Optional

from perftune.compare.metrics import MEMORY_FIELDS, MEMORY_NAMES, ConfigComparison, MetricChange
from perftune.compare.run import CompareReport
from perftune.io.plan import ACCURACY_METRICS
from perftune.io.records import PHASES
from perftune.words.format import speed_text, time_ratio_text

#: metrics that are times (lower is faster): their ratio reads "x1.10 slower" / "x1.23 faster", as throughput's does
TIME_METRICS = ("step_time", "data_wait", *(f"split.{p}" for p in PHASES))


def _num(v: Optional[float], unit: str = "") -> str:
    if v is None:
        return "n/a"
    a = abs(v)
    text = f"{v:,.0f}" if a >= 1000 else f"{v:.1f}" if a >= 100 else f"{v:.2f}" if a >= 1 else f"{v:.4f}" if a else "0"
    return f"{text} {unit}".rstrip()


def _interval_text(mc: MetricChange) -> str:
    full = _ratio_text(mc, interval=True) if mc.interval and mc.ci_low is not None else ""
    return full[full.index("["):] if "[" in full else "none (threshold only)"


def _ratio_text(mc: MetricChange, interval: bool = False) -> str:
    """The one ratio convention of every output: ``x1.23 faster`` / ``x1.10 slower`` for throughput and times alike
    (the interval, where asked, of that same factor); other metrics (memory, accuracy) as a signed percent with its
    direction spelled out."""
    lo, hi = (mc.ci_low, mc.ci_high) if interval and mc.interval else (None, None)
    if mc.name == "throughput" and mc.ratio is not None:
        return speed_text(mc.ratio, lo, hi, 3)
    if mc.name in TIME_METRICS and mc.ratio is not None:
        return time_ratio_text(mc.ratio, lo, hi, 3)
    if mc.change is None:
        return "n/a"
    if f"{mc.change:+.1%}" in ("+0.0%", "-0.0%"):
        return "no change"
    return f"{mc.change:+.1%} " + ("higher" if mc.change > 0 else "lower")


def _metric_line(mc: MetricChange) -> str:
    if mc.old is None and mc.new is None:
        return f"{mc.verdict}" + (f" ({mc.note})" if mc.note else "")
    ratio = _ratio_text(mc, interval=True) if mc.ratio is not None else "n/a"
    ci = ""
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
        lines.append(f"  data wait    {_num(wait.old, 'ms')} -> {_num(wait.new, 'ms')} ({_ratio_text(wait)}), "
                     "median of the timed steps (no interval)")
    splits = [m[f"split.{p}"] for p in PHASES if f"split.{p}" in m and m[f"split.{p}"].old is not None]
    if splits:
        lines.append("  splits (ms)  " + ", ".join(
            f"{s.name[6:]} {_num(s.old)} -> {_num(s.new)} ({_ratio_text(s)})" for s in splits)
            + "  (of the mean timed step, no interval)")
    mem = [m[f"memory.{k}"] for k in MEMORY_FIELDS if f"memory.{k}" in m]
    if mem:
        lines.append("  peak memory  " + ", ".join(  # median over runs of each run's peak
            f"{MEMORY_NAMES[x.name[7:]]} {_num(x.old, 'MB')} -> {_num(x.new, 'MB')} ({_ratio_text(x)})" for x in mem))
    acc = [m[a] for a in ACCURACY_METRICS if a in m]
    if acc:
        lines.append("  accuracy     " + ", ".join(
            f"{a.name} {_num(a.old)} -> {_num(a.new)} ({_ratio_text(a) if a.verdict != 'not comparable' else a.note})"
            for a in acc))
    for note in cc.notes:
        lines.append(f"  note         {note.text}")
    return lines


def _table_row(cc: ConfigComparison, metric: str) -> list[str]:
    mc = cc.metrics.get(metric)
    if mc is None or (mc.old is None and mc.new is None):
        return [cc.label, "n/a", "n/a", "n/a", "n/a", cc.verdict]
    ratio = _ratio_text(mc) if mc.ratio is not None else "n/a"
    return [cc.label, f"{_num(mc.old)} ({cc.old_runs})", f"{_num(mc.new)} ({cc.new_runs})", ratio,
            _interval_text(mc), cc.verdict]


def _columns(report: CompareReport) -> list[str]:
    unit = next((c.metrics[report.metric].unit for c in report.configurations if report.metric in c.metrics), "")
    what = {"throughput": "samples/s", "step_time": "mean step ms"}.get(report.metric) or (
        f"{report.metric}" + (f" {unit}" if unit else ""))
    return ["configuration", f"OLD {what} (runs)", f"NEW {what} (runs)", "NEW vs OLD", "95% interval", "verdict"]


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
    """Markdown text shown as written: HTML escaped (reasons quote exception messages), ``|`` escaped."""
    return html.escape(v, quote=False).replace("|", "\\|")


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
    accuracy = [a for a in ACCURACY_METRICS if any(a in cc.metrics for cc in report.configurations)]
    detail_cols = ["configuration", "step time ms", "data wait ms"] + [f"{p} ms (profiled)" for p in PHASES] + \
        ["peak memory MB"] + accuracy
    out.append("<details><summary>step time, splits, memory, accuracy (OLD → NEW)</summary>")
    out.append("")
    out.append("| " + " | ".join(detail_cols) + " |")
    out.append("|" + "|".join(["---"] + ["---:"] * (len(detail_cols) - 1)) + "|")

    def cell(mc: Optional[MetricChange]) -> str:
        if mc is None or mc.old is None or mc.new is None:
            return "n/a"
        return f"{_num(mc.old)} → {_num(mc.new)} ({_ratio_text(mc)})"

    for cc in report.configurations:
        m = cc.metrics
        out.append("| " + " | ".join(_md(v) for v in [cc.label, cell(m.get("step_time")), cell(m.get("data_wait"))]
                                      + [cell(m.get(f"split.{p}")) for p in PHASES] + [cell(m.get("memory"))]
                                      + [cell(m.get(a)) for a in accuracy]) + " |")
    out += ["", "Data wait, splits, memory and accuracy have no interval: the threshold applies to their relative "
            "change.  Throughput and step time are the centres the ratio is estimated from: the geometric mean, "
            "over each side's processes, of every timed window's batch / mean step (so NEW / OLD is the ratio "
            "exactly; a trial's own samples/s, batch / mean step over all its windows, can differ slightly); data "
            "wait is the median over the timed steps; the splits are of the mean step, as shares of the profiled "
            "steps.",
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
