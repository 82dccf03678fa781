"""How much of the machine other processes used while a timed window ran: the contention guard.

A window measured while something else competed for the cores is slower for reasons that have nothing to do with the
knob under test.  The kernel's ``/proc/stat`` says how busy all CPUs were; the burst's own process tree (its threads
and the dataset's worker processes, from psutil) says how much of that was ours; the rest is others' work.  Steal
time (a hypervisor giving our virtual CPUs to another guest) is counted separately, as the kernel reports it.
Readings that the platform does not offer (no ``/proc``) leave the fields empty rather than guess.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Optional

import psutil

#: a window in which other processes used more than this share of the whole machine (all cores) is flagged
CONTENDED_SHARE = 0.25
_BUSY_FIELDS = (0, 1, 2, 5, 6)  # user nice system irq softirq (steal is field 7, counted on its own)


def _proc_stat() -> Optional[tuple[float, float]]:
    """(busy, steal) CPU seconds summed over all CPUs since boot, or None without /proc/stat."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()[1:]
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    values = [int(v) for v in fields]
    busy = sum(values[i] for i in _BUSY_FIELDS if i < len(values))
    steal = values[7] if len(values) > 7 else 0
    return busy / ticks, steal / ticks


def _own_cpu_s() -> float:
    """CPU seconds of this process and every live descendant (dataset workers)."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            continue
    return total


@dataclass(frozen=True)
class Reading:
    wall_s: float
    busy_s: Optional[float]
    steal_s: Optional[float]
    own_s: float


def read() -> Reading:
    stat = _proc_stat()
    return Reading(time.perf_counter(), stat[0] if stat else None, stat[1] if stat else None, _own_cpu_s())


@dataclass(frozen=True)
class Contention:
    others_cpu_share: Optional[float]  # others' CPU time / (wall time x cores): 0 idle machine, 1 all cores busy
    steal_share: Optional[float]
    load_avg_1m: Optional[float]
    contended: bool


def between(start: Reading, end: Reading) -> Contention:
    wall = max(end.wall_s - start.wall_s, 1e-9)
    cores = psutil.cpu_count() or 1
    others = steal = None
    if start.busy_s is not None and end.busy_s is not None:
        others = max(0.0, (end.busy_s - start.busy_s) - (end.own_s - start.own_s)) / (wall * cores)
        steal = max(0.0, end.steal_s - start.steal_s) / (wall * cores)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    contended = others is not None and others > CONTENDED_SHARE
    return Contention(others, steal, load, contended)
