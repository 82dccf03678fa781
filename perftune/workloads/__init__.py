"""Built-in workloads and the loader for a user's own (``package.module:function``)."""

from __future__ import annotations

import importlib
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

__all__ = ["BUILTIN", "Workload", "repetition_rate", "resolve", "check_reference"]


def check_reference(ref: str) -> str | None:
    """Return an error message when ``ref`` names no workload, without building it (no MindSpore import)."""
    if ref in BUILTIN:
        return None
    if ":" not in ref:
        return f"unknown workload {ref!r}: use a built-in name ({', '.join(sorted(BUILTIN))}) or 'package.module:function'"
    module_name, _, func_name = ref.partition(":")
    if not module_name or not func_name or module_name.startswith(".") or module_name.endswith(".") \
            or not all(part.isidentifier() for part in module_name.split(".")) or not func_name.isidentifier():
        return f"workload {ref!r} is not of the form 'package.module:function'"
    with working_directory_on_path():
        try:
            spec = importlib.util.find_spec(module_name) if _importable_parent(module_name) else None
        except (ImportError, ValueError):
            spec = None
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


def _importable_parent(module_name: str) -> bool:
    parent = module_name.rpartition(".")[0]
    if not parent:
        return True
    try:
        importlib.import_module(parent)
    except ImportError:
        return False
    return True


def resolve(ref: str) -> Callable[..., Workload]:
    """The build function for a workload reference."""
    target = BUILTIN.get(ref, ref)
    module_name, _, func_name = target.partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, func_name)
    except AttributeError:
        raise ValueError(f"workload {ref!r}: module {module_name!r} has no function {func_name!r}") from None
