"""Shared fixtures: small REAL sweeps, run once per test session and shared by every test that reads results.

Bursts are real MindSpore processes (a few seconds each), so the fixtures keep workloads tiny and reuse results.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

#: a small, fast MLP: bursts of a few seconds
TINY_MLP = {"in_dim": 64, "hidden": 128, "layers": 2, "classes": 8, "train_samples": 1024, "val_samples": 128}
TINY_BURST = {"warmup_steps": 1, "steps": 8, "repeats": 2, "profile_steps": 2, "timeout_s": 120}


def write_plan(folder: Path, **fields) -> Path:
    plan = {
        "name": "t",
        "workload": "mlp",
        "workload_params": dict(TINY_MLP),
        "burst": dict(TINY_BURST),
        "baseline": {"batch_size": 32, "mode": "graph", "prefetch_size": 2},
        "decision": {"baseline_runs": 2, "max_runs": 2},
    }
    plan.update(fields)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{plan['name']}.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def run_sweep_cli(plan_path: Path, out: Path, *extra: str):
    from perftune.compat import cli_runner

    from perftune.cli import main

    runner = cli_runner()
    return runner.invoke(main, ["sweep", str(plan_path), "--out", str(out), "--no-progress", *extra],
                         catch_exceptions=False)


@pytest.fixture(scope="session")
def quick_sweep(tmp_path_factory) -> Path:
    """A real, data-bound sweep: each sample sleeps 0.5 ms in the Python map (as slow storage would), so with one
    data worker the graph-mode step waits for its batch.  Tests read its files and plumbing, never which
    configuration the machine ran faster (decisions are tested on scripted measurements: test_sweep_logic.py).

    Returns the sweep's output folder (results.json, trials/, ablation.*, report.html).
    """
    folder = tmp_path_factory.mktemp("quick_sweep")
    plan = write_plan(folder, name="quick", workload_params={**TINY_MLP, "preprocess_ms": 0.5},
                      variables={"mode": ["pynative"], "num_parallel_workers": [2]}, decision={"max_runs": 2})
    out = folder / "out"
    result = run_sweep_cli(plan, out)
    assert result.exit_code == 0, result.output
    return out
