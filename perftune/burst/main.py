"""The burst process: ``python -m perftune.burst TRIAL_DIR`` reads ``TRIAL_DIR/spec.json`` and writes
``TRIAL_DIR/trial.json`` (atomically) whatever happens.  Under msrun the same command is msrun's scheduler
(``MS_ROLE=MS_SCHED``) or one rank (``MS_ROLE=MS_WORKER``, writing ``rank_<r>/trial.json``)."""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import NoReturn

from perftune.burst.failures import classify_failure, first_logged_error, one_line
from perftune.burst.own_workload import Burst
from perftune.io.files import LOG_NAME, TRIAL_NAME, rank_dir_name, rank_log_name, read_spec
from perftune.io.records import TrialSpec
from perftune.io.store import write_json_atomic
from perftune.parent_death import die_with_parent


def run_scheduler(spec: TrialSpec) -> None:
    """msrun's scheduler process runs this module too (MS_ROLE=MS_SCHED): it serves the cluster inside init().

    Where several msrun launches share one host as separate "nodes" (the loopback test), every launch thinks it is
    the master; the launcher sets PERFTUNE_SCHEDULER=0 on all but node 0, and those schedulers leave at once.
    """
    if os.environ.get("PERFTUNE_SCHEDULER", "1") == "0":
        os._exit(0)
    import mindspore as ms
    from mindspore.communication import init

    try:
        ms.set_device(spec.device)
        init()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(4)
    os._exit(0)


def main(argv: list[str]) -> int:
    trial_dir = Path(argv[0])
    role = os.environ.get("MS_ROLE")  # set by msrun: MS_SCHED (its scheduler) or MS_WORKER (one rank)
    if role:
        # msrun starts each rank in a session of its own, out of reach of the launcher's process group: die with
        # msrun (PR_SET_PDEATHSIG), and leave now if msrun is already gone
        die_with_parent()
        if os.getppid() == 1:
            os._exit(5)
    spec = read_spec(trial_dir)
    if role == "MS_SCHED":
        run_scheduler(spec)
    out_dir, log_path = trial_dir, trial_dir / LOG_NAME
    if role == "MS_WORKER":  # each rank writes rank_<r>/trial.json (+ rank_<r>/profile); msrun logs worker_<r>.log
        rank = os.environ.get("RANK_ID", f"unknown_{os.getpid()}")
        out_dir = trial_dir / rank_dir_name(rank)
        out_dir.mkdir(parents=True, exist_ok=True)
        log_path = trial_dir / rank_log_name(rank)
    if spec.script is not None:  # the user's own training script, measured from inside (burst/script.py)
        from perftune.burst.script import ScriptBurst

        burst = ScriptBurst(spec, out_dir)
    else:
        burst = Burst(spec, out_dir)
    try:
        result = burst.run()
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a recorded trial
        traceback.print_exc()
        sys.stderr.flush()
        status, reason = classify_failure(exc, spec)
        cause = first_logged_error(log_path, reason)
        if cause and len(reason) < 200:
            reason = f"{reason} (first error in the log: {cause})"
        result = burst.result
        result.status = status
        result.reason = reason
        try:
            burst.memory()
        except Exception:  # noqa: BLE001
            pass
    try:
        write_json_atomic(out_dir / TRIAL_NAME, result.model_dump(mode="json"))
    except BaseException as exc:  # noqa: BLE001 - e.g. a full disk: say why, and still leave by os._exit
        print(f"perftune burst: could not write {TRIAL_NAME} ({result.status}: {result.reason}): "
              f"{one_line(exc)}", file=sys.stderr)
        return leave(WRITE_FAILED, distributed=bool(role))
    print(json.dumps({"status": result.status, "trial_id": spec.trial_id}))
    sys.stdout.flush()
    return leave(0 if result.status == "ok" else 3, distributed=bool(role))  # never returns


#: the exit code of a burst that could not write its trial.json (its log's last line says why)
WRITE_FAILED = 6
#: how long the ``atexit`` hooks may take once the result is on disk: MindSpore's own hook closes its dataset workers
#: (2 s each at most) with python_multiprocessing=true (measured: experiments/benchmarks/README.md, "The burst's
#: constants")
EXIT_GRACE_S = 10


def leave(code: int, distributed: bool) -> NoReturn:
    """End the burst: run the ``atexit`` hooks (a script's, a workload's, ``logging``'s), then ``os._exit``.

    Not the interpreter's full exit: after the hooks its finalisation (module teardown, MindSpore's objects and
    C++ destructors) took 3.3-3.9 s per burst here (0.15 s with ``os._exit``, load average 10-12), and processes
    are most of a sweep's time (and MindSpore's teardown was seen to hang or crash after failures).  The result is
    on disk already: should a hook hang, SIGALRM's default action ends the process after ``EXIT_GRACE_S`` (even inside
    C code), and a crash only changes the exit code, which the launcher reads after ``trial.json``.  A rank under
    msrun skips the hooks: with the communication backend initialised, they were not measured here.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    if not distributed:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(EXIT_GRACE_S)
        atexit._run_exitfuncs()  # noqa: SLF001 - the stdlib's own runner of the registered hooks
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)
