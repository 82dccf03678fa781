"""Where the baseline's loss curve flattens: the accuracy window's end, within its budget.

A window that ends as soon as the loss has moved ("fallen by 3x the tolerance") judges in the steep first part of
training, where the seeds disagree most and where a harm that caps what the model can reach (a precision floor, a
learning rate that diverges later, a batch too large to keep improving) has not shown yet: float16 on a regression
whose targets sit at 1000 passed at 192 samples and was 220 seed spreads worse at 3072.  So the window runs to the
knee of the curve: the first end at which the window's last quarter improved the loss by at most ``FLAT_SHARE`` of
its whole fall, on a log scale, and by at most ``LATE_FALL`` itself (a loss falling from 0.04 to 0.004 is still
learning, however small that is beside its first fall).  A curve that has not flattened within the budget ends
at the budget, and says so.

Pure functions of a curve (samples seen, loss): tested on scripted curves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

#: the knee: the window's last quarter made at most this share of the whole (log) fall ...
FLAT_SHARE = 0.05
#: ... and improved the loss by at most this much itself (relative): a loss still halving after a fall by a factor
#: of 1000 is a tiny share of that fall, and still learning
LATE_FALL = 0.02
#: steps averaged for the curve's start
HEAD_STEPS = 3
#: ends tried per curve (on the step unit's grid), so a long curve costs no more than this many looks
MAX_ENDS = 128
#: steps a window needs before its flatness means anything (each eighth of it then has 8 steps)
MIN_STEPS = 64
#: a flat stretch is a knee only if the loss falls at most this much more (relative) by the longest curve's end: a
#: plateau early in training (a saddle the model leaves later) is not where the curve flattens
AFTER_FALL = 0.10


@dataclass(frozen=True)
class Knee:
    """One end of a window on a curve: how much the loss fell by then and how flat its last quarter was."""

    samples: int
    fall: Optional[float]  # 1 - end / start: 0.62 means the loss fell 62% (negative: it rose)
    late_share: Optional[float]  # the last quarter's share of the whole log fall (None: no fall to share)
    flat: bool


def _points(curve: Sequence[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
    pts = [(int(s), float(v)) for s, v in curve if v is not None and math.isfinite(v)]
    return np.asarray([s for s, _ in pts], dtype=float), np.asarray([v for _, v in pts], dtype=float)


def _mean(xs: np.ndarray, ys: np.ndarray, lo: float, hi: float) -> Optional[float]:
    sel = ys[(xs > lo) & (xs <= hi)]
    return float(sel.mean()) if len(sel) else None


def _se(xs: np.ndarray, ys: np.ndarray, lo: float, hi: float) -> float:
    """The standard error of ``_mean`` over the same steps (the batch losses' own noise)."""
    sel = ys[(xs > lo) & (xs <= hi)]
    return float(sel.std(ddof=1) / math.sqrt(len(sel))) if len(sel) >= 2 else 0.0


def at(curve: Sequence[tuple[int, float]], end: int, target: float = 0.0, flat_share: float = FLAT_SHARE) -> Knee:
    """The window ``(0, end]`` of ``curve``: its fall (first steps to its last eighth) and the share of the log fall
    its last quarter made (the mean over its 5/8-6/8 eighth against its last eighth); flat when that share is at
    most ``flat_share`` and that quarter's own fall at most ``LATE_FALL`` (each beyond the batch losses' noise: two
    standard errors of the difference), and the loss fell at least ``target``."""
    xs, ys = _points(curve)
    inside = xs <= end
    if inside.sum() < 2 * HEAD_STEPS or end <= 0:
        return Knee(end, None, None, False)
    start = float(ys[inside][:HEAD_STEPS].mean())
    last = _mean(xs, ys, end * 7 / 8, end)
    before = _mean(xs, ys, end * 5 / 8, end * 6 / 8)
    if last is None or before is None or start <= 0:
        return Knee(end, None, None, False)
    fall = 1.0 - last / start
    positive = last > 0 and before > 0
    scale = math.log if positive and ys[inside].min() > 0 else (lambda v: v)
    total = scale(start) - scale(last)
    if total <= 0:
        return Knee(end, fall, None, False)
    share = (scale(before) - scale(last)) / total
    # the batch losses' noise: a drop within two standard errors of the two means is not a fall
    noise = 2.0 * math.hypot(_se(xs, ys, end * 5 / 8, end * 6 / 8), _se(xs, ys, end * 7 / 8, end))
    drop = before - last
    noise_share = (noise / last if scale is math.log else noise) / total
    flat = drop <= LATE_FALL * before + noise and share <= flat_share + noise_share
    return Knee(end, fall, share, bool(inside.sum() >= MIN_STEPS and flat and fall >= target))


def further_fall(curve: Sequence[tuple[int, float]], end: int) -> Optional[float]:
    """How much more the loss fell (relative) from the window's last eighth to the curve's last eighth."""
    xs, ys = _points(curve)
    if not len(xs) or xs.max() <= end:
        return None
    longest = float(xs.max())
    tail, here = _mean(xs, ys, longest * 7 / 8, longest), _mean(xs, ys, end * 7 / 8, end)
    return 1.0 - tail / here if tail is not None and here else None


def first_knee(curve: Sequence[tuple[int, float]], unit: int, target: float = 0.0,
               flat_share: float = FLAT_SHARE, limit: Optional[int] = None) -> Optional[Knee]:
    """The first end on the ``unit`` grid (up to ``limit``) at which the curve is flat (``at``) and stays so: the
    loss falls at most ``AFTER_FALL`` more by the whole curve's end.  None if there is none."""
    xs, _ = _points(curve)
    if not len(xs):
        return None
    top = min(int(xs.max()), limit or int(xs.max())) // unit * unit
    step = max(unit, int(math.ceil(top / MAX_ENDS / unit)) * unit)
    for end in range(step, top + 1, step):
        knee = at(curve, end, target, flat_share)
        if knee.flat and (further_fall(curve, end) or 0.0) <= AFTER_FALL:
            return knee
    return None


@dataclass(frozen=True)
class WindowChoice:
    """The window chosen on a curve: its end, whether the knee was reached, and the loss's further fall after it."""

    samples: int
    knee: Knee
    budget_bound: bool
    after_fall: Optional[float]  # relative fall from the window's end to the curve's end (None: curve ends there)


def choose(curve: Sequence[tuple[int, float]], unit: int, budget_samples: int, target: float = 0.0,
           flat_share: float = FLAT_SHARE) -> WindowChoice:
    """The window on the baseline's ``curve``: its knee, else the budget's end (``budget_samples``, on the unit
    grid, no longer than the curve); the curve may go on past the budget (the stack check's length), which tells
    whether a flat stretch stays flat and how much the loss still fell after the window.  ``target``: the least fall
    a knee needs (the gate must be able to judge)."""
    xs, ys = _points(curve)
    longest = int(xs.max()) // unit * unit if len(xs) else unit
    limit = max(unit, min(budget_samples // unit * unit, longest))
    knee = first_knee(curve, unit, target, flat_share, limit)
    end = knee.samples if knee is not None else limit
    chosen = knee if knee is not None else at(curve, limit, target, flat_share)
    return WindowChoice(end, chosen, knee is None, further_fall(curve, end))
