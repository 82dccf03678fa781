"""Load sweep results back as pandas DataFrames, for notebooks: ``perftune.load_results(path)``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from perftune.errors import UserError
from perftune.records import PHASES, RESULTS_SCHEMA_VERSION, SweepResult, TrialResult, TRIAL_SCHEMA_VERSION


def _read_json(path: str | Path, default_name: str, what: str) -> tuple[Path, object]:
    path = Path(path)
    if path.is_dir():
        path = path / default_name
    try:
        return path, json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: not a readable {what} file ({exc.__class__.__name__}: {exc})") from None


def _validate(model, data: dict, path: Path, name: str):
    try:
        return model.model_validate(data)
    except ValueError as exc:
        first = str(exc).splitlines()[1:3]
        raise UserError(f"{path}: {name} does not match its schema: {' '.join(first)}") from None


def read_sweep(path: str | Path) -> SweepResult:
    """``results.json`` (or the folder holding it) as a ``SweepResult``; refuses other files and other schemas."""
    path, data = _read_json(path, "results.json", "results")
    if not isinstance(data, dict) or data.get("kind") != "perftune-sweep":
        raise UserError(f"{path}: not a perftune results.json (no \"kind\": \"perftune-sweep\")")
    version = data.get("schema_version")
    if version != RESULTS_SCHEMA_VERSION:
        raise UserError(f"{path}: results schema version {version!r}; this perftune reads version "
                        f"{RESULTS_SCHEMA_VERSION}")
    return _validate(SweepResult, data, path, "results.json")


def read_trial(path: str | Path) -> TrialResult:
    """``trial.json`` (or the folder holding it) as a ``TrialResult``."""
    path, data = _read_json(path, "trial.json", "trial")
    if not isinstance(data, dict) or "trial_id" not in data:
        raise UserError(f"{path}: not a perftune trial.json")
    if data.get("schema_version") != TRIAL_SCHEMA_VERSION:
        raise UserError(f"{path}: trial schema version {data.get('schema_version')!r}; this perftune reads "
                        f"version {TRIAL_SCHEMA_VERSION}")
    return _validate(TrialResult, data, path, "trial.json")


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
    from perftune.tables import ablation_table

    sweep = read_sweep(path)
    rows, split_rows, window_rows = [], [], []
    for t in sweep.trials:
        r = t.result
        c = t.vs_baseline
        acc = r.accuracy
        rows.append({
            "trial_id": t.trial_id, "label": t.label, "kind": t.kind, "replicate": t.replicate,
            "verdict": t.verdict, "reason": t.reason, "status": r.status, **{f"knob.{k}": v for k, v in r.knobs.items()},
            "samples_per_s": r.samples_per_s, "tokens_per_s": r.tokens_per_s, "step_ms_median": r.step_ms_median,
            "compile_ms": r.compile_ms, "speedup": c.ratio if c else None, "speedup_ci_low": c.ci_low if c else None,
            "speedup_ci_high": c.ci_high if c else None,
            "val_loss": acc.val_loss if acc else None, "train_loss": acc.train_loss if acc else None,
            "perplexity": acc.perplexity if acc else None,
            "allocator_peak_bytes": r.memory.allocator_peak_bytes, "host_rss_peak_bytes": r.memory.host_rss_peak_bytes,
        })
        splits = r.profile.splits if r.profile else None
        if splits is not None:
            split_rows.append({"trial_id": t.trial_id, "label": t.label,
                               **{f"{p}_ms": getattr(splits, f"{p}_ms") for p in PHASES},
                               "step_ms": splits.step_ms, "explained_share": splits.explained_share})
        for i, w in enumerate(r.windows):
            window_rows.append({"trial_id": t.trial_id, "label": t.label, "window": i, "samples_per_s": w.samples_per_s,
                                "median_step_ms": w.median_step_ms})
    return Results(raw=sweep, trials=pd.DataFrame(rows), splits=pd.DataFrame(split_rows),
                   stack=ablation_table(sweep), windows=pd.DataFrame(window_rows))
