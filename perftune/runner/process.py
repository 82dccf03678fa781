"""Process hygiene for bursts: their own process group, death with the sweep, a clean environment, log tails.

Shared by the one-process launcher (``local.py``) and the msrun launcher (``msrun.py``, which also needs the psutil
helpers: msrun puts each rank in a session of its own); dying with the parent is ``perftune.parent_death``'s, which
the burst uses too.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional

import psutil

import perftune
from perftune.parent_death import die_with_parent
from perftune.runner.reaper import TrialProcesses, killed_by_signal

KILL_GRACE_S = 3.0
BURST_MODULE = "perftune.burst"  # started by name (python -m): the launchers never import the child's code
#: a line that names an error: a Python exception (``ImportError: ...``), MindSpore's ``[ERROR]``, a fatal signal
ERROR_LINE = re.compile(r"(\b\w*(Error|Exception|Exit|Interrupt)\b:?)|\[ERROR\]|\bFatal\b|\bAborted\b")


def log_tail(path: Path, lines: int = 30, max_chars: int = 4000) -> str:
    """The last non-empty ``lines`` of a log (read from its last 64 KiB), at most ``max_chars``."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    kept = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return "\n".join(kept)[-max_chars:]


def kill_group(proc: subprocess.Popen, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the child's process group, then SIGKILL whatever is left after a grace period.

    A Ctrl-C during the grace period shortens it, never skips the kill: the KeyboardInterrupt is raised again once
    the group is gone."""
    interrupted = False
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    except KeyboardInterrupt:
        interrupted = True
    for _ in range(3):  # the leader is gone or out of time; make sure no straggler of its group survives it
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=10.0)
            break
        except subprocess.TimeoutExpired:
            break
        except KeyboardInterrupt:
            interrupted = True
    if interrupted:
        raise KeyboardInterrupt


def child_setup(procs: TrialProcesses) -> Callable[[], None]:
    """The launched child's pre-exec set-up: die with the sweep, join the trial's cgroup."""

    def setup() -> None:
        die_with_parent()
        procs.enter()

    return setup


def burst_env(own: Optional[dict[str, Optional[str]]] = None) -> dict[str, str]:
    """The burst's environment; ``own``: the trial's own environment knobs (``TrialSpec.env``; None removes)."""
    env = dict(os.environ)
    for var, value in (own or {}).items():
        if value is None:
            env.pop(var, None)
        else:
            env[var] = value
    env.setdefault("GLOG_v", "2")  # MindSpore: warnings and errors only
    env["PYTHONUNBUFFERED"] = "1"
    # msrun and dataset workers start `python` from PATH: make it this interpreter's environment
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    # the burst runs inside its trial folder (MindSpore drops rank_0/, kernel_meta/ ... into the cwd); keep the
    # caller's folder importable for "package.module:function" workloads, after this perftune where it holds another
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*import_roots(Path.cwd()), env.get("PYTHONPATH", "")) if p)
    return env


def import_roots(cwd: Path) -> list[str]:
    """The folders a burst imports from before its own path: ``cwd``, preceded by the folder holding this perftune
    where ``cwd`` holds a ``perftune/`` that is not it (the parent of a clone: every burst imported that tree's
    ``perftune`` and failed).  Only then, so an installed perftune's site-packages never goes before the stdlib."""
    installed = Path(perftune.__file__).resolve().parent
    other = cwd / "perftune"
    try:
        shadowed = other.exists() and other.resolve() != installed
    except OSError:
        shadowed = True
    return [str(installed.parent), str(cwd)] if shadowed else [str(cwd)]


def last_error_line(tail: str) -> str:
    """The log's last line that names an error (a Python exception's ``SomeError: ...``), else its last line."""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ERROR_LINE.search(ln)]
    return (errors or lines or [""])[-1][:300]


def classify_exit(returncode: int, log_path: Path, oom_kills: Optional[int] = None,
                  limit: str = "") -> tuple[str, str]:
    """(status, reason) of a burst that exited without writing its result (and was not stopped by perftune).

    "oom" only with evidence: the cgroup counted ``oom_kills`` kernel out-of-memory kills during the trial, or the
    log says so.  ``limit``: what the trial's own memory cgroup recorded (``burst.memory_limit_mb``, ``memcg.py``):
    a kill counted there is the trial's own, whatever the exit code (a dataset worker killed, the burst failing of
    it).  A burst killed by a signal without such evidence is "failed" with the signal named (see
    ``killed_from_outside``: such a trial is measured again on a resume)."""
    tail = log_tail(log_path, lines=50).lower()
    signame = killed_by_signal(returncode)
    if limit and oom_kills:
        how = f"was killed by {signame}" if signame else f"exited with code {returncode}"
        return "oom", (f"the burst {how} after the kernel's out-of-memory killer struck {oom_kills} time(s) in its "
                       f"memory cgroup: out of memory under {limit}")
    if signame and oom_kills:
        return "oom", (f"the burst was killed by {signame} while the kernel's out-of-memory killer struck "
                       f"{oom_kills} time(s) in this cgroup (memory.events oom_kill): out of memory")
    if "out of memory" in tail or "memoryerror" in tail:
        return "oom", f"the burst exited with code {returncode} and its log says it ran out of memory"
    if signame:
        return "failed", (f"the burst was killed by {signame}, a signal perftune did not send (no out-of-memory "
                          f"record in the cgroup); it is measured again on a resume")
    last = last_error_line(log_tail(log_path, lines=50))
    return "failed", (f"the burst exited with code {returncode} without writing trial.json"
                      + (f"; its log's last error: {last}" if last else " (its log is empty)"))


def killed_from_outside(returncode: Optional[int], status: str) -> bool:
    """A burst that someone else's signal ended: not a property of its configuration, so a resume retries it."""
    return returncode is not None and status == "failed" and killed_by_signal(returncode) is not None


def alive(p: psutil.Process) -> bool:
    """Running and not a zombie."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def process_tree(pid: int) -> list[psutil.Process]:
    """Every descendant of ``pid`` (none where it is gone)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def kill_all(victims: set) -> None:
    """SIGKILL each process's group (never our own) and then each process itself."""
    own = os.getpgrp()
    groups = set()
    for p in victims:
        try:
            groups.add(os.getpgid(p.pid))
        except OSError:
            pass
    for pgid in groups - {own}:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    for p in victims:  # anything in our own group (never expected) or that escaped its group
        try:
            p.kill()
        except psutil.Error:
            pass


def processes_of(trial_dir: Path) -> list[psutil.Process]:
    """Live processes of this trial: ``perftune.burst`` ranks/schedulers and msrun, named by the trial folder."""
    target = str(Path(trial_dir).resolve())
    me = psutil.Process()
    skip = {me.pid} | {p.pid for p in me.parents()}
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info.get("cmdline") or []
        if p.pid in skip or target not in cmd:
            continue
        if any(a == BURST_MODULE or a.endswith("perftune/burst/__main__.py") for a in cmd) and alive(p):
            out.append(p)
    return out
