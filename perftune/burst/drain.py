"""When a drain of prefetched batches ends: the warm-up's, and every arm switch of a paired process.

Why a drain at all: during compile, validation or the other arm's windows, a pipeline fills its queue; steps fed
from that queue are faster than the pipeline's real rate, so a timed window right after would flatter a data-bound
configuration.  The drain runs untimed steps until the queue is spent (``drain_done``).
"""

from __future__ import annotations

from perftune.io.records import StepRecord

#: the drain's time bound (``burst.drain_s`` overrides it): a model slower than its pipeline keeps its queue full and
#: its steps never wait, so a drain by step count alone would run long for nothing (measured:
#: experiments/benchmarks/README.md, "The burst's constants")
DRAIN_S = 5.0
#: a step whose wait for its batch is longer than this (ms) and this share of the step found the queue empty; two
#: such steps in a row (one can be a scheduler's hiccup on a busy machine): from there on the steps show the
#: pipeline's real rate, and the drain has done its job
DRY_WAIT_MS = 0.5
DRY_WAIT_SHARE = 0.1
DRY_STEPS = 2
#: a drain takes up to this many times ``prefetch_size + 2`` steps, unless the queue runs dry first: the pipeline
#: holds more than its prefetch (each operator's queue, the iterator's), and a drain of 1x left the next window fast.
#: The cap only bounds a pipeline that never runs dry, and then its queue changes nothing: an arm of a paired process
#: whose capped drain never found its queue empty drains one queue's worth at its later switches
#: (``arms.Arms.drained_once``)
DRAIN_CAP_FACTOR = 4


def drain_done(steps: list[StepRecord], cap: int, bound_s: float) -> bool:
    """The drain ends at the first of: steps that waited for their batch (the queue ran dry: from there on the
    steps wait as the pipeline's real rate makes them), ``cap`` steps (``DRAIN_CAP_FACTOR x (prefetch_size + 2)``:
    the queue is spent), or ``bound_s`` seconds of steps (a model that slow keeps its queue full anyway)."""
    if len(steps) >= cap or not steps:
        return len(steps) >= cap
    last = steps[-DRY_STEPS:]
    if len(last) == DRY_STEPS and all(waited(r) for r in last):
        return True
    return sum(r.step_ms for r in steps) >= bound_s * 1e3


def waited(record: StepRecord) -> bool:
    """The step found its queue empty (waited for its batch longer than a scheduler's hiccup)."""
    return record.data_wait_ms > max(DRY_WAIT_MS, DRY_WAIT_SHARE * record.step_ms)


def queued_batches() -> int:
    """How many batches the pipeline may hold ready: its prefetch size, as configured when the drain begins (the
    plan's ``prefetch_size``, or what a script set)."""
    import mindspore.dataset as ds

    return int(ds.config.get_prefetch_size())
