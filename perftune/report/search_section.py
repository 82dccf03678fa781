"""The HTML report's section ``searches``: each range search's curve (throughput against the knob's value, with
95% intervals; every tried value marked, the found one highlighted, values that did not fit crossed) and its line in
words (``perftune.words.search_words``)."""

from __future__ import annotations

from typing import Optional

from matplotlib.figure import Figure

from perftune.io.sweep_records import SearchRecord, SweepResult
from perftune.report import figures
from perftune.words.search_words import search_line, stop_text

FOUND_COLOR = "#2e8b57"
TRIED_COLOR = "#0072b2"
MISFIT_COLOR = "#c0392b"


def search_plot(record: SearchRecord) -> Optional[Figure]:
    """One search's curve; None when no tried value was measured."""
    points = record.curve
    if not points:
        return None
    fig = Figure(figsize=(figures.WIDTH_IN, 3.2))
    ax = fig.subplots()
    xs = [p.value for p in points]
    ys = [p.samples_per_s for p in points]
    err = [[p.samples_per_s - p.ci_low for p in points], [p.ci_high - p.samples_per_s for p in points]]
    ax.plot(xs, ys, color=TRIED_COLOR, linewidth=1, alpha=0.6)
    ax.errorbar(xs, ys, yerr=err, fmt="o", color=TRIED_COLOR, capsize=3, label="tried (95% interval)")
    for p in points:
        ax.annotate(f"{p.processes}", (p.value, p.ci_high), textcoords="offset points", xytext=(0, 3),
                    ha="center", fontsize=7, color="#555555")
    found = next((p for p in points if p.value == record.found), None)
    if found is not None:
        ax.plot([found.value], [found.samples_per_s], marker="*", markersize=16, color=FOUND_COLOR, linestyle="",
                label=f"found: {record.found}")
    misfits = [f.value for f in record.fits if f.status != "ok"]
    for i, value in enumerate(misfits):
        ax.axvline(value, color=MISFIT_COLOR, linestyle=":", linewidth=1,
                   label="did not fit" if i == 0 else None)
    if record.range.scale == "log2":
        ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(xs + misfits)), [str(v) for v in sorted(set(xs + misfits))])
    ax.set_xlabel(f"{record.knob} (numbers above the bars: processes)")
    ax.set_ylabel("samples/s")
    ax.set_title(f"{record.knob}: {stop_text(record)}", fontsize=9)
    figures.tidy_axes(ax, grid="y")
    ax.legend(fontsize=8, frameon=False)
    return fig


@figures.plain_text
def search_figure(record: SearchRecord) -> Optional[str]:
    fig = search_plot(record)
    return figures.to_png(fig) if fig is not None else None


def search_context(result: SweepResult) -> list[dict]:
    """Per range search: its knob, its line in words and its figure."""
    return [{"knob": s.knob, "line": search_line(s), "figure": search_figure(s)} for s in result.searches]
