"""The phase of each op: forward, backward, optimizer or communication.

How an op gets its phase (``ops.phase_rule`` says which rule decided):

(attribution) Where the per-launch timestamps split into steps, :mod:`perftune.profile.attribution` places every
launch instead (rules ``timeline`` and ``recompute``, from the names below plus each launch's place in its step); the
``timeline`` placement described here is then superseded.

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
"""

from __future__ import annotations

import math
import re
from functools import reduce
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from perftune.errors import ProfileError

#: phases an op can have; ``data`` and ``other`` come from the burst's timing, not from ops
OP_PHASES = ("forward", "backward", "optimizer", "communication")


COMPUTE_PHASES = ("forward", "backward", "optimizer")


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


def phase_rule(full_op_name: str, op_type: str) -> tuple[str, str]:
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
    return phase_rule(full_op_name, op_type)[0]


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


def place_by_timeline(per_op: pd.DataFrame, ts_path: Path,
                      detail_name: str) -> tuple[pd.DataFrame, Optional[int], tuple[int, int]]:
    """Check the per-launch timestamps against the op table, find the profiled window and place each launch of an op
    that its name cannot place by when it ran in its step (see the module doc for the rules).

    ``detail_name`` names the op table in messages.  Returns (ops, steps the launches split into, (first launch start, last launch end) in ns).  At most two
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
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    n = max(steps, 1)
    first_bwd, first_update = np.full(n, big, np.int64), np.full(n, big, np.int64)
    last_bwd, last_fwd = np.full(n, small, np.int64), np.full(n, small, np.int64)
    window = [big, 0]
    seen: dict[str, int] = {}
    for name, start, dur in scan_timestamps(ts_path):
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
    for name, start, dur in scan_timestamps(ts_path):
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
