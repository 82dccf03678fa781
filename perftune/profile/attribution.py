"""Which phase each op launch belongs to, from what the op is and where it runs in its step.

An op's name alone cannot say its phase once MindSpore recomputes or accumulates (measured on MindSpore 2.10, CPU):

* ``recompute_`` scopes name the *original* forward ops of a recomputed cell as well as their re-run copies inside
  the backward pass, so a scope rule counts the whole forward of the cell as backward;
* GRAPH mode runs ops in dataflow order: gradient pieces that need only forward values (``Grad_Div`` of GELU, the
  loss's ``Grad_SumExt/Tile``) run in the middle of the forward, the loss value's own ops can run after the backward
  matmuls, and the micro-batches of an accumulation loop run side by side (both forwards, then both backwards);
* ``Expand/...`` ops carry the name of the composite they were expanded from, which is a gradient for
  ``Expand/_SoftmaxBackward`` and ``Expand/_SiLUGrad`` and either phase for ``Expand/_Muls`` or ``Expand/_SumExt``;
* PyNative runs ops eagerly in program order and names most of them bare (``MatMul``, ``AddExt``), forward and
  backward alike, and an accumulation step runs forward, backward, forward, backward, then the update.

So every launch gets a *kind* from its name (:func:`launch_kind`) and those kinds that the name does not decide are
placed by their position in the step's timeline (:func:`attribute_phases`):

``gradient``
    ``Gradients/...`` (including ``Gradients/recompute_...``), gradient kernels by type (``*Grad``, ``*Backward``,
    ``Conv2DBackpropInput/Filter``: ``perftune.profile.op_phase.is_gradient_type``), ``Expand/_*Backward|_*Grad``:
    backward wherever they run, never placed by time.
``fixed``
    optimizer and communication ops (the name rule of ``perftune.profile`` decides): unchanged.
``forward_scope``
    ops in the network's cell scope (``Default/net_with_loss-.../MatMul-op0``): forward, even where GRAPH mode
    runs them late (the loss value).
``recompute``, ``step_cell``, ``free``
    ``recompute_...`` outside ``Gradients``, the training step's own ops (``Default/Mul-op3``), and ops with no cell
    scope (bare PyNative ops, other ``Expand/...``): placed by time.

Placement, per step (launches split into equal steps as ``perftune.profile`` found them) and per micro-batch:

* **GRAPH mode** (every launch scoped): the forward ends where backward evidence starts to outweigh forward
  evidence: the boundary ``b`` minimises (gradient launches before ``b``) + (forward-evidence launches after
  ``b``), forward evidence being the ``forward_scope`` launches (cell form) or else the ``step_cell`` ones (the
  ``ms.jit`` function form, whose whole network is ``Default/<op>``), and the first half of the ``recompute``
  launches (a recomputed cell's originals run in the forward, their copies, no more of them, in the backward).
  Unlike "before the first gradient op" this holds when gradient pieces run early and when the loss's own ops
  run late.
* **PyNative** (bare op names present): the backward of a micro-batch starts at its first gradient launch, or at
  the gradient seed (the last ``OnesLike``/``Ones``/``Fill`` launch before it: ``ones_like(loss)``) where there is
  one.  With gradient accumulation the step holds several micro-batches: their number ``k`` is the smallest ratio
  (launches per step) / (launches in the first micro-batch's forward) over the ops of that forward (the loss's ops
  run once per micro-batch), and each micro-batch starts at a launch of the first such op.
* Placed launches before the boundary are forward, after it backward; after the step's last gradient launch
  (GRAPH) or from the first update kernel that follows it (PyNative, whose embedding gradient
  ``UnsortedSegmentSum`` carries no gradient name) they are optimizer.  In the cell form a ``step_cell`` launch after
  the boundary is optimizer too: gradient post-processing (norm, accumulation mean, unscaling).
* **Recompute**: a placed launch inside the backward is a recomputed forward op, rule ``recompute`` (part of the
  backward, reported on its own by :func:`recompute_share`), when its name has a ``recompute_`` scope (GRAPH) or
  when it follows the micro-batch's first gradient launch and lies on a run of at least :data:`RECOMPUTE_RUN`
  launches whose op types occur in the same order in the micro-batch's forward (PyNative names nothing
  ``recompute_``; its re-run is a copy of a stretch of the forward).

Known limits: the cell form's gradient accumulation adds inherit the network's cell scope and so count as forward
(about 2% of a ``tiny_gpt`` step); in GRAPH mode a gradient piece that needs only forward values counts as backward
even though it runs during the forward (it is backward work), and an ``Expand`` op of the forward that runs after
the boundary counts as backward.
"""

from __future__ import annotations

import math
import re
from typing import Iterable, Optional

import numpy as np
import pandas as pd

__all__ = ["KINDS", "RECOMPUTE_RUN", "launch_kind", "launch_table", "attribute_phases", "place_launches",
           "aggregate_launches", "phase_ms_by_step", "recompute_share"]

KINDS = ("gradient", "fixed", "forward_scope", "recompute", "step_cell", "free")
#: a PyNative backward stretch is a recompute when this many consecutive launches repeat the forward's op types
RECOMPUTE_RUN = 6
#: op types that seed the backward with ones (``ones_like(loss)``) in PyNative
SEED_TYPES = frozenset({"OnesLike", "Ones", "Fill", "FillV2"})
_EXPAND_GRADIENT = re.compile(r"(Backward|Grad)(V\d+)?$")  # Expand/_SoftmaxBackward, Expand/_SiLUGrad
_PHASES = ("forward", "backward", "optimizer")


def launch_kind(full_name: str, op_type: str, name_phase: str, name_rule: str) -> str:
    """The kind of an op (one of :data:`KINDS`) from its full name and the phase its name gives.

    ``name_phase`` / ``name_rule`` are what ``perftune.profile`` decides from the name alone (its rules:
    ``scope``, ``op_type``, ``step_cell``, ``unscoped``).

    >>> launch_kind("recompute_Default/net-Net/0-Block/MatMul-op0", "MatMul", "backward", "scope")
    'recompute'
    >>> launch_kind("Expand/_SoftmaxBackward/Mul-op0", "Mul", "forward", "unscoped")
    'gradient'
    """
    segments = [s for s in full_name.split("/") if s]
    if name_phase in ("optimizer", "communication"):
        return "fixed"
    if segments and segments[0] == "Gradients":
        return "gradient"
    if any(s.startswith("recompute_") for s in segments[:-1]):
        return "recompute"
    if len(segments) >= 3 and segments[0] == "Expand" and _EXPAND_GRADIENT.search(segments[1]):
        return "gradient"
    if name_phase == "backward":  # a gradient kernel by type (ReluGrad, Conv2DBackpropFilter, ...)
        return "gradient"
    if name_rule == "scope":
        return "forward_scope"
    if name_rule == "step_cell":
        return "step_cell"
    return "free"


def launch_table(records: Iterable[tuple[str, np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """One row per launch (``full_name``, ``start_ns``, ``dur_ms``) from ``(name, starts, durations)`` records,
    each name's launches in the order they ran (as ``cpu_op_execute_timestamp_<rank>.txt`` lists them)."""
    names, starts, durs = [], [], []
    for name, start, dur in records:
        names.append(np.full(len(start), name, dtype=object))
        starts.append(np.asarray(start, dtype=np.int64))
        durs.append(np.asarray(dur, dtype=np.float64))
    if not names:
        return pd.DataFrame({"full_name": pd.Series(dtype=object), "start_ns": pd.Series(dtype="int64"),
                             "dur_ms": pd.Series(dtype="float64")})
    return pd.DataFrame({"full_name": np.concatenate(names), "start_ns": np.concatenate(starts),
                         "dur_ms": np.concatenate(durs)})


def attribute_phases(ops: pd.DataFrame, launches: pd.DataFrame, steps: int) -> pd.DataFrame:
    """Per-op phases with every launch placed (see the module doc).

    ``ops``: one row per op from the name rules (``full_name``, ``name``, ``op_type``, ``phase``, ``phase_rule``,
    ...); ``launches``: :func:`launch_table`; ``steps``: equal steps the launches split into (each op's launches
    divide evenly).  Returns one row per op and phase with the columns of ``ops``, ``count`` and ``total_ms``
    summed from the launches; ``phase_rule`` is ``timeline`` for a launch placed by time, ``recompute`` for a
    recomputed forward op inside the backward, else the name's rule.  Total count and time are unchanged.
    """
    return aggregate_launches(ops, place_launches(ops, launches, steps))


def aggregate_launches(ops: pd.DataFrame, placed: pd.DataFrame) -> pd.DataFrame:
    """:func:`place_launches`' rows summed per op and phase, with the columns of ``ops``."""
    out = placed.groupby(["full_name", "phase", "phase_rule"], as_index=False, sort=False).agg(
        count=("dur_ms", "size"), total_ms=("dur_ms", "sum"))
    extra = [c for c in ops.columns if c not in out.columns and c != "mean_ms"]
    out = out.merge(ops.drop_duplicates("full_name")[["full_name", *extra]], on="full_name", how="left")
    return out[[c for c in ops.columns if c in out.columns]]


def phase_ms_by_step(placed: pd.DataFrame) -> pd.DataFrame:
    """Op time per step (rows, 0..steps-1) and phase (columns) from :func:`place_launches`' rows: how much each
    phase varies from step to step, the noise against which splits of different runs are compared."""
    return placed.pivot_table(index="step", columns="phase", values="dur_ms", aggfunc="sum", fill_value=0.0)


def place_launches(ops: pd.DataFrame, launches: pd.DataFrame, steps: int) -> pd.DataFrame:
    """One row per launch (``full_name``, ``step``, ``phase``, ``phase_rule``, ``dur_ms``, ...), each launch placed
    as :func:`attribute_phases` describes."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    meta = ops.drop_duplicates("full_name").set_index("full_name")
    df = launches.reset_index(drop=True).copy()
    missing = sorted(set(df["full_name"]) - set(meta.index))
    if missing:
        raise ValueError(f"launches of {missing[0]!r}, which the op table does not list")
    df["op_type"] = meta["op_type"].reindex(df["full_name"]).to_numpy()
    name_phase = meta["phase"].reindex(df["full_name"]).to_numpy()
    name_rule = meta["phase_rule"].reindex(df["full_name"]).to_numpy()
    kind_of = {n: launch_kind(n, t, p, r) for n, t, p, r in
               zip(meta.index, meta["op_type"], meta["phase"], meta["phase_rule"])}
    df["kind"] = df["full_name"].map(kind_of)
    df["phase"] = name_phase
    df["phase_rule"] = name_rule
    counts = df.groupby("full_name")["full_name"].transform("size").to_numpy()
    if (counts % steps).any():
        raise ValueError(f"the launches do not divide into {steps} equal steps")
    df["step"] = df.groupby("full_name").cumcount().to_numpy() // (counts // steps)
    eager = bool((~df["full_name"].str.contains("/", regex=False)).any())
    cell_form = bool((df["kind"] == "forward_scope").any())
    df = df.sort_values(["step", "start_ns"], kind="stable")
    micro, anchor = _micro_batches(df, steps)
    placed_phase = df["phase"].to_numpy(dtype=object).copy()
    placed_rule = df["phase_rule"].to_numpy(dtype=object).copy()
    for _, idx in df.groupby("step", sort=True).indices.items():
        step = df.iloc[idx]
        ph, rl = _place_step(step, eager, cell_form, micro, anchor)
        placed_phase[idx], placed_rule[idx] = ph, rl
    df["phase"], df["phase_rule"] = placed_phase, placed_rule
    return df


def _micro_batches(df: pd.DataFrame, steps: int) -> tuple[int, Optional[str]]:
    """(micro-batches per step, the op whose launches start them) from the first step's forward (module doc)."""
    first = df[df["step"] == 0]
    grads = np.flatnonzero(first["kind"].to_numpy() == "gradient")
    if not len(grads) or grads[0] == 0:
        return 1, None
    fwd = first.iloc[: grads[0]]
    fwd = fwd[fwd["kind"] != "fixed"]
    if fwd.empty:
        return 1, None
    in_fwd = fwd["full_name"].value_counts()
    per_step = df["full_name"].value_counts()[in_fwd.index] // steps
    ratio = per_step / in_fwd
    k = int(math.floor(float(ratio.min())))
    if k <= 1:
        return 1, None
    for name in fwd["full_name"]:  # the earliest op of the forward that runs once per micro-batch
        if in_fwd[name] == 1 and per_step[name] == k:
            return k, name
    return 1, None


def _place_step(step: pd.DataFrame, eager: bool, cell_form: bool, micro: int, anchor: Optional[str]):
    """(phase, rule) arrays for one step's launches, in the step's time order."""
    kind = step["kind"].to_numpy()
    phase = step["phase"].to_numpy(dtype=object).copy()
    rule = step["phase_rule"].to_numpy(dtype=object).copy()
    n = len(step)
    grads = np.flatnonzero(kind == "gradient")
    expanded = (kind == "gradient") & (phase != "backward")  # Expand/_SoftmaxBackward: the expander's name says it
    phase[expanded], rule[expanded] = "backward", "scope"
    placed = np.isin(kind, ("recompute", "step_cell", "free"))
    if not len(grads):  # no backward at all: what the names cannot place is forward
        phase[placed], rule[placed] = "forward", "timeline"
        return phase, rule
    last_grad = grads[-1]
    tail = last_grad + 1
    if eager:  # the optimizer starts at its first update kernel after the gradients
        later = np.flatnonzero((kind == "fixed") & (phase == "optimizer") & (np.arange(n) > last_grad))
        tail = later[0] if len(later) else tail
    # micro-batch windows: [start, end) position ranges before the tail
    bounds = [0]
    if micro > 1 and anchor is not None:
        starts = np.flatnonzero(step["full_name"].to_numpy() == anchor)
        bounds += [int(s) for s in starts[1:] if 0 < s < tail]
    bounds.append(tail)
    region = np.full(n, 2, dtype=np.int8)  # 0 forward, 1 backward, 2 optimizer (tail)
    types = step["op_type"].to_numpy()
    recompute = np.zeros(n, dtype=bool)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        b = _eager_boundary(kind, types, lo, hi) if eager else _graph_boundary(kind, lo, hi, cell_form)
        region[lo:b] = 0
        region[b:hi] = 1
        window_grads = grads[(grads >= lo) & (grads < hi)]
        if eager and len(window_grads):  # a re-run inside the backward: after the backward's first gradient op
            g = int(window_grads[0]) + 1
            recompute[g:hi] |= _repeats_forward(types[lo:b], types[g:hi])
    recompute &= placed & (region == 1)
    recompute |= placed & (region == 1) & (kind == "recompute")
    new = np.array(_PHASES, dtype=object)[region]
    if cell_form:  # the step cell's own ops once the forward is done: gradient post-processing
        new[(kind == "step_cell") & (region == 1)] = "optimizer"
    phase[placed] = new[placed]
    rule[placed] = "timeline"
    rule[recompute] = "recompute"
    return phase, rule


def _graph_boundary(kind: np.ndarray, lo: int, hi: int, cell_form: bool) -> int:
    """First backward position in [lo, hi): minimises gradients before it + forward evidence after it (the latest
    such position, so launches between the last forward evidence and the first gradient stay forward).

    The first half of the ``recompute`` launches count as forward evidence too: a recomputed cell's original ops
    run in the forward and their copies (no more of them: only what the gradients need) in the backward.  Without
    them a two-block function-form step, whose forward is almost all ``recompute_`` ops, had its boundary before
    the blocks (the ten gradient pieces GRAPH mode runs early outweighed the eight head and loss ops), and its
    forward counted as backward."""
    k = kind[lo:hi]
    grad = (k == "gradient").astype(np.int64)
    fwd = (k == ("forward_scope" if cell_form else "step_cell")).astype(np.int64)
    recomputed = np.flatnonzero(k == "recompute")
    fwd[recomputed[: len(recomputed) // 2]] = 1
    grad_before = np.concatenate(([0], np.cumsum(grad)))
    fwd_after = fwd.sum() - np.concatenate(([0], np.cumsum(fwd)))
    cost = grad_before + fwd_after
    return lo + int(np.flatnonzero(cost == cost.min())[-1])


def _eager_boundary(kind: np.ndarray, types: np.ndarray, lo: int, hi: int) -> int:
    """First backward position in [lo, hi) in program order: the gradient seed before the first gradient op, or
    that op."""
    grads = np.flatnonzero(kind[lo:hi] == "gradient")
    if not len(grads):
        return hi
    first = lo + int(grads[0])
    seeds = np.flatnonzero(np.isin(types[lo:first], list(SEED_TYPES)))
    return lo + int(seeds[-1]) if len(seeds) else first


def _repeats_forward(forward_types: np.ndarray, backward_types: np.ndarray, run: int = RECOMPUTE_RUN) -> np.ndarray:
    """Mask of the backward launches on a run of ``run`` op types that occurs, in order, in the forward."""
    mask = np.zeros(len(backward_types), dtype=bool)
    if len(forward_types) < run or len(backward_types) < run:
        return mask
    fwd = [str(t) for t in forward_types]
    grams = {tuple(fwd[i:i + run]) for i in range(len(fwd) - run + 1)}
    bwd = [str(t) for t in backward_types]
    for i in range(len(bwd) - run + 1):
        if tuple(bwd[i:i + run]) in grams:
            mask[i:i + run] = True
    return mask


def recompute_share(ops: pd.DataFrame) -> float:
    """The share of backward op time that is recomputed forward (``phase_rule == "recompute"``), 0 without any."""
    bwd = ops[ops["phase"] == "backward"]
    total = float(bwd["total_ms"].sum())
    return float(bwd.loc[bwd["phase_rule"] == "recompute", "total_ms"].sum()) / total if total > 0 else 0.0
