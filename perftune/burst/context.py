"""Process-wide settings of a burst (device, mode, compile level, fusion, threads), what MindSpore reports back
after the knobs were applied, and the environment the burst ran in."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from perftune import __version__, compat
from perftune import knobs as knob_registry
from perftune.burst import amp_check
from perftune.burst.failures import KnobRefused
from perftune.io.records import Environment, Note, TrialSpec

#: graph_kernel knob value -> set_context(graph_kernel_flags=...)
GRAPH_KERNEL_FLAGS = {"on": "", "O1": "--opt_level=1", "O2": "--opt_level=2"}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> Optional[str]:
    try:
        root = Path(__file__).resolve().parent.parent.parent
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        if out.returncode:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def environment(device: str, kernel_threads: Optional[int]) -> Environment:
    import mindspore as ms

    return Environment(
        perftune_version=__version__,
        mindspore_version=ms.__version__,
        python_version=platform.python_version(),
        device=device,
        host=socket.gethostname(),
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count() or 1,
        kernel_threads=kernel_threads,
        git_commit=git_commit(),
        utc_time=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def apply_context(spec: TrialSpec) -> list[Note]:
    """Process-wide settings: device, mode, compile level, fusion, threads.  Returns notes for the trial."""
    import mindspore as ms

    k = spec.knobs
    notes = knob_registry.no_effect_notes(k, spec.device)
    ms.set_device(spec.device)
    ms.set_context(mode=ms.GRAPH_MODE if k["mode"] == "graph" else ms.PYNATIVE_MODE)
    if k["mode"] == "pynative":
        for name in ("jit_level", "graph_kernel"):
            if k[name] != knob_registry.KNOBS[name].default:
                notes.append(Note(kind="no_effect", knob=name,
                                  text=f"{name}={k[name]} has no effect in pynative mode (nothing is compiled)"))
    if k["graph_kernel"] != "off":
        ms.set_context(enable_graph_kernel=True, graph_kernel_flags=GRAPH_KERNEL_FLAGS[k["graph_kernel"]])
    if k["kernel_threads"]:
        if spec.device == "CPU":
            compat.set_kernel_threads(int(k["kernel_threads"]))
        else:
            notes.append(Note(kind="no_effect", knob="kernel_threads",
                              text=f"kernel_threads={k['kernel_threads']} sets CPU kernel threads only; no effect on "
                                   f"{spec.device} kernels"))
    if k["dispatch_threads"]:
        compat.set_dispatch_threads(int(k["dispatch_threads"]))
    if k["dataset_sink_mode"] and spec.device != "CPU":
        raise KnobRefused("dataset_sink_mode=true: perftune's burst does not implement device sinking yet "
                          "(its step timing needs one host round trip per step)")
    return notes


def read_back(k: dict, network, step_fn, dataset) -> dict[str, Any]:
    """What MindSpore reports after the knobs were applied: the evidence that each one took effect."""
    import mindspore as ms
    import mindspore.dataset as ds

    ops_in_pipeline = [type(n).__name__ for n in walk(dataset)]
    batch_op = next((n for n in walk(dataset) if type(n).__name__ == "BatchDataset"), None)
    map_op = next((n for n in walk(dataset) if type(n).__name__ == "MapDataset"), None)
    inner = getattr(step_fn, "inner", step_fn)  # train_step.TrainStep's compiled Cell or function
    jit = getattr(inner, "jit_config_dict", None) or {}
    return {
        "mode": "graph" if ms.get_context("mode") == ms.GRAPH_MODE else "pynative",
        "jit_level": jit.get("jit_level") if jit else (k["jit_level"] if k["train_step"] == "function" else None),
        "graph_kernel": bool(ms.get_context("enable_graph_kernel")),
        "network_class": type(network).__name__,
        "amp_level": k["amp_level"],
        "recompute_cells": compat.recompute_cells(network),
        "train_step": type(inner).__name__ if not callable(getattr(inner, "__wrapped__", None))
        else "function",
        "grad_accum_micro_batch": int(k["batch_size"]) // int(k["grad_accum_steps"]),
        **amp_check.scaler_read_back(getattr(step_fn, "scaler", None), k["loss_scale"] != "none"),
        "pipeline": " <- ".join(ops_in_pipeline),
        "num_parallel_workers": getattr(batch_op, "num_parallel_workers", None),
        "python_multiprocessing": getattr(map_op, "python_multiprocessing", None) if map_op else None,
        "drop_remainder": getattr(batch_op, "drop_remainder", None),
        "batch_size": batch_op.get_batch_size() if batch_op is not None else None,
        "prefetch_size": ds.config.get_prefetch_size(),
        "dataset_autotune": bool(ds.config.get_enable_autotune()),
        **compat.threads_configured(),
    }


def walk(node):
    while node is not None:
        yield node
        node = node.children[0] if getattr(node, "children", None) else None


def first_eager_op() -> None:
    """Under NumPy 2 the first eager op raises (see mindspore-notes.md); take that hit outside the step (and
    without its known warning: ``compat.first_eager_op``)."""
    compat.first_eager_op()


def single_process_notes(k: dict) -> list[Note]:
    """The distributed knobs set away from their defaults in a one-process burst (workers=1) change nothing."""
    return [Note(kind="no_effect", knob=name,
                 text=f"{name}={k[name]} has no effect with workers=1 (one process, no parallel context)")
            for name in knob_registry.in_group("distributed")
            if name != "workers" and name in k and k[name] != knob_registry.KNOBS[name].default]


def distributed_read_back(rank: int, world: int, grad_reducer: bool) -> dict[str, Any]:
    import mindspore as ms

    mode = str(ms.get_auto_parallel_context("parallel_mode"))
    out = {
        "rank": rank,
        "world_size": world,
        "parallel_mode": mode,
        "gradients_mean": bool(ms.get_auto_parallel_context("gradients_mean")),
        "grad_reducer": grad_reducer,
    }
    if mode == "auto_parallel":  # the context always holds a search mode; it only means something here
        out["search_mode"] = str(ms.get_auto_parallel_context("search_mode"))
    return out


def scale_learning_rate(optimizer, factor: float) -> Note:
    """Multiply a fixed learning rate in place (plan ``accuracy.lr_scaling``); a schedule cannot be scaled here."""
    import mindspore as ms

    rate = getattr(optimizer, "learning_rate", None)
    if getattr(optimizer, "dynamic_lr", False) or not isinstance(rate, ms.Parameter):
        raise KnobRefused(f"accuracy.lr_scaling: the workload's optimizer has a learning-rate schedule, which "
                          f"perftune cannot scale by {factor:.3g}; use lr_scaling: none")
    before = float(rate.asnumpy())
    rate.set_data(ms.Tensor(before * factor, rate.dtype))
    return Note(kind="info", text=f"learning rate scaled x{factor:.3g} for the batch size ({before:.3g} -> "
                                  f"{before * factor:.3g})")


def learning_rate(optimizer) -> Optional[float]:
    """The optimizer's learning rate where it is one number (a schedule has none): the steps' ``learning_rate``."""
    try:
        if getattr(optimizer, "dynamic_lr", False):
            return None
        return float(optimizer.learning_rate.asnumpy())
    except Exception:  # noqa: BLE001 - no optimizer, or a rate that is not one number
        return None
