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
