"""Shared fixtures: small REAL sweeps, run once per test session and shared by every test that reads results.

Bursts are real MindSpore processes (a few seconds each), so the fixtures keep workloads tiny and reuse results.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# A suite started as a background job of a non-interactive shell (``.ci/run &``) inherits SIGINT ignored, and so does
# every process it starts: the Ctrl-C tests then test the launcher, not perftune (4 of them failed that way).  A
# Python handler here is reset to the default in every child at exec, so the sweeps they start get KeyboardInterrupt.
signal.signal(signal.SIGINT, signal.default_int_handler)

#: modules whose tests start real processes (bursts, sweeps, msrun, a Ray cluster): ``slow``, left out of the fast
#: subset ``pytest -m "not slow"`` (README: the edit-test loop); the full suite runs them all
SLOW_MODULES = {
    "test_burst", "test_burst_exit", "test_containment", "test_distributed", "test_executor_option", "test_faults",
    "test_graph_cache", "test_integrity", "test_integrity_resume", "test_mindcv_phases", "test_phase_routes",
    "test_ray", "test_script_loop", "test_script_workload", "test_step_equivalence", "test_sweep",
    "test_sweep_signals", "test_user_files", "test_mindformers", "test_eager_sweep", "test_batch_accuracy",
    "test_range_sweep",
}
#: fixtures that run a real sweep: every test that reads one is ``slow`` too
SWEEP_FIXTURES = {
    "quick_sweep", "lm_sweep", "eager_sweep", "batch_sweep", "compare_runs", "own_sweep", "rendered", "sealed",
}


#: the modules reading each session sweep: one pytest-xdist work unit per sweep (``pytest_xdist_make_scheduler``), so
#: each runs once, and the two run on two workers; a reader elsewhere stops the collection
SHARED_SWEEP_MODULES = {
    "quick_sweep": {"test_sweep", "test_efficiency", "test_export", "test_report"},
    "lm_sweep": {"test_lm_view"},
}
#: a module's work unit when it reads a session sweep
SWEEP_UNIT = {module: f"{sweep} readers" for sweep, modules in SHARED_SWEEP_MODULES.items() for module in modules}


#: the work units that keep a worker busy half a minute or more (``pytest --durations=0``, idle), longest first:
#: started first, so that the short units fill the other worker's time at the end (longest processing time first)
#: instead of a long sweep starting last and running alone
LONGEST_FIRST = [
    "test_range_sweep", "test_containment", "test_ray", "test_faults", "test_distributed", "test_burst",
    "test_integrity_resume", "test_step_equivalence", "test_own_knobs", "test_integrity", "test_compare",
    "lm_sweep readers", "test_graph_cache", "test_ci_workflow", "test_script_workload", "test_model_train_lm",
    "quick_sweep readers", "test_eager_sweep",
]


def module_of(item) -> str:
    return item.module.__name__.rpartition(".")[2] if item.module else ""


def unit_of(item) -> str:
    """The xdist work unit a test belongs to: its session sweep's readers, or its module."""
    return SWEEP_UNIT.get(module_of(item), module_of(item))


def pytest_collection_modifyitems(items):
    for item in items:
        module = module_of(item)
        fixtures = set(getattr(item, "fixturenames", ()))
        if module in SLOW_MODULES or SWEEP_FIXTURES & fixtures:
            item.add_marker(pytest.mark.slow)
        for sweep in SHARED_SWEEP_MODULES.keys() & fixtures:
            if module not in SHARED_SWEEP_MODULES[sweep]:
                raise pytest.UsageError(f"{item.nodeid} reads {sweep}: add {module} to SHARED_SWEEP_MODULES "
                                        "(tests/conftest.py), or the sweep runs again on another xdist worker")
    # the order xdist hands out work units (``pytest_xdist_make_scheduler``): the longest, then the rest of the units
    # that start processes, then the ones that start none; a unit's tests stay together and in their order
    slow_units = {unit_of(i) for i in items if i.get_closest_marker("slow")}

    def rank(item) -> tuple[int, int]:
        unit = unit_of(item)
        if unit in LONGEST_FIRST:
            return 0, LONGEST_FIRST.index(unit)
        return (1 if unit in slow_units else 2), 0

    items.sort(key=rank)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which would answer first
def pytest_xdist_make_scheduler(config, log):
    """Work units of pytest-xdist: a module's tests stay together (its module fixtures, often a real sweep, run
    once), and the modules reading one session sweep form one unit.  A scheduler of our own because xdist 3.8's
    ``loadgroup`` marks have no effect under pytest 9.2 (it renames ``item._nodeid``, which pytest 9.2 no longer
    reads: every test was its own unit, and the eager sweep ran on both workers)."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # the units in collection order (``LONGEST_FIRST``), not by test count

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SWEEP_UNIT.get(Path(path).stem, path)

    return ByModule(config, log)


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker more than the cores, at most 4 (each real burst is a MindSpore process of ~0.5 GB, and
    the timing bounds of the signal tests assume a machine that is not oversubscribed several times over).  The extra
    worker fills the time the others wait (a process starting, a time-out test sleeping, a Ray or msrun cluster
    coming up): on 2 cores the slow tests took 639 s with 3 workers against 667 s with 2, idle, and the whole suite
    765-812 s against 874-982 s beside a busy core, whose one thread the suite's processes then outnumber 3 to 1
    (README, "Tests")."""
    import os

    return max(1, min(len(os.sched_getaffinity(0)) + 1, 4))


#: a small, fast MLP: bursts of a few seconds
TINY_MLP = {"in_dim": 64, "hidden": 128, "layers": 2, "classes": 8, "train_samples": 1024, "val_samples": 128}
#: no profiled steps: the profiler and its parser are about a second of each ~5 s burst (measured side by side,
#: ``perftune run`` of this plan with 2 and 0 profiled steps); the tests that read splits ask for them (``PROFILED``)
TINY_BURST = {"warmup_steps": 1, "steps": 8, "repeats": 2, "profile_steps": 0, "timeout_s": 120}
PROFILED = {**TINY_BURST, "profile_steps": 2}


def write_plan(folder: Path, **fields) -> Path:
    plan = {
        "name": "t",
        "workload": "mlp",
        "workload_params": dict(TINY_MLP),
        "burst": dict(TINY_BURST),
        "baseline": {"batch_size": 32, "mode": "graph", "prefetch_size": 2},
        "decision": {"baseline_runs": 2, "max_runs": 2},
        # the window fixed (batch x steps) and one seed: no sizing probes and no seed runs, which these tests do not
        # look at; the gate's own tests pass ``accuracy=`` (test_batch_accuracy: three seeds; test_accuracy_gate: sizing)
        "accuracy": {"samples": 256, "seeds": 1},
    }
    plan.update(fields)
    # no re-measuring of a process the machine contended: a test's count of processes, and so the suite's time, must
    # not depend on the load; paired processes of 2 short ABBA blocks (the default 6 x 0.5 s made one paired MLP
    # process 20-100 s).  A test that looks at either says so in its own decision
    plan["decision"] = {"remeasure_contended": 0, "paired_blocks": 2, "paired_window_s": 0.1, **plan["decision"]}
    # and every process the plan's windows: a repeat chooses its count from the first process's spread and cost
    # (engine/window_count.py, tested on scripted sweeps), up to 40 windows where a short window straddles an epoch's
    # end (a 4-step window of an 8-step epoch: 47 s of a 9-process fits sweep's 143 s)
    # and a warm-up drain of at most half a second: a compute-bound step never empties its queue, so the drain runs
    # to its cap (16 steps: 4 s of a 250 ms step in the fits sweep's processes); the drain's own tests set theirs
    plan["burst"] = {"windows": "fixed", "drain_s": 0.5, **plan["burst"]}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{plan['name']}.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


@contextmanager
def tmpfs(path: Path, size: str):
    """A small tmpfs mounted at ``path`` (made here): a disk that fills up or turns read-only, for real."""
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode:
        pytest.skip("needs to mount a small tmpfs (root with CAP_SYS_ADMIN)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def run_sweep_cli(plan_path: Path, out: Path, *extra: str):
    from perftune.cli import main
    from perftune.compat import cli_runner

    runner = cli_runner()
    return runner.invoke(main, ["sweep", str(plan_path), "--out", str(out), "--no-progress", *extra],
                         catch_exceptions=False)


@pytest.fixture(scope="session", autouse=True)
def peak_cache(tmp_path_factory):
    """An empty peak cache for the whole session: reports never pick up a peak measured on this machine before
    (``perftune peak`` writes ~/.cache/perftune/peak.json); tests that need one write it themselves."""
    import os

    from perftune.io.peak_cache import CACHE_ENV

    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("peak_cache"))
    yield Path(os.environ[CACHE_ENV])
    if before is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = before


@pytest.fixture(scope="session")
def quick_sweep(tmp_path_factory) -> Path:
    """A real, data-bound sweep: each sample sleeps 0.5 ms in the Python map (as slow storage would), so with one
    data worker the graph-mode step waits for its batch.  Tests read its files and plumbing, never which
    configuration the machine ran faster (decisions are tested on scripted measurements: test_sweep_logic.py).

    Returns the sweep's output folder (results.json, trials/, ablation.*, report.html).
    """
    folder = tmp_path_factory.mktemp("quick_sweep")
    plan = write_plan(folder, name="quick", workload_params={**TINY_MLP, "preprocess_ms": 0.5},
                      variables={"mode": ["pynative"], "num_parallel_workers": [2]}, decision={"max_runs": 2},
                      burst=dict(PROFILED))
    out = folder / "out"
    result = run_sweep_cli(plan, out)
    assert result.exit_code == 0, result.output
    return out


#: a tiny tiny_gpt (1 layer, d_model 64, 16-byte windows): bursts of seconds, still a real byte-level LM
TINY_GPT = {"d_model": 64, "n_layers": 1, "n_heads": 4, "seq_len": 16, "train_samples": 256, "val_samples": 16,
            "corpus_bytes": 50_000}


@pytest.fixture(scope="session")
def lm_sweep(tmp_path_factory) -> tuple[Path, str]:
    """A real tiny_gpt sweep (baseline + ``recompute=true``, one baseline run) with the progress lines on: what a
    language-model user reads.  Returns the output folder and everything the command printed (stdout + stderr)."""
    from click.testing import CliRunner

    from perftune.cli import main

    folder = tmp_path_factory.mktemp("lm_sweep")
    plan = write_plan(folder, name="lm", workload="tiny_gpt", workload_params=dict(TINY_GPT),
                      burst={**PROFILED, "steps": 4, "timeout_s": 240}, baseline={"batch_size": 8, "mode": "graph"},
                      # one fresh process a side: what the tests read is the view, not the verdict (paired processes
                      # and more rounds were 4 of 7 processes; paired rows' figures: test_user_messages.py)
                      variables={"recompute": [True]}, decision={"baseline_runs": 1, "max_runs": 1, "paired": False})
    out = folder / "out"
    result = CliRunner().invoke(main, ["sweep", str(plan), "--out", str(out), "--progress"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out, result.output
