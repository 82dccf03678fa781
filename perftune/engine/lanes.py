"""A race's rounds measured side by side: one lane per node of a cluster, each lane a thread that waits on its node.

The runner decides where a lane runs (``ParallelRunner``: ``perftune.runner.ray_executor.RayExecutor`` pins lane
``j`` to node ``j``); this module only books each process's replicate in a fixed order before a round starts (so the
trial ids, and a resumed sweep's reuse of them, do not depend on which lane finished first), runs the lanes, and
hands the finished processes back in lane order.  Ctrl-C (which only the main thread receives) stops every lane: the
runner cancels what runs on the nodes, no lane starts another process, and the interrupt goes on up.
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable, Hashable, Optional, Protocol, Sequence, TypeVar, runtime_checkable

from perftune.engine.race import LaneOutcome, Lanes
from perftune.io.records import TrialResult, TrialSpec

Item = TypeVar("Item")
Done = TypeVar("Done")


@runtime_checkable
class ParallelRunner(Protocol):
    """A trial runner with ``lanes`` lanes that can run at once (one per node)."""

    lanes: int

    def __call__(self, spec: TrialSpec, trial_dir: Path, lane: Optional[int] = None) -> TrialResult: ...
    def lane_node(self, lane: int) -> Optional[str]: ...  # the node lane ``lane`` runs on (``ProcessRun.node``)
    def stop(self) -> None: ...  # Ctrl-C: cancel every running trial, start none


class LaneSweep(Protocol):
    """What a sweep offers the lanes (``perftune.engine.processes.Processes``)."""

    def book(self, key: Hashable) -> int: ...  # the next replicate of ``key``, reserved
    def measure_booked(self, key: Hashable, replicate: int, lane: int) -> Any: ...  # any thread
    def use(self, key: Hashable, trial: Any) -> LaneOutcome: ...  # main thread, in lane order


def run_lanes(lanes: Sequence[Sequence[Item]], work: Callable[[int, Item], Done],
              stop: Callable[[], None]) -> list[list[Done]]:
    """``work(lane, item)`` for each lane's items in order, the lanes in threads at once; every result, per lane.

    An exception in one lane (or Ctrl-C in the main thread) stops the others (``stop``, and no lane starts another
    item) and is raised once every lane has ended.
    """
    halt = threading.Event()
    results: list[list[Done]] = [[] for _ in lanes]

    def lane_work(j: int) -> None:
        for item in lanes[j]:
            if halt.is_set():
                return
            results[j].append(work(j, item))

    pool = ThreadPoolExecutor(max_workers=max(1, len(lanes)), thread_name_prefix="perftune-lane")
    futures: list[Future] = [pool.submit(lane_work, j) for j, items in enumerate(lanes) if items]
    try:
        while True:  # short waits: the main thread stays able to take Ctrl-C
            done, running = wait(futures, timeout=0.5, return_when=FIRST_EXCEPTION)
            failed = [f.exception() for f in done if f.exception() is not None]
            if failed:
                raise failed[0]
            if not running:
                break
    except BaseException:  # Ctrl-C here, or a lane's exception: the other lanes stop before it goes on up
        halt.set()
        stop()
        wait(futures)
        raise
    finally:
        pool.shutdown(wait=True)
    return results


def lanes_of(sweep: LaneSweep, runner: ParallelRunner) -> Lanes:
    """The race's ``Lanes`` for ``sweep`` on ``runner``'s lanes."""

    def run_round(sequences: list[list[Hashable]]) -> list[list[LaneOutcome]]:
        booked = [[(key, sweep.book(key)) for key in seq] for seq in sequences]  # in a fixed order, before any runs
        trials = run_lanes(booked, lambda lane, item: sweep.measure_booked(item[0], item[1], lane), runner.stop)
        return [[sweep.use(key, trial) for (key, _), trial in zip(items, done)]
                for items, done in zip(booked, trials)]

    return Lanes(runner.lanes, run_round, runner.lane_node)
