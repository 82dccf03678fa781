"""What each ``perftune`` command does, as plain functions: the one place that wires the engine, the runner and
the report together (the engine never imports the runner; the CLI only turns options into these calls)."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Callable, Optional

from perftune import knobs
from perftune.engine.blocked import node_summary
from perftune.engine.own_knobs import own_knob_rows
from perftune.engine.plan_load import load_plan, parse_set_options
from perftune.engine.progress import SweepProgress
from perftune.engine.script_plan import check_set_routes
from perftune.engine.specs import make_spec
from perftune.engine.sweep import run_sweep, utc_now
from perftune.errors import UserError
from perftune.io.files import RESULTS_NAME
from perftune.io.outdir import (
    FolderLock,
    cannot_write,
    check_own_folder,
    check_own_trial_folder,
    check_profiler_path,
    clear_own,
    lock_folder,
    mark_own,
)
from perftune.io.plan import Plan, ScriptWorkload
from perftune.io.records import TrialResult
from perftune.io.store import write_json_atomic
from perftune.io.sweep_records import SweepResult
from perftune.report.tables import write_tables
from perftune.runner import run_trial
from perftune.runner.cgroup import containment_probe, driver_tag
from perftune.runner.leftovers import kill_driver_leftovers
from perftune.runner.memcg import memory_probe

#: errors that mean the output cannot be written (not a bug): read-only file system, no space, quota, permission
WRITE_ERRNOS = (errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM)


def default_cache_dir(plan_output: Path) -> Path:
    return plan_output / "cache"


def plan_output_dir(plan: Plan, plan_path: Path) -> Path:
    if plan.output_dir:
        out = Path(plan.output_dir)
        return out if out.is_absolute() else (plan_path.parent / out)
    return Path("reports") / plan.name


def take_folder(out: Path, say: Callable[[str], None]) -> FolderLock:
    """Lock ``out`` for this driver; where a driver that died held it, kill what it left running first."""
    lock = lock_folder(out, since=utc_now(), tag=driver_tag())
    if lock.stale:
        say(f"took over the stale lock of {lock.stale}: that process is gone")
    if lock.stale_tag:
        killed = kill_driver_leftovers(lock.stale_tag)
        if killed:
            say(f"killed {len(killed)} process(es) the dead driver had left running (pids "
                f"{', '.join(map(str, killed[:8]))}{' ...' if len(killed) > 8 else ''})")
    return lock


def check_set_once(overrides) -> None:
    """``--set knob=a --set knob=b``: refused rather than silently taking the last."""
    seen: dict[str, str] = {}
    for pair in overrides:
        name, eq, raw = pair.partition("=")
        if not eq:
            continue
        if name.strip() in seen:
            raise UserError(f"--set {name.strip()}: given twice ({seen[name.strip()]!r} and {raw!r}); give each knob "
                            "once")
        seen[name.strip()] = raw


def run_one(plan_path: Path, overrides, out_dir: Path | None,
            say: Callable[[str], None] = lambda line: None) -> tuple[TrialResult, Path]:
    """``perftune run``: one burst of the plan's baseline with ``overrides`` (``knob=value`` strings).  The trial
    folder is locked as a sweep's is (a driver that died there has its leftovers killed first)."""
    plan = load_plan(plan_path)
    check_set_once(overrides)
    knob_values = parse_set_options(list(overrides), plan)
    if isinstance(plan.workload, ScriptWorkload):
        check_set_routes(plan.workload, knob_values)
    base_out = plan_output_dir(plan, Path(plan_path))
    label = ", ".join(f"{k}={v}" for k, v in knob_values.items()) or "baseline"
    spec = make_spec(plan, knob_values, label, cache_dir=default_cache_dir(base_out).resolve())
    trial_dir = out_dir or base_out / "runs" / spec.trial_id
    check_own_trial_folder(Path(trial_dir))
    if spec.burst.profile_steps > 0:
        check_profiler_path(Path(trial_dir))
    lock = take_folder(Path(trial_dir), say)
    try:
        return run_trial(spec, trial_dir), Path(trial_dir)
    finally:
        lock.release()


def sweep(plan: Plan, out: Path, plan_path: Optional[Path] = None, fresh: bool = False,
          progress: Optional[SweepProgress] = None, command: str = "", report: bool = False,
          say: Callable[[str], None] = lambda line: None, executor: Optional[str] = None,
          address: Optional[str] = None) -> SweepResult:
    """``perftune sweep``: run (or resume) the sweep with real bursts, then write the ablation tables (and the
    report, ``out/report.html``).  The folder must be perftune's own and is locked for the whole run.

    ``executor`` (default: the plan's ``executor``): ``local`` runs each burst here, ``ray`` as a task on a Ray
    cluster's node (``address``, default the plan's ``ray.address``); the results folder is the same either way.
    """
    out = Path(out)
    executor = executor or plan.executor
    if address and executor != "ray":
        raise UserError("--address: only with --executor ray (or executor: ray in the plan)")
    check_own_folder(out)
    if plan.burst.profile_steps > 0:
        check_profiler_path(out)
    lock = take_folder(out, say)
    try:
        contained = containment_probe()
        if not contained.startswith("cgroup"):
            say(f"processes of each trial held by: {contained}")
        if plan.burst.memory_limit_mb is not None and executor != "ray":  # refused here where not enforceable
            say(memory_probe(plan.burst.memory_limit_mb))
        mark_own(out)
        if fresh:
            kept = clear_own(out)
            if kept:
                say(f"--fresh left {len(kept)} item(s) perftune did not write in place: {', '.join(kept[:3])}")
        if executor == "ray":
            from perftune.runner.ray_executor import RayExecutor

            ray_executor = RayExecutor(address or plan.ray.address, plan.ray.max_attempts,
                                       announce=progress.start if progress is not None else None)
            try:
                ray_executor.connect()
                result = run_sweep(plan, out, ray_executor, plan_path, fresh=False, progress=progress,
                                   command=command)
            finally:
                ray_executor.close()
            result.nodes = node_summary(result)  # which node ran what, ratios per node beside the sweep's verdicts
            write_json_atomic(out / RESULTS_NAME, result.model_dump(mode="json"))
        else:
            result = run_sweep(plan, out, run_trial, plan_path, fresh=False, progress=progress, command=command)
        write_tables(result, out)
        if report:
            from perftune.report import write_report

            write_report(out)
        return result
    except OSError as exc:
        if exc.errno in WRITE_ERRNOS:  # read-only, full or over quota: one line, results.json as last saved
            raise cannot_write(Path(exc.filename or out), exc) from None
        raise
    finally:
        lock.release()


def knob_lines(plan_path: Optional[Path] = None) -> list[str]:
    """``perftune knobs``: every registry knob; with ``plan_path``, the knobs that plan routes itself."""
    if plan_path is not None:
        rows = own_knob_rows(load_plan(plan_path))
        lines = [f"{plan_path}: {len(rows)} knob(s) routed by the plan" + ("" if rows else " (workload.knob_args, "
                 "workload.knob_config, knob_env, knob_params)")]
        for row in rows:
            lines += [f"{row['name']}{'' if row['own'] else ' (built-in)'}", f"  route:    {row['route']}",
                      f"  type:     {row['type']}", f"  baseline: {knobs.format_value(row['baseline'])}",
                      f"  values:   {', '.join(knobs.format_value(v) for v in row['values']) or '(not varied)'}"]
        return lines
    lines = []
    route = {"context": "set before the script, kept against its set_context", "dataset":
             "mindspore.dataset.config", "model": "where the script builds Model / calls Model.train"}
    for knob in knobs.KNOBS.values():
        lines += [f"{knob.name}", f"  values:   {knob.values_text()}   (default: {knob.default})",
                  f"  changes:  {knob.help}"]
        backends = []
        for b in knobs.BACKENDS:
            refused = [str(v) for v, bs in knob.refused.items() if b in bs]
            if b in knob.no_effect_on:
                backends.append(f"{b} (accepted, no effect)")
            elif b not in knob.runs_on:
                backends.append(f"{b} (not supported)")
            elif refused:
                backends.append(f"{b} (not {', '.join(refused)})")
            else:
                backends.append(b)
        lines.append(f"  backends: {', '.join(backends)}")
        if knob.pairable:
            lines.append("  compared: pairable (one process, both pipelines, alternating windows; decision.paired)")
        if knob.confined:
            split = "wait for data" if knob.confined == "data" else "communication"
            lines.append(f"  ceiling:  gains at most the step's {split}: not raced where that cannot pay "
                         "decision.min_gain (decision.skip_cannot_gain)")
        if knob.retry_when_slower:
            lines.append("  stack:    retried on top of the stack even when slower alone (decision.retry_on_stack)")
        lines.append(f"  script:   {route.get(knob.script_route, 'through workload.knob_args or knob_config')}")
    return lines
