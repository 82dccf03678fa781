"""Results on disk: atomic writes and versioned reads, so a killed sweep never leaves a half-written file."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text_atomic(path: Path, text: str) -> None:
    path = Path(path)
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
