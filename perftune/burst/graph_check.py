"""The burst's side of the per-configuration compile cache (``perftune.engine.graph_cache``): point MindSpore at the
folder before anything compiles, and check a process that may have loaded its step from it.

A process without its configuration's first loss (the first process) empties the folder first, so it compiles cold
(its ``compile_ms`` is the real compile) and fills the folder in its own order; a process with it loads what the
first process compiled and must reproduce its first step's loss: the same seed, weights and first batch give the
same loss unless the graph is another one.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

from perftune.io.records import TrialResult, TrialSpec

#: how far a first loss from the cached graph may be from the first process's: threads that sum in another order
#: move a float32 loss by about 1e-7 relative; another graph moves it by far more
LOSS_RTOL = 1e-4


class GraphMismatch(Exception):
    """The compile cache served a graph that does not reproduce the configuration's first loss."""


def use_compile_cache(spec: TrialSpec, result: TrialResult) -> None:
    """Set MindSpore's cache variables for this process (before its first compile)."""
    if not spec.compile_cache:
        return
    folder = Path(spec.compile_cache)
    if spec.first_loss is None:  # the configuration's first process: a cold compile, filling the folder
        shutil.rmtree(folder, ignore_errors=True)
        result.compile_cache = "filled"
    else:
        result.compile_cache = "loaded" if any(folder.rglob("*.mindir")) else "filled"
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["MS_COMPILER_CACHE_ENABLE"] = "1"
    os.environ["MS_COMPILER_CACHE_PATH"] = str(folder)


def check_first_loss(spec: TrialSpec, result: TrialResult) -> None:
    """After the first step: raise ``GraphMismatch`` where a loaded graph did not reproduce the first loss."""
    expected, got = spec.first_loss, result.first_loss
    if result.compile_cache != "loaded" or expected is None:
        return
    if got is None or not (math.isfinite(got) and math.isclose(got, expected, rel_tol=LOSS_RTOL, abs_tol=1e-6)):
        result.compile_cache = "mismatch"
        shown = "not finite" if got is None else f"{got:.6g}"
        raise GraphMismatch(f"the compile cache {spec.compile_cache} served another graph: first loss {shown}, "
                            f"the configuration's first process had {expected:.6g}")

