"""One burst in one fresh process (``python -m perftune.burst TRIAL_DIR``); always comes back with a result.

The child runs in its own process group, so a time-out or Ctrl-C ends it and every process it started (dataset
workers).  Whatever the child does (raise, hang, get killed by the OOM killer) the parent writes a ``trial.json``
with a status and the tail of the log, and never hangs on it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from perftune.errors import UserError
from perftune.io.derived import failed_result
from perftune.io.files import LOG_NAME, TRIAL_NAME, read_trial_if_present
from perftune.io.records import TrialResult, TrialSpec
from perftune.io.store import write_json_atomic
from perftune.runner.logcap import CappedLog
from perftune.runner.process import (
    BURST_MODULE,
    burst_env,
    child_setup,
    classify_exit,
    kill_group,
    killed_from_outside,
    log_tail,
)
from perftune.runner.reaper import TrialProcesses


def run_local(spec: TrialSpec, trial_dir: Path, timeout_s: float) -> TrialResult:
    """Run one burst in a fresh process; the returned result is also in ``trial_dir/trial.json``."""
    result_path = trial_dir / TRIAL_NAME
    log_path = trial_dir / LOG_NAME
    started = time.perf_counter()
    # the sweep becomes the subreaper of the burst's orphans; burst.memory_limit_mb: a memory cgroup (memcg.py)
    trial_procs = TrialProcesses(spec.burst.memory_limit_mb)
    ooms_before = trial_procs.oom_count()
    with CappedLog(log_path) as log:  # burst.log keeps its last MiBs (logcap.py)
        with trial_procs.launching():
            proc = subprocess.Popen(
                [sys.executable, "-m", BURST_MODULE, str(trial_dir.resolve())],
                stdout=log.fd, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=trial_procs.env(burst_env(spec.env)), start_new_session=True,
                preexec_fn=child_setup(trial_procs), cwd=str(trial_dir.resolve()),
            )
            trial_procs.started(proc.pid)
        log.launched()
        status: Optional[str] = None
        reason: Optional[str] = None
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            trial_procs.watch(proc.pid)
            kill_group(proc)
            status, reason = "timeout", f"the burst ran past timeout_s={timeout_s:g} s and was stopped"
        except BaseException:  # Ctrl-C: stop the burst and its children, then let the caller handle it
            trial_procs.watch(proc.pid)
            kill_group(proc)
            raise
        else:
            kill_group(proc)  # dataset worker processes may outlive the leader
        finally:
            trial_procs.kill_leftovers()  # setsid'd descendants and orphans re-parented to the sweep
    wall_s = time.perf_counter() - started
    unreadable: Optional[str] = None
    try:
        result = read_trial_if_present(result_path)
    except UserError as exc:  # written atomically, yet unreadable (e.g. by another perftune version): say so
        result, unreadable = None, str(exc)
    retry = False
    ooms_after = trial_procs.oom_count()
    ooms = ooms_after - ooms_before if ooms_after is not None and ooms_before is not None else None
    if result is not None and result.status == "failed" and ooms and trial_procs.memory_evidence:
        result = None  # a process of it (a dataset worker) was killed past the limit, and the burst failed of it
    if status is None and result is None:
        status, reason = classify_exit(proc.returncode, log_path, ooms, trial_procs.memory_evidence)
        retry = killed_from_outside(proc.returncode, status)
        if unreadable:
            reason = f"the burst wrote a trial.json this perftune cannot read: {unreadable}"
            status, retry = "failed", False
    if result is None or status == "timeout":
        result = failed_result(spec, status or "failed", reason, retry_on_resume=retry)
    if result.status != "ok" and not result.log_tail:
        result.log_tail = log_tail(log_path)
    result.wall_s = wall_s
    result.containment = trial_procs.containment
    write_json_atomic(result_path, result.model_dump(mode="json"))
    return result
