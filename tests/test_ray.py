"""``perftune sweep --executor ray`` on a real Ray cluster started on this machine (loopback).

The cluster (``ray.cluster_utils.Cluster``): a head that runs no trial (no ``perftune`` resource) and two worker
nodes with ``perftune: 1`` each, as experiments/README.md's ``ray start`` lines set up real machines.  The sweeps are real
bursts, started as a separate driver process (``python -m perftune.cli sweep``), so a test can kill a node or the
driver while a trial runs.  Tests check files, records and clean-up, never which configuration ran faster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO, TINY_MLP, write_plan

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'perftune[ray]'; the test extra has it)")
pytestmark = pytest.mark.ray

BURST = {"warmup_steps": 1, "steps": 6, "repeats": 2, "profile_steps": 2, "timeout_s": 180}
NODE_ARGS = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "resources": {"perftune": 1}}


def ray_processes(pids: set[int]) -> list[psutil.Process]:
    alive = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def start_cluster():
    """Head + two trial nodes.  Ray gives a node 30 s to register (hard-coded); on this loaded 2-core machine that
    is sometimes too short, so one more try before the test fails."""
    from ray.cluster_utils import Cluster

    for attempt in range(2):
        c = Cluster()
        try:
            c.add_node(num_cpus=1, object_store_memory=80 * 1024 * 1024, include_dashboard=False)  # head: no trials
            c.workers = [c.add_node(**NODE_ARGS) for _ in range(2)]
            c.wait_for_nodes()
            return c
        except Exception:
            c.shutdown()
            if attempt:
                raise
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def cluster():
    """Head (no trials) + two worker nodes offering ``perftune: 1``; shut down, and checked gone, at the end."""
    print(f"\n[uptime] {os.getloadavg()}", file=sys.stderr)
    old_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), old_path) if p)  # the nodes run this tree
    started = time.perf_counter()
    # this test process may already have children (an earlier in-process sweep's watchdog lives as long as its
    # driver, this process): only what appears from here on is the cluster's
    before = {p.pid for p in descendants(os.getpid())}
    c = None
    try:
        c = start_cluster()
        print(f"[cluster up in {time.perf_counter() - started:.0f} s]", file=sys.stderr)
        yield c
    finally:
        ours = {p.pid for p in descendants(os.getpid())} - before
        if c is not None:
            c.shutdown()
        if old_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_path
        deadline = time.monotonic() + 30
        while ray_processes(ours) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = ray_processes(ours)
        for p in left:  # only processes this fixture's cluster started, by pid
            p.kill()
        assert not left, f"Ray processes outlived the cluster: {[p.cmdline()[:4] for p in left]}"


def start_sweep(plan: Path, out: Path, address: str, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "perftune.cli", "sweep", str(plan), "--out", str(out), "--no-progress",
           "--executor", "ray", "--address", address, *extra]
    return subprocess.Popen(cmd, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout: float = 400) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the sweep did not finish in {timeout:g} s:\n{out}")
    return out


def bursts_on(node) -> list[psutil.Process]:
    """The burst processes running under ``node``'s raylet (ours only, not other sessions' bursts); a burst that
    ends while this looks (a zombie, or gone) is not running."""
    found = []
    for p in descendants(node.all_processes["raylet"][0].process.pid):
        try:
            if "perftune.burst" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.Error:
            pass
    return found


@pytest.fixture
def sweeps():
    """The sweep drivers a test started: any still running when it ends (a failed test) is killed, so it cannot
    run on into the next test's cluster."""
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def span(result: dict) -> tuple[float, float]:
    """When a trial's burst ran (its start, to the second, and its wall time)."""
    from datetime import datetime

    start = datetime.fromisoformat(result["environment"]["utc_time"]).timestamp()
    return start, start + result["wall_s"]


def test_a_sweep_on_two_nodes_has_the_local_layout_and_records_its_nodes(cluster, tmp_path, sweeps):
    plan = write_plan(tmp_path, name="rayt", workload_params=dict(TINY_MLP), burst=BURST,
                      variables={"prefetch_size": [4]}, decision={"baseline_runs": 2})
    out = tmp_path / "out"
    started = time.perf_counter()
    proc = start_sweep(plan, out, cluster.address)
    sweeps.append(proc)
    log = finish(proc)
    print(f"[ray sweep: {time.perf_counter() - started:.0f} s, load {os.getloadavg()}]", file=sys.stderr)
    assert proc.returncode == 0, log
    for name in ("results.json", "ablation.md", "ablation.csv", "report.html"):
        assert (out / name).is_file(), name
    results = json.loads((out / "results.json").read_text())
    assert results["command"].endswith(f"--executor ray --address {cluster.address}")
    trials = results["trials"]
    kinds = [t["kind"] for t in trials]
    assert kinds[0] == "baseline" and kinds.count("single") == 1 and kinds.count("baseline") >= 2, kinds
    worker_ids = {n.node_id for n in cluster.workers}
    for t in trials:
        folder = out / "trials" / t["trial_id"]
        assert {"trial.json", "spec.json", "burst.log"} <= {p.name for p in folder.iterdir()}
        record = json.loads((folder / "trial.json").read_text())
        assert record["status"] == "ok" and record["node"]["node_id"] in worker_ids
        assert record["node"] == t["result"]["node"] and record["node"]["attempts"] == 1
        if record["profile"] and record["profile"]["profile_dir"]:  # the profile came back with the trial
            assert (folder / record["profile"]["profile_dir"]).is_dir()
    # the two baseline runs went to the two nodes, so each node can compare with a baseline of its own
    assert {t["result"]["node"]["node_id"] for t in trials if t["kind"] == "baseline"} == worker_ids
    # the race's round ran on both nodes at once (one lane per node): some trials of different nodes overlapped
    spans = [(t["result"]["node"]["node_id"], *span(t["result"])) for t in trials]
    assert any(a[0] != b[0] and a[1] < b[2] and b[1] < a[2] for a in spans for b in spans), spans
    nodes = results["nodes"]  # the node effect and the single's ratio to the baseline of each node that ran it
    assert set(nodes["trials_per_node"]) == worker_ids and set(nodes["node_effect"]) == worker_ids
    [single] = nodes["blocked"]
    assert single["label"] == "+prefetch_size=4" and set(single["per_node_ratio"]) <= worker_ids
    own = next(t for t in trials if t["label"] == "+prefetch_size=4" and t["kind"] == "single")
    assert single["comparison"] == own["vs_baseline"]  # one verdict per configuration: the sweep's own
    assert "vs the baseline of its node" in log
    for command in (["report", str(out)], ["compare", str(out), str(out), "--threshold", "50%"]):
        done = subprocess.run([sys.executable, "-m", "perftune.cli", *command], cwd=str(REPO),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    assert "Ray cluster: node " in (out / "report.html").read_text()  # the node effect, shown in the report
    import perftune

    assert set(perftune.load_results(out).trials["node_id"]) == worker_ids
    # resume: every trial reused, nothing sent to the cluster again
    again = start_sweep(plan, out, cluster.address)
    sweeps.append(again)
    assert again.wait(timeout=120) == 0
    resumed = json.loads((out / "results.json").read_text())["trials"]
    assert len(resumed) == len(trials) and all(t["reused"] for t in resumed)


def test_ctrl_c_on_the_driver_stops_the_remote_bursts_of_every_lane(cluster, tmp_path, sweeps):
    # windows of at least 2 s: each lane's burst times 6 s or more whatever the machine's speed, so the two lanes'
    # bursts overlap (40-step windows on a busy core once let the sweep end before both were seen at once)
    plan = write_plan(tmp_path, name="rayint", workload_params=dict(TINY_MLP),
                      burst={**BURST, "steps": 40, "repeats": 3, "profile_steps": 0, "min_window_s": 2.0},
                      variables={"prefetch_size": [4]}, decision={"baseline_runs": 1})
    out = tmp_path / "out"
    proc = start_sweep(plan, out, cluster.address)
    sweeps.append(proc)
    bursts: list[psutil.Process] = []
    deadline = time.monotonic() + 300
    while len(bursts) < 2 and time.monotonic() < deadline and proc.poll() is None:  # both lanes running
        bursts = [b for node in cluster.workers for b in bursts_on(node)]
        time.sleep(0.2)
    assert len(bursts) == 2, f"the two lanes never ran at once: {proc.poll()}"
    proc.send_signal(signal.SIGINT)
    log = finish(proc, timeout=60)
    assert proc.returncode == 130, log
    assert "resume with: perftune sweep" in log and "--executor ray" in log
    gone, alive = psutil.wait_procs(bursts, timeout=30)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], "a remote burst outlived the Ctrl-C"
    assert json.loads((out / "results.json").read_text())["status"] == "interrupted"
    assert not [b for node in cluster.workers for b in bursts_on(node)], "a lane sent a trial after the Ctrl-C"


def test_a_node_that_dies_mid_trial_is_replaced_and_recorded(cluster, tmp_path, sweeps):
    plan = write_plan(tmp_path, name="raykill", workload_params=dict(TINY_MLP),
                      burst={**BURST, "steps": 30, "repeats": 3}, decision={"baseline_runs": 1})
    out = tmp_path / "out"
    proc = start_sweep(plan, out, cluster.address)
    sweeps.append(proc)
    victim, burst = None, None
    deadline = time.monotonic() + 180
    while victim is None and time.monotonic() < deadline and proc.poll() is None:
        for node in cluster.workers:
            found = bursts_on(node)
            if found:
                victim, burst = node, found[0]
                break
        time.sleep(0.2)
    assert victim is not None, "no burst started on a worker node"
    cluster.remove_node(victim, allow_graceful=False)  # the machine is gone, mid-burst
    cluster.workers = [n for n in cluster.workers if n is not victim]
    log = finish(proc)
    assert proc.returncode == 0, log
    psutil.wait_procs([burst], timeout=30)
    assert not burst.is_running() or burst.status() == psutil.STATUS_ZOMBIE, "the burst outlived its node"
    record = json.loads((out / "results.json").read_text())["trials"][0]["result"]
    node = record["node"]
    print(f"[lost run recorded as: {node['lost']}]", file=sys.stderr)
    assert node["attempts"] == 2 and len(node["lost"]) == 1, node
    assert record["status"] == "ok" and node["node_id"] == cluster.workers[0].node_id


def test_a_killed_workers_trial_folder_is_removed_by_the_nodes_next_task(tmp_path):
    """A Ray worker killed under its task (a lost node, Ctrl-C's forced cancel) leaves its trial folder in the node's
    temporary folder; the node's next task (``run_on_node``) removes every folder whose worker pid is gone and
    leaves a running worker's alone.  Real processes: one that has exited, and this one."""
    from perftune.runner.ray_executor import remove_orphans

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp_path / f"{gone.pid}-abc123"
    (dead / "5a92e651d8fe").mkdir(parents=True)
    (dead / "5a92e651d8fe" / "spec.json").write_text("{}")
    live = tmp_path / f"{os.getpid()}-def456"
    live.mkdir()
    stranger = tmp_path / "notes"
    stranger.mkdir()
    assert remove_orphans(tmp_path) == [dead]
    assert not dead.exists() and live.exists() and stranger.exists()
