"""Nothing a trial started outlives it, and "out of memory" is said only with evidence.

A burst's process group does not hold everything: a grandchild that calls ``setsid`` leaves it, and a child whose
parent died is re-parented away from us.  The sweep process therefore marks itself a *child subreaper* (Linux
``PR_SET_CHILD_SUBREAPER``): every orphaned descendant of a trial is re-parented to the sweep instead of init, so
after the trial the sweep sees it among its own children and kills it.  ``TrialProcesses`` remembers which children
existed before the trial, so only the trial's own leftovers are touched.  Where cgroups are writable, each trial
also has a cgroup of its own (``cgroup.py``) that holds every descendant, killed whole first; the rest is the fallback.

A root script can leave the cgroup (write its pid into the root cgroup's procs file) and clear the trial token from
its daemons' environment; the daemons are still re-parented to the sweep while it lives.  So every descendant the
sweep inherited during the trial is killed and reaped at its end, token or not (only a process carrying another
running trial's token, or another trial's launched process, is left to that trial), and one found outside the
trial's cgroup, or without its token, is named in ``TrialProcesses.escaped``.  Once the sweep is SIGKILLed such a
daemon goes to init, beyond any subreaper: the limit stated in perftune/README.md, "Faults and hostile folders".

The cgroup's ``memory.events`` counts the kernel's out-of-memory kills (``oom_kill``): a burst that died from
SIGKILL while that counter grew was most likely killed for memory; one that died from SIGKILL without it was
killed by someone else, which is recorded as such and measured again on a resume.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import psutil

from perftune.errors import UserError
from perftune.io.files import ESCAPED
from perftune.runner.cgroup import TrialCgroup, containment_text, driver_tag, own_cgroup
from perftune.runner.leftovers import TOKEN_ENV, signals_held
from perftune.runner.memcg import MemoryCgroup
from perftune.runner.watchdog import ensure_watchdog, track, untrack

PR_SET_CHILD_SUBREAPER = 36
#: held while a trial's process starts: until its ``exec`` the child has the driver's environment (no token), so a
#: look for orphans then would take it for one
_launch = threading.Lock()
#: the trials running in this process (lanes run several): token -> trial
_live: dict[str, TrialProcesses] = {}


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

    def __init__(self, memory_limit_mb: Optional[float] = None) -> None:
        become_subreaper()
        ensure_watchdog(driver_tag())  # kills what is left if the driver dies (SIGKILL included): watchdog.py
        self.token = f"{driver_tag()}-{uuid.uuid4().hex[:8]}"
        self.pid: Optional[int] = None
        self.before = {p.pid for p in _children()}
        self.seen: set[psutil.Process] = set()
        self.cgroup, self.why_not = TrialCgroup.open(self.token)
        self.memory: Optional[MemoryCgroup] = None  # ``burst.memory_limit_mb``'s cgroup (memcg.py)
        if memory_limit_mb is not None:
            try:
                self.memory = MemoryCgroup.open(self.token, memory_limit_mb, self.cgroup and self.cgroup.path)
            except BaseException:
                if self.cgroup is not None:
                    self.cgroup.kill()
                raise
        #: the memory cgroup's out-of-memory kills and what the kernel recorded, read before it is removed
        self.memory_ooms: Optional[int] = None
        self.memory_evidence = ""
        self.launched: set[int] = set()
        #: the processes of this trial found outside its containment (its cgroup, its token) at its end, in words
        self.escaped: list[str] = []
        _live[self.token] = self

    @contextmanager
    def launching(self) -> Iterator[None]:
        """Wrap the start of the trial's process (``Popen`` and ``started``): no look for orphans meanwhile."""
        with _launch:
            yield

    def enter(self) -> None:
        """In the launched child, before ``exec``: join the trial's cgroup (nothing where there is none)."""
        if self.memory is not None:
            self.memory.enter()
        if self.cgroup is not None:
            self.cgroup.enter()

    def started(self, pid: int) -> None:
        """After the launch: where the child could not join the cgroup, say so and rely on the fallback."""
        self.pid = pid
        self.launched.add(pid)
        track(pid)
        if self.cgroup is not None and not self.cgroup.holds(pid):
            self.cgroup.kill()
            self.cgroup, self.why_not = None, "the launched process could not join its cgroup"
        if self.memory is not None and not self.memory.holds(pid):  # never a trial run past an unenforced limit
            os.killpg(pid, signal.SIGKILL)
            self.memory.remove()
            raise UserError("burst.memory_limit_mb: the trial's process could not join its memory cgroup "
                            f"{self.memory.path}; perftune refuses to run trials it cannot limit")

    def oom_count(self) -> Optional[int]:
        """Out-of-memory kills so far: in the trial's memory cgroup where it has one (counted from 0, kept after
        the trial's end), else in the sweep's own cgroup (None: not readable); a difference over the trial is
        the evidence ``process.classify_exit`` asks for."""
        if self.memory is None:
            return oom_kills()
        return self.memory_ooms if self.memory_ooms is not None else self.memory.oom_kills()

    @property
    def containment(self) -> str:
        text = containment_text(self.cgroup, self.why_not)
        if self.memory is not None:
            text += f"; memory limited to {self.memory.limit_bytes / 2**20:g} MB (cgroup v{self.memory.version})"
        if self.escaped:
            text += (f"; {len(self.escaped)} process(es) {ESCAPED}, killed at the trial's end as the sweep's "
                     f"orphans: {'; '.join(self.escaped[:4])}{' ...' if len(self.escaped) > 4 else ''}")
        return text

    def env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with this trial's token: pass it to the launched process."""
        return {**env, TOKEN_ENV: self.token}

    def watch(self, pid: int) -> None:
        """Remember the current descendants of ``pid`` (call before killing it: they may leave its group)."""
        try:
            self.seen.update(psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            pass

    def kill_leftovers(self, timeout: float = 5.0) -> list[int]:
        """SIGKILL every remembered descendant and every process the sweep inherited during this trial; reap them.

        Returns the PIDs that were still alive (for tests and logs).  Ctrl-C, SIGTERM and SIGHUP wait until it is
        done (they are raised afterwards): a clean-up cut short would leave processes behind."""
        with signals_held():
            victims = self._victims(set(self.seen))  # found first: after the cgroup's kill an orphan's environment
            self.escaped += self._escapes(victims)  # is gone
            in_cgroup = self.cgroup.kill() if self.cgroup is not None else []
            if self.memory is not None and self.memory_ooms is None:
                self.memory_ooms, self.memory_evidence = self.memory.oom_kills(), self.memory.evidence()
                self.memory.remove()
            killed = set(in_cgroup) | set(_kill_and_reap(victims, timeout))
            for _ in range(3):  # a tree in flux (a parent exiting while looked at) hides its child for a moment
                again = _kill_and_reap(self._victims(set()), timeout)
                if not again:
                    break
                killed.update(again)
            if self.pid is not None:
                untrack(self.pid)
            _live.pop(self.token, None)
            return sorted(killed)

    def _victims(self, victims: set[psutil.Process]) -> set[psutil.Process]:
        """``victims`` and every descendant the sweep inherited since this trial began (with their descendants),
        but another running trial's: its launched process, or a process carrying its token."""
        others = {token for token in _live if token != self.token}
        theirs = {pid for trial in list(_live.values()) if trial is not self for pid in trial.launched}
        with _launch:
            for child in _children():
                if child.pid not in self.before and child.pid not in theirs:
                    victims.update(p for p in _tree(child) if token_of(p) not in others)
        return {p for p in victims if p.pid != os.getpid()}

    def _escapes(self, victims: set[psutil.Process]) -> list[str]:
        """The live ``victims`` outside the trial's cgroup (a root script can leave it) or without its token."""
        out = []
        for p in sorted(victims, key=lambda p: p.pid):
            token = token_of(p)
            inside = self.cgroup.contains(p.pid) if self.cgroup is not None else True
            if token is None or inside is None:  # gone or a zombie: nothing left to contain
                continue
            out_of_cgroup = inside is False
            what = [w for w, bad in (("left the trial's cgroup", out_of_cgroup),  # (the token is the fallback's)
                                     ("carried no trial token", token != self.token and (
                                         out_of_cgroup or self.cgroup is None))) if bad]
            if what:
                try:
                    name = " ".join(p.cmdline())[:120] or p.name()
                except psutil.Error:
                    name = "?"
                out.append(f"pid {p.pid} ({name}) {' and '.join(what)}")
        return out


def token_of(p: psutil.Process) -> Optional[str]:
    """The trial token in ``p``'s environment: "" where it has none, None where it cannot be read (gone, zombie)."""
    try:
        return p.environ().get(TOKEN_ENV, "")
    except psutil.Error:
        return None


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
