"""The file layout of trials and sweeps, and the one place that reads their JSON back.

A trial folder holds ``spec.json`` (what was asked), ``trial.json`` (what was measured), ``burst.log`` and, for
distributed trials, ``rank_<r>/`` and ``msrun_logs/``; a sweep folder holds ``results.json`` and ``trials/<id>/``.
Every reader goes through :func:`read_json` (one wording for missing, empty, binary and cut files) and
``perftune.io.schema`` (older versions upgraded, newer ones refused), and raises ``UserError`` naming the file.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any, Optional

from pydantic import ValidationError

from perftune.errors import UserError
from perftune.io.derived import derived_mismatch
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
#: each accepted trial.json's SHA-256, at the top of the sweep folder (``perftune/io/seals.py``)
SEALS_NAME = ".perftune-seals.json"
#: the seal written into the trial folder itself, beside trial.json (``sha256sum -c`` reads it): a second witness
TRIAL_SEAL_NAME = "trial.sha256"
#: the words of a trial's ``containment`` where a process of the trial was found outside it (the runner says it,
#: the sweep warns)
ESCAPED = "escaped the trial's containment"
#: the environment variable that tells a rank (and a sweep on another machine) its node number
NODE_RANK_ENV = "PERFTUNE_NODE_RANK"
#: what a trial folder holds that the runner wrote (a redone trial clears them; ``--fresh`` deletes only these)
TRIAL_OUTPUTS = ("profile", "kernel_meta", "rank_*", MSRUN_LOG_DIR, LOG_NAME, TRIAL_NAME, TRIAL_SEAL_NAME, ".*.tmp")
#: limits on every JSON file perftune reads: its own are a few MB and a few levels deep
MAX_JSON_BYTES = 256 * 1024 * 1024
MAX_JSON_DEPTH = 64


def rank_dir_name(rank: int | str) -> str:
    """The folder of one rank's result and profile inside a distributed trial's folder."""
    return f"rank_{rank}"


def rank_log_name(rank: int | str) -> str:
    """msrun's log of one rank, relative to the trial folder."""
    return f"{MSRUN_LOG_DIR}/worker_{rank}.log"


def file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path: Path, max_bytes: int = MAX_JSON_BYTES) -> None:
    """Refuse, before opening it (a FIFO would block), anything that is not a regular file of at most ``max_bytes``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{path}: {file_kind(st.st_mode)}, not a regular file; perftune reads only regular files")
    if st.st_size > max_bytes:
        raise UserError(f"{path}: {st.st_size} bytes, more than the {max_bytes // 2**20} MiB perftune reads")


class _NotFinite(ValueError):
    pass


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def _no_constant(text: str) -> float:
    raise _NotFinite(text)


def json_depth_exceeds(data: Any, limit: int) -> bool:
    """Whether ``data`` nests deeper than ``limit`` (iterative: a deep file must not exhaust the stack here)."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return False


def read_json(path: Path, expected: str = "a perftune results.json or trial.json") -> Any:
    """The parsed JSON of ``path``; a ``UserError`` naming the file and what is wrong with it otherwise.

    Bounded: a regular file (never a FIFO or device), at most ``MAX_JSON_BYTES``, nested at most ``MAX_JSON_DEPTH``
    levels, numbers finite (perftune writes no NaN or Infinity)."""
    path = Path(path)
    check_regular(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not raw.strip():
        raise UserError(f"{path}: empty file (expected {expected})")
    deep = False
    try:
        data = json.loads(raw, parse_float=_finite_float, parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file (expected {expected})") from None
    except _NotFinite as exc:
        raise UserError(f"{path}: holds the number {exc}, which perftune never writes (only finite numbers): the "
                        "file is corrupted or was edited") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: corrupted or truncated JSON ({exc.msg} at line {exc.lineno}, "
                        f"column {exc.colno})") from None
    except RecursionError:  # deeper than the interpreter's recursion limit
        deep, data = True, None
    if deep or json_depth_exceeds(data, MAX_JSON_DEPTH):
        raise UserError(f"{path}: nested more than {MAX_JSON_DEPTH} levels deep (perftune's files are a few levels "
                        "deep): not a perftune file")
    return data


def unusable_windows(result: TrialResult) -> Optional[str]:
    """Why an ok trial's timed windows cannot be used (a throughput or time that is not > 0, a stored throughput
    they do not give: ``derived.derived_mismatch``), or None.

    The one rule of what is unusable, so ``report``, ``compare``, ``export`` and a resume refuse the same files."""
    if result.status != "ok":
        return None
    for w in result.windows:
        for name, value in (("throughput", w.samples_per_s), ("time", w.total_ms)):
            if value is None or not value > 0:
                return (f"trial {result.trial_id} has an unusable window {name} ({value!r}; expected finite numbers "
                        "> 0): the file is corrupted or was edited")
    return derived_mismatch(result)


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
    sweep = _validate(SweepResult, upgrade_results(data, path), path, RESULTS_NAME)
    for t in sweep.trials:
        if (why := unusable_windows(t.result)) is not None:
            raise UserError(f"{path}: {why}")
    return sweep


def read_trial(path: str | Path) -> TrialResult:
    """``trial.json`` (or the folder holding it) as a ``TrialResult``, upgraded from older schema versions."""
    path = _file_in(path, TRIAL_NAME)
    data = read_json(path, "a perftune trial.json")
    if not is_trial(data):
        raise UserError(f"{path}: not a perftune trial.json")
    result = _validate(TrialResult, upgrade_trial(data, path), path, TRIAL_NAME)
    if (why := unusable_windows(result)) is not None:
        raise UserError(f"{path}: {why}")
    return result


def read_trial_if_present(path: str | Path) -> Optional[TrialResult]:
    """``read_trial``, or None where no file exists yet; a file that exists but cannot be read still raises."""
    path = _file_in(path, TRIAL_NAME)
    if not path.exists():
        return None
    return read_trial(path)


def read_spec(path: str | Path) -> TrialSpec:
    """A trial folder's ``spec.json`` (written by the runner before it starts the burst)."""
    path = _file_in(path, SPEC_NAME)
    data = read_json(path, "a perftune spec.json")
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a perftune spec.json")
    return _validate(TrialSpec, data, path, SPEC_NAME)
