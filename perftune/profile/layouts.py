"""MindSpore profiler output folders -> :class:`ProfileData` (one DataFrame row per op and phase).

:func:`load_profile` finds the ``*_ascend_ms`` folder, detects its layout, reads the declared columns and gives each
op its phase (``op_phase.py`` by name and type, ``attribution.py`` by place in the step); ``splits.py`` turns that
into time splits, ``session.py`` records a profile.

Layouts (see ``/work/shared/mindspore-notes.md`` and ``profiler-layouts.md``):

``cpu``
    ``<host>_<pid>_<ts>_ascend_ms/FRAMEWORK/cpu_op_detail_info_<rank>.csv`` (aggregated per op) plus
    ``cpu_op_execute_timestamp_<rank>.txt`` (every launch), ``cpu_ms_memory_record_<rank>.txt`` (allocator) and
    ``ASCEND_PROFILER_OUTPUT/trace_view.json``.  No step markers and no data pipeline: the burst times steps.
``ascend``
    ``ASCEND_PROFILER_OUTPUT/kernel_details.csv`` (every kernel), ``step_trace_time.csv`` (device step split,
    optional), ``trace_view.json``; ``profiler_info_<rank>.json`` names the rank.

Bad folders raise :class:`~perftune.errors.ProfileError` naming the file and what was expected; nothing here
logs and returns empty.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Optional

import pandas as pd

from perftune.errors import ProfileError
from perftune.profile.attribution import aggregate_launches, launch_table, phase_ms_by_step, place_launches
from perftune.profile.columns import (
    ASCEND_DB,
    ASCEND_KERNELS,
    ASCEND_STEP_TRACE,
    CPU_OP_DETAIL,
    CPU_OP_TIMESTAMPS,
    OP_COLUMNS,
    ROOT_SUFFIX,
    TRACE_VIEW,
    peak_allocated,
    read_csv,
    scan_timestamps,
)
from perftune.profile.op_phase import OP_PHASES, phase_rule


@dataclass
class ProfileData:
    root: Path  # the ``*_ascend_ms`` folder
    layout: str  # "cpu" | "ascend"
    rank: int
    ops: pd.DataFrame  # one row per op and phase: OP_COLUMNS
    step_trace: Optional[pd.DataFrame] = None  # Ascend/GPU step_trace_time.csv, units in column names
    trace_file: Optional[Path] = None  # Chrome trace (trace_view.json) if present
    peak_allocated_bytes: Optional[int] = None  # allocator peak (cpu_ms_memory_record_<rank>.txt)
    #: equal steps the launches split into (CPU, from per-launch timestamps); None where not known
    launch_steps: Optional[int] = None
    #: op time per step (rows) and phase (columns) where launches were placed by time (CPU), else None
    phase_ms_by_step: Optional[pd.DataFrame] = None

    def phase_totals_ms(self) -> dict[str, float]:
        """Total op time by phase over all profiled steps."""
        sums = self.ops.groupby("phase")["total_ms"].sum()
        return {p: float(sums.get(p, 0.0)) for p in OP_PHASES}


def _find_roots(path: Path) -> list[Path]:
    path = Path(path)
    if not path.exists():
        raise ProfileError(f"{path}: no such folder (expected a profiler output folder)")
    if not path.is_dir():
        raise ProfileError(f"{path}: not a folder (expected a profiler output folder with a *{ROOT_SUFFIX} folder)")
    if path.name.endswith(ROOT_SUFFIX):
        return [path]
    roots = sorted(p for p in path.glob(f"*{ROOT_SUFFIX}") if p.is_dir())
    if not roots:  # tensorboard_trace_handler with a worker name, msrun per-rank folders: one level deeper
        roots = sorted(p for p in path.glob(f"*/*{ROOT_SUFFIX}") if p.is_dir())
    if not roots:
        raise ProfileError(
            f"{path}: no *{ROOT_SUFFIX} folder here or one level down (expected the output_dir of a MindSpore "
            "profiler run, or the *_ascend_ms folder itself)"
        )
    return roots


_RANK_FILES = [
    re.compile(r"^cpu_op_detail_info_(\d+)\.csv$"),
    re.compile(r"^profiler_info_(\d+)\.json$"),
    re.compile(r"^ascend_mindspore_profiler_(\d+)\.db$"),
]


def _ranks_in(root: Path) -> list[int]:
    ranks: set[int] = set()
    for folder in (root, root / "FRAMEWORK", root / "ASCEND_PROFILER_OUTPUT"):
        if folder.is_dir():
            for f in folder.iterdir():
                for pat in _RANK_FILES:
                    m = pat.match(f.name)
                    if m:
                        ranks.add(int(m.group(1)))
    return sorted(ranks)


def detect_layout(root: Path, rank: Optional[int] = None) -> tuple[str, int]:
    ranks = _ranks_in(root)
    if rank is None:
        if len(ranks) > 1:
            raise ProfileError(f"{root}: holds ranks {ranks}; pass rank= (or use load_all_ranks)")
        rank = ranks[0] if ranks else 0
    elif ranks and rank not in ranks:
        raise ProfileError(f"{root}: no files for rank {rank} (ranks found: {ranks})")
    cpu_csv = CPU_OP_DETAIL.path(root, rank)
    if cpu_csv.is_file():
        return "cpu", rank
    out = root / "ASCEND_PROFILER_OUTPUT"
    kernels = ASCEND_KERNELS.path(root, rank)
    if kernels.is_file():
        return "ascend", rank
    expected = ["kernel_details.csv", "op_statistic.csv", "step_trace_time.csv"]
    present = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    dbs = sorted(root.rglob(ASCEND_DB.format(rank="*")))
    if dbs and not any(name.endswith(".csv") for name in present):
        raise ProfileError(
            f"{dbs[0]}: only a database export (export_type Db) and no CSV; perftune reads the text export: "
            "profile with export_type including ExportType.Text"
        )
    if any(name in present for name in expected):
        missing = [name for name in expected if name not in present]
        raise ProfileError(
            f"{out}: partial Ascend/GPU output, missing {', '.join(missing)} (kernel_details.csv is required; the "
            "profiler's analyse probably failed or was interrupted)"
        )
    raise ProfileError(
        f"{cpu_csv}: not found, and no {kernels.relative_to(root)} either: {root.name} is not a layout perftune "
        "knows (expected FRAMEWORK/cpu_op_detail_info_<rank>.csv from a CPU run or "
        "ASCEND_PROFILER_OUTPUT/kernel_details.csv from Ascend/GPU)"
    )


def load_profile(path: Path, rank: Optional[int] = None) -> ProfileData:
    """Parse one rank's profiler output.

    ``path`` is the ``output_dir`` given to :class:`ProfilerSession` (the ``*_ascend_ms`` folder is found below it)
    or that folder itself.  Where ``path`` holds several ranks, ``rank`` picks one.
    """
    roots = _find_roots(Path(path))
    if len(roots) > 1:
        by_rank: dict[int, Path] = {}
        for candidate in roots:
            for r in _ranks_in(candidate):
                if r in by_rank:
                    raise ProfileError(
                        f"{path}: two profiler folders for rank {r} ({by_rank[r].name}, {candidate.name}): keep one "
                        "run per output folder"
                    )
                by_rank[r] = candidate
        if rank is None:
            raise ProfileError(
                f"{path}: holds {len(roots)} profiler folders ({', '.join(r.name for r in roots)}, ranks "
                f"{sorted(by_rank)}); pass rank= or use load_all_ranks"
            )
        if rank not in by_rank:
            raise ProfileError(f"{path}: no profiler folder for rank {rank} (ranks found: {sorted(by_rank)})")
        root = by_rank[rank]
    else:
        root = roots[0]
    layout, rank = detect_layout(root, rank)
    if layout == "cpu":
        return _load_cpu(root, rank)
    return _load_ascend(root, rank)


def load_all_ranks(path: Path) -> list[ProfileData]:
    """Every rank's profile under ``path`` (msrun: one ``*_ascend_ms`` folder per rank), sorted by rank."""
    roots = _find_roots(Path(path))
    out = []
    for root in roots:
        ranks = _ranks_in(root) or [None]
        for r in ranks:
            out.append(load_profile(root, r))
    seen = [p.rank for p in out]
    if len(set(seen)) != len(seen):
        raise ProfileError(f"{path}: several profiler folders for the same rank ({sorted(seen)}); "
                           "keep one run per folder")
    return sorted(out, key=lambda p: p.rank)


def _trace_file(root: Path) -> Optional[Path]:
    f = root / TRACE_VIEW
    return f if f.is_file() else None


def _load_cpu(root: Path, rank: int) -> ProfileData:
    csv_path = CPU_OP_DETAIL.path(root, rank)
    detail = read_csv(CPU_OP_DETAIL, csv_path)
    if detail.empty:
        raise ProfileError(f"{csv_path}: no ops recorded (the profiler was started and stopped around no steps?)")
    # the CSV can list one name twice (one row per subgraph): aggregate per full name
    per_op = (
        detail.groupby(["full_name", "name", "op_type"], as_index=False, sort=False)
        .agg(count=("count", "sum"), total_ms=("total_ms", "sum"))
    )
    rules = [phase_rule(n, t) for n, t in zip(per_op["full_name"], per_op["op_type"])]
    per_op["phase"] = [p for p, _ in rules]
    per_op["phase_rule"] = [r for _, r in rules]
    launch_steps, window, by_step = None, None, None
    ts_path = root / CPU_OP_TIMESTAMPS.format(rank=rank)
    if ts_path.is_file():  # every launch placed by what it is and where it runs in its step (attribution.py)
        launches, launch_steps, window = _read_launches(per_op, ts_path)
        placed = place_launches(per_op, launches, launch_steps)
        per_op, by_step = aggregate_launches(per_op, placed), phase_ms_by_step(placed)
    per_op["phase_rule"] = per_op["phase_rule"].replace({"unscoped": "default", "step_cell": "default"})
    ops = _finish_ops(per_op)
    return ProfileData(
        root=root,
        layout="cpu",
        rank=rank,
        ops=ops,
        step_trace=None,
        trace_file=_trace_file(root),
        peak_allocated_bytes=peak_allocated(root, rank, window),
        launch_steps=launch_steps,
        phase_ms_by_step=by_step,
    )


def _read_launches(per_op: pd.DataFrame, ts_path: Path) -> tuple[pd.DataFrame, int, tuple[int, int]]:
    """(every launch in time order, the equal steps they split into, (first start, last end) in ns), the
    timestamps file read once and checked against the op table.

    An op that runs m times per step has m x steps launches, so the number of steps is the gcd of the launch counts
    (an optimizer kernel runs once per step); launch k of an op belongs to step ``k // m``.
    """
    detail_name = Path(CPU_OP_DETAIL.relpath).name.format(rank="<rank>")
    launches = launch_table(scan_timestamps(ts_path))
    counts = per_op.groupby("full_name")["count"].sum()
    seen = launches["full_name"].value_counts()
    unknown = seen.index.difference(counts.index)
    if len(unknown):
        raise ProfileError(f"{ts_path}: launches of {unknown[0]!r}, which {detail_name} does not list (files of "
                           "different runs mixed?)")
    seen = seen.reindex(counts.index, fill_value=0)
    short = counts[seen != counts]
    if len(short):
        name = short.index[0]
        more = f" (and {len(short) - 1} more ops differ)" if len(short) > 1 else ""
        raise ProfileError(f"{ts_path}: {seen[name]} launches of {name!r} where {detail_name} counts "
                           f"{short.iloc[0]}{more}: a truncated file?")
    steps = reduce(math.gcd, (int(c) for c in counts if c > 0), 0) or 1
    ends = launches["start_ns"] + (launches["dur_ms"] * 1e6).astype("int64")
    window = (int(launches["start_ns"].min()), int(ends.max())) if len(launches) else None
    # one name on several lines: its launches in the order they ran
    return launches.sort_values("start_ns", kind="stable").reset_index(drop=True), steps, window


def _finish_ops(per_op: pd.DataFrame) -> pd.DataFrame:
    per_op = per_op[per_op["count"] > 0].copy()
    per_op["mean_ms"] = per_op["total_ms"] / per_op["count"]
    per_op["count"] = per_op["count"].astype("int64")
    return per_op[OP_COLUMNS].sort_values("total_ms", ascending=False, kind="stable").reset_index(drop=True)


def _load_ascend(root: Path, rank: int) -> ProfileData:
    kpath = ASCEND_KERNELS.path(root, rank)
    kernels = read_csv(ASCEND_KERNELS, kpath)
    if kernels.empty:
        raise ProfileError(f"{kpath}: no kernels recorded")
    # with_stack appends the Python stack to Name after a newline or ';': keep the op name
    kernels["full_name"] = kernels["full_name"].str.split(r"[\n;]", n=1, regex=True).str[0].str.strip()
    grouped = kernels.groupby(["full_name", "op_type"], as_index=False, sort=False).agg(
        count=("duration_us", "size"), total_us=("duration_us", "sum")
    )
    grouped["total_ms"] = grouped["total_us"] / 1000.0
    grouped["name"] = grouped["full_name"].str.rsplit("/", n=1).str[-1]
    rules = [phase_rule(n, t) for n, t in zip(grouped["full_name"], grouped["op_type"])]
    grouped["phase"] = [p for p, _ in rules]
    grouped["phase_rule"] = [r if r in ("scope", "op_type") else "default" for _, r in rules]
    step_trace = None
    spath = ASCEND_STEP_TRACE.path(root, rank)
    if spath.is_file():
        step_trace = read_csv(ASCEND_STEP_TRACE, spath)
        if step_trace.empty:
            raise ProfileError(f"{spath}: no steps (expected one row per step)")
    return ProfileData(
        root=root,
        layout="ascend",
        rank=rank,
        ops=_finish_ops(grouped),
        step_trace=step_trace,
        trace_file=_trace_file(root),
        peak_allocated_bytes=peak_allocated(root, rank),
    )
