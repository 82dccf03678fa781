"""What each ``perftune`` command does, as plain functions: the one place that wires the engine, the runner and
the report together (the engine never imports the runner; the CLI only turns options into these calls)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from perftune.engine.blocked import node_summary
from perftune.engine.plan import load_plan, parse_set_options
from perftune.engine.specs import make_spec
from perftune.engine.progress import SweepProgress
from perftune.engine.sweep import run_sweep
from perftune.errors import UserError
from perftune.io.files import RESULTS_NAME
from perftune.io.plan import Plan
from perftune.io.records import TrialResult
from perftune.io.store import write_json_atomic
from perftune.io.sweep_records import SweepResult
from perftune.report.tables import write_tables
from perftune.runner import run_trial


def default_cache_dir(plan_output: Path) -> Path:
    return plan_output / "cache"


def plan_output_dir(plan: Plan, plan_path: Path) -> Path:
    if plan.output_dir:
        out = Path(plan.output_dir)
        return out if out.is_absolute() else (plan_path.parent / out)
    return Path("reports") / plan.name


def run_one(plan_path: Path, overrides, out_dir: Path | None) -> tuple[TrialResult, Path]:
    """``perftune run``: one burst of the plan's baseline with ``overrides`` (``knob=value`` strings)."""
    plan = load_plan(plan_path)
    knob_values = parse_set_options(list(overrides))
    base_out = plan_output_dir(plan, Path(plan_path))
    label = ", ".join(f"{k}={v}" for k, v in knob_values.items()) or "baseline"
    spec = make_spec(plan, knob_values, label, cache_dir=default_cache_dir(base_out).resolve())
    trial_dir = out_dir or base_out / "runs" / spec.trial_id
    return run_trial(spec, trial_dir), Path(trial_dir)


def sweep(plan: Plan, out: Path, plan_path: Optional[Path] = None, fresh: bool = False,
          progress: Optional[SweepProgress] = None, command: str = "", executor: Optional[str] = None,
          address: Optional[str] = None) -> SweepResult:
    """``perftune sweep``: run (or resume) the sweep with real bursts, then write the ablation tables.

    ``executor`` (default: the plan's ``executor``): ``local`` runs each burst here, ``ray`` as a task on a Ray
    cluster's node (``address``, default the plan's ``ray.address``); the results folder is the same either way.
    """
    if address and (executor or plan.executor) != "ray":
        raise UserError("--address: only with --executor ray (or executor: ray in the plan)")
    if (executor or plan.executor) == "ray":
        from perftune.runner.ray_executor import RayExecutor

        ray_executor = RayExecutor(address or plan.ray.address, plan.ray.max_attempts,
                                   announce=progress.start if progress is not None else None)
        try:
            ray_executor.connect()
            result = run_sweep(plan, out, ray_executor, plan_path, fresh=fresh, progress=progress, command=command)
        finally:
            ray_executor.close()
        result.nodes = node_summary(result)  # the within-node comparisons, beside the sweep's own verdicts
        write_json_atomic(Path(out) / RESULTS_NAME, result.model_dump(mode="json"))
    else:
        result = run_sweep(plan, out, run_trial, plan_path, fresh=fresh, progress=progress, command=command)
    write_tables(result, Path(out))
    return result
