"""A process that outlives the sweep driver and kills what its trials left when the driver dies, however it dies.

Every other guard needs the driver alive: the cgroup is killed by the driver, the subreaper is the driver, and
``PR_SET_PDEATHSIG`` kills the burst alone.  A process the burst forked (a dataset worker, the profiler's parser;
same argv, same process group) is re-parented to init when a SIGKILLed driver's burst dies, and lived on.
SIGKILL cannot be caught, so the driver cannot clean up itself: the burst being a subreaper does not help either
(its own death re-parents its children past the dead driver).  The driver therefore starts, once, this watchdog in
a session of its own (``python -m perftune.runner.watchdog TAG``), holding the only read end of a pipe whose write
end only the driver holds (not inherited: ``os.pipe`` is close-on-exec).  The driver's death, by any signal, closes
the pipe; the watchdog reads EOF and kills the trial cgroups of that driver's tag, the process groups of the bursts
it was told of (``+PGID`` / ``-PGID`` lines) and every process carrying one of its trial tokens, a few rounds (a
fork in flight), then exits.  A later sweep in the folder still kills what is left (``kill_driver_leftovers``)
where the watchdog was killed too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Optional

from perftune.runner.leftovers import kill_driver_leftovers

#: set (to anything) to start no watchdog: tests of the later sweep's clean-up, which the watchdog pre-empts
NO_WATCHDOG_ENV = "PERFTUNE_NO_WATCHDOG"
MODULE = "perftune.runner.watchdog"

_pipe: dict[int, Optional[int]] = {}  # driver pid -> write end (a forked child is another driver)


def ensure_watchdog(tag: str) -> bool:
    """Start this driver's watchdog once (no-op afterwards); False where it is off or could not start."""
    pid = os.getpid()
    if pid in _pipe:
        return _pipe[pid] is not None
    _pipe[pid] = None
    if os.environ.get(NO_WATCHDOG_ENV):
        return False
    read_end, write_end = os.pipe()
    try:
        subprocess.Popen([sys.executable, "-m", MODULE, tag], stdin=read_end, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except OSError:
        os.close(write_end)
        return False
    finally:
        os.close(read_end)
    _pipe[pid] = write_end
    os.register_at_fork(after_in_child=lambda: _close_in_fork(write_end))
    return True


def _close_in_fork(fd: int) -> None:
    """A fork of the driver (no exec) would hold the write end and delay the watchdog's EOF past the driver's death."""
    try:
        os.close(fd)
    except OSError:
        pass


def _say(line: str) -> None:
    fd = _pipe.get(os.getpid())
    if fd is None:
        return
    try:
        os.write(fd, f"{line}\n".encode())
    except OSError:  # the watchdog is gone: the next sweep's clean-up remains
        _pipe[os.getpid()] = None


def track(pgid: int) -> None:
    """A burst's process group started (its leader's pid: the launchers start it in a session of its own)."""
    _say(f"+{pgid}")


def untrack(pgid: int) -> None:
    """That group's trial is over and cleaned up: never signal the number again (it may be reused)."""
    _say(f"-{pgid}")


def _read_groups() -> set[int]:
    """Follow the driver's lines until EOF (its death or exit); the groups still running then."""
    groups: set[int] = set()
    with os.fdopen(0, "rb", buffering=0) as pipe:
        buf = b""
        while True:
            chunk = pipe.read(4096)
            if not chunk:
                return groups
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                text = line.decode(errors="replace").strip()
                if text[:1] in "+-" and text[1:].isdigit():
                    (groups.add if text[0] == "+" else groups.discard)(int(text[1:]))


def clean_up(tag: str, groups: set[int]) -> list[int]:
    """What the watchdog does at the driver's death; the pids killed."""
    killed: set[int] = set()
    for _ in range(3):
        for pgid in groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
        found = kill_driver_leftovers(tag)
        killed.update(found)
        if not found:
            break
    return sorted(killed)


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):  # only the pipe's end ends it
        signal.signal(sig, signal.SIG_IGN)
    groups = _read_groups()
    clean_up(argv[0] if argv else "", groups)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
