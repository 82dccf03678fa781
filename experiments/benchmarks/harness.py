"""The benchmarks' parent side (not part of perftune's API; see README.md here): plans, perftune bursts, the load
average, small statistics, the failure exit, and ``run_child`` to run a measurement of ``children.py`` in a fresh
interpreter (MindSpore's context is process-global, and the spread that matters is the one between processes)."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
HERE = Path(__file__).resolve().parent
EXIT_CANNOT_MEASURE = 2

#: a small but real tiny_gpt (2 blocks, d=64, seq 64: about 0.1 M parameters): a burst takes seconds on 2 cores
SMALL_GPT = {"d_model": 64, "n_layers": 2, "n_heads": 4, "seq_len": 64, "train_samples": 2048, "val_samples": 64,
             "corpus_bytes": 300_000}
#: the mlp workload's defaults (256-512-512-16, 0.4 M parameters)
SMALL_MLP: dict = {}
WORKLOADS = {"tiny_gpt": (SMALL_GPT, 16), "mlp": (SMALL_MLP, 32)}  # name -> (params, batch size)


class CannotMeasure(Exception):
    """The benchmark could not produce its figures (a burst failed, a child died ...): exit status 2."""


def fail(message: str) -> None:
    print(f"CANNOT MEASURE: {message}", flush=True)
    sys.exit(EXIT_CANNOT_MEASURE)


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unavailable"


def load1() -> Optional[float]:
    try:
        return float(loadavg().split()[0])
    except (ValueError, IndexError):
        return None


def out_dir(name: str, given: Optional[str]) -> Path:
    path = Path(given) if given else Path(tempfile.gettempdir()) / "perftune_bench" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_plan(**fields):
    """A validated perftune ``Plan`` (name defaults to 'bench')."""
    from perftune.engine.plan_load import parse_plan

    data = {"name": "bench", **fields}
    return parse_plan(data, "benchmark plan")


def run_burst(plan, knobs: dict, trial_dir: Path, label: str = "trial", replicate: int = 0,
              cache_dir: Optional[Path] = None):
    """One perftune burst (``perftune.runner.run_trial``: a fresh ``python -m perftune.burst`` process)."""
    from perftune.engine.specs import make_spec
    from perftune.runner import run_trial

    spec = make_spec(plan, knobs, label, replicate, cache_dir)
    return run_trial(spec, trial_dir)


def require_ok(result, what: str):
    if result.status != "ok":
        tail = (result.log_tail or "").splitlines()[-5:]
        raise CannotMeasure(f"{what}: status {result.status}: {result.reason}\n    " + "\n    ".join(tail))
    return result


def phase_seconds(result) -> dict[str, float]:
    """Seconds spent in the steps of each burst phase (accuracy includes the first, compiling step)."""
    out = {"accuracy": 0.0, "warmup": 0.0, "timed": 0.0, "profiled": 0.0}
    for s in result.steps:
        out[s.phase] = out.get(s.phase, 0.0) + s.step_ms / 1e3
    return out


def phase_counts(result) -> dict[str, int]:
    out = {"accuracy": 0, "warmup": 0, "timed": 0, "profiled": 0}
    for s in result.steps:
        out[s.phase] = out.get(s.phase, 0) + 1
    return out


def fixed_cost(result) -> dict[str, float]:
    """A trial's wall time split into the timed windows (what it is for) and everything else (its fixed cost).

    From ``trial.json`` alone: ``wall_s`` is the launcher's (process start to exit), the steps carry their phase.
    ``rest_s`` is what no step covers: process start, imports, building the workload and the dataset, validation
    and the greedy sample, profile parsing, writing the result.
    """
    ph = phase_seconds(result)
    wall = float(result.wall_s or 0.0)
    compile_s = (result.compile_ms or 0.0) / 1e3
    analyse = float(result.profile.analyse_s or 0.0) if result.profile else 0.0
    steps_total = sum(ph.values())
    fixed = wall - ph["timed"]
    return {
        "wall_s": wall,
        "timed_s": ph["timed"],
        "fixed_s": fixed,
        "fixed_share": fixed / wall if wall else float("nan"),
        "compile_s": compile_s,
        "accuracy_steps_s": ph["accuracy"] - compile_s,
        "warmup_s": ph["warmup"],
        "profiled_steps_s": ph["profiled"],
        "analyse_s": analyse,
        "rest_s": wall - steps_total - analyse,
    }


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def geomean(values: Sequence[float]) -> float:
    return float(math.exp(sum(math.log(v) for v in values) / len(values)))


def cv(values: Sequence[float]) -> float:
    """Coefficient of variation (sample SD / mean)."""
    if len(values) < 2:
        return float("nan")
    return float(statistics.stdev(values) / statistics.mean(values))


def run_child(command: str, args: dict, timeout_s: float = 600, cwd: Optional[Path] = None) -> dict:
    """Run ``children.py COMMAND`` in a fresh interpreter; return its JSON answer (last stdout line).

    ``launch_time`` (``time.time()`` just before the start) goes along, so the child can say how long the
    interpreter took to reach its first line."""
    payload = json.dumps({**args, "launch_time": time.time()})
    env = dict(os.environ)
    env.setdefault("GLOG_v", "2")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    started = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, str(HERE / "children.py"), command, payload], capture_output=True,
                              text=True, timeout=timeout_s, env=env, cwd=str(cwd) if cwd else None,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise CannotMeasure(f"child '{command}' ran past {timeout_s:g} s") from None
    wall = time.perf_counter() - started
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        tail = "\n    ".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise CannotMeasure(f"child '{command}' exited {proc.returncode}:\n    {tail}")
    answer = json.loads(lines[-1])
    answer["wall_s"] = wall
    return answer
