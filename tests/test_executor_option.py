"""``--executor`` / ``--address`` and the plan's ``executor`` field: mistakes and a missing Ray are one line, exit 2."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO, write_plan

NO_RAY = "import sys; sys.modules['ray'] = None; from perftune.cli import main; sys.argv[0] = 'perftune'; main()"


def perftune(*args: str, block_ray: bool = False) -> subprocess.CompletedProcess:
    head = ["-c", NO_RAY] if block_ray else ["-m", "perftune.cli"]
    return subprocess.run([sys.executable, *head, *args], cwd=str(REPO), capture_output=True, text=True, timeout=120)


def test_without_ray_the_ray_executor_says_what_to_install(tmp_path):
    plan = write_plan(tmp_path)
    done = perftune("sweep", str(plan), "--out", str(tmp_path / "out"), "--executor", "ray", block_ray=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("perftune: --executor ray needs Ray, which is not installed: "
                                   "pip install 'perftune[ray]'")
    assert not (tmp_path / "out" / "trials").exists()


def test_the_plan_field_chooses_the_executor_and_is_validated(tmp_path):
    plan = write_plan(tmp_path, executor="ray")
    done = perftune("sweep", str(plan), "--out", str(tmp_path / "out"), block_ray=True)
    assert done.returncode == 2 and "pip install 'perftune[ray]'" in done.stderr
    bad = write_plan(tmp_path, name="bad", executor="dask", ray={"max_attempts": 0})
    done = perftune("validate", str(bad))
    assert done.returncode == 2
    assert "executor: Input should be 'local' or 'ray'" in done.stderr and "ray.max_attempts" in done.stderr


def test_address_needs_the_ray_executor(tmp_path):
    plan = write_plan(tmp_path)
    done = perftune("sweep", str(plan), "--out", str(tmp_path / "out"), "--address", "10.0.0.1:6379")
    assert done.returncode == 2
    assert done.stderr.strip() == "perftune: --address: only with --executor ray (or executor: ray in the plan)"
