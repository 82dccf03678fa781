"""The sweep's sequential comparisons: faster, slower, equivalent, or (out of budget) undecided.

Why this shape (Chromium Pinpoint's "different / same / unknown", racing in irace):
- Candidate processes are measured between reference processes (R C R C R ...), so each candidate process is a
  block with the reference processes on either side, and slow drift of the machine cancels within the block:
  ``d = log C - mean(log R_left, log R_right)``.  A block's variance is ``sigma^2 (1 + 1/k)`` for ``k`` (1 or 2)
  neighbouring reference processes, ``sigma`` the sweep's pooled process noise (``stats.Noise``).
- A comparison may be looked at after every added process (up to ``max_runs`` per candidate), so each look uses
  Pocock's constant boundary for that many looks (``stats.per_look_alpha``): adding processes while a comparison is
  open does not inflate false alarms.  The interval and the outcome are ``stats.estimate``'s, as for every other
  comparison.
- Across the sweep's one-at-a-time comparisons, Benjamini-Hochberg keeps the false discovery rate at
  ``1 - confidence`` (``stats.benjamini_hochberg``).
- A paired comparison that the rest of its budget is unlikely to decide stops early (``futile``): a non-binding futility
  rule (as in group-sequential trials), so it never adds a false alarm; it only gives up the processes that would
  have ended ``undecided`` anyway (in the quickstart, MindRecord against the PyNative baseline: three paired
  processes and "about 13 runs would").

Pure functions over measurements: no processes, no clocks (``perftune.engine.race`` schedules, the sweep measures).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Optional, Sequence

from perftune.engine.stats import Decision, Noise, Policy, ProcessRun, estimate, t_quantile

#: how far, in predictive standard deviations of its movement over the rest of the budget, an open comparison's
#: estimate would have to move to be decided before ``futile`` stops it
FUTILITY_Z = 2.0


@dataclass(frozen=True)
class CandidateBlock:
    """One candidate process and the reference processes measured next to it."""

    difference: float  # log candidate - mean log neighbouring references
    neighbours: tuple[int, ...]  # positions (in ``runs``) of its 1 or 2 neighbouring reference processes
    position: int = -1  # the candidate process's position in ``runs``


def blocks(runs: Sequence[ProcessRun], candidate: Hashable, reference: Hashable) -> list[CandidateBlock]:
    """Each candidate process with the nearest reference process before and after it (in measurement order) on the
    same machine, so that drift in time and the speed of a node both cancel; a candidate process with no reference
    process on its node gives no block."""
    seq = [(i, r.config, r.log_mean, r.node) for i, r in enumerate(runs) if r.config in (candidate, reference)]
    out = []
    for k, (pos, config, value, node) in enumerate(seq):
        if config != candidate:
            continue
        left = next(((i, v) for i, c, v, n in reversed(seq[:k]) if c == reference and n == node), None)
        right = next(((i, v) for i, c, v, n in seq[k + 1:] if c == reference and n == node), None)
        refs = [x for x in (left, right) if x is not None]
        if refs:
            out.append(CandidateBlock(value - sum(v for _, v in refs) / len(refs), tuple(i for i, _ in refs), pos))
    return out


def decide(runs: Sequence[ProcessRun], candidate: Hashable, reference: Hashable, noise: Noise,
           policy: Policy = Policy(), looks: Optional[int] = None) -> Optional[Decision]:
    """The comparison of ``candidate`` with ``reference`` as it stands; None when no block can be formed yet.

    ``looks`` (default ``policy.max_runs``) is how many looks the boundary is planned for: 1 for a comparison that
    is looked at once (an informational one).
    """
    bl = blocks(runs, candidate, reference)
    if not bl:
        return None
    r = len(bl)
    diff = math.fsum(b.difference for b in bl) / r
    se = math.sqrt(noise.var * sum(1.0 + 1.0 / len(b.neighbours) for b in bl)) / r
    neighbours = sorted({i for b in bl for i in b.neighbours})
    return estimate(diff, se, noise, policy, policy.max_runs if looks is None else looks,
                    [runs[b.position] for b in bl], [runs[i] for i in neighbours])


def futile(d: Decision, budget: int) -> bool:
    """Whether the open comparison ``d`` (``d.blocks`` of its ``budget`` processes measured, at least two) is unlikely
    to be decided by the rest of its budget.

    The interval at the budget's end is projected from this one (its standard error shrinking as
    ``1 / sqrt(processes)``); until then the estimate moves with predictive sd ``se sqrt(1 - n / N)``.  Deciding
    needs the estimate beyond the projected boundary (faster, slower) or inside the equivalence margin less the
    projected half-width (equivalent); futile when both are more than ``FUTILITY_Z`` such sds away.  The normal
    quantile stands in for the end's t (more degrees of freedom then), which makes the rule stop less, not more.

    Paired comparisons only: their noise is their own blocks' (10 or more degrees of freedom after two processes),
    so its projection holds.  A fresh-process comparison's noise is the sweep's pooled estimate, still weighted by
    its prior early on and moved by every other process: on scripted measurements a 4.5% change stopped after two
    runs would have been decided after four, as the pooled noise fell."""
    if d.design != "paired" or d.outcome != "open" or d.blocks < 2 or budget <= d.blocks:
        return False
    alpha = 1.0 - d.level
    se = d.resolution / t_quantile(1.0 - alpha / 2.0, d.df)
    f = d.blocks / budget
    z = t_quantile(1.0 - alpha / 2.0, 1e9)
    boundary = z * se * math.sqrt(f)  # the projected half-width at the budget's end
    estimate_ = abs(math.log(d.ratio))
    to_differ = boundary - estimate_
    room = math.log1p(d.equivalence) - boundary
    to_equal = estimate_ - room if room > 0 else math.inf
    return min(to_differ, to_equal) > FUTILITY_Z * se * math.sqrt(1.0 - f)
