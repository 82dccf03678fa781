"""Per-step time splits that add up (data + forward + backward + optimizer + communication + other == the measured
step, by construction) and the most expensive ops, from a parsed profile."""

from __future__ import annotations

import math
import re
from typing import Optional

from perftune.profile.attribution import recompute_share
from perftune.io.records import Splits, TopOp, TopOpType
from perftune.profile.layouts import ProfileData
from perftune.profile.op_phase import COMPUTE_PHASES, OP_PHASES


#: a profiled step within this factor of the timed one is the same step; beyond it the ratio is stated as the cause
SAME_STEP = 0.05


def _overhead_cause(factor: float, profiled_compute: float, timed_compute: float) -> Optional[str]:
    """Why the profiled op times were scaled by ``factor`` (timed compute / profiled compute), in words."""
    if abs(factor - 1.0) <= SAME_STEP:
        return None
    if factor < 1.0:
        return (f"profiled steps' compute {profiled_compute:.3f} ms ran x{1 / factor:.2f} slower than the timed "
                f"steps' {timed_compute:.3f} ms (profiler overhead: every launch is recorded)")
    return (f"profiled steps' compute {profiled_compute:.3f} ms ran x{factor:.2f} faster than the timed steps' "
            f"{timed_compute:.3f} ms (the timed steps waited for something the profiled ones did not: contention "
            "or an asynchronous queue)")


def compute_splits(profile: ProfileData, profiled_steps: int, step_ms: float, data_wait_ms: float,
                   profiled_step_ms: Optional[float] = None, profiled_data_ms: float = 0.0) -> Splits:
    """Mean time per step by phase; the six phases add up to ``step_ms`` exactly.

    ``step_ms``: mean wall time of the timed (unprofiled) steps, *including* the time they waited for their batch,
    ``data_wait_ms`` (the CPU profiler records no data pipeline).  Op time per phase is its total over the profile
    divided by ``profiled_steps``.

    Op times come from the profiled steps, which run slower than the timed ones (the profiler records every launch:
    x1.57 on the PyNative quickstart baseline) or sometimes faster; dividing the timed step by them mixes two
    different steps, and op time then "exceeds" the step.  So, given ``profiled_step_ms`` (and the profiled steps'
    own ``profiled_data_ms``), each phase is its share of the profiled steps' compute time (step - data), carried to
    the timed steps' compute time: ``other`` keeps its share too.  ``op_scale`` and ``op_scale_cause`` say by how
    much and why, per trial.  Only where op time exceeds the profiled steps' own compute (ops overlapping each other,
    a collective waiting for a peer) or where no profiled step time is given are the phases squeezed into the step,
    and ``op_scale_cause`` says that instead.  Where the Ascend layout's ``step_trace_time.csv`` exists, its
    device-side Computing (split by op time into forward / backward / optimizer) and Communication(Not Overlapped)
    are used instead of the op sums.
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
        profiled_step_ms = None  # device time has no host profiler overhead to take out
    budget = step_ms - data_wait_ms
    scale, cause = None, None
    if profiled_step_ms is not None and profiled_step_ms - profiled_data_ms > 0:
        profiled_compute = profiled_step_ms - profiled_data_ms
        op_sum = sum(per_step.values())
        if op_sum > profiled_compute:  # ops longer than their own steps: they overlap or wait
            cause = (f"op time {op_sum:.3f} ms exceeds the profiled steps' own compute {profiled_compute:.3f} ms "
                     "(ops overlap, or a collective waits for a peer); squeezed into it")
            per_step = {p: v * profiled_compute / op_sum for p, v in per_step.items()}
        scale = budget / profiled_compute
        per_step = {p: v * scale for p, v in per_step.items()}
        overhead = _overhead_cause(scale, profiled_compute, budget)
        cause = "; ".join(c for c in (cause, overhead) if c) or None
        if cause:
            source += f"; op phases x{scale:.3f}: their share of the profiled steps, carried to the timed step ({cause})"
        other = max(budget - sum(per_step.values()), 0.0)
    else:
        op_sum = sum(per_step.values())
        if op_sum > budget:
            scale = budget / op_sum if op_sum > 0 else 0.0
            per_step = {p: v * scale for p, v in per_step.items()}
            cause = (f"op time {op_sum:.3f} ms > step - data {budget:.3f} ms and no profiled step time to tell "
                     "profiler overhead from overlapping ops")
            source += f"; op phases scaled x{scale:.3f} ({cause})"
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
        profiled_step_ms=profiled_step_ms,
        profiled_data_ms=profiled_data_ms if profiled_step_ms is not None else None,
        op_scale=scale,
        op_scale_cause=cause,
        # attribution: the recomputed forward's part of backward_ms, where launches were placed by time
        recompute_ms=per_step["backward"] * recompute_share(profile.ops) if profile.launch_steps else None,
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


_INSTANCE = re.compile(r"-op\d+$")


def op_type_of(full_name: str, op_type: str = "") -> str:
    """The operator type of an op instance: its ``op_type`` column, else its name without the scope and the
    instance number (``Default/Conv2D-op9`` -> ``Conv2D``)."""
    if op_type and op_type.strip() and op_type != "nan":
        return op_type.strip()
    return _INSTANCE.sub("", full_name.rsplit("/", 1)[-1])


def top_op_types(profile: ProfileData, profiled_steps: int, n: int = 10) -> list[TopOpType]:
    """The ``n`` operator types with the most total time, every instance and phase summed, per step."""
    ops = profile.ops.assign(type_=[op_type_of(str(a), str(b)) for a, b in zip(profile.ops["full_name"],
                                                                                profile.ops["op_type"])])
    total = float(ops["total_ms"].sum())
    out = []
    for op_type, g in ops.groupby("type_", sort=False):
        by_phase = g.groupby("phase")["total_ms"].sum().sort_values(ascending=False, kind="stable")
        ms = float(g["total_ms"].sum())
        out.append(TopOpType(op_type=str(op_type), phases=[str(p) for p in by_phase.index],
                             calls_per_step=float(g["count"].sum()) / profiled_steps, ms_per_step=ms / profiled_steps,
                             share=ms / total if total > 0 else 0.0))
    return sorted(out, key=lambda t: -t.ms_per_step)[:n]
