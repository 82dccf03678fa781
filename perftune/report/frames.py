"""A sweep's results as pandas DataFrames, for notebooks: ``perftune.load_results(path)``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from perftune.io.files import read_sweep
from perftune.io.records import PHASES
from perftune.io.sweep_records import SweepResult
from perftune.report.tables import ablation_table
from perftune.words import lm
from perftune.words.reasons import reason_text


@dataclass
class Results:
    """A sweep's results as DataFrames; ``raw`` is the typed record."""

    raw: SweepResult
    trials: pd.DataFrame
    splits: pd.DataFrame
    stack: pd.DataFrame
    windows: pd.DataFrame


def load_results(path: str | Path) -> Results:
    """Load a sweep (``results.json`` or its folder): trials, splits, the stack and every timed window."""
    sweep = read_sweep(path)
    rows, split_rows, window_rows = [], [], []
    for t in sweep.trials:
        r = t.result
        c = t.vs_baseline
        acc = r.accuracy
        rows.append({
            "trial_id": t.trial_id, "label": t.label, "kind": t.kind, "replicate": t.replicate,
            "verdict": t.verdict, "reason": reason_text(t), "status": r.status,
            "node": r.node.host if r.node else None, "node_id": r.node.node_id if r.node else None,
            **{f"knob.{k}": v for k, v in r.knobs.items()},
            "samples_per_s": r.samples_per_s, "tokens_per_s": r.tokens_per_s, "step_ms_mean": r.step_ms_mean,
            "step_ms_median": r.step_ms_median, "compile_ms": r.compile_ms, "speedup": c.ratio if c else None,
            "speedup_ci_low": c.ci_low if c else None,
            "speedup_ci_high": c.ci_high if c else None,
            "val_loss": acc.val_loss if acc else None, "train_loss": acc.train_loss if acc else None,
            "perplexity": lm.perplexity(r), "repetition_rate": lm.repetition(r),  # language models only
            "allocator_peak_bytes": r.memory.allocator_peak_bytes, "host_rss_peak_bytes": r.memory.host_rss_peak_bytes,
        })
        splits = r.profile.splits if r.profile else None
        if splits is not None:
            split_rows.append({"trial_id": t.trial_id, "label": t.label,
                               **{f"{p}_ms": getattr(splits, f"{p}_ms") for p in PHASES},
                               "step_ms": splits.step_ms, "explained_share": splits.explained_share,
                               "recompute_ms": splits.recompute_ms})
        for i, w in enumerate(r.windows):
            window_rows.append({"trial_id": t.trial_id, "label": t.label, "window": i, "samples_per_s": w.samples_per_s,
                                "median_step_ms": w.median_step_ms})
    return Results(raw=sweep, trials=pd.DataFrame(rows), splits=pd.DataFrame(split_rows),
                   stack=ablation_table(sweep), windows=pd.DataFrame(window_rows))
