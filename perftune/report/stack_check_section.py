"""The HTML report's section ``stack-check``: the accuracy gate's set-up and the final stack's check at length, in
the words of ``perftune.words.window_words``, and its one figure.
"""

from __future__ import annotations

from typing import Optional

from matplotlib.figure import Figure

from perftune.io.accuracy_window import StackCheck
from perftune.io.sweep_records import SweepResult
from perftune.report import figures
from perftune.words.window_words import changes_text, limits_line, stack_check_lines, window_lines


def stack_check_plot(check: Optional[StackCheck]) -> Optional[Figure]:
    """The baseline's seeds (grey) and the final stack (blue; red when refused) at the longer window, the sweep's
    window marked: where a late harm shows."""
    if check is None or check.stack_run is None or not check.baseline_runs:
        return None
    fig = Figure(figsize=(figures.WIDTH_IN, 3.2))
    ax = fig.subplots()
    for i, run in enumerate(check.baseline_runs):
        ax.plot([s for s, _ in run.loss_curve], [v for _, v in run.loss_curve], color="#999999", linewidth=0.8,
                label=f"baseline, {len(check.baseline_runs)} seeds" if i == 0 else None)
    color = "#c0392b" if check.status == "refused" else "#0072b2"
    ax.plot([s for s, _ in check.stack_run.loss_curve], [v for _, v in check.stack_run.loss_curve], color=color,
            linewidth=1.2, label=f"{changes_text(check.best)} ({check.status})")
    ax.axvline(check.window, color="#555555", linestyle=":", linewidth=1, label="the sweep's accuracy window")
    values = [v for r in [*check.baseline_runs, check.stack_run] for _, v in r.loss_curve if v and v > 0]
    if values and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ax.set_xlabel("samples seen")
    ax.set_ylabel("training loss")
    ax.legend(fontsize=8)
    return fig


def stack_check_context(result: SweepResult) -> dict:
    """The report section ``stack-check``: its lines, the window's limits and the figure."""
    fig = stack_check_plot(result.stack_check)
    return {"lines": window_lines(result) + stack_check_lines(result), "limits": limits_line(result),
            "figure": figures.to_png(fig) if fig is not None else None,
            "status": result.stack_check.status if result.stack_check else None}
