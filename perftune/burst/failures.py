"""How a burst failure becomes a status: unsupported (a knob this backend refuses), oom, or failed, with one line
saying why."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from perftune import compat, knobs as knob_registry
from perftune.io.records import TrialSpec


class KnobRefused(Exception):
    """A knob value that this backend cannot run; becomes status 'unsupported'."""


def one_line(exc: BaseException) -> str:
    """The exception's type and the first meaningful line of its message (MindSpore's run to dozens of lines)."""
    text = str(exc).strip()
    first = next((line.strip() for line in text.splitlines() if line.strip() and not line.startswith("---")), "")
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
    if "num_parallel_workers exceeds" in text:
        return "unsupported", f"num_parallel_workers={spec.knobs['num_parallel_workers']}: MindSpore says {reason}"
    return "failed", reason


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
