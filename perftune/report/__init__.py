"""The HTML report (placeholder until the report module lands): the Markdown tables are always written."""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def write_report(out_dir: Path) -> Optional[Path]:
    return None
