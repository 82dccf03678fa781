"""MindSpore profiler output -> pandas DataFrames -> per-step time splits that add up.

Two jobs:

1. :class:`ProfilerSession` runs MindSpore's profiler around a few training steps inside a burst process
   (CPU activity always, plus the device on GPU / Ascend) and reports how long the analysis took.
2. :func:`load_profile` parses a profiler output folder into a :class:`ProfileData` (one DataFrame row per op
   and phase), :func:`compute_splits` turns it plus the burst's own step timing into :class:`~perftune.records.Splits`
   (data + forward + backward + optimizer + communication + other == the measured step, by construction) and
   :func:`top_ops` lists the most expensive ops.

Layouts (see ``/work/shared/mindspore-notes.md`` and ``profiler-layouts.md``):

``cpu``
    ``<host>_<pid>_<ts>_ascend_ms/FRAMEWORK/cpu_op_detail_info_<rank>.csv`` (aggregated per op) plus
    ``cpu_op_execute_timestamp_<rank>.txt`` (every launch), ``cpu_ms_memory_record_<rank>.txt`` (allocator) and
    ``ASCEND_PROFILER_OUTPUT/trace_view.json``.  No step markers and no data pipeline: the burst times steps.
``ascend``
    ``ASCEND_PROFILER_OUTPUT/kernel_details.csv`` (every kernel), ``step_trace_time.csv`` (device step split,
    optional), ``trace_view.json``; ``profiler_info_<rank>.json`` names the rank.

How an op gets its phase (``ops.phase_rule`` says which rule decided):

``scope`` / ``op_type``
    :func:`classify_phase`, from the op's scope and type alone: collectives are communication (and so are the other
    ops of a ``DistributedGradReducer``, the mean's scaling); ``Gradients/...`` and ``recompute_...`` scopes and
    ``*Grad`` kernels are backward; an optimizer cell's scope (``optimizer-Adam``) or an update kernel (Adam,
    ApplyMomentum, ...) is optimizer; other ops inside a cell scope (``Default/net_with_loss-NetWithLoss/...``)
    are forward.
``timeline``
    Ops whose name carries no cell scope cannot be placed by name: bare ``MatMul`` (PyNative runs most ops
    eagerly, unscoped), ``Default/Square-op0`` (ops of the training-step cell itself: in the burst's cell form the
    gradient norm; in the ``ms.jit`` function form every op) and ``Expand/...`` (composite ops the compiler
    expanded, e.g. ``Expand/_SoftmaxBackward/...``).  On CPU every launch is timestamped, so each such launch is
    placed by when it ran in its step.  GRAPH mode runs ops in dataflow order, not phase order (the optimizer's
    step counter runs first, gradient pieces that need only forward values run during forward), so:

    * cell form (the network's forward ops carry its cell scope): a ``Default/<op>`` launch before the step's
      first backward op is forward, after it optimizer (gradient post-processing: norm, clipping, unscaling);
      other unscoped launches are forward up to the step's last forward-scoped op, backward up to its last
      backward op, optimizer after;
    * otherwise (PyNative, the function form): forward before the step's first backward op, backward until its
      first update kernel (Adam, ...), optimizer after.  In PyNative this counts a gradient norm as backward, and
      in the GRAPH-mode function form forward ops scheduled after an early gradient op count as backward.

    Where the launches cannot be split into equal steps the name rule (forward) stays and ``phase_rule`` says
    ``default``.

Bad folders raise :class:`~perftune.errors.ProfileError` naming the file and what was expected; nothing here
logs and returns empty.
"""

from __future__ import annotations

import io
import math
import os
import re
import time
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from perftune.errors import ProfileError
from perftune.records import Splits, TopOp

__all__ = [
    "ProfilerSession",
    "ProfileData",
    "load_profile",
    "load_all_ranks",
    "classify_phase",
    "compute_splits",
    "top_ops",
    "COMPUTE_PHASES",
    "OP_PHASES",
]

#: phases an op can have; ``data`` and ``other`` come from the burst's timing, not from ops
OP_PHASES = ("forward", "backward", "optimizer", "communication")
COMPUTE_PHASES = ("forward", "backward", "optimizer")

ROOT_SUFFIX = "_ascend_ms"  # MindSpore 2.x names the folder like this on every backend, CPU included

# ---------------------------------------------------------------------------------------------------------------
# Columns, declared once: source column -> (our column, dtype).  Our names carry units.
# ---------------------------------------------------------------------------------------------------------------


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
        "Communication(Not Overlapped and Exclude Receive)": ("communication_not_overlapped_exclude_receive_us", "float64"),
        "Preparing": ("preparing_us", "float64"),
    },
    optional=("Device_id", "Step", "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing"),
)
ASCEND_DB = "ascend_mindspore_profiler_{rank}.db"
TRACE_VIEW = "ASCEND_PROFILER_OUTPUT/trace_view.json"

#: the columns of ``ProfileData.ops``
OP_COLUMNS = ["name", "full_name", "op_type", "phase", "phase_rule", "count", "total_ms", "mean_ms"]

# ---------------------------------------------------------------------------------------------------------------
# Phase rules
# ---------------------------------------------------------------------------------------------------------------

#: collective kernels, compared after lower-casing and dropping an ``hcom``/``nccl`` prefix and underscores
#: (so ``HcomAllReduce`` and Ascend's ``hcom_allReduce_`` match; ``BroadcastTo``, ``Gather`` (an embedding lookup)
#: and ``ScatterNd``, compute ops, do not)
COLLECTIVES = frozenset(
    {
        "allreduce", "allgather", "allgatherv", "reducescatter", "reducescatterv", "broadcast", "alltoall",
        "alltoallv", "alltoallvc", "alltoallall", "send", "receive", "recv", "sendrecv", "batchsendrecv", "reduce",
        "barrier", "collectivegather", "collectivescatter", "neighborexchange", "neighborexchangev2",
        "matmulallreduce", "allgathermatmul", "matmulreducescatter",
    }
)
#: update kernels of MindSpore's optimizers
OPTIMIZER_OP_TYPES = frozenset(
    {
        "Adam", "AdamW", "AdamWeightDecay", "FusedAdam", "FusedAdamWeightDecay", "FusedSparseAdam",
        "FusedSparseLazyAdam", "FusedCastAdamWeightDecay", "AdamApplyOne", "AdamApplyOneWithDecay",
        "AdamApplyOneAssign", "AdamApplyOneWithDecayAssign", "LambApplyOptimizerAssign", "LambApplyWeightAssign",
        "LambUpdateWithLR", "LambNextMV", "LarsUpdate", "LARSUpdate", "SGD", "ApplyAdaMax", "ApplyAdam",
        "ApplyAdamWithAmsgrad", "ApplyAdamWithAmsgradV2", "ApplyMomentum", "ApplyKerasMomentum",
        "ApplyGradientDescent", "ApplyProximalGradientDescent", "ApplyAdagrad", "ApplyAdagradV2", "ApplyAdagradDA",
        "ApplyAdadelta", "ApplyRMSProp", "ApplyCenteredRMSProp", "ApplyFtrl", "ApplyProximalAdagrad",
        "ApplyPowerSign", "ApplyAddSign", "SparseApplyAdam", "SparseApplyFtrl", "SparseApplyFtrlV2",
        "SparseApplyAdagrad", "SparseApplyAdagradV2", "SparseApplyProximalAdagrad", "SparseApplyRMSProp",
        "SparseApplyCenteredRMSProp", "SparseApplyMomentum", "SparseApplyAdadelta",
    }
)
#: optimizer cells; a scope segment ``<attribute>-<Class>`` with one of these classes (or attribute ``optimizer``)
OPTIMIZER_CELLS = frozenset(
    {
        "Optimizer", "Adam", "AdamW", "AdamWeightDecay", "AdamOffload", "LazyAdam", "Momentum", "SGD", "Lamb", "LARS",
        "Adagrad", "Adadelta", "AdaMax", "AdaFactor", "ASGD", "RMSProp", "FTRL", "ProximalAdagrad", "Rprop",
        "ThorGpu", "ThorAscend",
    }
)
#: gradient reducers of data parallelism: their non-collective ops (the mean's scaling) count as communication
GRAD_REDUCER_CELLS = frozenset({"DistributedGradReducer", "PipelineGradReducer"})
_GRAD_KERNEL = re.compile(r"Grad(V\d+)?(Grad)?$")  # ReluGrad, BiasAddGrad, GatherDGradV2, MaxPoolGradGrad
_CELL_SEGMENT = re.compile(r"^(?P<attr>[^-/]+)-(?P<cls>[A-Za-z_][A-Za-z0-9_]*)$")  # fc1-Dense, optimizer-Adam


def _collective_key(op_type: str) -> str:
    key = op_type.lower().replace("_", "")
    for prefix in ("hcom", "nccl", "hccl", "lccl", "dist"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    return key


def _is_collective(op_type: str) -> bool:
    return _collective_key(op_type) in COLLECTIVES


def _segments(full_op_name: str) -> list[str]:
    return [s for s in full_op_name.split("/") if s]


def _in_optimizer_scope(segments: list[str]) -> bool:
    for seg in segments[:-1]:
        m = _CELL_SEGMENT.match(seg)
        if m and (m["attr"].startswith("optimizer") or m["cls"] in OPTIMIZER_CELLS):
            return True
    return False


def _is_backward_scope(segments: list[str]) -> bool:
    return bool(segments) and (
        segments[0] == "Gradients" or any(seg.startswith("recompute_") for seg in segments[:-1])
    )


def _in_grad_reducer_scope(segments: list[str]) -> bool:
    for seg in segments[:-1]:
        m = _CELL_SEGMENT.match(seg)
        if m and (m["cls"] in GRAD_REDUCER_CELLS or m["attr"] == "grad_reducer"):
            return True
    return False


def _rule(full_op_name: str, op_type: str) -> tuple[str, str]:
    """(phase, rule) from the name alone.

    rule: ``op_type`` or ``scope`` (decided), ``step_cell`` (``Default/<op>``: an op of the training-step cell
    itself, outside any sub-cell) or ``unscoped`` (no scope at all, or ``Expand/...``); the last two are forward
    by name and placed by time where launches are timestamped.
    """
    segments = _segments(full_op_name)
    if _is_collective(op_type):
        return "communication", "op_type"
    if _is_backward_scope(segments):
        return "backward", "scope"
    if _in_grad_reducer_scope(segments):  # the mean's scaling around the AllReduce: part of gradient sync
        return "communication", "scope"
    if _in_optimizer_scope(segments):
        return "optimizer", "scope"
    if op_type in OPTIMIZER_OP_TYPES:
        return "optimizer", "op_type"
    if _GRAD_KERNEL.search(op_type):
        return "backward", "op_type"
    # a cell scope between the root and the op (``Default/net_with_loss-NetWithLoss/.../MatMul-op0``) is forward
    if len(segments) >= 3 and segments[0] == "Default" and any(_CELL_SEGMENT.match(s) for s in segments[1:-1]):
        return "forward", "scope"
    if len(segments) == 2 and segments[0] == "Default":
        return "forward", "step_cell"
    return "forward", "unscoped"


def classify_phase(full_op_name: str, op_type: str) -> str:
    """The phase of an op from its scope and type: ``forward``, ``backward``, ``optimizer`` or ``communication``.

    >>> classify_phase("Gradients/Default/net_with_loss-NetWithLoss/network-MLP/fc2-Dense/Grad_MatMul/MatMul-op1", "MatMul")
    'backward'
    >>> classify_phase("Default/optimizer-Adam/Assign-op1", "Assign")
    'optimizer'

    Ops without a cell scope (bare ``MatMul`` in PyNative, ``Default/Square-op0``, ``Expand/...``) are forward
    here; :func:`load_profile` places their launches by time where the profile has per-launch timestamps.
    """
    return _rule(full_op_name, op_type)[0]


# ---------------------------------------------------------------------------------------------------------------
# The profiler session
# ---------------------------------------------------------------------------------------------------------------


class ProfilerSession:
    """MindSpore's profiler around a few steps: ``start()``, run the steps, ``stop_and_analyse()``.

    Uses ``mindspore.profiler.profile`` (the non-deprecated API) with CPU activity always and the device's
    (GPU / NPU) where the context's device is one; the analysis runs inside ``stop_and_analyse`` (on 2 CPU cores
    about 1.1 s for a few thousand op launches, 3.4 s for 29 k, 5.5 s for 59 k), so keep it out of timed steps.
    MindSpore's profiler logs and swallows its own errors; this class checks that the output exists and raises
    :class:`ProfileError` when it does not.  Several processes (msrun ranks) may share ``output_dir``: each
    session finds its own folder by its pid; ``root`` is that folder after ``stop_and_analyse``.
    """

    def __init__(self, output_dir: Path, profile_memory: bool = True):
        self.output_dir = Path(output_dir)
        self.profile_memory = profile_memory
        self.root: Optional[Path] = None
        self._prof = None
        self._before: set[Path] = set()

    def start(self) -> None:
        import mindspore as ms
        from mindspore.profiler import ProfilerActivity

        if self._prof is not None:
            raise RuntimeError("ProfilerSession.start() called twice")
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self._before = set(self.output_dir.glob(f"*{ROOT_SUFFIX}"))
        activities = [ProfilerActivity.CPU]
        device = str(ms.get_context("device_target"))
        if device == "GPU":
            activities.append(ProfilerActivity.GPU)
        elif device == "Ascend":
            activities.append(ProfilerActivity.NPU)
        self._prof = ms.profiler.profile(
            activities=activities,
            profile_memory=self.profile_memory,
            start_profile=False,
            on_trace_ready=ms.profiler.tensorboard_trace_handler(str(self.output_dir.resolve())),
        )
        self._prof.start()

    def stop_and_analyse(self) -> float:
        """Stop collecting, analyse (on_trace_ready runs inside ``stop``); return the seconds this took."""
        if self._prof is None:
            raise RuntimeError("ProfilerSession.stop_and_analyse() before start()")
        t0 = time.perf_counter()
        self._prof.stop()
        analyse_s = time.perf_counter() - t0
        self._prof = None
        # several processes (msrun ranks) may share output_dir: the folder is <host>_<pid>_<timestamp>_ascend_ms
        pid = f"_{os.getpid()}_"
        new = sorted(p for p in set(self.output_dir.glob(f"*{ROOT_SUFFIX}")) - self._before if pid in p.name)
        if not new:
            raise ProfileError(
                f"{self.output_dir}: the profiler wrote no *{ROOT_SUFFIX} folder (MindSpore's profiler logs and "
                "swallows its own errors; see its log above)"
            )
        self.root = new[-1]
        _detect_layout(self.root)  # raises where the analysis left no readable output
        return analyse_s


# ---------------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------------


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


def _detect_layout(root: Path, rank: Optional[int] = None) -> tuple[str, int]:
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


def _read_csv(spec: CsvSpec, path: Path, **kwargs) -> pd.DataFrame:
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
            out[dst] = np.nan if dtype != str else ""
    return out


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
    layout, rank = _detect_layout(root, rank)
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
        raise ProfileError(f"{path}: several profiler folders for the same rank ({sorted(seen)}); keep one run per folder")
    return sorted(out, key=lambda p: p.rank)


def _trace_file(root: Path) -> Optional[Path]:
    f = root / TRACE_VIEW
    return f if f.is_file() else None


def _peak_allocated(root: Path, rank: int, window: Optional[tuple[int, int]] = None) -> Optional[int]:
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


def _load_cpu(root: Path, rank: int) -> ProfileData:
    csv_path = CPU_OP_DETAIL.path(root, rank)
    detail = _read_csv(CPU_OP_DETAIL, csv_path)
    if detail.empty:
        raise ProfileError(f"{csv_path}: no ops recorded (the profiler was started and stopped around no steps?)")
    # the CSV can list one name twice (one row per subgraph): aggregate per full name
    per_op = (
        detail.groupby(["full_name", "name", "op_type"], as_index=False, sort=False)
        .agg(count=("count", "sum"), total_ms=("total_ms", "sum"))
    )
    rules = [_rule(n, t) for n, t in zip(per_op["full_name"], per_op["op_type"])]
    per_op["phase"] = [p for p, _ in rules]
    per_op["phase_rule"] = [r for _, r in rules]
    launch_steps, window = None, None
    ts_path = root / CPU_OP_TIMESTAMPS.format(rank=rank)
    if ts_path.is_file():
        per_op, launch_steps, window = _timeline(per_op, ts_path)
    per_op["phase_rule"] = per_op["phase_rule"].replace({"unscoped": "default", "step_cell": "default"})
    ops = _finish_ops(per_op)
    return ProfileData(
        root=root,
        layout="cpu",
        rank=rank,
        ops=ops,
        step_trace=None,
        trace_file=_trace_file(root),
        peak_allocated_bytes=_peak_allocated(root, rank, window),
        launch_steps=launch_steps,
    )


def _finish_ops(per_op: pd.DataFrame) -> pd.DataFrame:
    per_op = per_op[per_op["count"] > 0].copy()
    per_op["mean_ms"] = per_op["total_ms"] / per_op["count"]
    per_op["count"] = per_op["count"].astype("int64")
    return per_op[OP_COLUMNS].sort_values("total_ms", ascending=False, kind="stable").reset_index(drop=True)


def _parse_launches(rest: str) -> tuple[np.ndarray, np.ndarray]:
    """``start_ns,dur_ms,0 start_ns,dur_ms,0 ...`` -> (start_ns int64, dur_ms float64)."""
    fields = rest.replace(",", " ").split()
    if len(fields) % 3:
        raise ValueError("launch records are 'start_ns,dur_ms,flag' triples")
    return np.array(fields[0::3], dtype=np.int64), np.array(fields[1::3], dtype=np.float64)


def _scan_timestamps(path: Path):
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


def _timeline(per_op: pd.DataFrame, ts_path: Path) -> tuple[pd.DataFrame, Optional[int], tuple[int, int]]:
    """Check the per-launch timestamps against the op table, find the profiled window and place each launch of an op
    that its name cannot place by when it ran in its step (see the module doc for the rules).

    Returns (ops, steps the launches split into, (first launch start, last launch end) in ns).  At most two
    streaming passes over the file; memory is one line plus O(steps + ops), however long the profile.  Launches of
    a name that runs m times per step belong to step ``index // m``; the number of steps is the gcd of the launch
    counts (an optimizer kernel runs once per step).
    """
    rule_of = dict(zip(per_op["full_name"], per_op["phase_rule"]))
    phase_of = dict(zip(per_op["full_name"], per_op["phase"]))
    type_of = dict(zip(per_op["full_name"], per_op["op_type"]))
    weak = {n for n, r in rule_of.items() if r in ("unscoped", "step_cell")}
    counts = per_op.groupby("full_name")["count"].sum().to_dict()
    steps = reduce(math.gcd, (int(c) for c in counts.values() if c > 0), 0)
    detail_name = Path(CPU_OP_DETAIL.relpath).name.format(rank="<rank>")
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    n = max(steps, 1)
    first_bwd, first_update = np.full(n, big, np.int64), np.full(n, big, np.int64)
    last_bwd, last_fwd = np.full(n, small, np.int64), np.full(n, small, np.int64)
    window = [big, 0]
    seen: dict[str, int] = {}
    for name, start, dur in _scan_timestamps(ts_path):
        if name not in counts:
            raise ProfileError(
                f"{ts_path}: launches of {name!r}, which {detail_name} does not list (files of different runs mixed?)"
            )
        seen[name] = seen.get(name, 0) + len(start)
        if len(start):
            window[0] = min(window[0], int(start.min()))
            window[1] = max(window[1], int((start + dur * 1e6).max()))
        if name in weak or seen[name] != counts[name] or not len(start):
            continue
        step_of = np.arange(len(start)) // (len(start) // steps)
        if phase_of[name] == "backward":
            np.minimum.at(first_bwd, step_of, start)
            np.maximum.at(last_bwd, step_of, start)
        elif phase_of[name] == "forward":
            np.maximum.at(last_fwd, step_of, start)
        elif phase_of[name] == "optimizer" and type_of[name] in OPTIMIZER_OP_TYPES:
            np.minimum.at(first_update, step_of, start)
    short = {n: c for n, c in counts.items() if seen.get(n, 0) != c}
    if short:
        name, count = next(iter(short.items()))
        raise ProfileError(
            f"{ts_path}: {seen.get(name, 0)} launches of {name!r} where {detail_name} counts {count}"
            f"{f' (and {len(short) - 1} more ops differ)' if len(short) > 1 else ''}: a truncated file?"
        )
    if not weak or steps < 1:
        return per_op, (steps or None), (window[0], window[1])
    # cell form: the network's forward ops carry its cell scope (graph mode), so the step's forward ends at the
    # last of them; else (PyNative, the ms.jit function form) nothing marks it and backward begins at its first op
    cell_form = bool(((per_op["phase"] == "forward") & (per_op["phase_rule"] == "scope")).any())
    rows = []
    for name, start, dur in _scan_timestamps(ts_path):
        if name not in weak:
            continue
        if len(start) != counts[name]:  # one name on several lines: its launches cannot be put in steps
            return per_op, None, (window[0], window[1])
        k = np.arange(len(start)) // (len(start) // steps)
        if cell_form and rule_of[name] == "step_cell":  # gradient norm, clipping, unscaling: once gradients exist
            code = np.where(start < first_bwd[k], 0, 2)
        elif cell_form:
            code = np.where(start <= last_fwd[k], 0, np.where(start <= last_bwd[k], 1, 2))
        else:
            code = np.where(start < first_bwd[k], 0, np.where(start < first_update[k], 1, 2))
        for c, ph in enumerate(COMPUTE_PHASES):
            sel = code == c
            if sel.any():
                rows.append((name, ph, int(sel.sum()), float(dur[sel].sum())))
    placed = pd.DataFrame(rows, columns=["full_name", "phase", "count", "total_ms"])
    meta = per_op.loc[per_op["full_name"].isin(weak), ["full_name", "name", "op_type"]]
    placed = placed.merge(meta, on="full_name", how="left")
    placed["phase_rule"] = "timeline"
    kept = per_op[~per_op["full_name"].isin(weak)]
    return pd.concat([kept, placed[kept.columns]], ignore_index=True), steps, (window[0], window[1])


def _load_ascend(root: Path, rank: int) -> ProfileData:
    kpath = ASCEND_KERNELS.path(root, rank)
    kernels = _read_csv(ASCEND_KERNELS, kpath)
    if kernels.empty:
        raise ProfileError(f"{kpath}: no kernels recorded")
    # with_stack appends the Python stack to Name after a newline or ';': keep the op name
    kernels["full_name"] = kernels["full_name"].str.split(r"[\n;]", n=1, regex=True).str[0].str.strip()
    grouped = kernels.groupby(["full_name", "op_type"], as_index=False, sort=False).agg(
        count=("duration_us", "size"), total_us=("duration_us", "sum")
    )
    grouped["total_ms"] = grouped["total_us"] / 1000.0
    grouped["name"] = grouped["full_name"].str.rsplit("/", n=1).str[-1]
    rules = [_rule(n, t) for n, t in zip(grouped["full_name"], grouped["op_type"])]
    grouped["phase"] = [p for p, _ in rules]
    grouped["phase_rule"] = [r if r in ("scope", "op_type") else "default" for _, r in rules]
    step_trace = None
    spath = ASCEND_STEP_TRACE.path(root, rank)
    if spath.is_file():
        step_trace = _read_csv(ASCEND_STEP_TRACE, spath)
        if step_trace.empty:
            raise ProfileError(f"{spath}: no steps (expected one row per step)")
    return ProfileData(
        root=root,
        layout="ascend",
        rank=rank,
        ops=_finish_ops(grouped),
        step_trace=step_trace,
        trace_file=_trace_file(root),
        peak_allocated_bytes=_peak_allocated(root, rank),
    )


# ---------------------------------------------------------------------------------------------------------------
# Analysis
# ---------------------------------------------------------------------------------------------------------------


def compute_splits(profile: ProfileData, profiled_steps: int, step_ms: float, data_wait_ms: float) -> Splits:
    """Mean time per step by phase; the six phases add up to ``step_ms`` exactly.

    ``step_ms``: mean wall time of the profiled steps as the burst measured it, *including* the time the step
    waited for its batch, ``data_wait_ms`` (the CPU profiler records no data pipeline).  Op time per phase is its
    total over the profile divided by ``profiled_steps``.  Where the op phases plus data exceed the step (ops that
    overlap, or a collective whose time includes waiting for a peer), the op phases are scaled down by one factor
    so that they fit; ``step_source`` says so, and ``explained_share`` is then 1.  Where the Ascend layout's
    ``step_trace_time.csv`` exists, its device-side Computing (split by op time into forward / backward /
    optimizer) and Communication(Not Overlapped) are used instead of the op sums.
    """
    if profiled_steps < 1:
        raise ValueError(f"profiled_steps must be >= 1, got {profiled_steps}")
    if not (step_ms > 0 and math.isfinite(step_ms)):
        raise ValueError(f"step_ms must be a positive number, got {step_ms}")
    if not (0 <= data_wait_ms <= step_ms):
        raise ValueError(f"data_wait_ms must be within [0, step_ms={step_ms}], got {data_wait_ms}")
    totals = profile.phase_totals_ms()
    per_step = {p: totals[p] / profiled_steps for p in OP_PHASES}
    source = "burst"
    if profile.launch_steps is not None and profile.launch_steps % profiled_steps and profiled_steps % profile.launch_steps:
        source += f"; warning: the ops' launches split into {profile.launch_steps} steps, not {profiled_steps}"
    if profile.step_trace is not None and not profile.step_trace.empty:
        st = profile.step_trace
        computing = float(st["computing_us"].mean()) / 1000.0
        comm = float(st["communication_not_overlapped_us"].mean()) / 1000.0
        compute_ops = sum(per_step[p] for p in COMPUTE_PHASES)
        for p in COMPUTE_PHASES:
            per_step[p] = computing * (per_step[p] / compute_ops) if compute_ops > 0 else 0.0
        if compute_ops <= 0:
            per_step["forward"] = computing
        per_step["communication"] = comm
        source = "step_trace_time.csv (device: Computing, Communication(Not Overlapped)) + burst (step, data)"
    budget = step_ms - data_wait_ms
    op_sum = sum(per_step.values())
    if op_sum > budget:
        factor = budget / op_sum if op_sum > 0 else 0.0
        per_step = {p: v * factor for p, v in per_step.items()}
        source += f"; op phases scaled x{factor:.3f} (op time {op_sum:.3f} ms > step - data {budget:.3f} ms: overlap or waiting)"
        other = 0.0
    else:  # other is the rest, so the six add up to step_ms (to rounding)
        other = max(budget - op_sum, 0.0)
    explained = 1.0 - other / step_ms
    return Splits(
        step_ms=step_ms,
        data_ms=data_wait_ms,
        forward_ms=per_step["forward"],
        backward_ms=per_step["backward"],
        optimizer_ms=per_step["optimizer"],
        communication_ms=per_step["communication"],
        other_ms=other,
        explained_share=min(1.0, max(0.0, explained)),
        step_source=source,
    )


def top_ops(profile: ProfileData, n: int = 10) -> list[TopOp]:
    """The ``n`` ops (per name and phase) with the most total time, with their share of all profiled op time."""
    ops = profile.ops
    total = float(ops["total_ms"].sum())
    best = ops.nlargest(n, "total_ms", keep="first")
    return [
        TopOp(
            name=str(r.full_name),
            op_type=str(r.op_type),
            phase=str(r.phase),
            count=int(r.count),
            total_ms=float(r.total_ms),
            mean_ms=float(r.mean_ms),
            share=float(r.total_ms) / total if total > 0 else 0.0,
        )
        for r in best.itertuples(index=False)
    ]
