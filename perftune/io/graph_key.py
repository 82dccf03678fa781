"""What a configuration's compiled graphs are keyed by: shared by the engine, which names the compile cache folder by
it, and the burst, which loads a folder only where the record inside it names the same key (a folder renamed or
swapped with another configuration's says another key, as git's objects are named by what they hold)."""

from __future__ import annotations

import hashlib
import json

from perftune.io.records import TrialSpec

#: what a configuration's graphs do not depend on: which process it is, how long it is timed, where files go, and
#: what the cache itself passes on (the losses a loaded graph must reproduce)
NOT_IN_KEY = {"trial_id", "label", "replicate", "accuracy_samples", "burst", "pair", "cache_dir", "compile_cache",
              "first_loss", "second_loss", "distributed"}
#: the record a configuration's first process writes into its folder: the key, what it computes, the files' digests
MANIFEST = "perftune-graph.json"


def graph_fields(spec: TrialSpec) -> dict:
    """Everything in ``spec`` that can change its graphs (knobs, workload and its parameters, seed, environment):
    data knobs too, since a configuration's folder is filled by its own first process only."""
    return spec.model_dump(mode="json", exclude=NOT_IN_KEY)


def graph_key(spec: TrialSpec) -> str:
    return hashlib.sha256(json.dumps(graph_fields(spec), sort_keys=True, default=str).encode()).hexdigest()[:16]
