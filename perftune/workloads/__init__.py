"""Built-in workloads and the loader for a user's own (``package.module:function``)."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from contextlib import contextmanager
from typing import Callable, Iterator

from perftune.workloads.base import Workload, repetition_rate

BUILTIN: dict[str, str] = {
    "mlp": "perftune.workloads.mlp:build",
    "tiny_gpt": "perftune.workloads.tiny_gpt:build",
}
#: built-in workloads' parameters that change only the data pipeline's work (its per-sample preprocessing), not the
#: model or the data: a change of one is compared in one process, as a pairable knob is (``engine/paired.py``)
DATA_PARAMS: dict[str, tuple[str, ...]] = {"mlp": ("preprocess_ms",)}

__all__ = ["BUILTIN", "DATA_PARAMS", "Workload", "repetition_rate", "resolve", "build", "check_reference"]


def check_reference(ref: str) -> str | None:
    """Return an error message when ``ref`` names no workload, without building it (no MindSpore import)."""
    if ref in BUILTIN:
        return None
    if ":" not in ref:
        return (f"unknown workload {ref!r}: use a built-in name ({', '.join(sorted(BUILTIN))}) "
                "or 'package.module:function'")
    module_name, _, func_name = ref.partition(":")
    if not module_name or not func_name or module_name.startswith(".") or module_name.endswith(".") \
            or not all(part.isidentifier() for part in module_name.split(".")) or not func_name.isidentifier():
        return f"workload {ref!r} is not of the form 'package.module:function'"
    if module_name.split(".")[0] == "__main__":
        return f"workload {ref!r}: __main__ is the running program, not a module; name the module that defines it"
    with working_directory_on_path():
        spec = find_without_running(module_name)
    if spec is None:
        return (f"workload {ref!r}: module {module_name!r} cannot be found on the Python path (the working "
                f"directory {os.getcwd()} is on it: run perftune from the folder your package lives in)")
    return None


@contextmanager
def working_directory_on_path() -> Iterator[None]:
    """The working directory on ``sys.path``, as for ``python -m``: bursts run with it on PYTHONPATH (see
    ``launch.burst_env``), so validation and the report's reproduce command resolve workloads exactly as bursts do."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def find_without_running(module_name: str):
    """The module's import spec, found without executing it or its parent packages (None where not found).

    ``importlib.util.find_spec("a.b")`` would import (run) ``a`` first; here each level is looked up in the
    parent's ``__path__`` as recorded in its spec, so nothing runs.  A package that builds its ``__path__`` at
    import time (rare) is not found this way; modules already imported are taken as they are."""
    parts = module_name.split(".")
    spec = None
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        if name in sys.modules:
            spec = getattr(sys.modules[name], "__spec__", None)
            if spec is None:
                return None
            continue
        try:
            if i == 0:
                spec = importlib.util.find_spec(name)  # a top-level name: found on sys.path, not imported
            elif spec is None or spec.submodule_search_locations is None:
                return None  # the parent is a plain module: it has no submodules
            else:
                spec = importlib.machinery.PathFinder.find_spec(name, list(spec.submodule_search_locations))
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
    return spec


def resolve(ref: str) -> Callable[..., Workload]:
    """The build function for a workload reference."""
    target = BUILTIN.get(ref, ref)
    module_name, _, func_name = target.partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, func_name)
    except AttributeError:
        raise ValueError(f"workload {ref!r}: module {module_name!r} has no function {func_name!r}") from None


def build(ref: str, params: dict, seed: int) -> Workload:
    """Build the workload ``ref`` names: its ``build(params, seed)``, refused in one line (a ``TypeError`` the burst
    records as the failed trial's reason) where it returns anything but a :class:`Workload`, say ``None`` from a
    ``build()`` that forgot its ``return``, before anything reads the result."""
    made = resolve(ref)(params, seed)
    if not isinstance(made, Workload):
        module_name = BUILTIN.get(ref, ref).partition(":")[0]
        shown = "None" if made is None else f"a {type(made).__module__}.{type(made).__qualname__}"
        raise TypeError(f"workload {ref!r}: build() in module {module_name!r} returned {shown}; it must return a "
                        "perftune.workloads.base.Workload (see experiments/README.md, build() workloads)")
    return made
