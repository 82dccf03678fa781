"""Workloads for tests/test_integrity.py and tests/test_containment.py: training functions that behave as hostile
scripts beside their results or around their processes (the reliability battery's).  Each trains the tiny MLP
after doing its damage."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def vandal_trainer(params: dict, seed: int):
    """The second trial (one sibling folder with a trial.json exists) deletes the other trial folders, results.json,
    the lock and the sweep marker of its sweep (its cwd is its trial folder: trials/<id>/), then trains."""
    from perftune.workloads import mlp

    here = Path.cwd()
    out = here.parent.parent
    siblings = [p for p in here.parent.iterdir() if p != here and (p / "trial.json").exists()]
    if siblings:
        for p in siblings:
            shutil.rmtree(p)
        for name in ("results.json", ".perftune.lock", ".perftune-sweep"):
            (out / name).unlink(missing_ok=True)
    return mlp.build(params, seed)


def loud_trainer(params: dict, seed: int):
    """Prints ``megabytes`` MB to stdout (and a last line) before training."""
    from perftune.workloads import mlp

    params = dict(params)
    line = "x" * 1023 + "\n"
    for _ in range(int(params.pop("megabytes")) * 1024):
        sys.stdout.write(line)
    print("the last line of the loud workload", flush=True)
    return mlp.build(params, seed)


def cgroup_leaver(params: dict, seed: int):
    """A double-forked daemon that writes its pid into the cgroup2 root's cgroup.procs (root only) and sleeps with
    ``marker`` on its command line; then trains."""
    from perftune.runner.cgroup import cgroup2_mount
    from perftune.workloads import mlp

    params = dict(params)
    marker = params.pop("marker")
    root = cgroup2_mount()
    code = ("import os, sys, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    try:\n"
            "        open(sys.argv[1], 'w').write(str(os.getpid()))\n"
            "    except OSError:\n"
            "        pass\n"
            "    time.sleep(300)\n"
            "os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code, str(root / "cgroup.procs"), marker], check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return mlp.build(params, seed)


ROOT_SCRIPT = """import os, subprocess, sys, time
try:
    open(sys.argv[1], 'w').write(str(os.getpid()))  # this script leaves the trial's cgroup for the root's
except OSError:
    pass
clean = {k: v for k, v in os.environ.items() if not k.startswith('PERFTUNE')}  # and its daemons drop the token
for _ in range(int(sys.argv[3])):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve(sys.executable, [sys.executable, '-c', 'import time; time.sleep(300)', sys.argv[2]], clean)
        os._exit(0)
    os.wait()
"""


def root_escaper(params: dict, seed: int):
    """The battery's root script: it writes its own pid into the cgroup2 root's cgroup.procs (root only), then
    starts ``daemons`` double-forked, setsid'd daemons with no trial token in their environment, sleeping with
    ``marker`` on their command line; it exits, the burst trains."""
    from perftune.runner.cgroup import cgroup2_mount
    from perftune.workloads import mlp

    params = dict(params)
    marker, daemons = params.pop("marker"), int(params.pop("daemons"))
    subprocess.run([sys.executable, "-c", ROOT_SCRIPT, str(cgroup2_mount() / "cgroup.procs"), marker, str(daemons)],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return mlp.build(params, seed)
