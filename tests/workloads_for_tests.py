"""Workloads that misbehave on purpose, to check that perftune records them instead of crashing or hanging."""

from __future__ import annotations

import time

import numpy as np


def raising(params: dict, seed: int):
    raise RuntimeError("this workload is broken on purpose: " + str(params.get("why", "no reason")))


def hanging(params: dict, seed: int):
    time.sleep(3600)


def memory_hog(params: dict, seed: int):
    # far beyond what the machine has: NumPy raises MemoryError at once (Linux refuses the obvious overcommit)
    return np.ones((1 << 40,), dtype=np.float64)



def newer_trial_file(params: dict, seed: int):
    """Raises; as its process exits (the burst ends with ``os._exit`` after writing its failed trial.json), the file
    is replaced by one from a newer perftune: a schema version this one does not know."""
    import json
    import os

    real_exit = os._exit

    def exit_leaving_a_newer_file(code: int) -> None:  # the burst runs in its trial folder
        with open("trial.json", "w") as fh:
            json.dump({"trial_id": "x", "schema_version": 99}, fh)
        real_exit(code)

    os._exit = exit_leaving_a_newer_file
    raise RuntimeError("about to leave a trial.json from the future")
