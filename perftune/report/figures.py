"""The report's figures: matplotlib (Agg, no pyplot, no global state) in, base64 PNG ``data:`` URIs out.

Each function takes plain rows (dicts or a DataFrame from ``perftune.report.tables``) and returns ``None`` when there is
nothing to draw, so the template can say why a figure is missing instead of showing an empty frame.
"""

from __future__ import annotations

import base64
import functools
import io
from typing import Callable, Optional, Sequence

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from perftune.compat import mathtext_off
from perftune.io.records import PHASES
from perftune.words.format import is_missing, speed_text

WIDTH_IN = 8.0
DPI = 110
PHASE_COLORS = {"data": "#e69f00", "forward": "#0072b2", "backward": "#56b4e9", "optimizer": "#cc79a7",
                "communication": "#d55e00", "other": "#bbbbbb"}
VERDICT_COLORS = {"baseline": "#7f7f7f", "kept": "#2e8b57", "slower": "#c0392b", "accuracy rejected": "#c0392b",
                  "not significant": "#9db4c8", "no effect": "#9db4c8", "dropped": "#9db4c8", "measured": "#8e7cc3"}
CURVE_COLORS = ["#555555", "#0072b2", "#2e8b57", "#e69f00", "#cc79a7", "#d55e00", "#56b4e9", "#8e7cc3"]


def plain_text(draw: Callable[..., Optional[str]]) -> Callable[..., Optional[str]]:
    """Draw with ``text.parse_math`` off: labels come from plans and knob values, and a ``$...$`` in one must be
    shown as written, not parsed (and possibly rejected) by matplotlib's mathtext."""

    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(mathtext_off()):
            return draw(*args, **kwargs)

    return wrapper


def to_png(fig: Figure) -> str:
    """The figure as a PNG ``data:`` URI (the report is one self-contained file)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def rows_height(n_rows: int) -> float:
    """Figure height (inches) for one horizontal bar per row."""
    return 1.3 + 0.34 * max(n_rows, 1)


def _ok(value) -> bool:
    """A value to draw: not missing by the tables' rule (``words.format.is_missing``)."""
    return not is_missing(value)


def tidy_axes(ax, xlabel: Optional[str] = None, grid: str = "x") -> None:
    """The house style: a light grid behind the data (``grid``: x | y | both), no top and right frame."""
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    ax.grid(axis=grid, alpha=0.3)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def label_rows(ax, labels: Sequence[str]) -> None:
    """One y tick per bar, the first row at the top."""
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()


def legend_outside(ax) -> None:
    ax.legend(fontsize="x-small", frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def phase_bars(ax, rows_ms: Sequence[dict]) -> None:
    """Stacked horizontal bars, one per row, of ms per phase (``rows_ms``: phase -> ms, missing = 0), in the
    order of ``PHASES``, each phase in the legend once."""
    left = [0.0] * len(rows_ms)
    for phase in PHASES:
        widths = [(r.get(phase) or 0.0) for r in rows_ms]
        if any(widths):
            ax.barh(range(len(rows_ms)), widths, left=left, color=PHASE_COLORS[phase], label=phase, height=0.65)
        left = [a + b for a, b in zip(left, widths)]


def verdict_bars(ax, rows: Sequence[dict], values: Sequence[float], texts: Sequence[str], room: float,
                 xerr: Optional[list] = None) -> None:
    """One bar per trial coloured by its verdict, ``texts`` written past each bar's end (or its whisker); the x
    axis leaves ``room`` (a share of the longest bar) for them."""
    colors = [VERDICT_COLORS.get(r.get("verdict"), "#9db4c8") for r in rows]
    ax.barh(range(len(rows)), values, xerr=xerr, color=colors, height=0.65, capsize=3, error_kw={"elinewidth": 1})
    reach = [v + (xerr[1][i] if xerr else 0.0) for i, v in enumerate(values)]
    top = max(reach) or 1.0
    for i, text in enumerate(texts):
        if text:
            ax.text(reach[i] + top * 0.01, i, text, va="center", fontsize="small")
    ax.set_xlim(0, top * (1 + room))
    label_rows(ax, [r["label"] for r in rows])


@plain_text
def splits_figure(rows: Sequence[dict]) -> Optional[str]:
    """Stacked horizontal bars of ms per step by phase.

    ``rows``: ``label``, ``<phase>_ms`` (None without a profile), ``step_ms`` and ``data_wait_ms`` (burst timing,
    drawn hatched as "data wait" + "not profiled" when the profile is missing).
    """
    rows = [r for r in rows if _ok(r.get("data_ms")) or (_ok(r.get("step_ms")) and _ok(r.get("data_wait_ms")))]
    if not rows:
        return None
    fig = Figure(figsize=(WIDTH_IN, rows_height(len(rows))))
    ax = fig.subplots()
    phase_bars(ax, [{p: r.get(f"{p}_ms") for p in PHASES} if _ok(r.get("data_ms")) else {} for r in rows])
    unprofiled = [i for i, r in enumerate(rows) if not _ok(r.get("data_ms"))]
    if unprofiled:
        wait = [rows[i]["data_wait_ms"] for i in unprofiled]
        rest = [max(rows[i]["step_ms"] - rows[i]["data_wait_ms"], 0.0) for i in unprofiled]
        ax.barh(unprofiled, wait, color=PHASE_COLORS["data"], hatch="//", edgecolor="white", height=0.65,
                label="data wait (burst timing)")
        ax.barh(unprofiled, rest, left=wait, color="#dddddd", hatch="//", edgecolor="white", height=0.65,
                label="rest of step (not profiled)")
    label_rows(ax, [r["label"] for r in rows])
    tidy_axes(ax, "time per step (ms)")
    ax.set_title("Where the step time goes, per trial")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.9 / rows_height(len(rows))), ncol=6, frameon=False,
              fontsize="small")
    return to_png(fig)


@plain_text
def throughput_figure(rows: Sequence[dict]) -> Optional[str]:
    """Median throughput per trial; whiskers span the slowest and fastest timed window of that process.

    ``rows``: ``label``, ``verdict``, ``samples_per_s``, ``window_min``, ``window_max``, ``speedup_text``.
    """
    rows = [r for r in rows if _ok(r.get("samples_per_s"))]
    if not rows:
        return None
    fig = Figure(figsize=(WIDTH_IN, rows_height(len(rows))))
    ax = fig.subplots()
    values = [r["samples_per_s"] for r in rows]
    lo = [max(v - (r.get("window_min") or v), 0.0) for v, r in zip(values, rows)]
    hi = [max((r.get("window_max") or v) - v, 0.0) for v, r in zip(values, rows)]
    verdict_bars(ax, rows, values, [r.get("speedup_text") or "" for r in rows], 0.35, xerr=[lo, hi])
    tidy_axes(ax, "throughput (samples/s); whiskers: slowest to fastest timed window")
    ax.set_title("Throughput per trial (text: speed-up vs baseline [95% CI])")
    return to_png(fig)


@plain_text
def waterfall_figure(ablation: pd.DataFrame, final: Optional[tuple[float, float, float]]) -> Optional[str]:
    """Cumulative speed-up over the baseline, one stack step at a time; ``final`` is (ratio, ci_low, ci_high).

    ``ablation`` is ``perftune.report.tables.ablation_table`` with an optional ``change_label`` column (the step's own
    change, shorter than the cumulative configuration).
    """
    if ablation.empty or len(ablation) < 2:
        return None
    fig = Figure(figsize=(WIDTH_IN, 3.6))
    ax = fig.subplots()
    level = 1.0
    names, x = [], 0
    ax.bar(x, 1.0, color=VERDICT_COLORS["baseline"], width=0.6)
    ax.text(x, 1.0, "reference", ha="center", va="bottom", fontsize="small")
    names.append("baseline")
    for _, row in ablation.iloc[1:].iterrows():
        x += 1
        ax.plot([x - 0.7, x - 0.3], [level, level], color="#999999", linewidth=0.8, linestyle=":")
        names.append(row.get("change_label") or row["configuration"])
        cumulative = row.get("speedup")
        if bool(row.get("kept")) and _ok(cumulative):
            bottom, height = min(level, cumulative), abs(cumulative - level)
            color = VERDICT_COLORS["kept"] if cumulative >= level else VERDICT_COLORS["slower"]
            ax.bar(x, height, bottom=bottom, color=color, width=0.6)
            ax.text(x, max(level, cumulative), speed_text(cumulative), ha="center", va="bottom", fontsize="small")
            level = cumulative
        else:
            ax.plot([x - 0.3, x + 0.3], [level, level], color="#999999", linewidth=2)
            ax.text(x, level, "dropped", ha="center", va="bottom", fontsize="small", color="#666666")
    x += 1
    ax.plot([x - 0.7, x - 0.3], [level, level], color="#999999", linewidth=0.8, linestyle=":")
    names.append("final (= baseline)" if not final and level == 1.0 else "final")
    value = final[0] if final else level
    err = None
    if final:
        err = [[max(value - final[1], 0.0)], [max(final[2] - value, 0.0)]]
    ax.bar(x, value, color="#1f5f3f", width=0.6, yerr=err, capsize=4)
    words = speed_text(value, final[1], final[2]) if final else speed_text(value)
    ax.text(x + 0.32, value, words.replace(" [", "\n["),
            ha="left", va="center", fontsize="small")
    ax.axhline(1.0, color="#777777", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(names)), names, rotation=15, ha="right")
    ax.set_ylabel("speed-up over baseline (x, throughput ratio)")
    ax.set_title("Cumulative speed-up (waterfall); final bar: 95% CI")
    ax.set_xlim(-0.6, x + 1.2)
    tidy_axes(ax, grid="y")
    return to_png(fig)


def _smooth(values: list[float], window: int) -> list[float]:
    return list(pd.Series(values).rolling(window, min_periods=1, center=True).mean())


def _coincide(curves: Sequence[dict]) -> bool:
    """All curves hold the same losses at the same samples seen (deterministic runs: one line hides the others)."""
    drawn = [c["points"] for c in curves if c.get("points")]
    return len(drawn) > 1 and all(
        len(p) == len(drawn[0]) and all(a[0] == b[0] and abs(a[1] - b[1]) <= 1e-6 * max(abs(b[1]), 1.0)
                                        for a, b in zip(p, drawn[0])) for p in drawn[1:])


@plain_text
def loss_figure(curves: Sequence[dict], metric: str, tolerance: Optional[float], band: Optional[dict] = None
                ) -> Optional[str]:
    """:func:`loss_plot` as a PNG ``data:`` URI."""
    fig = loss_plot(curves, metric, tolerance, band)
    return to_png(fig) if fig is not None else None


def _seed_band(left, right, band: Optional[dict]) -> Optional[float]:
    """The baseline's seed band (``perftune.engine.accuracy.seed_band.figure_band``): the envelope of its seeds'
    smoothed training losses on the left, their metric values and mean +- sd on the right; returns the gate's
    limit."""
    if not band:
        return None
    curves = [c for c in band["points"] if c]
    grid = sorted(set.intersection(*(set(s for s, _ in c) for c in curves))) if curves else []
    if grid:
        smooth = [dict(zip([s for s, _ in c], _smooth([v for _, v in c], 5))) for c in curves]
        left.fill_between(grid, [min(m[s] for m in smooth) for s in grid], [max(m[s] for m in smooth) for s in grid],
                          color="#999999", alpha=0.3, linewidth=0, label=f"baseline, {len(curves)} seeds")
    right.axvspan(band["mean"] - band["sd"], band["mean"] + band["sd"], color="#999999", alpha=0.3)
    right.plot(band["values"], [-0.45] * len(band["values"]), "|", color="#555555", markersize=8)
    return band.get("limit")


def loss_plot(curves: Sequence[dict], metric: str, tolerance: Optional[float], band: Optional[dict] = None
              ) -> Optional[Figure]:
    """Training loss against samples seen (same data order and initial weights) plus the gated metric per config.

    ``curves``: ``label``, ``points`` [(samples_seen, loss)], ``value`` (the metric at ``samples_seen``),
    ``rejected`` (drawn dashed red). The first curve is the baseline; the gate rejects values above
    baseline x (1 + ``tolerance``) (only a worsening counts), shaded red on the right; with the baseline's seed
    ``band``, above what seed noise explains, the band drawn grey (seeds' envelope, their values and mean +- sd).
    """
    curves = [c for c in curves if c.get("points") or _ok(c.get("value"))]
    if not curves:
        return None
    fig = Figure(figsize=(WIDTH_IN, 3.6))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2.2, 1]})
    _loss_curves(left, curves)
    seed_limit = _seed_band(left, right, band)
    if left.get_legend_handles_labels()[0]:  # no curve points (a record without its loss curve): no legend
        left.legend(fontsize="x-small", frameon=False, loc="lower left")
    if any(_ok(c.get("value")) for c in curves):
        _gate_panel(right, curves, metric, tolerance, band, seed_limit)
    else:
        right.set_axis_off()
    return fig


def _loss_curves(left, curves: Sequence[dict]) -> None:
    """The left panel: each configuration's loss per step (faint) and its 5-step mean."""
    for i, c in enumerate(curves):
        color = "#c0392b" if c.get("rejected") else CURVE_COLORS[i % len(CURVE_COLORS)]
        if c.get("points"):
            xs = [p[0] for p in c["points"]]
            ys = [p[1] for p in c["points"]]
            left.plot(xs, ys, color=color, alpha=0.25, linewidth=0.8)
            left.plot(xs, _smooth(ys, 5), color=color, linewidth=1.6, label=c["label"],
                      linestyle="--" if c.get("rejected") else "-")
    if _coincide(curves):
        values = {round(c["value"], 6) for c in curves if _ok(c.get("value"))}
        text = "all curves coincide (identical training losses)" if len(values) <= 1 else (
            "training losses coincide, the validation metric does not: what differs is evaluation\n"
            "(e.g. BatchNorm moving statistics, Dropout or evaluation-mode layers), not the training steps")
        left.text(0.98, 0.97, text, transform=left.transAxes, ha="right", va="top", fontsize="x-small",
                  color="#555555")
    left.set_xlabel("samples seen")
    left.set_ylabel("training loss")
    left.set_title("Training loss (faint: per step; line: 5-step mean)", fontsize="medium")
    left.grid(alpha=0.3)


def _gate_panel(right, curves: Sequence[dict], metric: str, tolerance: Optional[float], band: Optional[dict],
                seed_limit: Optional[float]) -> None:
    """The right panel: each configuration's gated metric against the gate's limit (seed noise, or tolerance)."""
    valued = [c for c in curves if _ok(c.get("value"))]
    values = [c["value"] for c in valued]
    base = curves[0].get("value") if _ok(curves[0].get("value")) else None
    limit = base * (1 + tolerance) if base is not None and tolerance is not None else None
    limit = seed_limit if seed_limit is not None else limit
    drawn = values + ([limit] if limit else []) + ([base] if base is not None else []) + list(
        (band or {}).get("values", []))
    lo, hi = min(drawn), max(drawn)  # the axis holds every plotted point, the gate's limit and the baseline
    pad = (hi - lo) * 0.15 or abs(hi) * 0.05 or 1.0
    if limit is not None:
        right.axvspan(limit, hi + pad, color="#c0392b", alpha=0.12)
        right.axvline(limit, color="#c0392b", linewidth=0.8)
        what = "seed noise" if seed_limit is not None else f"baseline +{tolerance:.0%}"
        right.text(limit, len(valued) - 0.55, f" rejected above {what}", fontsize="x-small", color="#c0392b",
                   rotation=90, va="bottom", ha="left")  # along the limit, clear of the title
    if base is not None:
        right.axvline(base, color="#777777", linewidth=0.8, linestyle="--")
    for i, c in enumerate(valued):
        color = "#c0392b" if c.get("rejected") else CURVE_COLORS[curves.index(c) % len(CURVE_COLORS)]
        right.plot([c["value"]], [i], "o", color=color)
    right.set_yticks(range(len(valued)), [c["label"] for c in valued], fontsize="x-small")
    right.yaxis.tick_right()
    right.set_ylim(len(valued) - 0.5, -0.9)
    right.set_xlim(lo - pad, hi + pad)  # last: nothing drawn after it can move it
    samples = valued[0].get("samples_seen")
    right.set_xlabel(f"{metric}" + (f" after {samples} samples" if samples else ""))
    right.set_title("Accuracy gate", fontsize="medium")
    right.grid(axis="x", alpha=0.3)


@plain_text
def memory_figure(rows: Sequence[dict]) -> Optional[str]:
    """Peak memory per trial: host RSS of the burst process and, when known, the allocator / device peak.

    ``rows``: ``label``, ``host_rss_mb``, ``peak_mem_mb`` (either may be None).
    """
    rows = [r for r in rows if _ok(r.get("host_rss_mb")) or _ok(r.get("peak_mem_mb"))]
    if not rows:
        return None
    panels = [(key, title) for key, title in (("host_rss_mb", "host RSS peak (MB)"),
                                              ("peak_mem_mb", "allocator / device peak (MB)"))
              if any(_ok(r.get(key)) for r in rows)]
    fig = Figure(figsize=(WIDTH_IN, rows_height(len(rows))))
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    y = list(range(len(rows)))
    for ax, (key, title) in zip(axes, panels):
        values = [r.get(key) if _ok(r.get(key)) else 0.0 for r in rows]
        ax.barh(y, values, color="#6a8caf", height=0.65)
        for i, v in enumerate(values):
            ax.text(v, i, f" {v:.1f}" if v else " n/a", va="center", fontsize="x-small")
        ax.set_xlim(0, max(values) * 1.25 or 1)
        tidy_axes(ax, title)
    label_rows(axes[0], [r["label"] for r in rows])
    fig.suptitle("Peak memory per trial")
    return to_png(fig)


def compile_figure(rows: Sequence[dict]) -> Optional[str]:
    """Compile (first-step) time beside step time, per trial: a knob can trade one for the other.

    ``rows``: ``label``, ``verdict``, ``step_ms`` (mean), ``step_ms_median`` and ``compile_s`` (either may be None).
    """
    rows = [r for r in rows if _ok(r.get("compile_s")) or _ok(r.get("step_ms"))]
    if not rows:
        return None
    fig = Figure(figsize=(WIDTH_IN, rows_height(len(rows))))
    step_ax, compile_ax = fig.subplots(1, 2, sharey=True)
    y = list(range(len(rows)))
    colors = [VERDICT_COLORS.get(r.get("verdict"), "#9db4c8") for r in rows]
    for ax, key, title, fmt in ((step_ax, "step_ms", "step time (ms): mean; tick: median", "{:.1f}"),
                                (compile_ax, "compile_s", "compile, first step (s)", "{:.1f}")):
        values = [r.get(key) if _ok(r.get(key)) else 0.0 for r in rows]
        ax.barh(y, values, color=colors, height=0.65)
        for i, v in enumerate(values):
            ax.text(v, i, " " + fmt.format(v) if v else " n/a", va="center", fontsize="x-small")
        ax.set_xlim(0, (max(values) * 1.3) or 1.0)
        tidy_axes(ax, title)
    medians = [(i, r["step_ms_median"]) for i, r in enumerate(rows) if _ok(r.get("step_ms_median"))]
    if medians:
        step_ax.plot([m for _, m in medians], [i for i, _ in medians], "|", color="black", markersize=12)
    label_rows(step_ax, [r["label"] for r in rows])
    fig.suptitle("Step time and compile time per trial")
    return to_png(fig)
