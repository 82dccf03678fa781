"""How many timed windows a configuration's repeat process runs, chosen from what its processes cost and how their
figures vary, instead of the plan's fixed ``burst.repeats`` in every process: a process's fixed cost and its
windows' spread decide how many windows are worth their time.

Kalibera and Jones ("Rigorous benchmarking in reasonable time", ISMM 2013, section 4): with two levels of
repetition, windows within a process and processes, the number of windows per process that gives the most
precision per second is ``sqrt((c_process / c_window) * (S2_window / S2_process))``: ``c_process`` what a process
costs besides its windows (start, import, build, compile, warm-up, exit), ``c_window`` one window, ``S2_window`` the
variance of log throughput between windows of one process, ``S2_process`` what varies between processes once the
windows' own noise is taken out of their means.  A cheap process or a large between-process variance asks for more
processes; a costly process or noisy windows for more windows in each.

Measured from the configuration's own processes so far (its first one at least: ``c`` and ``S2_window``) and the
sweep's pooled between-process variance (``stats.Noise``, prior included, for ``S2_process``).  The first process
keeps the plan's ``repeats``; paired processes have their own blocks.
"""

from __future__ import annotations

import math
import statistics
from typing import Optional, Sequence

from perftune.engine.stats import Noise
from perftune.io.plan import Plan, ScriptWorkload
from perftune.io.records import TrialResult
from perftune.io.sweep_records import WindowCount

#: bounds on the chosen count: two windows show a process's own spread; 40 caps one process's share of a budget
MIN_WINDOWS = 2
MAX_WINDOWS = 40
#: the smallest between-process sd credited: below it the formula's windows would grow without bound
PROCESS_SD_FLOOR = 0.005


def window_variance(results: Sequence[TrialResult]) -> Optional[float]:
    """The pooled within-process variance of log window throughput (None below two windows in any process)."""
    ss, df = 0.0, 0
    for r in results:
        logs = [math.log(w.samples_per_s) for w in r.windows if w.samples_per_s > 0]
        if len(logs) > 1:
            mean = math.fsum(logs) / len(logs)
            ss += math.fsum((v - mean) ** 2 for v in logs)
            df += len(logs) - 1
    return ss / df if df else None


def choose(results: Sequence[TrialResult], noise: Noise, default: int) -> Optional[WindowCount]:
    """The windows for the configuration's next repeat process from its processes so far (``results``, ok ones with
    windows and a wall time); None (the plan's ``default``) where they do not tell."""
    usable = [r for r in results if r.status == "ok" and r.windows and r.wall_s]
    var_w = window_variance(usable)
    if not usable or var_w is None:
        return None
    timed = [sum(w.total_ms for w in r.windows) / 1e3 for r in usable]
    window_s = statistics.median(t / len(r.windows) for t, r in zip(timed, usable))
    process_s = statistics.median(max(0.0, r.wall_s - t) for t, r in zip(timed, usable))
    per_process = statistics.mean(len(r.windows) for r in usable)
    var_p = max(noise.var - var_w / per_process, PROCESS_SD_FLOOR**2)
    if window_s <= 0:
        return None
    best = math.sqrt(process_s / window_s * var_w / var_p)
    # and no more windows than take the process's fixed cost: more leans on a between-process variance at its
    # floor, which no A/A here reaches (+-5% in the quickstart), while a window spread that is structure, not noise
    # (4-step windows of an 8-step epoch, every other one holding the epoch's end), asked for 40 windows of 2.8 s
    # in a process of 14 s fixed cost.  The quickstart's repeats choose 2-6, under caps of 7-49
    most = min(MAX_WINDOWS, max(MIN_WINDOWS, math.floor(process_s / window_s)))
    windows = int(min(most, max(MIN_WINDOWS, round(best))))
    return WindowCount(windows=windows, optimum=best, default=default, process_s=process_s, window_s=window_s,
                        window_sd=math.sqrt(var_w), process_sd=math.sqrt(var_p))


def for_repeat(plan: Plan, replicate: int, results: Sequence[TrialResult], noise: Noise) -> Optional[WindowCount]:
    """The windows of process ``replicate`` of a configuration: chosen for a repeat (``choose``), None (the plan's
    ``repeats``) for a first process, under ``burst.windows: fixed``, or for a script (it trains as long as it does:
    more windows than the first process had could outlast its epochs)."""
    if replicate == 0 or plan.burst.windows == "fixed" or isinstance(plan.workload, ScriptWorkload):
        return None
    return choose(results, noise, plan.burst.repeats)
