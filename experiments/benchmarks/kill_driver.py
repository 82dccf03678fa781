"""SIGKILL of a sweep driver at a burst's phase: is any process of the trial alive 5 s later? (issue 40)

    python experiments/benchmarks/kill_driver.py [--times 10] [--phases start,parse] [--paths cgroup,fallback]

The issue's reproduction: ``experiments/ci/tiny.yaml`` with ``workload_params.preprocess_ms: 1.0`` (the map runs
in dataset worker processes forked from the burst), ``accuracy.samples: 1024``, ``burst.profile_steps: 3``; the
driver is SIGKILLed once the trial's ``burst.log`` shows the profiler starting (``start``: "Profiler won't be
using warmup") or parsing (``parse``: "Parsing:"), on the cgroup path and the fallback (``PERFTUNE_NO_CGROUP=1``).
Alive = not a zombie, naming the results folder on its command line or carrying one of the driver's trial tokens.
Whatever is found is killed afterwards, so runs do not pile up.  Prints one line per kill and a summary.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[2]
TRIGGERS = {"start": "Profiler won't be using warmup", "parse": "Parsing:"}


def plan(folder: Path) -> Path:
    data = yaml.safe_load((REPO / "experiments/ci/tiny.yaml").read_text())
    data["workload_params"]["preprocess_ms"] = 1.0
    data["accuracy"]["samples"] = 1024
    data["burst"]["profile_steps"] = 3
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def of_trial(out: Path, driver_pid: int) -> list[psutil.Process]:
    target, token = str(out.resolve()), f"{driver_pid}-"
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.status() == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
                continue
            if target in " ".join(p.info["cmdline"] or []) or \
                    p.environ().get("PERFTUNE_TRIAL_TOKEN", "").startswith(token):
                found.append(p)
        except psutil.Error:
            continue
    return found


def seen(out: Path, text: str) -> bool:
    for log in out.glob("trials/*/burst.log"):
        try:
            if text in log.read_text(errors="replace"):
                return True
        except OSError:
            continue
    return False


def one(phase: str, path: str, timeout_s: float = 180.0) -> tuple[str, int, list[str]]:
    """Start a sweep, SIGKILL its driver at ``phase``; (what happened, processes alive 5 s later, their argv)."""
    with tempfile.TemporaryDirectory(prefix="perftune-kill-") as tmp:
        folder = Path(tmp)
        out = folder / "out"
        env = dict(os.environ)
        if path == "fallback":
            env["PERFTUNE_NO_CGROUP"] = "1"
        driver = subprocess.Popen([sys.executable, "-m", "perftune.cli", "sweep", str(plan(folder)), "--out",
                                   str(out), "--no-progress", "--no-report"], cwd=REPO, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + timeout_s
        while not seen(out, TRIGGERS[phase]):
            if driver.poll() is not None or time.monotonic() > end:
                driver.kill()
                driver.wait()
                return "phase not reached", 0, []
            time.sleep(0.02)
        forks = len([p for p in of_trial(out, driver.pid)])
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        time.sleep(5.0)
        left = of_trial(out, driver.pid)
        argv = []
        for p in left:
            try:
                argv.append(" ".join(p.cmdline())[:120])
                p.kill()
            except psutil.Error:
                pass
        return f"killed with {forks} trial processes running", len(left), argv


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--times", type=int, default=10)
    ap.add_argument("--phases", default="start,parse")
    ap.add_argument("--paths", default="cgroup,fallback")
    args = ap.parse_args()
    print(f"uptime: {os.getloadavg()}", flush=True)
    summary = []
    for path in args.paths.split(","):
        for phase in args.phases.split(","):
            bad = reached = 0
            for i in range(args.times):
                what, alive, argv = one(phase, path)
                reached += what != "phase not reached"
                bad += alive > 0
                print(f"{path:8} {phase:5} #{i + 1}: {what}; alive 5 s later: {alive} {argv}", flush=True)
            summary.append(f"{path} {phase}: {bad} of {reached} kills left a process alive "
                           f"({args.times - reached} never reached the phase)")
    print("\n".join(summary))
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
