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

Pure functions over measurements: no processes, no clocks (``perftune.engine.race`` schedules, the sweep measures).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Optional, Sequence

from perftune.engine.stats import Decision, Noise, Policy, ProcessRun, estimate


@dataclass(frozen=True)
class Block:
    """One candidate process and the reference processes measured next to it."""

    difference: float  # log candidate - mean log neighbouring references
    neighbours: tuple[int, ...]  # positions (in ``runs``) of its 1 or 2 neighbouring reference processes
    position: int = -1  # the candidate process's position in ``runs``


def blocks(runs: Sequence[ProcessRun], candidate: Hashable, reference: Hashable) -> list[Block]:
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
            out.append(Block(value - sum(v for _, v in refs) / len(refs), tuple(i for i, _ in refs), pos))
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

