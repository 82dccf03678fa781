"""``burst.memory_limit_mb``: every trial process runs under a memory limit the kernel enforces, in a memory cgroup.

On CPU the limit stands in for a device's memory: a configuration that does not fit is killed by the kernel's
out-of-memory killer, and the cgroup's own counter (cgroup v1 ``memory.oom_control`` ``oom_kill``, v2
``memory.events`` ``oom_kill``) is the evidence that makes the trial "oom" rather than "failed".  Two layouts:

- cgroup v2 with the memory controller enabled below this process's cgroup (its subtree_control file names
  ``memory``): the trial's own cgroup v2 (``cgroup.TrialCgroup``) gets ``memory.max`` (and ``memory.swap.max`` 0);
- cgroup v1 (a hybrid layout, where ``/proc/self/cgroup`` has a ``memory:`` line): a memory cgroup of its own per
  trial below this process's, ``perftune-<trial token>`` (so a later sweep finds what a dead driver left by its
  tag), with ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``: no swapping past the limit).

Nowhere else: where neither can be used the plan is refused (``memory_probe``), never run unenforced.  A watchdog
polling the processes' RSS was the alternative, and was not taken: a batch's allocation jumps past the limit between
two polls, RSS is not what the kernel charges (page cache, shared pages), and a search for the largest batch that
fits reads the status, so "oom" must be the kernel's verdict, not a sampled guess.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Optional

from perftune.errors import UserError
from perftune.runner.cgroup import PREFIX, deepest_first, driver_tag, mount_point, own_cgroup, pids_in, write_control

V1_ROOT = Path("/sys/fs/cgroup/memory")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _field(text: str, key: str) -> int:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def v1_mount() -> Path:
    """Where the cgroup v1 memory controller is mounted (``/sys/fs/cgroup/memory`` unless mountinfo says other)."""
    return mount_point("cgroup", "memory") or V1_ROOT


def memory_parent() -> tuple[Optional[Path], int, str]:
    """Where trial memory cgroups go: (folder, cgroup version, "") or (None, 0, why none can be used)."""
    own, why_v2 = own_cgroup()
    if own is not None and "memory" in _read(own / "cgroup.subtree_control").split():
        return own, 2, ""
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "memory" in parts[1].split(","):
            folder = v1_mount() / parts[2].lstrip("/")
            if (folder / "memory.limit_in_bytes").is_file():
                return folder, 1, ""
            return None, 0, f"the cgroup v1 memory controller's folder {folder} is not there"
    why = why_v2 or f"the memory controller is not enabled below {own} (cgroup.subtree_control)"
    return None, 0, f"no memory cgroup can be used here: no cgroup v1 memory controller, and cgroup v2: {why}"


class MemoryCgroup:
    """The memory cgroup of one trial (``open``; ``enter`` in the child before ``exec``, ``oom_kills`` and
    ``evidence`` after it, ``remove`` at its end)."""

    def __init__(self, path: Path, version: int, limit_bytes: int, owned: bool):
        self.path, self.version, self.limit_bytes, self.owned = path, version, limit_bytes, owned

    @classmethod
    def open(cls, name: str, limit_mb: float, trial_cgroup: Optional[Path]) -> MemoryCgroup:
        """The trial's memory cgroup, limited to ``limit_mb``; UserError (one line) where none can be made."""
        parent, version, why = memory_parent()
        limit = int(limit_mb * 2**20)
        if parent is None:
            raise UserError(f"burst.memory_limit_mb: {why}; perftune refuses to run trials it cannot limit")
        try:
            if version == 2:
                if trial_cgroup is None:
                    raise OSError("the trial has no cgroup v2 of its own (see the containment line)")
                write_control(trial_cgroup / "memory.max", str(limit))
                if (trial_cgroup / "memory.swap.max").exists():
                    write_control(trial_cgroup / "memory.swap.max", "0")
                return cls(trial_cgroup, 2, limit, owned=False)
            path = parent / f"{PREFIX}{name}"
            path.mkdir()
            made = cls(path, 1, limit, owned=True)
            try:
                write_control(path / "memory.limit_in_bytes", str(limit))
                if (path / "memory.memsw.limit_in_bytes").exists():
                    write_control(path / "memory.memsw.limit_in_bytes", str(limit))
            except OSError:
                made.remove()
                raise
            return made
        except OSError as exc:
            raise UserError(f"burst.memory_limit_mb: cannot limit a trial's memory in {parent} "
                            f"({exc.strerror or exc}); perftune refuses to run trials it cannot limit") from exc

    def enter(self) -> None:
        """In the child (pre-exec): join the memory cgroup (cgroup v2: the trial's cgroup, joined already)."""
        if self.version == 1:
            try:
                write_control(self.path / "cgroup.procs", "0")
            except OSError:
                pass

    def holds(self, pid: int) -> bool:
        return self.version == 2 or str(pid) in _read(self.path / "cgroup.procs").split()

    def oom_kills(self) -> int:
        """The kernel's out-of-memory kills in this cgroup and below it (the ranks' own under msrun) so far (v1
        counts per cgroup: summed)."""
        if self.version == 2:
            return _field(_read(self.path / "memory.events"), "oom_kill")
        return sum(_field(_read(p / "memory.oom_control"), "oom_kill") for p in deepest_first(self.path))

    def peak_bytes(self) -> Optional[int]:
        """The most the cgroup was charged (v1 ``memory.max_usage_in_bytes``, v2 ``memory.peak``); None: unknown."""
        text = _read(self.path / ("memory.peak" if self.version == 2 else "memory.max_usage_in_bytes")).strip()
        return int(text) if text.isdigit() else None

    def evidence(self) -> str:
        """What the kernel recorded, in words, for a trial's reason."""
        mb = self.limit_bytes / 2**20
        peak = self.peak_bytes()
        charged = f"charged up to {peak / 2**20:.0f} MB, " if peak is not None else ""
        counter = "memory.oom_control" if self.version == 1 else "memory.events"
        return f"burst.memory_limit_mb={mb:g} ({charged}oom_kill {self.oom_kills()} in {counter} of {self.path})"

    def remove(self, timeout: float = 5.0) -> None:
        """SIGKILL anything still in it, wait until it is empty, remove it (v1; v2's is the trial cgroup's)."""
        if self.owned:
            remove_tree(self.path, timeout)


def remove_tree(path: Path, timeout: float = 5.0) -> None:
    """Kill every process in a v1 memory cgroup and those below it, then remove them, deepest first."""
    end = time.monotonic() + timeout
    for folder in deepest_first(path):
        while pids_in(folder) and time.monotonic() < end:
            for pid in pids_in(folder):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)
        try:
            folder.rmdir()
        except OSError:
            pass


def remove_stale(tag: str) -> None:
    """Remove the v1 trial memory cgroups a driver with ``tag`` left (killed), and empty ones of dead drivers."""
    parent, version, _ = memory_parent()
    if parent is None or version != 1:
        return
    try:
        names = [p.name for p in parent.iterdir() if p.name.startswith(PREFIX) and p.is_dir()]
    except OSError:
        return
    for name in names:
        pid = name[len(PREFIX):].split("-", 1)[0]
        if (tag and name.startswith(f"{PREFIX}{tag}-")) or (pid.isdigit() and not os.path.exists(f"/proc/{pid}")):
            remove_tree(parent / name)


def memory_probe(limit_mb: float) -> str:
    """Refuse (UserError, one line) where ``burst.memory_limit_mb`` cannot be enforced; else say how it is."""
    parent, version, why = memory_parent()
    if parent is None:
        raise UserError(f"burst.memory_limit_mb: {why}; perftune refuses to run trials it cannot limit")
    remove_stale("")
    if version == 1:
        MemoryCgroup.open(f"{driver_tag()}-memprobe", limit_mb, None).remove()
    return (f"memory of each trial limited to {limit_mb:g} MB by a cgroup v{version} memory controller "
            f"(below {parent}; out-of-memory kills counted there)")
