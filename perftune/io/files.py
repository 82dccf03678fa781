"""The file layout of trials and sweeps, and the one place that reads their JSON back.

A trial folder holds ``spec.json`` (what was asked), ``trial.json`` (what was measured), ``burst.log`` and, for
distributed trials, ``rank_<r>/`` and ``msrun_logs/``; a sweep folder holds ``results.json`` and ``trials/<id>/``.
Every reader goes through :func:`read_json` (one wording for missing, empty, binary and cut files) and
``perftune.io.schema`` (older versions upgraded, newer ones refused), and raises ``UserError`` naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from pydantic import ValidationError

from perftune.errors import UserError
from perftune.io.records import TrialResult, TrialSpec
from perftune.io.schema import upgrade_results, upgrade_trial
from perftune.io.sweep_records import SweepResult

SPEC_NAME = "spec.json"
TRIAL_NAME = "trial.json"
LOG_NAME = "burst.log"
RESULTS_NAME = "results.json"
TRIALS_DIR = "trials"
MSRUN_LOG_DIR = "msrun_logs"  # msrun's --log_dir inside the trial folder: worker_<rank>.log, scheduler.log
SWEEP_KIND = "perftune-sweep"
#: the environment variable that tells a rank (and a sweep on another machine) its node number
NODE_RANK_ENV = "PERFTUNE_NODE_RANK"


def rank_dir_name(rank: int | str) -> str:
    """The folder of one rank's result and profile inside a distributed trial's folder."""
    return f"rank_{rank}"


def rank_log_name(rank: int | str) -> str:
    """msrun's log of one rank, relative to the trial folder."""
    return f"{MSRUN_LOG_DIR}/worker_{rank}.log"


def read_json(path: Path, expected: str = "a perftune results.json or trial.json") -> Any:
    """The parsed JSON of ``path``; a ``UserError`` naming the file and what is wrong with it otherwise."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not raw.strip():
        raise UserError(f"{path}: empty file (expected {expected})")
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file (expected {expected})") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: corrupted or truncated JSON ({exc.msg} at line {exc.lineno}, "
                        f"column {exc.colno})") from None


def _validate(model, data: dict, path: Path, name: str):
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = str(exc).splitlines()[1:3]
        raise UserError(f"{path}: {name} does not match its schema: {' '.join(first)}") from None


def _file_in(path: str | Path, default_name: str) -> Path:
    path = Path(path)
    return path / default_name if path.is_dir() else path


def is_sweep(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == SWEEP_KIND


def is_trial(data: Any) -> bool:
    return isinstance(data, dict) and "trial_id" in data


def read_sweep(path: str | Path) -> SweepResult:
    """``results.json`` (or the folder holding it) as a ``SweepResult``, upgraded from older schema versions."""
    path = _file_in(path, RESULTS_NAME)
    data = read_json(path, "a perftune results.json")
    if not is_sweep(data):
        raise UserError(f"{path}: not a perftune results.json (no \"kind\": \"{SWEEP_KIND}\")")
    return _validate(SweepResult, upgrade_results(data, path), path, RESULTS_NAME)


def read_trial(path: str | Path) -> TrialResult:
    """``trial.json`` (or the folder holding it) as a ``TrialResult``, upgraded from older schema versions."""
    path = _file_in(path, TRIAL_NAME)
    data = read_json(path, "a perftune trial.json")
    if not is_trial(data):
        raise UserError(f"{path}: not a perftune trial.json")
    return _validate(TrialResult, upgrade_trial(data, path), path, TRIAL_NAME)


def read_trial_if_present(path: str | Path) -> Optional[TrialResult]:
    """``read_trial``, or None where no file exists yet; a file that exists but cannot be read still raises."""
    path = _file_in(path, TRIAL_NAME)
    if not path.exists():
        return None
    return read_trial(path)


def reusable_trial(trial_dir: Path, trial_id: str) -> Optional[TrialResult]:
    """A finished trial.json of this very trial (same id) left by an earlier run, else None.

    A trial.json that exists but cannot be read is reported, not silently measured again: it may hold the only copy
    of a long measurement, and a file that keeps breaking would otherwise be re-run on every resume.
    """
    try:
        result = read_trial_if_present(trial_dir / TRIAL_NAME)
    except UserError as exc:
        raise UserError(f"{exc}; delete the folder {trial_dir} to measure this trial again, or start the sweep "
                        "over with --fresh") from None
    if result is None or result.trial_id != trial_id or result.retry_on_resume:
        return None  # retry_on_resume: killed by a signal perftune did not send; measured again
    return result


def read_spec(path: str | Path) -> TrialSpec:
    """A trial folder's ``spec.json`` (written by the runner before it starts the burst)."""
    path = _file_in(path, SPEC_NAME)
    data = read_json(path, "a perftune spec.json")
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a perftune spec.json")
    return _validate(TrialSpec, data, path, SPEC_NAME)
