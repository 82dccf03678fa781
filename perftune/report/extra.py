"""The report's efficiency and within-trial sections (template ``extra.html``): MFU against the measured peak,
throughput drift over each burst's timed windows, each change's loss as a difference from the baseline, and the
ranks of distributed trials (per-rank splits, the straggler, the spread, the communication share)."""

from __future__ import annotations

from typing import Optional

from perftune.io.records import COMMUNICATION_FLAG_SHARE, PHASES, Environment
from perftune.report import figures_extra
from perftune.report.efficiency import efficiency
from perftune.report.load import SweepFolder
from perftune.report.tables import process_label
from perftune.words.format import rate


def sweep_environment(folder: SweepFolder) -> Optional[Environment]:
    """The machine the sweep ran on: the sweep's record, else the first trial's."""
    return folder.result.environment or next(
        (t.result.environment for t in folder.trials if t.result.environment), None)


def loss_differences(folder: SweepFolder) -> list[dict]:
    """Every measured change (singles, stack steps, leave-one-out) with an accuracy curve, minus the first baseline
    run's curve at equal samples seen (the first process of each configuration)."""
    base = next((t for t in folder.trials if t.kind == "baseline" and t.replicate == 0), None)
    base_curve = folder.loss_curve(base.trial_id) if base is not None else []
    if not base_curve:
        return []
    out = []
    for t in folder.trials:
        if t.kind == "baseline" or t.result.status != "ok":
            continue
        points = figures_extra.loss_difference(base_curve, folder.loss_curve(t.trial_id))
        if points:
            rejected = " (rejected)" if t.verdict == "accuracy rejected" else ""
            out.append({"label": process_label(t, folder.trials) + rejected,
                        "points": points, "rejected": t.verdict == "accuracy rejected",
                        "max_abs": max(abs(y) for _, y in points)})
    return out


def ranks_context(folder: SweepFolder) -> dict:
    """Distributed trials (``workers >= 2``): per rank its step, throughput, communication share and profiled splits;
    per trial the straggler (slowest median step) and the spread between the ranks."""
    trials, bars = [], []
    for t in folder.trials:
        r = t.result
        if r.world_size < 2 or not r.ranks:
            continue
        label = process_label(t, folder.trials)
        ranks = []
        for k in r.ranks:
            straggler = k.rank == r.straggler_rank
            ranks.append({"rank": k.rank, "host": k.host or "", "status": k.status, "straggler": straggler,
                          "step_ms": f"{k.step_ms_median:.2f}" if k.step_ms_median is not None else "",
                          "samples_per_s": rate(k.samples_per_s),
                          "communication": f"{k.communication_share:.1%}" if k.communication_share is not None
                          else "", "profile_error": k.profile_error or ""})
            bars.append({"label": f"{label}, rank {k.rank}" + (" (straggler)" if straggler else ""),
                         "splits": {p: getattr(k.splits, f"{p}_ms") for p in PHASES} if k.splits else None})
        comm = r.profile.communication_share if r.profile else None
        trials.append({
            "trial_id": t.trial_id, "label": label, "world_size": r.world_size, "ranks": ranks,
            "straggler": r.straggler_rank, "spread": f"{r.rank_spread:.1%}" if r.rank_spread is not None else "",
            "communication": f"{comm:.1%}" if comm is not None else "",
            "communication_flag": bool(r.profile and r.profile.communication_flag),
        })
    return {"trials": trials, "figure": figures_extra.rank_splits_figure(bars) if bars else None,
            "flag_share": f"{COMMUNICATION_FLAG_SHARE:.0%}"}


def extra_context(folder: SweepFolder) -> dict:
    labels = {t.trial_id: process_label(t, folder.trials) for t in folder.trials}
    eff = efficiency(folder.trials, sweep_environment(folder), labels)
    drift_rows = [{"label": labels[t.trial_id], "windows": [w.samples_per_s for w in t.result.windows],
                   "contended": [w.contended for w in t.result.windows]}
                  for t in folder.trials if t.result.status == "ok"]
    diffs = loss_differences(folder)
    return {
        "efficiency": {
            "peak_text": eff.peak_text, "has_peak": eff.peak is not None,
            "rows": [{**r, "samples_per_s": rate(r['samples_per_s']),
                      "mflop_per_sample": f"{r['mflop_per_sample']:.3f}" if r["mflop_per_sample"] else "unknown",
                      "gflop_per_s": f"{r['gflop_per_s']:.2f}" if r["gflop_per_s"] else "unknown"}
                     for r in eff.rows],
            "figure": figures_extra.mfu_figure(eff.rows, eff.peak.flops_per_s / 1e9) if eff.peak else None,
        },
        "drift": figures_extra.drift_figure(drift_rows),
        "loss_difference": figures_extra.loss_difference_figure(diffs),
        "ranks": ranks_context(folder),
        "loss_difference_rows": [{"label": d["label"], "max_abs": f"{d['max_abs']:.4g}"} for d in diffs],
    }
