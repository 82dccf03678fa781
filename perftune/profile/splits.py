"""Per-step time splits that add up (data + forward + backward + optimizer + communication + other == the measured
step, by construction) and the most expensive ops, from a parsed profile."""

from __future__ import annotations

import math

from perftune.profile.attribution import recompute_share
from perftune.io.records import Splits, TopOp
from perftune.profile.layouts import ProfileData
from perftune.profile.phases import COMPUTE_PHASES, OP_PHASES


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
