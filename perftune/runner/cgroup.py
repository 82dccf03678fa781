"""One cgroup v2 per trial: every process the trial starts, however it leaves its session, is killed at once.

A process group misses a ``setsid`` grandchild, the subreaper misses a daemon once its parent (the sweep) is dead,
and ``PR_SET_PDEATHSIG`` covers one process.  A cgroup holds every descendant whatever it does (only root can move a
process out), and writing ``1`` to its ``cgroup.kill`` SIGKILLs all of them (Linux 5.14+), as systemd's
``KillMode=control-group`` does.  The trial's cgroup is made below the sweep's own (the ``0::`` line of
``/proc/self/cgroup``, under the cgroup2 mount), named ``perftune-<driver tag>-<n>``: the driver tag (its pid and a
random part, also written in the sweep folder's lock) lets a later sweep find and kill what a dead driver left.

Where cgroups are not writable (no cgroup2 mount, no permission, no ``cgroup.kill``), ``TrialCgroup.open`` returns
None with the reason and the runner relies on process groups, the subreaper, the per-trial token and PDEATHSIG.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Optional

PREFIX = "perftune-"
#: set (to anything) to use the fallback even where cgroups are writable
NO_CGROUP_ENV = "PERFTUNE_NO_CGROUP"
_RUN = uuid.uuid4().hex[:8]


def driver_tag() -> str:
    """This process's tag: its pid and a random part (a reused pid never matches a dead driver's tag)."""
    return f"{os.getpid()}-{_RUN}"


def mount_point(fstype: str, option: Optional[str] = None) -> Optional[Path]:
    """Where a file system of type ``fstype`` is mounted (with ``option`` among its super options: a cgroup v1
    controller's name), from ``/proc/self/mountinfo``; None where none is."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields = tail.split(" ")
        if fields[0] == fstype and (option is None or (len(fields) > 2 and option in fields[2].split(","))):
            return Path(head.split(" ")[4])
    return None


def cgroup2_mount() -> Optional[Path]:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup`` unified, ``/sys/fs/cgroup/unified`` hybrid)."""
    return mount_point("cgroup2")


def proc_cgroup(mount: Path, pid: str) -> Optional[Path]:
    """The cgroup v2 folder (under ``mount``) that ``/proc/PID/cgroup`` names on its ``0::`` line, or None where it
    has none; OSError where the file cannot be read (the process is gone)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return mount / line[3:].lstrip("/")
    return None


def own_cgroup() -> tuple[Optional[Path], str]:
    """This process's cgroup v2 folder, or None and why not."""
    mount = cgroup2_mount()
    if mount is None:
        return None, "no cgroup2 file system is mounted"
    try:
        path = proc_cgroup(mount, "self")
    except OSError as exc:
        return None, f"/proc/self/cgroup cannot be read ({exc.strerror})"
    if path is None:
        return None, "this process has no cgroup v2 (no 0:: line in /proc/self/cgroup)"
    return path, ""


def cgroup_of(pid: int) -> Optional[Path]:
    """The cgroup v2 folder of process ``pid``, or None where it is gone or has none."""
    mount = cgroup2_mount()
    try:
        return proc_cgroup(mount, str(pid)) if mount is not None else None
    except OSError:
        return None


def write_control(path: Path, text: str) -> None:
    """One write to a cgroup control file (no truncation, no buffering: the kernel reads one write)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _populated(path: Path) -> bool:
    try:
        for line in (path / "cgroup.events").read_text().splitlines():
            if line.startswith("populated "):
                return line.split()[1] != "0"
    except OSError:
        return False
    return False


def pids_in(path: Path) -> list[int]:
    """The processes a cgroup (v1 or v2) holds itself, from its ``cgroup.procs`` ([] where it cannot be read)."""
    try:
        return [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def deepest_first(path: Path) -> list[Path]:
    """A cgroup folder and every one below it, deepest first (the order they can be removed in)."""
    return sorted((Path(root) for root, _, _ in os.walk(path)), key=lambda p: len(p.parts), reverse=True)


def kill_cgroup(path: Path, timeout: float = 5.0) -> list[int]:
    """SIGKILL every process in the cgroup ``path``, wait until it is empty, remove it; returns the pids it held."""
    pids = pids_in(path)
    try:
        write_control(path / "cgroup.kill", "1")
    except OSError:
        return pids
    end = time.monotonic() + timeout
    while _populated(path) and time.monotonic() < end:
        time.sleep(0.02)
    try:
        path.rmdir()
    except OSError:
        pass
    return pids


class TrialCgroup:
    """The cgroup of one trial; ``enter`` runs in the child before ``exec`` (the child and all it starts are in)."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def open(cls, name: str) -> tuple[Optional[TrialCgroup], str]:
        """Make the trial's cgroup below this process's; (None, why) where that is not possible."""
        if os.environ.get(NO_CGROUP_ENV):
            return None, f"{NO_CGROUP_ENV} is set"
        parent, why = own_cgroup()
        if parent is None:
            return None, why
        path = parent / f"{PREFIX}{name}"
        try:
            path.mkdir()
        except OSError as exc:
            return None, f"cannot create a cgroup in {parent} ({exc.strerror or exc})"
        if not (path / "cgroup.kill").exists():
            path.rmdir()
            return None, "this kernel has no cgroup.kill (Linux 5.14+)"
        return cls(path), ""

    def enter(self) -> None:
        """In the child (pre-exec): move this process into the trial's cgroup; silent on failure (see ``holds``)."""
        try:
            write_control(self.path / "cgroup.procs", "0")
        except OSError:
            pass

    def holds(self, pid: int) -> bool:
        """Whether ``pid`` is in this cgroup (the child's move worked)."""
        return pid in pids_in(self.path)

    def contains(self, pid: int) -> Optional[bool]:
        """Whether ``pid`` is in this cgroup or one below it (None: gone); False: it left (root only can)."""
        where = cgroup_of(pid)
        if where is None:
            return None
        return where == self.path or self.path in where.parents

    def kill(self) -> list[int]:
        return kill_cgroup(self.path)


def kill_stale_cgroups(tag: str) -> list[int]:
    """Kill and remove the trial cgroups a driver with ``tag`` left beside this process's cgroup."""
    parent, _ = own_cgroup()
    if parent is None or not tag:
        return []
    killed: list[int] = []
    try:
        stale = [p for p in parent.iterdir() if p.name.startswith(f"{PREFIX}{tag}-") and p.is_dir()]
    except OSError:
        return []
    for path in stale:
        killed += kill_cgroup(path)
    return killed


def containment_text(cgroup: Optional[TrialCgroup], why_not: str) -> str:
    """What holds a trial's processes, for the records and the progress output."""
    if cgroup is not None:
        return f"cgroup v2 per trial ({cgroup.path.parent}; killed whole with cgroup.kill)"
    return f"process groups, subreaper, per-trial token and PDEATHSIG (no cgroup: {why_not})"


def remove_empty_dead() -> None:
    """Remove empty trial cgroups of drivers that are gone (a driver killed while a Ray worker or a test held
    one): only empty ones, which ``rmdir`` alone can remove; a populated one waits for its folder's next sweep."""
    parent, _ = own_cgroup()
    try:
        names = [p.name for p in parent.iterdir()] if parent is not None else []
    except OSError:
        return
    for name in names:
        pid = name[len(PREFIX):].split("-", 1)[0]
        if name.startswith(PREFIX) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            try:
                (parent / name).rmdir()
            except OSError:
                pass


def containment_probe() -> str:
    """What will hold the trials' processes here: a probe cgroup is made and removed at once (and empty ones of
    drivers that are gone are removed)."""
    probe, why_not = TrialCgroup.open(f"{driver_tag()}-probe")
    if probe is not None:
        probe.kill()
        remove_empty_dead()
    return containment_text(probe, why_not)
