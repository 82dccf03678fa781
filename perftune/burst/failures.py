"""How a burst failure becomes a status: unsupported (a knob this backend refuses), oom, or failed, with one line
saying why, and for a script, where in its own code it failed (the file and line from the traceback)."""

from __future__ import annotations

import importlib.util
import re
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Optional

from perftune import compat
from perftune import knobs as knob_registry
from perftune.io.records import TrialSpec
from perftune.words.amp_words import dtype_collision_text, o1_rewrite_text


class KnobRefused(Exception):
    """A knob value that this backend cannot run; becomes status 'unsupported'."""


def one_line(exc: BaseException) -> str:
    """The exception's type and the first meaningful line of its message (MindSpore's run to dozens of lines); a
    first line that only announces the next (MindSpore's ``- Kernel select failed:``) is joined with it, so the op
    or value named there reaches the reason."""
    lines = [line.strip().lstrip("- ").strip() for line in str(exc).strip().splitlines()]
    lines = [line for line in lines if line and not line.startswith("---")]
    first = lines[0] if lines else ""
    if first.endswith(":") and len(lines) > 1:
        first = f"{first} {lines[1]}"
    return f"{type(exc).__name__}: {first}"[:500]


def classify_failure(exc: BaseException, spec: TrialSpec) -> tuple[str, str]:
    """(status, reason) for an exception raised inside the burst."""
    reason = one_line(exc)
    text = str(exc).lower()
    if isinstance(exc, MemoryError) or "out of memory" in text or "memory not enough" in text or \
            "allocate memory failed" in text:
        return "oom", reason
    if isinstance(exc, (KnobRefused, compat.MissingApi)):
        return "unsupported", str(exc)
    refused = [f"{n}={v}" for n, v in spec.knobs.items()
               if n in knob_registry.KNOBS and knob_registry.KNOBS[n].known_refusal(v, spec.device)]
    if refused:
        return "unsupported", f"{', '.join(refused)} is not supported on {spec.device}: MindSpore says {reason}"
    amp = amp_refusal(exc, spec, reason)
    if amp:
        return "unsupported", amp
    if "num_parallel_workers exceeds" in text and user_frame(exc) is None:  # raised where perftune set the value
        return "unsupported", f"num_parallel_workers={spec.knobs['num_parallel_workers']}: MindSpore says {reason}"
    return "failed", reason


def amp_refusal(exc: BaseException, spec: TrialSpec, reason: str) -> Optional[str]:
    """Why an AMP level failed on this model and what to try instead (``perftune.words.amp_words``), or None: O1's
    rewrite missing a name of the model's file (a ``NameError``), or O2/O3 meeting the model's own casts (an operator
    refusing mixed input types)."""
    level = spec.knobs.get("amp_level")
    if level not in ("O1", "O2", "O3"):
        return None
    if level == "O1" and isinstance(exc, NameError):
        return o1_rewrite_text(reason)
    if level in ("O2", "O3") and re.search(r"input type must be (the )?same|type of .* must be same", str(exc)):
        return dtype_collision_text(level, reason)
    return None


def script_failure(exc: BaseException, spec: TrialSpec, steps: int) -> tuple[str, str]:
    """(status, reason) for an exception a script raised: ``classify_failure``'s, with where the script's code
    raised it.  A dataset op refusing a value the script passed it (``num_parallel_workers`` above the cores, from the
    script's own default) is the script's failure, not a knob perftune could not run."""
    status, reason = classify_failure(exc, spec)
    where = script_location(exc, spec.script.script if spec.script else None)
    if amp_refusal(exc, spec, reason):  # the AMP level's own words: why, and what to try instead
        return status, reason + (f" (raised at {where})" if where else "")
    text = f"the script raised {reason} after {steps} step(s)" + (f", at {where}" if where else "")
    if "num_parallel_workers exceeds" in reason and status == "failed" and where:
        text += (": the value is the script's own (" + (
            f"perftune's num_parallel_workers={spec.knobs['num_parallel_workers']} went to mindspore.dataset.config, "
            "which an explicit argument overrides)" if "num_parallel_workers" in spec.script_knobs
            else "the plan leaves num_parallel_workers to the script)"))
    return status, text


def _outside(filename: str) -> bool:
    """A frame of the user's code (a script or a library it brought, as mindcv): not MindSpore's, perftune's or
    Python's own (runpy, importlib)."""
    if not filename or filename.startswith("<"):
        return False
    path = str(Path(filename).resolve())
    paths = sysconfig.get_paths()
    installed = tuple(str(Path(paths[k]).resolve()) + "/" for k in ("purelib", "platlib"))
    stdlib = str(Path(paths["stdlib"]).resolve()) + "/"
    if path.startswith(stdlib) and not path.startswith(installed):
        return False
    return not any(path.startswith(root) for root in _package_roots())


def _package_roots() -> tuple[str, ...]:
    """perftune's folder and MindSpore's (found without importing it)."""
    roots = [str(Path(__file__).resolve().parents[1])]
    spec = importlib.util.find_spec("mindspore")
    if spec is not None and spec.submodule_search_locations:
        roots += [str(Path(p).resolve()) for p in spec.submodule_search_locations]
    return tuple(r + "/" for r in roots)


def user_frame(exc: BaseException) -> Optional[traceback.FrameSummary]:
    """The deepest frame of the traceback in the user's code (a script or the libraries it brought), or None."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _outside(f.filename)]
    return frames[-1] if frames else None


def script_location(exc: BaseException, script: Optional[str]) -> Optional[str]:
    """``train.py:17 (`data = data.map(...)`)``: the deepest frame in the script's own file, and the deepest frame of
    the user's code below it where that is another file (``via mindcv/data/loader.py:120``); None without either."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _outside(f.filename)]
    if not frames:
        return None
    own = Path(script).resolve() if script else None
    in_script = [f for f in frames if own is not None and Path(f.filename).resolve() == own]
    top = in_script[-1] if in_script else frames[-1]
    base = own.parent if own is not None else None
    text = f"{_short(top.filename, base)}:{top.lineno}" + (f" (`{top.line.strip()[:120]}`)" if top.line else "")
    deepest = frames[-1]
    if deepest.filename != top.filename:
        text += f" via {_short(deepest.filename, base)}:{deepest.lineno}"
    return text


def _short(filename: str, base: Optional[Path]) -> str:
    """The file relative to the script's folder, or to the ``sys.path`` entry it was imported from
    (``mindcv/data/loader.py``); else as the traceback names it."""
    path = Path(filename).resolve()
    if base is not None and path.is_relative_to(base):
        return str(path.relative_to(base))
    roots = [r for r in (Path(p).resolve() for p in sys.path if p) if path.is_relative_to(r)]
    return str(path.relative_to(max(roots, key=lambda r: len(r.parts)))) if roots else filename


def first_logged_error(log_path: Path, reason: str) -> Optional[str]:
    """MindSpore's exception is sometimes a bare "Response is empty."; the real cause is an earlier log line."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        m = re.match(r"^\s*(\w+(Error|Exception)): (.+)$", line)
        if m and m.group(0).strip() not in reason and "Traceback" not in line:
            return m.group(0).strip()[:300]
    return None
