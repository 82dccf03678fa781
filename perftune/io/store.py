"""Results on disk: atomic writes, so a killed sweep never leaves a half-written file; and the one check of where a
command may write (never onto its inputs, into a results folder it reads, or over what is not a regular file)."""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterable

from perftune.errors import UserError
from perftune.io.files import file_kind


def refuse_non_regular(path: Path) -> None:
    """An output that exists must be a regular file: the atomic rename would replace a device node, a FIFO or a
    socket with a plain file (as root, ``/dev/null`` too)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # absent (or unreachable: the write says why)
    if not stat.S_ISREG(mode):
        raise UserError(f"{path}: {file_kind(mode)}; perftune writes only regular files (choose a file path)")


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_output(path: Path, inputs: Iterable[Path] = (), option: str = "", folder: bool = False) -> None:
    """Refuse (one line) an output that is one of ``inputs`` (files) or lies inside one of them (folders: a results
    folder the command reads), or that exists and is not a regular file (``folder``: not a folder)."""
    name = f"{option} {path}" if option else str(path)
    target = Path(os.path.abspath(path)).resolve()
    for source in inputs:
        src = Path(os.path.abspath(source)).resolve()
        if target == src or (src.is_dir() and _inside(target, src)):
            what = "is an input" if target == src else f"lies inside {source}, an input"
            raise UserError(f"{name}: {what} of this command; write it elsewhere")
    if not folder:
        refuse_non_regular(path)
    elif os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"{name}: {file_kind(os.stat(path).st_mode)}, not a folder")


def write_text_atomic(path: Path, text: str) -> None:
    path = Path(path)
    refuse_non_regular(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600: give the file the permissions any other would get
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def finite(data: Any) -> Any:
    """NaN and infinities as ``None``: JSON has no such numbers, and one of them must never make a whole results file
    unwritable (a loss that diverged is recorded as such by the burst's ``nonfinite`` flags, not by the number)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(finite(data), indent=1, sort_keys=False, allow_nan=False) + "\n")
