"""SIGHUP to a sweep while its hostile workload's ``build()`` runs: is anything left 5 s later? (a closed terminal)

    python experiments/benchmarks/sighup_build.py [--times 10] [--busy 4]

The battery's reproduction: the workload (``tests.workloads_for_tests:escaping_trainer``, ``stall: train``) starts
a ``setsid`` grandchild and a double-forked daemon in ``build()`` and then sleeps there.  The driver gets SIGHUP at
the first escapee's sight (even runs: the forks in flight) or 0-1 s after both run (odd runs: the stalled
build), with ``--busy`` busy-loop processes loading the machine.  Left =
not a zombie and naming the marker, the results folder, or carrying one of the driver's trial tokens; plus the
lock file.  Whatever is found is killed afterwards, so runs do not pile up.  One line per run and a summary.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import random
import signal
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[2]
TINY_MLP = {"in_dim": 64, "hidden": 128, "layers": 2, "classes": 8, "train_samples": 1024, "val_samples": 128}


def plan(folder: Path, marker: str) -> Path:
    data = {"name": "hup", "workload": "tests.workloads_for_tests:escaping_trainer",
            "workload_params": {**TINY_MLP, "marker": marker, "started_file": str(folder / "started"),
                                "stall": "train"},
            "burst": {"warmup_steps": 1, "steps": 2, "repeats": 1, "profile_steps": 1, "timeout_s": 300},
            "baseline": {"batch_size": 32, "mode": "graph", "prefetch_size": 2},
            "decision": {"baseline_runs": 1}, "accuracy": {"samples": 256, "seeds": 1}}
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def left(marker: str, out: Path, driver_pid: int) -> list[psutil.Process]:
    target, token = str(out.resolve()), f"{driver_pid}-"
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.pid == os.getpid() or p.status() == psutil.STATUS_ZOMBIE:
                continue
            line = " ".join(p.info["cmdline"] or [])
            if marker in line or target in line or p.environ().get("PERFTUNE_TRIAL_TOKEN", "").startswith(token):
                found.append(p)
        except psutil.Error:
            continue
    return found


def escapees(marker: str) -> int:
    n = 0
    for p in psutil.process_iter(["cmdline"]):
        try:
            cmd = p.info["cmdline"] or []
            n += cmd[2:4] == ["import time; time.sleep(300)", marker] and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            continue
    return n


def in_terminal() -> tuple[int, dict]:
    """A pseudo-terminal the driver gets as its controlling terminal (a session of its own, as a login shell's job
    would be): closing the master end hangs it up, as closing a terminal window or an ssh session does."""
    master, slave = pty.openpty()

    def take_tty() -> None:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    return master, {"stdin": slave, "stdout": slave, "stderr": slave, "preexec_fn": take_tty}


def one(i: int, within: float, fallback: bool, tty: bool, twice: bool) -> tuple[str, list[str], bool, float]:
    """One sweep, SIGHUP at a random moment of its build; (when, what was left ``within`` s later, lock left,
    seconds until the driver exited)."""
    marker = f"perftune-bench-hup-{os.getpid()}-{i}"
    with tempfile.TemporaryDirectory(prefix="perftune-hup-") as tmp:
        folder = Path(tmp)
        out = folder / "out"
        master, where = in_terminal() if tty else (-1, {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE})
        driver = subprocess.Popen([sys.executable, "-m", "perftune.cli", "sweep", str(plan(folder, marker)), "--out",
                                   str(out), "--no-report", *([] if tty else ["--no-progress"])], cwd=REPO, text=True,
                                  env={**os.environ, **({"PERFTUNE_NO_CGROUP": "1"} if fallback else {})}, **where)
        if tty:
            os.close(where["stdin"])
            os.set_blocking(master, False)
        end = time.monotonic() + 240
        while not list(out.glob("trials/*/burst.log")):
            if driver.poll() is not None or time.monotonic() > end:
                driver.kill()
                said = driver.communicate()[1] or ""
                if tty:
                    try:
                        said = os.read(master, 65536).decode(errors="replace")
                    except OSError:
                        pass
                    os.close(master)
                return f"no burst: {said.strip()[-300:]}", [], False, 0.0
            time.sleep(0.01)
        started = time.monotonic()
        want = 1 if i % 2 == 0 else 2  # even runs: at the first escapee seen (the forks in flight); odd: both run
        while escapees(marker) < want and time.monotonic() < end and driver.poll() is None:
            time.sleep(0.002)
        delay = 0.0 if want == 1 else random.uniform(0.0, 1.0)
        time.sleep(delay)
        when = (f"{time.monotonic() - started:.2f} s after the burst's start ({escapees(marker)} escapees running, "
                f"{'at the first' if want == 1 else f'{delay:.2f} s after both'})")
        sent = time.monotonic()
        if tty:
            os.close(master)  # the terminal is closed: the kernel sends SIGHUP to the driver (its session's leader)
        else:
            driver.send_signal(signal.SIGHUP)
        if twice:  # a login shell passes its own SIGHUP on to its jobs: the driver gets a second one
            time.sleep(random.uniform(0.0, 0.3))
            if driver.poll() is None:
                driver.send_signal(signal.SIGHUP)
                when += "; SIGHUP again"
        try:
            driver.wait(timeout=within)
        except subprocess.TimeoutExpired:
            pass
        exit_s = time.monotonic() - sent if driver.poll() is not None else float("nan")
        time.sleep(max(0.0, within - (time.monotonic() - sent)))
        found = left(marker, out, driver.pid)
        lock = (out / ".perftune.lock").exists()
        argv = []
        for p in found:
            try:
                argv.append(" ".join(p.cmdline())[:100])
                p.kill()
            except psutil.Error:
                pass
        if driver.poll() is None:
            driver.kill()
        err = driver.communicate()[1] or ""
        if driver.returncode != 129:
            when += f"; driver exit {driver.returncode}: {err.strip()[-200:]}"
        return when, argv, lock, exit_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--times", type=int, default=10)
    ap.add_argument("--busy", type=int, default=4)
    ap.add_argument("--within", type=float, default=5.0)
    ap.add_argument("--fallback", action="store_true", help="PERFTUNE_NO_CGROUP=1: process groups, subreaper, tokens")
    ap.add_argument("--twice", action="store_true", help="a second SIGHUP 0-0.3 s after the first")
    ap.add_argument("--tty", action="store_true", help="run the driver in a terminal (with progress) and close it")
    args = ap.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.busy)]
    try:
        time.sleep(5 if args.busy else 0)
        print(f"load average before: {os.getloadavg()}", flush=True)
        bad = measured = 0
        for i in range(args.times):
            when, argv, lock, exit_s = one(i, args.within, args.fallback, args.tty, args.twice)
            bad += bool(argv) or lock
            measured += not when.startswith("no burst")
            print(f"#{i + 1}: SIGHUP {when}; driver exited after {exit_s:.2f} s; left {args.within:g} s later: "
                  f"{len(argv)} {argv}{'; LOCK LEFT' if lock else ''}; load {os.getloadavg()[0]:.2f}", flush=True)
        print(f"{bad} of {measured} runs left a process or the lock ({args.times - measured} started no burst; "
              f"{args.busy} busy loops{', the driver in a terminal that was closed' if args.tty else ''}"
              f"{', fallback containment' if args.fallback else ''}{', SIGHUP twice' if args.twice else ''})")
        print(f"load average after: {os.getloadavg()}")
    finally:
        for p in busy:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
