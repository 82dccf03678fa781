"""Start a burst in a fresh process and always come back with a ``TrialResult``.

The child runs in its own process group, so a time-out or Ctrl-C ends it and every process it started (dataset
workers, msrun ranks).  Whatever the child does (raise, hang, get killed by the OOM killer) the parent writes a
``trial.json`` with a status and the tail of the log, and never hangs on it.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

from pydantic import ValidationError

from perftune.records import TRIAL_SCHEMA_VERSION, TrialResult, TrialSpec
from perftune.store import write_json_atomic

LOG_NAME = "burst.log"
KILL_GRACE_S = 3.0


def trial_id(fields: dict[str, Any]) -> str:
    canonical = json.dumps({**fields, "trial_schema": TRIAL_SCHEMA_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def make_spec(plan, knob_values: dict[str, Any], label: str, replicate: int = 0,
              cache_dir: Optional[Path] = None) -> TrialSpec:
    """The spec of one trial of ``plan``: its knob values overlay the plan's baseline."""
    from perftune import knobs

    effective = knobs.effective({**plan.baseline, **knob_values})
    fields = {
        "workload": plan.workload,
        "workload_params": plan.workload_params,
        "device": plan.device,
        "seed": plan.seed,
        "knobs": effective,
        "burst": plan.burst.model_dump(),
        "accuracy_samples": plan.accuracy_samples(),
        "replicate": replicate,
    }
    hashed = dict(fields)
    dist = getattr(plan, "distributed", None)
    if dist is not None and dist.nodes > 1:  # where the ranks run changes the measurement; node_rank/port do not
        hashed["nodes"] = dist.nodes
    return TrialSpec(trial_id=trial_id(hashed), label=label,
                     cache_dir=str(cache_dir) if cache_dir else None,
                     distributed=dist.model_dump(mode="json") if dist is not None else None, **fields)


def log_tail(path: Path, lines: int = 30, max_chars: int = 4000) -> str:
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


def kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the child's process group, then SIGKILL whatever is left after a grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            # the leader is gone; make sure no straggler of its group survives it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        except subprocess.TimeoutExpired:
            continue


def _die_with_parent() -> None:
    """In the child: ask Linux to SIGKILL it when the sweep dies (even by SIGKILL), so no burst is orphaned."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def burst_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GLOG_v", "2")  # MindSpore: warnings and errors only
    env["PYTHONUNBUFFERED"] = "1"
    # msrun and dataset workers start `python` from PATH: make it this interpreter's environment
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    # the burst runs inside its trial folder (MindSpore drops rank_0/, kernel_meta/ ... into the cwd); keep the
    # caller's folder importable for "package.module:function" workloads
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p)
    return env


def run_trial(spec: TrialSpec, trial_dir: Path, timeout_s: Optional[float] = None) -> TrialResult:
    """Run one burst in a fresh process; the returned result is also in ``trial_dir/trial.json``."""
    trial_dir = Path(trial_dir)
    trial_dir.mkdir(parents=True, exist_ok=True)
    result_path = trial_dir / "trial.json"
    if result_path.exists():
        result_path.unlink()
    write_json_atomic(trial_dir / "spec.json", spec.model_dump(mode="json"))
    timeout_s = float(timeout_s if timeout_s is not None else spec.burst.get("timeout_s", 300))
    if int(spec.knobs.get("workers", 1)) >= 2:  # one rank per worker under msrun; writes trial.json itself
        from perftune.distributed import run_distributed

        return run_distributed(spec, trial_dir, timeout_s)
    log_path = trial_dir / LOG_NAME
    started = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "perftune.burst", str(trial_dir.resolve())],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=burst_env(), start_new_session=True, preexec_fn=_die_with_parent, cwd=str(trial_dir.resolve()),
        )
        status: Optional[str] = None
        reason: Optional[str] = None
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            status, reason = "timeout", f"the burst ran past timeout_s={timeout_s:g} s and was stopped"
        except BaseException:  # Ctrl-C: stop the burst and its children, then let the caller handle it
            kill_group(proc)
            raise
        else:
            kill_group(proc)  # dataset worker processes may outlive the leader
    wall_s = time.perf_counter() - started
    result = read_result(result_path)
    if status is None and result is None:
        status, reason = _classify_exit(proc.returncode, log_path)
    if result is None or status == "timeout":
        result = TrialResult(
            trial_id=spec.trial_id, status=status or "failed", reason=reason, workload=spec.workload,
            device=spec.device, knobs=spec.knobs, burst=spec.burst,
        )
    if result.status != "ok" and not result.log_tail:
        result.log_tail = log_tail(log_path)
    result.wall_s = wall_s
    write_json_atomic(result_path, result.model_dump(mode="json"))
    return result


def read_result(path: Path) -> Optional[TrialResult]:
    try:
        return TrialResult.model_validate_json(path.read_text())
    except (OSError, ValidationError, ValueError):
        return None


def _classify_exit(returncode: int, log_path: Path) -> tuple[str, str]:
    tail = log_tail(log_path, lines=50).lower()
    if returncode in (-signal.SIGKILL, 137) or "out of memory" in tail or "memoryerror" in tail:
        if "memory" in tail or returncode in (-signal.SIGKILL, 137):
            return "oom", f"the burst was killed (exit {returncode}); most likely out of memory"
    if returncode < 0:
        return "failed", f"the burst died from signal {signal.Signals(-returncode).name}"
    return "failed", f"the burst exited with code {returncode} without writing trial.json"
