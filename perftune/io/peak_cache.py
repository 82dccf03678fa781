"""The cached peak matmul FLOP/s of a machine (``perftune peak``), read by the report's MFU figures.

One JSON file, ``~/.cache/perftune/peak.json`` (``$PERFTUNE_CACHE_DIR`` or ``$XDG_CACHE_HOME/perftune`` instead
when set), holding one record per (host, device, MindSpore version): a peak measured on another machine, device or
MindSpore release never stands in for this one's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from pydantic import ValidationError

from perftune.errors import UserError
from perftune.io.records import Record

PEAK_FILE = "peak.json"
CACHE_ENV = "PERFTUNE_CACHE_DIR"


class PeakRecord(Record):
    """One measured peak and how it was measured (the report states both)."""

    host: str
    device: str
    mindspore_version: str
    flops_per_s: float  # the best repeat: the peak
    median_flops_per_s: float
    dtype: str = "float32"
    method: str  # e.g. "ops.MatMul 2048x2048x2048, PyNative, synchronised per call"
    size: int
    repeats: int
    seconds: float  # time spent in the timed repeats
    load_avg_1m: Optional[float] = None  # the machine's load when measured: a busy machine measures a lower peak
    measured_utc: str


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "perftune"


def cache_path() -> Path:
    return cache_dir() / PEAK_FILE


def peak_key(host: str, device: str, mindspore_version: str) -> str:
    return f"{host}|{device}|{mindspore_version}"


def _read_all(path: Path) -> dict:
    """Every cached record (bounded like every JSON perftune reads: ``files.read_json``)."""
    from perftune.io.files import read_json

    if not os.path.lexists(path):
        return {}
    try:
        data = read_json(path, "a perftune peak cache")
    except UserError as exc:
        raise UserError(f"unreadable peak cache: {exc}; delete it or run `perftune peak --refresh`") from None
    peaks = data.get("peaks") if isinstance(data, dict) else None
    if not isinstance(peaks, dict):
        raise UserError(f"{path}: not a perftune peak cache (no \"peaks\"); delete it or run `perftune peak --refresh`")
    return peaks


def read_peak(host: str, device: str, mindspore_version: str) -> Optional[PeakRecord]:
    """The cached peak of that machine, device and MindSpore version, or None where none was measured."""
    path = cache_path()
    raw = _read_all(path).get(peak_key(host, device, mindspore_version))
    if raw is None:
        return None
    try:
        return PeakRecord.model_validate(raw)
    except ValidationError:
        raise UserError(f"{path}: the entry for {host}/{device}/MindSpore {mindspore_version} does not match its "
                        "schema; run `perftune peak --refresh`") from None


def write_peak(record: PeakRecord) -> Path:
    """Add or replace ``record`` in the cache file (other machines' entries are kept); returns the file."""
    from perftune.io.store import write_json_atomic

    path = cache_path()
    try:
        peaks = _read_all(path)
    except UserError:  # an unreadable cache is replaced by the new measurement
        peaks = {}
    peaks[peak_key(record.host, record.device, record.mindspore_version)] = record.model_dump(mode="json")
    try:
        write_json_atomic(path, {"peaks": peaks})
    except OSError as exc:
        raise UserError(f"{path}: cannot be written ({exc.strerror or exc})") from None
    return path
