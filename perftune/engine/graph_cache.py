"""MindSpore's compile cache, one folder per configuration: a configuration's later processes load the graphs its
first process compiled instead of compiling them again: a compile is most of a short process's fixed cost.

MindSpore's cache (``MS_COMPILER_CACHE_ENABLE`` / ``MS_COMPILER_CACHE_PATH``) names its files by the order of the
compiles in a process (``compile_cache_<n>.mindir``) and checks only the source files they came from, not what was
compiled: ``experiments/benchmarks/compile_cache_order.py`` saw 2 of 4 processes sharing one folder served another
function's graph.  So each configuration has its own folder, keyed by everything that can change its graphs, and
only where perftune knows the order of the compiles: its own one-process workloads in graph mode, where every
process compiles AMP's forward probes (the same for a configuration), then the one training step (``TrainStep``),
and a first process then its validation graphs; a repeat or a paired process compiles the same sequence up to the
step.  A script compiles in its own order, so scripts do not use the cache.

The folder is named by the hash of what the configuration's graphs depend on (``perftune.io.graph_key``), and its
first process records that key and its files' digests inside it: a later process loads it only where the record
names its own key, so a folder renamed or swapped with another configuration's is refused (two configurations that
differ only after the forward pass, e.g. ``loss_scale`` in fp32, have bit-identical losses at every step, so no loss
tells their graphs apart).  A process that may have loaded its step carries its configuration's first and second
losses (``first_loss``, ``second_loss``: the second carries the first update's effect): the burst checks its own
steps against them (``perftune.burst.graph_check``), and the runner removes a folder that served another graph and
measures the process again without it.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Callable, Optional

from perftune.io.graph_key import graph_key
from perftune.io.records import Note, TrialResult, TrialSpec
from perftune.knobs import model_change

FOLDER = "compile"


def why_not(spec: TrialSpec) -> Optional[str]:
    """Why this process does not use the compile cache, or None where it does."""
    if spec.cache_dir is None:
        return "the trial has no cache folder"
    if spec.script is not None:
        return "a script compiles its graphs in its own order"
    if int(spec.knobs.get("workers", 1)) >= 2:
        return "distributed bursts compile per rank"
    if spec.knobs.get("mode") != "graph":
        return "PyNative runs the step without compiling it"
    if spec.pair is not None and model_change(spec.knobs, spec.pair.knobs):
        return "a paired process of two models compiles both arms' graphs in an order of its own"
    if spec.knobs.get("train_step") == "function":
        return ("an ms.jit function step loaded from MindSpore's compile cache trains with NaN losses (2.10, CPU: "
                "experiments/benchmarks/compile_cache_order.py); a Cell step loads correctly")
    return None


def cache_key(spec: TrialSpec) -> str:
    """The folder's name: the same for every process of a configuration, another for any graph-relevant change."""
    return graph_key(spec)


def with_cache(spec: TrialSpec, first: Optional[TrialResult] = None) -> TrialSpec:
    """``spec`` with its configuration's compile cache folder (unchanged where the cache is not used); ``first``:
    the configuration's finished first process, for a later process (which loads the folder and is checked by its
    first loss); without it the process compiles cold into an emptied folder.  A later process whose first process
    left no first loss does not use the cache."""
    if why_not(spec) is not None:
        return spec
    loss = first_loss_of(first)
    if first is not None and loss is None:
        return spec
    folder = Path(spec.cache_dir) / FOLDER / cache_key(spec)
    second = first.second_loss if first is not None and first.second_loss is not None \
        and math.isfinite(first.second_loss) else None
    return spec.model_copy(update={"compile_cache": str(folder), "first_loss": loss, "second_loss": second})


def for_process(spec: TrialSpec, first: Optional[TrialResult]) -> TrialSpec:
    """``spec`` as the sweep runs it: a configuration's first process compiles cold into the folder; a repeat or a
    paired process loads it once the first process (``first``, arm 0's configuration's) has finished."""
    if spec.replicate == 0 and spec.pair is None:
        return with_cache(spec)
    return with_cache(spec, first) if first is not None else spec


def run_checked(run: Callable[[TrialSpec], TrialResult], spec: TrialSpec) -> TrialResult:
    """``run(spec)``; where the compile cache served another graph (the burst's first loss check failed) or a process
    that loaded it failed, the folder is removed and the process measured again compiling its own graphs, with a
    warning note: a cache that fails is never the trial's result."""
    result = run(spec)
    failed_loaded = result.status != "ok" and result.compile_cache == "loaded"
    if result.compile_cache != "mismatch" and not failed_loaded:
        return result
    drop(spec)
    why = "served another graph (its first losses not reproduced)" if not failed_loaded else \
        f"was loaded by a process that then failed ({result.status}: {result.reason})"
    result = run(spec.model_copy(update={"compile_cache": None, "first_loss": None, "second_loss": None}))
    result.notes.append(Note(kind="warning", text=f"the compile cache {spec.compile_cache} {why}: removed, and this "
                                                  "process measured again compiling its own"))
    return result


def first_loss_of(result: Optional[TrialResult]) -> Optional[float]:
    """A finished first process's first loss, for its configuration's later processes."""
    if result is None or result.status != "ok" or result.first_loss is None or not math.isfinite(result.first_loss):
        return None
    return result.first_loss


def drop(spec: TrialSpec) -> None:
    """Remove a folder that served another graph (its next process compiles afresh and fills it again); a link is
    unlinked, never followed."""
    if not spec.compile_cache:
        return
    folder = Path(spec.compile_cache)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        folder.unlink(missing_ok=True)
    else:
        shutil.rmtree(folder, ignore_errors=True)
