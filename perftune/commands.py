"""What each ``perftune`` command does, as plain functions: the one place that wires the engine, the runner and
the report together (the engine never imports the runner; the CLI only turns options into these calls)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from perftune.engine.plan import load_plan, parse_set_options
from perftune.engine.specs import make_spec
from perftune.engine.progress import SweepProgress
from perftune.engine.script_plan import check_set_routes
from perftune.engine.sweep import run_sweep
from perftune.io.plan import Plan, ScriptWorkload
from perftune.io.records import TrialResult
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
    if isinstance(plan.workload, ScriptWorkload):
        check_set_routes(plan.workload, knob_values)
    base_out = plan_output_dir(plan, Path(plan_path))
    label = ", ".join(f"{k}={v}" for k, v in knob_values.items()) or "baseline"
    spec = make_spec(plan, knob_values, label, cache_dir=default_cache_dir(base_out).resolve())
    trial_dir = out_dir or base_out / "runs" / spec.trial_id
    return run_trial(spec, trial_dir), Path(trial_dir)


def sweep(plan: Plan, out: Path, plan_path: Optional[Path] = None, fresh: bool = False,
          progress: Optional[SweepProgress] = None, command: str = "") -> SweepResult:
    """``perftune sweep``: run (or resume) the sweep with real bursts, then write the ablation tables."""
    result = run_sweep(plan, out, run_trial, plan_path, fresh=fresh, progress=progress, command=command)
    write_tables(result, Path(out))
    return result
