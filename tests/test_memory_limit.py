"""``burst.memory_limit_mb``: no memory cgroup is left behind by a dead driver.  The limit itself, the "oom" trial
and the sweep going on are ``test_range_sweep.py``'s fits sweep, under the same limit."""

from __future__ import annotations

import os
import subprocess

import pytest

from perftune.runner import memcg
from perftune.runner.cgroup import PREFIX
from perftune.runner.leftovers import kill_driver_leftovers

pytestmark = pytest.mark.skipif(memcg.memory_parent()[0] is None, reason="no memory cgroup can be used here")


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
