"""``perftune run``: one burst of a plan's baseline, with overrides."""

from __future__ import annotations

from pathlib import Path

from perftune.launch import make_spec, run_trial
from perftune.plan import load_plan, parse_set_options
from perftune.records import TrialResult


def default_cache_dir(plan_output: Path) -> Path:
    return plan_output / "cache"


def plan_output_dir(plan, plan_path: Path) -> Path:
    if plan.output_dir:
        out = Path(plan.output_dir)
        return out if out.is_absolute() else (plan_path.parent / out)
    return Path("reports") / plan.name


def run_one(plan_path: Path, overrides, out_dir: Path | None) -> tuple[TrialResult, Path]:
    plan = load_plan(plan_path)
    knob_values = parse_set_options(list(overrides))
    base_out = plan_output_dir(plan, Path(plan_path))
    label = ", ".join(f"{k}={v}" for k, v in knob_values.items()) or "baseline"
    spec = make_spec(plan, knob_values, label, cache_dir=default_cache_dir(base_out).resolve())
    trial_dir = out_dir or base_out / "runs" / spec.trial_id
    return run_trial(spec, trial_dir), Path(trial_dir)
