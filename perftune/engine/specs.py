"""What one trial runs (``TrialSpec``) and its id: the hash of everything that changes the measurement."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Optional

from perftune import knobs
from perftune.engine.plan import accuracy_samples
from perftune.io.plan import Plan
from perftune.io.records import TrialSpec

#: part of every trial id.  Bumped when what a trial measures changes (so older trials are not reused), not when
#: the trial.json format does: the schema upgrades in ``perftune.io.schema`` keep older files reusable.
TRIAL_ID_VERSION = 1


def trial_id(fields: dict[str, Any]) -> str:
    canonical = json.dumps({**fields, "trial_schema": TRIAL_ID_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def make_spec(plan: Plan, knob_values: dict[str, Any], label: str, replicate: int = 0,
              cache_dir: Optional[Path] = None) -> TrialSpec:
    """The spec of one trial of ``plan``: its knob values overlay the plan's baseline."""
    effective = knobs.effective({**plan.baseline, **knob_values})
    fields = {
        "workload": plan.workload,
        "workload_params": plan.workload_params,
        "device": plan.device,
        "seed": plan.seed,
        "knobs": effective,
        "burst": plan.burst.model_dump(),
        "accuracy_samples": accuracy_samples(plan),
        "replicate": replicate,
    }
    hashed = dict(fields)
    dist = plan.distributed
    if dist is not None and dist.nodes > 1:  # where the ranks run changes the measurement; node_rank/port do not
        hashed["nodes"] = dist.nodes
    return TrialSpec(trial_id=trial_id(hashed), label=label, cache_dir=str(cache_dir) if cache_dir else None,
                     distributed=dist, **fields)
