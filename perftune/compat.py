"""What differs between the MindSpore and library releases perftune supports, in one place.

Supported: MindSpore 2.7.0 to 2.10.x (the releases on PyPI), NumPy 1.26 and 2.x as MindSpore allows (2.7-2.9
require NumPy < 2); the tested sets are ``.ci/constraints-*.txt`` (README, "Compatibility").  Checked by running one
burst per knob value on MindSpore 2.7.0, 2.8.0, 2.9.0 and 2.10.0: the entry points perftune calls (``set_device``,
``set_context(mode=...)``, ``ms.jit(jit_level=...)`` / ``JitConfig``, ``mindspore.profiler.profile`` and its CPU
output layout, ``dataset.config``, ``amp``, ``device_context.cpu.op_tuning.threads_num``,
``runtime.dispatch_threads_num``, ``_c_expression.RuntimeConf``) exist and behave alike in all four, so the burst
calls most of them directly.  What did differ is here:

* which cells ``Cell.recompute()`` marked (:func:`recompute_cells`): MindSpore 2.9 and 2.10 keep a
  ``_recompute_cell`` wrapper on each marked cell in both modes, 2.7 only in PyNative, so reading that attribute
  found nothing in graph mode on 2.7; ``_has_config_recompute`` is set by every supported release;
* where MindSpore records the graphs it compiled (:func:`compiled_graphs`): ``mindspore.graph.api`` from 2.10,
  ``mindspore.common.api`` before;
* click's ``CliRunner`` (:func:`cli_runner`, for tests): 8.0-8.1 mix stderr into the output unless
  ``mix_stderr=False``; 8.2 removed that argument and always keeps stderr apart.

The thread knobs and their read-back go through :func:`lookup`, so a MindSpore that lacks the API (an install made
with ``--no-deps`` beside another release) makes that knob ``unsupported`` naming what is missing, not a crash.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Optional


class MissingApi(Exception):
    """This MindSpore has no such function; the burst reports the knob that needed it as 'unsupported'."""


def mindspore_version() -> str:
    import mindspore

    return str(mindspore.__version__)


def lookup(path: str, knob: Optional[str] = None) -> Any:
    """The object at dotted ``path`` (``mindspore.runtime.dispatch_threads_num``), importing submodules as needed.

    Raises :class:`MissingApi` naming the knob, the path and the installed MindSpore version when it is absent.
    """
    parts = path.split(".")
    obj = importlib.import_module(parts[0])
    for i, name in enumerate(parts[1:], start=2):
        try:
            obj = getattr(obj, name)
        except AttributeError:
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                who = f"{knob}: " if knob else ""
                raise MissingApi(f"{who}MindSpore {mindspore_version()} has no {path}") from None
    return obj


def set_kernel_threads(n: int) -> None:
    """CPU kernel threads (the context's ``runtime_num_threads`` is the deprecated spelling)."""
    lookup("mindspore.device_context.cpu.op_tuning.threads_num", "kernel_threads")(int(n))


def set_dispatch_threads(n: int) -> None:
    lookup("mindspore.runtime.dispatch_threads_num", "dispatch_threads")(int(n))


def threads_configured() -> dict[str, Optional[bool]]:
    """Whether MindSpore's runtime recorded the thread settings (None where this release cannot say)."""
    try:
        conf = lookup("mindspore._c_expression.RuntimeConf").get_instance()
    except MissingApi:
        return {"kernel_threads_configured": None, "dispatch_threads_configured": None}
    return {"kernel_threads_configured": _maybe_bool(conf, "is_op_threads_num_configured"),
            "dispatch_threads_configured": _maybe_bool(conf, "is_dispatch_threads_num_configured")}


def _maybe_bool(obj: Any, method: str) -> Optional[bool]:
    fn = getattr(obj, method, None)
    return bool(fn()) if callable(fn) else None


def recompute_cells(network) -> list[str]:
    """Names of the cells ``recompute()`` was called on (in ``network.cells_and_names()``, "" is the network).

    ``_has_config_recompute`` is set on the called cell and on every cell below it (2.7.0-2.10.0 alike), so the
    called ones are the flagged cells with no flagged cell above them.
    """
    flagged = [name for name, cell in network.cells_and_names() if getattr(cell, "_has_config_recompute", False)]

    def below(name: str, other: str) -> bool:
        return name != other and (other == "" or name.startswith(other + "."))

    return sorted(n for n in flagged if not any(below(n, other) for other in flagged))


def compiled_graphs() -> Optional[int]:
    """How many graphs this process has compiled so far: MindSpore's own record of them (the phases of ``ms.jit``
    functions and of each Cell's graphs), which it consults before compiling; None where this release keeps no such
    record.  A graph loaded from the compile cache counts too: the record is of graphs made ready, not of their
    cost (``compile_ms`` is that)."""
    for module in ("mindspore.graph.api", "mindspore.common.api"):
        try:
            api = importlib.import_module(module)
        except ImportError:
            continue
        jits, cells = getattr(api, "ms_compile_cache", None), getattr(api, "cells_compile_cache", None)
        if isinstance(jits, set) and isinstance(cells, dict):
            return len(jits) + sum(len(phases) for phases in cells.values())
    return None


def cli_runner():
    """A ``click.testing.CliRunner`` whose result keeps stderr apart (``result.stderr``) on click 8.0 to 8.x."""
    from click.testing import CliRunner

    if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters:  # click < 8.2
        return CliRunner(mix_stderr=False)
    return CliRunner()


def mathtext_off() -> dict[str, Any]:
    """matplotlib settings that draw ``$...$`` in a label as written: ``text.parse_math`` exists from matplotlib 3.6;
    on older releases (the supported range starts at 3.5) labels are drawn with mathtext as before."""
    import matplotlib

    return {"text.parse_math": False} if "text.parse_math" in matplotlib.rcParams else {}


#: what NumPy 2 prints when a module built against NumPy 1.x asks for its C API (MindSpore's eager-op parser does,
#: once per process, on the first eager op, then carries on without it): a warning with two tracebacks, no error
NUMPY_ABI_WARNING = "A module that was compiled using NumPy 1.x cannot be run in"


def first_eager_op() -> None:
    """Run one throw-away eager op, so that what MindSpore does once per process on the first one (under NumPy 2:
    ask for NumPy's 1.x C API, which prints ``NUMPY_ABI_WARNING`` with two tracebacks, and may raise SystemError)
    happens here, outside any measured step and without its noise.

    Filtered at its source and nowhere else: Python's ``sys.stderr`` is held for this one op only, and what it
    received is dropped only when it is that known warning; anything else is written out as it was."""
    import io
    import sys

    import mindspore as ms
    import numpy as np

    held, sys.stderr = sys.stderr, io.StringIO()
    try:
        try:
            (ms.Tensor(np.ones(1, np.float32)) + 1).asnumpy()
        except SystemError:
            pass
    finally:
        said, sys.stderr = sys.stderr.getvalue(), held
    if said and NUMPY_ABI_WARNING not in said:
        sys.stderr.write(said)
