"""The profiler's files, declared once: where each is, which columns perftune reads under which name and type (our
names carry units), and the readers that refuse a malformed or cut file with a ``ProfileError`` naming it."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from perftune.errors import ProfileError

ROOT_SUFFIX = "_ascend_ms"  # MindSpore 2.x names the folder like this on every backend, CPU included

@dataclass(frozen=True)
class CsvSpec:
    """One CSV file of a layout: where it is and which of its columns we read, under which name and type."""

    relpath: str  # relative to the root; ``{rank}`` is filled in
    columns: dict  # source column -> (our column, dtype)
    optional: tuple = ()  # source columns that some versions lack

    def path(self, root: Path, rank: int) -> Path:
        return root / self.relpath.format(rank=rank)


CPU_OP_DETAIL = CsvSpec(
    "FRAMEWORK/cpu_op_detail_info_{rank}.csv",
    {
        "op_type": ("op_type", str),
        "op_name": ("name", str),
        "full_op_name": ("full_name", str),
        "op_occurrences": ("count", "int64"),
        "op_total_time(ms)": ("total_ms", "float64"),
        "op_avg_time(ms)": ("mean_ms", "float64"),
    },
)

CPU_OP_TIMESTAMPS = "FRAMEWORK/cpu_op_execute_timestamp_{rank}.txt"  # ``full_name;HostCpuOps;start_ns,dur_ms,0 ...``

CPU_MEMORY = CsvSpec(
    "FRAMEWORK/cpu_ms_memory_record_{rank}.txt",
    {"Timestamp(ns)": ("timestamp_ns", "int64"), "Total Allocated(Byte)": ("allocated_bytes", "int64")},
)

ASCEND_KERNELS = CsvSpec(
    "ASCEND_PROFILER_OUTPUT/kernel_details.csv",
    {
        "Step Id": ("step", "float64"),
        "Name": ("full_name", str),
        "Type": ("op_type", str),
        "Accelerator Core": ("core", str),
        "Start Time(us)": ("start_us", "float64"),
        "Duration(us)": ("duration_us", "float64"),
    },
    optional=("Step Id", "Accelerator Core", "Start Time(us)"),
)

ASCEND_STEP_TRACE = CsvSpec(
    "ASCEND_PROFILER_OUTPUT/step_trace_time.csv",
    {
        "Device_id": ("device_id", "float64"),
        "Step": ("step", "float64"),
        "Computing": ("computing_us", "float64"),
        "Communication(Not Overlapped)": ("communication_not_overlapped_us", "float64"),
        "Overlapped": ("overlapped_us", "float64"),
        "Communication": ("communication_us", "float64"),
        "Free": ("free_us", "float64"),
        "Stage": ("stage_us", "float64"),
        "Bubble": ("bubble_us", "float64"),
        "Communication(Not Overlapped and Exclude Receive)": ("communication_not_overlapped_exclude_receive_us",
                                                              "float64"),
        "Preparing": ("preparing_us", "float64"),
    },
    optional=("Device_id", "Step", "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing"),
)

ASCEND_DB = "ascend_mindspore_profiler_{rank}.db"

TRACE_VIEW = "ASCEND_PROFILER_OUTPUT/trace_view.json"

#: the columns of ``ProfileData.ops``
OP_COLUMNS = ["name", "full_name", "op_type", "phase", "phase_rule", "count", "total_ms", "mean_ms"]


def read_csv(spec: CsvSpec, path: Path, **kwargs) -> pd.DataFrame:
    """Read the declared columns of one CSV, BOM stripped; raise ProfileError on a malformed or cut file."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ProfileError(f"{path}: cannot read ({e.strerror})") from None
    text = raw.decode("utf-8-sig", errors="replace")
    if not text.strip():
        raise ProfileError(f"{path}: empty file (expected a CSV with columns {', '.join(spec.columns)})")
    if not text.endswith("\n"):  # MindSpore ends every line; a cut file ends mid-row
        raise ProfileError(f"{path}: truncated (the last line has no line end: the file was cut while written)")
    header = [c.strip().lstrip("\ufeff") for c in text.splitlines()[0].split(",")]
    required = [c for c in spec.columns if c not in spec.optional]
    missing = [c for c in required if c not in header]
    if missing:
        raise ProfileError(
            f"{path}: missing column(s) {', '.join(missing)} (header is {','.join(header)!r}; "
            f"expected {', '.join(required)})"
        )
    usecols = [c for c in spec.columns if c in header]
    try:
        df = pd.read_csv(io.StringIO(text), usecols=usecols, dtype=str, keep_default_na=False, **kwargs)
    except (pd.errors.ParserError, ValueError) as e:
        raise ProfileError(f"{path}: malformed CSV ({str(e).splitlines()[0]})") from None
    df.columns = [c.strip() for c in df.columns]
    out = pd.DataFrame(index=df.index)
    for src in usecols:
        dst, dtype = spec.columns[src]
        col = df[src].str.strip()
        if dtype is str:
            out[dst] = col
            continue
        num = pd.to_numeric(col.replace("", np.nan), errors="coerce")
        bad = num.isna() & (col != "") if src in spec.optional else num.isna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ProfileError(
                f"{path}: row {row + 2} has {col.iloc[row]!r} in column {src!r} (expected a number; "
                "a truncated or corrupted file)"
            )
        out[dst] = num.astype("int64") if dtype == "int64" and not num.isna().any() else num.astype("float64")
    for src, (dst, dtype) in spec.columns.items():
        if src not in usecols:
            out[dst] = np.nan if dtype is not str else ""
    return out


def peak_allocated(root: Path, rank: int, window: Optional[tuple[int, int]] = None) -> Optional[int]:
    """The allocator's peak ``Total Allocated(Byte)``, within ``window`` (ns) where given.

    The window matters: a second profiler session in the same process writes a memory record that starts at the
    *first* session's start.  Streamed in chunks, so memory stays flat however long the record is.
    """
    path = CPU_MEMORY.path(root, rank)
    if not path.is_file():
        return None
    with open(path, encoding="utf-8-sig") as f:
        header = [c.strip() for c in f.readline().rstrip("\n").split(",")]
        ts_name, alloc_name = CPU_MEMORY.columns  # the two declared columns, in that order
        try:
            ts_col, col = header.index(ts_name), header.index(alloc_name)
        except ValueError:
            raise ProfileError(
                f"{path}: expected columns {ts_name!r} and {alloc_name!r}, header is {','.join(header)!r}"
            ) from None
        peak = None
        try:
            for chunk in pd.read_csv(f, header=None, usecols=[ts_col, col], chunksize=20_000, dtype="float64"):
                values = chunk[col]
                if window is not None:  # float64 timestamps: ~256 ns resolution, plenty for a window
                    ts = chunk[ts_col]
                    values = values[(ts >= window[0]) & (ts <= window[1])]
                m = values.max()
                if not math.isnan(m):
                    peak = m if peak is None else max(peak, m)
        except (pd.errors.ParserError, ValueError) as e:
            raise ProfileError(f"{path}: malformed memory record ({str(e).splitlines()[0]})") from None
    return None if peak is None else int(peak)


def _parse_launches(rest: str) -> tuple[np.ndarray, np.ndarray]:
    """``start_ns,dur_ms,0 start_ns,dur_ms,0 ...`` -> (start_ns int64, dur_ms float64)."""
    fields = rest.replace(",", " ").split()
    if len(fields) % 3:
        raise ValueError("launch records are 'start_ns,dur_ms,flag' triples")
    return np.array(fields[0::3], dtype=np.int64), np.array(fields[1::3], dtype=np.float64)


def scan_timestamps(path: Path):
    """Yield (full_name, start_ns, dur_ms) per line: one line per op name, every launch on it (streamed)."""
    with open(path, encoding="utf-8-sig") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line:
                continue
            parts = line.split(";")
            if len(parts) != 3:
                raise ProfileError(
                    f"{path}: line {lineno} is not 'name;HostCpuOps;start_ns,dur_ms,0 ...' (a truncated file?)"
                )
            try:
                start, dur = _parse_launches(parts[2])
            except ValueError as e:
                raise ProfileError(f"{path}: line {lineno}: {e} (a truncated file?)") from None
            yield parts[0], start, dur
