"""One plan swept locally and on a Ray cluster of two nodes started on this machine: wall time, processes, overlap.

Issue 16's closing figures: a sweep's wall time locally vs ``--executor ray`` on two loopback nodes (a head without
the ``perftune`` resource and two nodes with it, ``ray.cluster_utils.Cluster``), the processes each measured, how
much of the Ray sweep's process time ran on both nodes at once (the lanes), the node effect, and whether the verdicts
agree.  On one machine two "nodes" share the cores, so no gain is expected: both lanes' bursts compete (and flag each
other's windows as contended); this checks the machinery, not the speed-up a real cluster gives.

    .venv/bin/python experiments/benchmarks/ray_lanes.py [--out DIR]

Needs Ray (``pip install 'perftune[ray]'``).  Prints its figures last, with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from harness import REPO, fail, loadavg, log, out_dir

PLAN = """name: ray_lanes
workload: mlp
device: CPU
seed: 0
burst: {warmup_steps: 2, steps: 10, repeats: 3, profile_steps: 0, timeout_s: 180}
baseline: {batch_size: 32, mode: graph, num_parallel_workers: 1, prefetch_size: 2}
variables:
  prefetch_size: [4]
  num_parallel_workers: [2]
  batch_size: [64]
decision: {max_runs: 2, baseline_runs: 3, retry_on_stack: false}
"""


def sweep(plan: Path, out: Path, *extra: str) -> tuple[float, dict]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "perftune.cli", "sweep", str(plan), "--out", str(out), "--fresh",
                           "--no-progress", "--no-report", *extra], cwd=str(REPO), capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        fail(f"the sweep {' '.join(extra) or 'local'} exited {done.returncode}: {done.stdout[-2000:]}"
             f"{done.stderr[-2000:]}")
    return wall, json.loads((out / "results.json").read_text())


def spans(results: dict) -> list[tuple[str, float, float]]:
    out = []
    for t in results["trials"]:
        r = t["result"]
        if r.get("environment") and r.get("wall_s"):
            start = datetime.fromisoformat(r["environment"]["utc_time"]).timestamp()
            node = (r.get("node") or {}).get("host", "local") + ":" + ((r.get("node") or {}).get("node_id") or "")[:6]
            out.append((node, start, start + r["wall_s"]))
    return out


def busy_s(items: list[tuple[str, float, float]], nodes: int) -> float:
    """Seconds during which processes ran on at least ``nodes`` different nodes at once."""
    edges = sorted({x for _, a, b in items for x in (a, b)})
    total = 0.0
    for lo, hi in zip(edges, edges[1:]):
        mid = (lo + hi) / 2
        if len({n for n, a, b in items if a <= mid < b}) >= nodes:
            total += hi - lo
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="working folder (default $TMPDIR/perftune_bench/ray_lanes)")
    args = ap.parse_args()
    try:
        from ray.cluster_utils import Cluster
    except ImportError:
        fail("Ray is not installed: pip install 'perftune[ray]'")
    work = out_dir("ray_lanes", args.out)
    plan = work / "plan.yaml"
    plan.write_text(PLAN)
    before = loadavg()
    log("local sweep ...")
    local_wall, local = sweep(plan, work / "local")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    cluster = Cluster()
    try:
        t0 = time.perf_counter()
        cluster.add_node(num_cpus=1, object_store_memory=80 * 1024 * 1024, include_dashboard=False)
        for _ in range(2):
            cluster.add_node(num_cpus=1, object_store_memory=80 * 1024 * 1024, resources={"perftune": 1})
        cluster.wait_for_nodes()
        cluster_up = time.perf_counter() - t0
        log(f"cluster up in {cluster_up:.0f} s; Ray sweep ...")
        ray_wall, remote = sweep(plan, work / "ray", "--executor", "ray", "--address", cluster.address)
    finally:
        cluster.shutdown()
    after = loadavg()
    items = spans(remote)
    process_s = sum(b - a for _, a, b in items)
    some, both = busy_s(items, 1), busy_s(items, 2)
    verdicts = {t["label"]: t["verdict"] for t in local["trials"] if t["kind"] == "single"}
    ray_verdicts = {t["label"]: t["verdict"] for t in remote["trials"] if t["kind"] == "single"}
    print("\n# ray_lanes.py figures")
    print(f"load average before: {before}")
    print(f"load average after:  {after}")
    print(f"local sweep: {local_wall:.0f} s, {len(local['trials'])} processes "
          f"({local_wall / max(1, len(local['trials'])):.1f} s per process)")
    print(f"Ray sweep, 2 nodes on this machine: {ray_wall:.0f} s (cluster start {cluster_up:.0f} s not included), "
          f"{len(remote['trials'])} processes ({ray_wall / max(1, len(remote['trials'])):.1f} s per process)")
    print(f"  a process running on some node {some:.0f} s, on both nodes at once {both:.0f} s; the processes' "
          f"own wall times add up to {process_s:.0f} s" if items else "  no process times")
    print(f"  contended processes (the two nodes share 2 cores): "
          f"{sum(1 for t in remote['trials'] if t['result'].get('contended_windows'))} of {len(remote['trials'])}")
    nodes = remote.get("nodes") or {}
    print(f"  node effect (baseline throughput / the nodes' mean): {nodes.get('node_effect')}")
    print(f"verdicts local: {verdicts}")
    print(f"verdicts Ray:   {ray_verdicts}")


if __name__ == "__main__":
    main()
