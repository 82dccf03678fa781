"""What one trial runs (``TrialSpec``) and its id: the hash of everything that changes the measurement."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Optional

from perftune import knobs
from perftune.engine.plan_load import accuracy_samples
from perftune.engine.plan_load import lr_scale as plan_lr_scale
from perftune.io.plan import Plan, ScriptWorkload
from perftune.io.records import PairArm, TrialSpec
from perftune.routes import env_values, param_values

#: part of every trial id.  Bumped when what a trial measures changes (so older trials are not reused), not when
#: the trial.json format does: the schema upgrades in ``perftune.io.schema`` keep older files reusable.  Not bumped
#: when a trial is measured differently but still measures the same configuration (one graph per process, repeats
#: without the accuracy window): a resumed older sweep must not run again
TRIAL_ID_VERSION = 1
#: knobs added to the registry after trial ids were fixed: hashed only away from their default, so the ids (and
#: resumes) of earlier sweeps stay as they were
LATER_KNOBS = ("dataset_autotune",)
#: a script workload's fields added after trial ids were fixed: hashed only when set, for the same reason
LATER_SCRIPT_FIELDS = ("knob_config", "knob_env")


def trial_id(fields: dict[str, Any]) -> str:
    canonical = json.dumps({**fields, "trial_schema": TRIAL_ID_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def make_spec(plan: Plan, knob_values: dict[str, Any], label: str, replicate: int = 0,
              cache_dir: Optional[Path] = None, windows: Optional[int] = None) -> TrialSpec:
    """The spec of one trial of ``plan``: its knob values overlay the plan's baseline; ``windows``: a repeat
    process's timed windows where chosen (``engine.window_count``), else the plan's ``burst.repeats``.  A repeat
    (``replicate > 0``) keeps the plan's ``accuracy_samples``: it skips the window (``burst.settle``), but warms up
    for no more samples than that and the warm-up steps, so it needs no more steps than the first process did."""
    effective = knobs.effective({**plan.baseline, **knob_values})
    script = plan.workload if isinstance(plan.workload, ScriptWorkload) else None
    script_knobs = sorted(set(plan.baseline) | set(plan.variables) | set(plan.ranges) | set(knob_values)) \
        if script is not None else []
    fields = {
        "workload": str(plan.workload),
        # the knobs routed to the workload's own parameters (``knob_params``) set them; without such knobs the
        # params are the plan's as they are
        "workload_params": {**plan.workload_params, **param_values(plan, effective)},
        "device": plan.device,
        "seed": plan.seed,
        "knobs": effective,
        # unset optional settings are left out, so trial ids (and resumes) of plans that do not use them stay as
        # they were
        "burst": plan.burst.model_dump(exclude_none=True),
        "accuracy_samples": accuracy_samples(plan),
        "replicate": replicate,
    }
    lr_scale = plan_lr_scale(plan, effective["batch_size"])
    hashed = dict(fields)
    hashed["knobs"] = {k: v for k, v in effective.items()
                       if not (k in LATER_KNOBS and v == knobs.KNOBS[k].default)}
    if script is not None:  # only then, so that the ids of the other workloads' trials stay as they were
        dump = {k: v for k, v in script.model_dump(exclude_none=True).items()
                if v or k not in LATER_SCRIPT_FIELDS}  # seed_arg and a knob_args entry's flag: when set
        hashed["script"] = {**dump, "imposed": script_knobs}
    env = env_values(plan, effective)
    if env:  # only then, so that the ids of plans without environment knobs stay as they were
        hashed["env"] = env
    if lr_scale != 1.0:  # only then, so that trial ids (and resumes) of plans without the rule stay as they were
        hashed["lr_scale"] = lr_scale
    dist = plan.distributed
    if dist is not None and dist.nodes > 1:  # where the ranks run changes the measurement; node_rank/port do not
        hashed["nodes"] = dist.nodes
    if windows is not None:  # not in the id: a resumed sweep reuses a repeat whatever count it chose then
        fields["burst"] = plan.burst.model_copy(update={"repeats": windows}).model_dump(exclude_none=True)
    return TrialSpec(trial_id=trial_id(hashed), label=label, lr_scale=lr_scale,
                     cache_dir=str(cache_dir) if cache_dir else None, distributed=dist, script=script,
                     script_knobs=script_knobs, env=env, **fields)


def paired_spec(reference: TrialSpec, candidate: TrialSpec, replicate: int, blocks: int,
                min_window_s: float) -> TrialSpec:
    """A paired process of ``candidate`` against ``reference`` (``perftune.engine.paired``): the reference's spec
    with the candidate's pipeline as its second arm, no accuracy window; its id hashes both ids and the design."""
    pair = PairArm(label=candidate.label, reference_label=reference.label, knobs=candidate.knobs,
                   workload_params=candidate.workload_params, blocks=blocks, min_window_s=min_window_s)
    tid = trial_id({"paired": [reference.trial_id, candidate.trial_id], "replicate": replicate, "blocks": blocks,
                    "min_window_s": min_window_s})
    return reference.model_copy(update={"trial_id": tid, "label": paired_label(reference.label, candidate.label,
                                                                           replicate), "accuracy_samples": 0,
                                        "replicate": replicate, "pair": pair})


def paired_label(reference: str, candidate: str, replicate: int) -> str:
    """``+num_parallel_workers=2 vs baseline (paired, run 2)``: a paired process by its comparison."""
    what = f"{reference} vs itself (A/A, paired" if reference == candidate else f"{candidate} vs {reference} (paired"
    return what + (f", run {replicate + 1})" if replicate else ")")
