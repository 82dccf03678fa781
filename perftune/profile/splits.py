"""Per-step time splits that add up (data + forward + backward + optimizer + communication + other == the measured
step, by construction) and the most expensive ops, from a parsed profile."""

from __future__ import annotations

import math
import re
from typing import Optional

from perftune.io.records import Splits, SplitWarning, TopOp, TopOpType
from perftune.profile.attribution import recompute_share
from perftune.profile.layouts import ProfileData
from perftune.profile.op_phase import COMPUTE_PHASES, OP_PHASES

#: a profiled step within this factor of the timed one is the same step; beyond it the ratio is a warning
SAME_STEP = 0.05
#: op_scale beyond this factor either way (0.8 / 1.25) is "far": the split carries an interval and a warning
FAR_SCALE = 1.25
#: op rules whose phase came from where the launch ran, not from the op's name or type
BY_TIME_RULES = ("timeline", "recompute", "default")


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
    the timed steps' compute time: ``other`` keeps its share too.  ``op_scale`` says by how much.  That carrying
    assumes the speed difference spread over the phases in proportion; it need not (the profiler's cost is per
    launch, contention hits whatever runs), so ``phase_ranges`` holds where each phase can lie if the difference fell
    anywhere, widened by the profiled steps' own spread, and beyond :data:`FAR_SCALE` a warning says to compare
    phases by those ranges.  (Profiling again would not help: the profiler's own overhead makes every profile of a
    PyNative step about x1.6 slower, so more profiled steps converge to the same factor and cost a profiler
    session each.)  Where op time exceeds the profiled steps' own compute (ops overlapping each other, a collective
    waiting for a peer) or no profiled step time is given the phases are squeezed into the step.  Where the Ascend
    layout's ``step_trace_time.csv`` exists, its device-side Computing (split by op time into forward / backward /
    optimizer) and Communication(Not Overlapped) are used instead of the op sums.
    """
    _check_inputs(profiled_steps, step_ms, data_wait_ms)
    totals = profile.phase_totals_ms()
    per_step = {p: totals[p] / profiled_steps for p in OP_PHASES}
    source, warnings = "burst", []
    launches = profile.launch_steps
    if launches is not None and launches % profiled_steps and profiled_steps % launches:
        warnings.append(SplitWarning(kind="launch_steps", figures={"launch_steps": profile.launch_steps,
                                                                   "profiled_steps": profiled_steps}))
    by_step = profile.phase_ms_by_step
    if profile.step_trace is not None and not profile.step_trace.empty:
        per_step = _device_phases(profile.step_trace, per_step)
        source = "step_trace_time.csv (device: Computing, Communication(Not Overlapped)) + burst (step, data)"
        profiled_step_ms, by_step = None, None  # device time has no host profiler overhead to take out
    budget = step_ms - data_wait_ms
    if profiled_step_ms is not None and profiled_step_ms - profiled_data_ms > 0:
        profiled, per_step, scale, shift = _carried(per_step, profiled_step_ms - profiled_data_ms, budget, warnings)
    else:
        profiled, per_step, scale, shift = _squeezed(per_step, budget, warnings)
    other = max(budget - sum(per_step.values()), 0.0)  # other is the rest: the six add up to step_ms
    explained = 1.0 - other / step_ms
    op_total = float(profile.ops["total_ms"].sum())
    by_time = float(profile.ops.loc[profile.ops["phase_rule"].isin(BY_TIME_RULES), "total_ms"].sum())
    return Splits(
        step_ms=step_ms, data_ms=data_wait_ms, forward_ms=per_step["forward"], backward_ms=per_step["backward"],
        optimizer_ms=per_step["optimizer"], communication_ms=per_step["communication"], other_ms=other,
        explained_share=min(1.0, max(0.0, explained)),
        step_source=source,
        profiled_step_ms=profiled_step_ms,
        profiled_data_ms=profiled_data_ms if profiled_step_ms is not None else None,
        op_scale=scale,
        # attribution: the recomputed forward's part of backward_ms, where launches were placed by time
        recompute_ms=per_step["backward"] * recompute_share(profile.ops) if profile.launch_steps else None,
        by_time_share=(by_time / op_total) * sum(per_step.values()) / step_ms if op_total > 0 else None,
        phase_ranges=phase_ranges(profiled, per_step, shift, by_step),
        warnings=warnings,
    )


def _check_inputs(profiled_steps: int, step_ms: float, data_wait_ms: float) -> None:
    if profiled_steps < 1:
        raise ValueError(f"profiled_steps must be >= 1, got {profiled_steps}")
    if not (step_ms > 0 and math.isfinite(step_ms)):
        raise ValueError(f"step_ms must be a positive number, got {step_ms}")
    if not (0 <= data_wait_ms <= step_ms):
        raise ValueError(f"data_wait_ms must be within [0, step_ms={step_ms}], got {data_wait_ms}")


Phases = dict[str, float]


def _carried(per_step: Phases, profiled_compute: float, budget: float,
             warnings: list[SplitWarning]) -> tuple[Phases, Phases, Optional[float], float]:
    """Each phase's share of the profiled steps' compute carried to the timed steps' ``budget``: (the profiled
    phases, the carried ones, the scale, the shift); the warnings it finds appended to ``warnings``."""
    op_sum = sum(per_step.values())
    if op_sum > profiled_compute:  # ops longer than their own steps: they overlap or wait
        warnings.append(SplitWarning(kind="ops_overlap", figures={"op_ms": op_sum, "profiled_ms": profiled_compute}))
        per_step = {p: v * profiled_compute / op_sum for p, v in per_step.items()}
    scale = budget / profiled_compute
    warnings += _speed_warnings(scale, profiled_compute, budget)
    return dict(per_step), {p: v * scale for p, v in per_step.items()}, scale, budget - profiled_compute


def _squeezed(per_step: Phases, budget: float,
              warnings: list[SplitWarning]) -> tuple[Phases, Phases, Optional[float], float]:
    """No profiled step time: the op sums as they are, squeezed into ``budget`` where they exceed it."""
    op_sum = sum(per_step.values())
    scale = None
    if op_sum > budget:
        scale = budget / op_sum if op_sum > 0 else 0.0
        per_step = {p: v * scale for p, v in per_step.items()}
        warnings.append(SplitWarning(kind="ops_exceed_step", figures={"op_ms": op_sum, "budget_ms": budget}))
    return dict(per_step), per_step, scale, 0.0


def _device_phases(step_trace, per_step: dict[str, float]) -> dict[str, float]:
    """Ascend/GPU: device Computing split by op time into the compute phases, Communication(Not Overlapped)."""
    computing = float(step_trace["computing_us"].mean()) / 1000.0
    out = dict(per_step)
    compute_ops = sum(per_step[p] for p in COMPUTE_PHASES)
    for p in COMPUTE_PHASES:
        out[p] = computing * (per_step[p] / compute_ops) if compute_ops > 0 else 0.0
    if compute_ops <= 0:
        out["forward"] = computing
    out["communication"] = float(step_trace["communication_not_overlapped_us"].mean()) / 1000.0
    return out


def _speed_warnings(scale: float, profiled_ms: float, timed_ms: float) -> list[SplitWarning]:
    """The profiled steps' compute ran at another speed than the timed steps' (and, beyond FAR_SCALE, far)."""
    if abs(scale - 1.0) <= SAME_STEP:
        return []
    figures = {"profiled_ms": profiled_ms, "timed_ms": timed_ms, "op_scale": scale}
    out = [SplitWarning(kind="profiled_slower" if scale < 1.0 else "profiled_faster", figures=figures)]
    if not 1 / FAR_SCALE <= scale <= FAR_SCALE:
        out.append(SplitWarning(kind="op_scale_far", figures={"op_scale": scale, "limit": FAR_SCALE}))
    return out


def phase_ranges(profiled: dict[str, float], carried: dict[str, float], shift: float,
                 by_step=None) -> dict[str, list[float]]:
    """[low, high] ms per step of each compute phase.

    ``profiled``: the phase as the profiled steps ran it; ``carried``: the same carried to the timed steps;
    ``shift``: timed compute - profiled compute.  If the difference can fall in any phase (each phase moves only in
    its direction, never past zero), a phase lies between ``profiled`` and ``profiled + shift``; the profiled steps'
    own spread (``by_step``: op ms per profiled step and phase, carried by the same factor) widens that.  Empty where
    neither applies (device step trace, no profiled step time and no per-step placement).

    >>> phase_ranges({"forward": 60.0, "backward": 30.0, "optimizer": 10.0},
    ...              {"forward": 36.0, "backward": 18.0, "optimizer": 6.0}, -40.0)["forward"]
    [20.0, 60.0]
    """
    if not shift and by_step is None:
        return {}
    out = {}
    for p in COMPUTE_PHASES:
        o, v = profiled[p], carried[p]
        lo, hi = min(v, max(0.0, min(o, o + shift))), max(v, o, o + shift)
        if by_step is not None and p in getattr(by_step, "columns", ()) and len(by_step) > 1:
            mean = float(by_step[p].mean())
            if mean > 0:
                lo, hi = min(lo, float(by_step[p].min()) * v / mean), max(hi, float(by_step[p].max()) * v / mean)
        out[p] = [lo, hi]
    return out


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
