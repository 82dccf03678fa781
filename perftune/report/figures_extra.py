"""More report figures: MFU per trial, throughput drift within each trial, each change's loss as a difference from
the baseline at equal samples seen, and the per-rank splits of distributed trials.  Drawn with ``figures``' own
helpers (PNG ``data:`` URI out, ``None`` when there is nothing to draw, labels as plain text)."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
from matplotlib.figure import Figure

from perftune.report.figures import (
    CURVE_COLORS,
    WIDTH_IN,
    label_rows,
    legend_outside,
    phase_bars,
    plain_text,
    rows_height,
    tidy_axes,
    to_png,
    verdict_bars,
)


@plain_text
def mfu_figure(rows: Sequence[dict], peak_gflops: float) -> Optional[str]:
    """Bars of MFU per trial (``rows``: ``label``, ``verdict``, ``mfu`` or None); unknown MFU is labelled, not 0."""
    known = [r for r in rows if r.get("mfu") is not None]
    if not known:
        return None
    fig = Figure(figsize=(WIDTH_IN, rows_height(len(rows))))
    ax = fig.subplots()
    values = [100 * r["mfu"] if r.get("mfu") is not None else 0.0 for r in rows]
    verdict_bars(ax, rows, values, [f"{v:.2f}%" if r.get("mfu") is not None else "unknown"
                                    for r, v in zip(rows, values)], 0.25)
    ax.set_xlabel(f"MFU (% of the measured {peak_gflops:.1f} GFLOP/s matmul peak)")
    ax.set_title("Model FLOPs utilisation per trial")
    tidy_axes(ax, grid="both")
    return to_png(fig)


@plain_text
def drift_figure(rows: Sequence[dict]) -> Optional[str]:
    """Each trial's timed windows in order, as a share of that trial's median window: a flat line is a steady burst,
    a slope is drift (warming caches, throttling, a neighbour starting).  Contended windows are drawn as crosses.

    ``rows``: ``label``, ``windows`` [samples/s per window], ``contended`` [bool per window].
    """
    rows = [r for r in rows if len(r.get("windows") or []) >= 2]
    if not rows:
        return None
    fig = Figure(figsize=(WIDTH_IN, 3.4))
    ax = fig.subplots()
    lo, hi = 1.0, 1.0
    for i, r in enumerate(rows):
        rel = np.asarray(r["windows"], dtype=float) / float(np.median(r["windows"]))
        x = np.arange(1, len(rel) + 1)
        color = CURVE_COLORS[i % len(CURVE_COLORS)]
        style = ("-", "--", ":")[(i // len(CURVE_COLORS)) % 3]  # more trials than colours: vary the line
        ax.plot(x, rel, marker="o", linestyle=style, color=color, markersize=3, linewidth=1.2, label=r["label"])
        bad = [j for j, c in enumerate(r.get("contended") or []) if c and j < len(rel)]
        if bad:
            ax.plot(x[bad], rel[bad], "x", color="#c0392b", markersize=8)
        lo, hi = min(lo, float(rel.min())), max(hi, float(rel.max()))
    pad = max((hi - lo) * 0.15, 0.01)
    ax.set_ylim(lo - pad, hi + pad)
    ax.axhline(1.0, color="#777777", linewidth=0.8, linestyle="--")
    ax.set_xlabel("timed window, in order (red cross: others used the cores)")
    ax.set_ylabel("throughput / trial's median window")
    ax.set_title("Throughput drift within each burst")
    ax.xaxis.get_major_locator().set_params(integer=True)
    legend_outside(ax)
    tidy_axes(ax, grid="both")
    return to_png(fig)


def loss_difference(base: Sequence[tuple[int, float]], curve: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """``curve`` minus the baseline's loss at the same samples seen (linear interpolation between the baseline's
    points; only inside the baseline's range).  Identical curves give zeros."""
    if not base or not curve:
        return []
    bx = np.asarray([p[0] for p in base], dtype=float)
    by = np.asarray([p[1] for p in base], dtype=float)
    return [(int(x), float(y - np.interp(x, bx, by))) for x, y in curve if bx[0] <= x <= bx[-1]]


@plain_text
def loss_difference_figure(curves: Sequence[dict]) -> Optional[str]:
    """Training loss of each change minus the baseline's at equal samples seen: identical curves read as a flat line
    at zero, a divergence stands out.  ``curves``: ``label``, ``points`` [(samples seen, loss - baseline)],
    ``rejected``."""
    curves = [c for c in curves if c.get("points")]
    if not curves:
        return None
    fig = Figure(figsize=(WIDTH_IN, 3.4))
    ax = fig.subplots()
    ax.axhline(0.0, color="#555555", linewidth=1.0, label="baseline (zero)")
    extent = 0.0
    for i, c in enumerate(curves):
        xs, ys = [p[0] for p in c["points"]], [p[1] for p in c["points"]]
        extent = max(extent, max(abs(y) for y in ys))
        color = "#c0392b" if c.get("rejected") else CURVE_COLORS[(i + 1) % len(CURVE_COLORS)]
        ax.plot(xs, ys, color=color, linewidth=1.3, label=c["label"], linestyle="--" if c.get("rejected") else "-")
    if extent == 0.0:
        ax.text(0.98, 0.95, "every change's loss equals the baseline's at every point", transform=ax.transAxes,
                ha="right", va="top", fontsize="x-small", color="#555555")
    limit = extent * 1.15 or 0.05
    ax.set_ylim(-limit, limit)
    ax.set_xlabel("samples seen")
    ax.set_ylabel("training loss - baseline's")
    ax.set_title("Loss difference from the baseline at equal samples seen (above zero: worse)")
    legend_outside(ax)
    tidy_axes(ax, grid="both")
    return to_png(fig)


@plain_text
def rank_splits_figure(rows: Sequence[dict]) -> Optional[str]:
    """One stacked bar per rank of each distributed trial: that rank's profiled splits (they add up to its step).

    ``rows``: ``label`` (e.g. "workers=2, rank 1 (straggler)"), ``splits`` {phase: ms} or None (no profile: an
    empty bar labelled so)."""
    if not any(r.get("splits") for r in rows):
        return None
    fig = Figure(figsize=(WIDTH_IN, rows_height(len(rows))))
    ax = fig.subplots()
    phase_bars(ax, [r.get("splits") or {} for r in rows])
    for i, r in enumerate(rows):
        if not r.get("splits"):
            ax.text(0, i, " not profiled", va="center", fontsize="x-small", color="#777777")
    label_rows(ax, [r["label"] for r in rows])
    ax.set_xlabel("time per step (ms), each rank's own profiled split")
    ax.set_title("Per-rank time splits of distributed trials")
    legend_outside(ax)
    tidy_axes(ax, grid="both")
    return to_png(fig)
