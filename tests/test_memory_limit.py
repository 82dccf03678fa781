"""``burst.memory_limit_mb`` for real: the kernel kills a trial past the limit in its memory cgroup, the trial is
recorded "oom" with the cgroup's evidence, the sweep goes on, and no memory cgroup is left behind (also none a dead
driver left).  Measured here first (a wider MLP, graph mode, 2 cores, cgroup v1 memory): the trial's cgroup is
charged about 0.5 GB at batch 64 and past 0.6 GB at batch 4096, so 600 MB fits the one and kills the other."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import TINY_BURST, run_sweep_cli, write_plan

from perftune.runner import memcg
from perftune.runner.cgroup import PREFIX, driver_tag
from perftune.runner.leftovers import kill_driver_leftovers

WIDE_MLP = {"in_dim": 1024, "hidden": 2048, "layers": 2, "classes": 8, "train_samples": 8192, "val_samples": 128}
LIMIT_MB = 600

pytestmark = pytest.mark.skipif(memcg.memory_parent()[0] is None, reason="no memory cgroup can be used here")


def ours(parent) -> list[str]:
    return [p.name for p in parent.iterdir() if p.name.startswith(f"{PREFIX}{driver_tag()}-")]


def test_a_batch_past_the_limit_is_oom_and_the_sweep_goes_on(tmp_path):
    plan = write_plan(tmp_path, workload_params=WIDE_MLP,
                      burst={**TINY_BURST, "steps": 4, "profile_steps": 0, "memory_limit_mb": LIMIT_MB},
                      baseline={"batch_size": 64, "mode": "graph", "prefetch_size": 2},
                      variables={"batch_size": [4096], "kernel_threads": [1]}, decision={"baseline_runs": 2, "max_runs": 1})
    out = tmp_path / "out"
    result = run_sweep_cli(plan, out)
    assert result.exit_code == 0, result.output
    assert f"memory of each trial limited to {LIMIT_MB} MB by a cgroup" in result.output
    done = json.loads((out / "results.json").read_text())
    assert done["status"] == "complete"
    by_label = {t["label"]: t for t in done["trials"] if t["kind"] in ("single", "baseline")}
    oom = by_label["+batch_size=4096"]
    assert oom["verdict"] == "oom" and oom["result"]["status"] == "oom", oom["reason"]
    assert "out-of-memory killer struck" in oom["reason"] and f"burst.memory_limit_mb={LIMIT_MB}" in oom["reason"]
    assert "oom_kill 1 in memory." in oom["reason"] and not oom["result"]["retry_on_resume"]
    assert by_label["baseline"]["result"]["status"] == "ok"
    assert "memory limited to 600 MB" in by_label["baseline"]["result"]["containment"]
    after = by_label["+kernel_threads=1"]  # measured after the oom: the sweep went on
    assert after["result"]["status"] == "ok" and "peak host memory x" in after["reason"]
    assert ours(memcg.memory_parent()[0]) == []  # every trial's memory cgroup removed


def test_a_dead_driver_s_memory_cgroups_are_removed_with_their_processes():
    parent, version, _ = memcg.memory_parent()
    if version != 1:
        pytest.skip("cgroup v2: the memory limit is on the trial's own cgroup, removed with it")
    tag = "999999999-deadbeef"  # no such pid: a driver that is gone
    stale = parent / f"{PREFIX}{tag}-1"
    stale.mkdir()
    fd = os.open(stale / "cgroup.procs", os.O_WRONLY)
    try:
        proc = subprocess.Popen(["sleep", "60"], pass_fds=(fd,),
                                preexec_fn=lambda: os.write(fd, b"0"))
    finally:
        os.close(fd)
    assert str(proc.pid) in (stale / "cgroup.procs").read_text().split()
    kill_driver_leftovers(tag)
    assert proc.wait(timeout=10) == -9 and not stale.exists()
