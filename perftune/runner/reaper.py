"""Nothing a trial started outlives it, and "out of memory" is said only with evidence.

A burst's process group does not hold everything: a grandchild that calls ``setsid`` leaves it, and a child whose
parent died is re-parented away from us.  The sweep process therefore marks itself a *child subreaper* (Linux
``PR_SET_CHILD_SUBREAPER``): every orphaned descendant of a trial is re-parented to the sweep instead of init, so
after the trial the sweep sees it among its own children and kills it.  ``TrialProcesses`` remembers which children
existed before the trial, so only the trial's own leftovers are touched.  Where cgroups are writable, each trial
also has a cgroup of its own (``cgroup.py``) that holds every descendant, killed whole first; the rest is the fallback.

The cgroup's ``memory.events`` counts the kernel's out-of-memory kills (``oom_kill``): a burst that died from
SIGKILL while that counter grew was most likely killed for memory; one that died from SIGKILL without it was
killed by someone else, which is recorded as such and measured again on a resume.
"""

from __future__ import annotations

import ctypes
import os
import signal
import uuid
from pathlib import Path
from typing import Optional

import psutil

from perftune.runner.cgroup import TrialCgroup, containment_text, driver_tag, own_cgroup
from perftune.runner.leftovers import TOKEN_ENV, signals_held
from perftune.runner.watchdog import ensure_watchdog, track, untrack

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Ask Linux to re-parent this process's orphaned descendants to it; False where that is not possible."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children() -> list[psutil.Process]:
    try:
        return psutil.Process().children()
    except psutil.Error:
        return []


def _tree(p: psutil.Process) -> list[psutil.Process]:
    try:
        return [p] + p.children(recursive=True)
    except psutil.Error:
        return [p]


class TrialProcesses:
    """The processes of one trial: its cgroup where cgroups are writable (``cgroup.py``), its process tree while it
    runs, and the orphans it leaves to the sweep.

    Every process of the trial inherits ``TOKEN_ENV`` = this trial's token from the launcher's environment, so an
    orphan re-parented to the sweep is recognised as this trial's even where several trials run at once in one
    process (the two-node loopback test): another trial's launcher is never touched."""

    def __init__(self) -> None:
        become_subreaper()
        ensure_watchdog(driver_tag())  # kills what is left if the driver dies (SIGKILL included): watchdog.py
        self.token = f"{driver_tag()}-{uuid.uuid4().hex[:8]}"
        self.pid: Optional[int] = None
        self.before = {p.pid for p in _children()}
        self.seen: set[psutil.Process] = set()
        self.cgroup, self.why_not = TrialCgroup.open(self.token)

    def enter(self) -> None:
        """In the launched child, before ``exec``: join the trial's cgroup (nothing where there is none)."""
        if self.cgroup is not None:
            self.cgroup.enter()

    def started(self, pid: int) -> None:
        """After the launch: where the child could not join the cgroup, say so and rely on the fallback."""
        self.pid = pid
        track(pid)
        if self.cgroup is not None and not self.cgroup.holds(pid):
            self.cgroup.kill()
            self.cgroup, self.why_not = None, "the launched process could not join its cgroup"

    @property
    def containment(self) -> str:
        return containment_text(self.cgroup, self.why_not)

    def env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with this trial's token: pass it to the launched process."""
        return {**env, TOKEN_ENV: self.token}

    def watch(self, pid: int) -> None:
        """Remember the current descendants of ``pid`` (call before killing it: they may leave its group)."""
        try:
            self.seen.update(psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            pass

    def _ours(self, p: psutil.Process) -> bool:
        try:
            return p.environ().get(TOKEN_ENV) == self.token
        except psutil.Error:
            return False

    def kill_leftovers(self, timeout: float = 5.0) -> list[int]:
        """SIGKILL every remembered descendant and every orphan of this trial re-parented to us; reap them.

        Returns the PIDs that were still alive (for tests and logs).  Ctrl-C, SIGTERM and SIGHUP wait until it is
        done (they are raised afterwards): a clean-up cut short would leave processes behind."""
        with signals_held():
            victims = self._victims(set(self.seen))  # found first: after the cgroup's kill an orphan's environment
            in_cgroup = self.cgroup.kill() if self.cgroup is not None else []  # is gone
            killed = set(in_cgroup) | set(_kill_and_reap(victims, timeout))
            for _ in range(3):  # a tree in flux (a parent exiting while looked at) hides its child for a moment
                again = _kill_and_reap(self._victims(set()), timeout)
                if not again:
                    break
                killed.update(again)
            if self.pid is not None:
                untrack(self.pid)
            return sorted(killed)

    def _victims(self, victims: set[psutil.Process]) -> set[psutil.Process]:
        """``victims`` and every process of this trial re-parented to us (with their descendants)."""
        for child in _children():
            if child.pid not in self.before:
                victims.update(p for p in _tree(child) if self._ours(p))
        return {p for p in victims if p.pid != os.getpid()}


def _kill_and_reap(victims: set[psutil.Process], timeout: float) -> list[int]:
    killed = []
    for p in victims:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                killed.append(p.pid)
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    psutil.wait_procs(list(victims), timeout=timeout)  # reaps those that are our children (no zombies left)
    return killed


def _cgroup_events() -> Optional[Path]:
    """Where the kernel counts this process's out-of-memory kills: ``memory.events`` of its cgroup v2 (found where
    cgroup2 is really mounted: ``/sys/fs/cgroup/unified`` in a hybrid layout), else ``memory.oom_control`` of its v1
    memory cgroup (a hybrid layout keeps the memory controller in v1)."""
    own, _ = own_cgroup()
    if own is not None and (own / "memory.events").is_file():
        return own / "memory.events"
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and "memory" in parts[1].split(","):  # cgroup v1
            path = Path("/sys/fs/cgroup/memory") / parts[2].lstrip("/") / "memory.oom_control"
            return path if path.is_file() else None
    return None


def oom_kills() -> Optional[int]:
    """The kernel's out-of-memory kills counted in this process's cgroup so far; None where not readable."""
    path = _cgroup_events()
    if path is None:
        return None
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def killed_by_signal(returncode: int) -> Optional[str]:
    """The signal's name where the exit code says the process died from one (negative, or a shell's 128+n)."""
    number = -returncode if returncode < 0 else (returncode - 128 if returncode in (137, 143) else 0)
    if number <= 0:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
