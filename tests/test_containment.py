"""Nothing a sweep started survives it (issue 27): a workload that starts a ``setsid`` grandchild and a double-forked
daemon; the driver stopped by SIGHUP, or killed by SIGKILL and then started again in the same folder, at each phase
of a burst (training, profile parsing); msrun ranks.  Real processes and signals; tiny bursts that stall on purpose
once the phase is reached, so each case takes seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import psutil
import pytest
from conftest import TINY_MLP, write_plan
from test_faults import none_left, processes_with, wait_for

from perftune.runner.cgroup import NO_CGROUP_ENV, TrialCgroup, containment_probe, driver_tag
from perftune.runner.leftovers import TOKEN_ENV
from perftune.runner.process import alive, child_setup, kill_group
from perftune.runner.reaper import TrialProcesses
from perftune.runner.watchdog import NO_WATCHDOG_ENV

REPO = Path(__file__).resolve().parent.parent


def escaping_plan(tmp_path: Path, marker: str, stall: str, **baseline) -> Path:
    return write_plan(tmp_path, name="esc", workload="tests.workloads_for_tests:escaping_trainer",
                      workload_params={**TINY_MLP, "marker": marker, "started_file": str(tmp_path / "started"),
                                       "stall": stall},
                      burst={"warmup_steps": 1, "steps": 2, "repeats": 1, "profile_steps": 1, "timeout_s": 300},
                      baseline={"batch_size": 32, "mode": "graph", "prefetch_size": 2, **baseline},
                      decision={"baseline_runs": 1})


def driver(*args: str, env: Optional[dict] = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "perftune.cli", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def sweep_driver(plan: Path, out: Path, **env: str) -> subprocess.Popen:
    return driver("sweep", str(plan), "--out", str(out), "--no-progress", "--no-report", env=env)


def reached(tmp_path: Path, phase: str, count: int = 1):
    def check() -> bool:
        try:
            return (tmp_path / "started").read_text().split().count(phase) >= count
        except OSError:
            return False
    return check


def sleepers(marker: str) -> list[psutil.Process]:
    """The escapees themselves (not the short-lived middle process of the double fork, which names the marker too)."""
    out = []
    for p in processes_with(marker):
        try:
            if p.cmdline()[2:3] == ["import time; time.sleep(300)"]:
                out.append(p)
        except psutil.Error:
            continue
    return out


def tokenless(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` without a trial token in their environment (gone ones left out)."""
    found = []
    for p in processes:
        try:
            if p.environ().get(TOKEN_ENV) is None:
                found.append(p)
        except psutil.Error:
            continue
    return found


def started_by(pid: int) -> list[psutil.Process]:
    """Live processes carrying a trial token of the driver ``pid`` (every process of its trials inherits one)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(TOKEN_ENV, "").startswith(f"{pid}-") and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def test_the_trial_cgroup_holds_every_descendant_and_is_killed_whole():
    probe = containment_probe()
    group, why = TrialCgroup.open(f"{driver_tag()}-test")
    if group is None:
        assert probe.startswith("process groups") and why in probe  # the fallback, named
        pytest.skip(f"cgroups are not writable here: {why}")
    assert probe.startswith("cgroup v2 per trial")
    dead = group.path.parent / "perftune-999999999-0-0"  # an empty cgroup of a driver that is gone
    dead.mkdir()
    containment_probe()
    assert not dead.exists() and group.path.exists()
    leader = subprocess.Popen([sys.executable, "-c", "import os, subprocess, sys, time\n"
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
                               "start_new_session=True)\nprint('go', flush=True); time.sleep(60)"],
                              preexec_fn=group.enter, stdout=subprocess.PIPE, text=True)
    assert leader.stdout.readline().strip() == "go"
    assert group.holds(leader.pid) and len(group.path.joinpath("cgroup.procs").read_text().split()) == 2
    killed = group.kill()
    assert leader.wait(timeout=10) == -signal.SIGKILL and len(killed) == 2
    assert not group.path.exists()


def test_sighup_while_the_burst_parses_its_profile_stops_the_sweep_and_everything_it_started(tmp_path):
    """(SIGHUP in the training phase: the resumed sweep of the next test.)"""
    phase = "profile"
    marker = f"perftune-test-hup-{os.getpid()}-{phase}"
    out = tmp_path / "out"
    sweep = sweep_driver(escaping_plan(tmp_path, marker, stall=phase), out)
    wait_for(reached(tmp_path, phase), f"the {phase} phase", sweep)
    wait_for(lambda: len(sleepers(marker)) == 2, "the grandchild and the daemon", sweep)
    sweep.send_signal(signal.SIGHUP)
    _, err = sweep.communicate(timeout=60)
    assert sweep.returncode == 129, err
    assert "terminated (SIGHUP)" in err and "resume with: perftune sweep" in err and "Traceback" not in err, err
    assert none_left(marker), [p.cmdline() for p in processes_with(marker)]
    assert not started_by(sweep.pid)


def escapee_forks_seen(marker: str) -> bool:
    """The first process naming the marker: the workload's build() is starting its escapees, the forks in flight."""
    return bool(processes_with(marker))


def test_sighup_while_the_build_forks_its_escapees_leaves_nothing_within_5_s_and_no_lock(tmp_path):
    """A closed terminal during a hostile workload's build(): SIGHUP at the first sight of its escapees (the setsid
    grandchild and the double fork in flight; 10 runs under load: experiments/benchmarks/sighup_build.py)."""
    marker = f"perftune-test-hup-{os.getpid()}-build"
    out = tmp_path / "out"
    sweep = sweep_driver(escaping_plan(tmp_path, marker, stall="train"), out)
    wait_for(lambda: escapee_forks_seen(marker), "the build's first escapee", sweep)
    sweep.send_signal(signal.SIGHUP)
    sent = time.monotonic()
    _, err = sweep.communicate(timeout=60)
    assert sweep.returncode == 129 and "terminated (SIGHUP)" in err and "Traceback" not in err, err
    assert none_left(marker, within=max(0.0, 5.0 - (time.monotonic() - sent))), \
        [p.cmdline() for p in processes_with(marker)]
    assert not started_by(sweep.pid) and not (out / ".perftune.lock").exists()


def test_sighup_stops_perftune_run_and_everything_it_started(tmp_path):
    marker = f"perftune-test-hup-{os.getpid()}-run"
    run = driver("run", str(escaping_plan(tmp_path, marker, stall="train")), "--out", str(tmp_path / "trial"))
    wait_for(reached(tmp_path, "train"), "the train phase", run)
    wait_for(lambda: len(sleepers(marker)) == 2, "the grandchild and the daemon", run)
    run.send_signal(signal.SIGHUP)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 129 and "terminated (SIGHUP)" in err and "Traceback" not in err, err
    assert none_left(marker) and not started_by(run.pid)


ESCAPER = ("import sys, time\n"
           "sys.path.insert(0, 'tests')\n"
           "from workloads_for_tests import _escapees\n"
           "_escapees(sys.argv[1]); print('go', flush=True); time.sleep(60)\n")


@pytest.mark.parametrize("cgroups", [True, False], ids=["cgroup", "fallback"])
def test_a_setsid_grandchild_and_a_daemon_are_killed_with_the_trial(monkeypatch, cgroups):
    """The runner's own clean-up (as after a time-out or Ctrl-C), with cgroups and with the fallback, which says
    which one held the trial."""
    if not cgroups:
        monkeypatch.setenv(NO_CGROUP_ENV, "1")
    marker = f"perftune-test-unit-{os.getpid()}-{cgroups}"
    procs = TrialProcesses()
    if cgroups and procs.cgroup is None:
        pytest.skip(f"cgroups are not writable here: {procs.why_not}")
    leader = subprocess.Popen([sys.executable, "-c", ESCAPER, marker], cwd=REPO, stdout=subprocess.PIPE, text=True,
                              env=procs.env(dict(os.environ)), start_new_session=True,
                              preexec_fn=child_setup(procs))
    procs.started(leader.pid)
    assert leader.stdout.readline().strip() == "go"
    wait_for(lambda: len(sleepers(marker)) == 2, "the escapees")
    assert procs.containment.startswith("cgroup v2" if cgroups else f"process groups, subreaper, per-trial token "
                                        f"and PDEATHSIG (no cgroup: {NO_CGROUP_ENV} is set)")
    procs.watch(leader.pid)
    kill_group(leader)
    procs.kill_leftovers()
    assert none_left(marker, within=2.0), [p.cmdline() for p in processes_with(marker)]


@pytest.mark.parametrize("phase", ["train", "profile"])
def test_a_killed_drivers_leftovers_are_killed_before_the_next_sweep_runs_anything(tmp_path, phase):
    marker = f"perftune-test-kill-{os.getpid()}-{phase}"
    out = tmp_path / "out"
    plan = escaping_plan(tmp_path, marker, stall=phase)
    first = sweep_driver(plan, out, **{NO_WATCHDOG_ENV: "1"})  # the backstop where the watchdog died too
    wait_for(reached(tmp_path, phase), f"the {phase} phase", first)
    wait_for(lambda: len(sleepers(marker)) == 2, "the grandchild and the daemon", first)
    first.kill()
    first.communicate(timeout=30)
    orphans = sleepers(marker)
    assert len(orphans) == 2  # SIGKILL cannot be handled: without the watchdog the escapees outlive the driver
    # the next sweep in the folder (a resume) kills them before its own burst starts, then stops on SIGHUP
    plan.write_text(plan.read_text().replace(f"stall: {phase}", "stall: train"))
    (tmp_path / "started").unlink()
    resume = sweep_driver(plan, out)
    wait_for(reached(tmp_path, "train"), "the resumed burst", resume)
    assert not any(alive(p) for p in orphans)  # (a zombie where this test process became a subreaper)
    resume.send_signal(signal.SIGHUP)
    _, err = resume.communicate(timeout=60)
    assert resume.returncode == 129, err
    assert "the dead driver had left running" in err, err
    assert none_left(marker) and not started_by(first.pid) and not started_by(resume.pid)


def test_msrun_ranks_and_their_escapees_left_by_a_killed_driver_are_killed_on_start(tmp_path):
    from perftune.commands import take_folder

    marker = f"perftune-test-kill-{os.getpid()}-msrun"
    out = tmp_path / "out"
    first = sweep_driver(escaping_plan(tmp_path, marker, stall="train", workers=2), out, **{NO_WATCHDOG_ENV: "1"})
    wait_for(reached(tmp_path, "train", count=2), "both ranks", first, timeout=180)
    wait_for(lambda: len(sleepers(marker)) == 4, "each rank's grandchild and daemon", first)
    first.kill()
    first.communicate(timeout=30)
    assert len(sleepers(marker)) == 4  # msrun's ranks die with msrun (PDEATHSIG); their escapees do not
    said: list[str] = []
    lock = take_folder(out, said.append)  # what a sweep or a resume does first
    lock.release()
    assert any("the dead driver had left running" in line for line in said), said
    assert none_left(marker) and not started_by(first.pid)


# -- issue 40: a killed driver leaves nothing running (runner/watchdog.py); 10 kills per case:
#    experiments/benchmarks/kill_driver.py

def of_driver(out: Path, pid: int) -> list[psutil.Process]:
    """Live processes naming the results folder or carrying a trial token of the driver ``pid``."""
    target = str(out.resolve())
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.pid != os.getpid() and p.status() != psutil.STATUS_ZOMBIE and (
                    target in " ".join(p.info["cmdline"] or []) or
                    p.environ().get(TOKEN_ENV, "").startswith(f"{pid}-")):
                found.append(p)
        except psutil.Error:
            continue
    return found


def gone_within(out: Path, pid: int, seconds: float = 5.0) -> list[psutil.Process]:
    deadline = time.monotonic() + seconds
    while (left := of_driver(out, pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def in_log(out: Path, text: str):
    def check() -> bool:
        return any(text in p.read_text(errors="replace") for p in out.glob("trials/*/burst.log"))
    return check


@pytest.mark.parametrize("path", ["cgroup", "fallback"])
@pytest.mark.parametrize("phase, line", [("start", "Profiler won't be using warmup"), ("parse", "Parsing:")])
def test_a_sigkilled_driver_leaves_no_process_of_its_trial_at_the_profilers_start_and_parse(tmp_path, path, phase,
                                                                                            line):
    """The battery's first: dataset workers forked from the burst (``preprocess_ms``) and the profiler's parser
    outlived a SIGKILLed driver; now the watchdog kills them (cgroup.kill, process groups, trial tokens)."""
    if path == "cgroup" and not containment_probe().startswith("cgroup"):
        pytest.skip("cgroups are not writable here")
    plan = write_plan(tmp_path, name="kill", workload_params={**TINY_MLP, "preprocess_ms": 1.0},
                      accuracy={"samples": 1024, "seeds": 1}, decision={"baseline_runs": 1},
                      burst={"warmup_steps": 3, "steps": 25, "repeats": 4, "profile_steps": 3, "timeout_s": 120})
    out = tmp_path / "out"
    first = sweep_driver(plan, out, **({NO_CGROUP_ENV: "1"} if path == "fallback" else {}))
    wait_for(in_log(out, line), f"the profiler's {phase}", first, timeout=240)
    assert of_driver(out, first.pid)
    first.kill()
    first.communicate(timeout=30)
    left = gone_within(out, first.pid)
    assert not left, [p.cmdline() for p in left]


@pytest.mark.parametrize("path", ["cgroup", "fallback"])
def test_a_sigkilled_driver_leaves_no_setsid_grandchild_or_daemon(tmp_path, path):
    if path == "cgroup" and not containment_probe().startswith("cgroup"):
        pytest.skip("cgroups are not writable here")
    marker = f"perftune-test-watchdog-{os.getpid()}-{path}"
    out = tmp_path / "out"
    first = sweep_driver(escaping_plan(tmp_path, marker, stall="train"), out,
                         **({NO_CGROUP_ENV: "1"} if path == "fallback" else {}))
    wait_for(reached(tmp_path, "train"), "the train phase", first)
    wait_for(lambda: len(sleepers(marker)) == 2, "the grandchild and the daemon", first)
    first.kill()
    first.communicate(timeout=30)
    assert none_left(marker, within=5.0), [p.cmdline() for p in processes_with(marker)]
    assert not gone_within(out, first.pid, 1.0)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can move a process out of its cgroup")
@pytest.mark.parametrize("kill", [False, True], ids=["trial-ends", "driver-sigkilled"])
def test_a_script_that_leaves_its_cgroup_leaves_nothing_running(tmp_path, kill):
    """The battery's second: a double-forked daemon writes its pid into the root cgroup.procs; the driver is the
    subreaper (its token names it) and the watchdog scans the tokens."""
    if not containment_probe().startswith("cgroup"):
        pytest.skip("cgroups are not writable here")
    marker = f"perftune-test-leaver-{os.getpid()}-{kill}"
    plan = write_plan(tmp_path, name="leaver", workload="tests.integrity_workloads:cgroup_leaver",
                      workload_params={**TINY_MLP, "marker": marker}, decision={"baseline_runs": 1},
                      burst={"warmup_steps": 1, "steps": 2, "repeats": 1, "profile_steps": 0, "timeout_s": 120})
    out = tmp_path / "out"
    first = sweep_driver(plan, out)
    wait_for(lambda: processes_with(marker), "the daemon", first, timeout=180)
    if kill:
        first.kill()
    _, err = first.communicate(timeout=300)
    assert kill or first.returncode == 0, err
    assert none_left(marker, within=5.0), [p.cmdline() for p in processes_with(marker)]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can move a process out of its cgroup")
def test_a_root_script_in_the_root_cgroup_whose_daemons_drop_the_token_leaves_nothing_and_is_named(tmp_path):
    """The battery's: a script writes its own pid into the root cgroup.procs, then starts double-forked, setsid'd
    daemons without the trial token (11 were left after a sweep).  They are re-parented to the sweep (its
    subreaper), killed at the trial's end as every descendant it inherited, and named in the trial's containment
    and the sweep's integrity notes.  (Once the driver is SIGKILLed they belong to init: the limit in
    perftune/README.md, "Faults and hostile folders".)"""
    if not containment_probe().startswith("cgroup"):
        pytest.skip("cgroups are not writable here")
    marker = f"perftune-test-root-escaper-{os.getpid()}"
    plan = write_plan(tmp_path, name="escaper", workload="tests.integrity_workloads:root_escaper",
                      workload_params={**TINY_MLP, "marker": marker, "daemons": 4}, decision={"baseline_runs": 1},
                      burst={"warmup_steps": 1, "steps": 2, "repeats": 1, "profile_steps": 0, "timeout_s": 120})
    out = tmp_path / "out"
    sweep = sweep_driver(plan, out)
    # the root script itself carries the marker (and the token) until it exits: wait for its 4 token-less daemons
    wait_for(lambda: len(tokenless(processes_with(marker))) >= 4, "the daemons", sweep, timeout=180)
    _, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 0, err
    assert none_left(marker, within=5.0), [p.cmdline() for p in processes_with(marker)]
    saved = json.loads((out / "results.json").read_text())
    containment = saved["trials"][0]["result"]["containment"]
    assert "4 process(es) escaped the trial's containment" in containment, containment
    assert "left the trial's cgroup and carried no trial token" in containment and marker in containment
    assert any("escaped the trial's containment" in line for line in saved["integrity"]), saved["integrity"]
