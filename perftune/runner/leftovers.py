"""What a dead sweep driver left running, killed by the next driver in its folder or by its watchdog: every process
of its trials carries the trial's token in its environment (``TOKEN_ENV``, set by ``reaper.TrialProcesses``), so
a setsid'd grandchild, a daemon or an msrun rank is found even after it left the trial's process group."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from typing import Iterator

import psutil

from perftune.runner.cgroup import kill_stale_cgroups
from perftune.runner.memcg import remove_stale

#: set in the environment of every process of a trial (inherited by its descendants): whose orphan is it
TOKEN_ENV = "PERFTUNE_TRIAL_TOKEN"


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP (in the main thread) for a clean-up; they are delivered after it."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (ValueError, OSError):
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def kill_driver_leftovers(tag: str) -> list[int]:
    """Kill what a dead sweep driver (``tag``: see ``cgroup.driver_tag``) left running: its trials' cgroups (and
    memory cgroups) and every process that carries one of its trial tokens (setsid'd grandchildren, daemons, msrun
    ranks).  Returns the pids killed."""
    if not tag:
        return []
    with signals_held():
        killed = set(kill_stale_cgroups(tag))
        victims = []
        for p in psutil.process_iter():
            if p.pid == os.getpid():
                continue
            try:
                if p.environ().get(TOKEN_ENV, "").startswith(f"{tag}-") and p.status() != psutil.STATUS_ZOMBIE:
                    victims.append(p)
                    p.send_signal(signal.SIGKILL)
            except psutil.Error:
                continue
        psutil.wait_procs(victims, timeout=5.0)
        remove_stale(tag)  # burst.memory_limit_mb's cgroup v1 memory cgroups (their processes killed with them)
    return sorted(killed | {p.pid for p in victims})
