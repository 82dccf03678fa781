"""Atomic writes: finite JSON whatever a trial produced, and the permissions any other file of the user gets."""

from __future__ import annotations

import json
import math
import os
import stat

import pytest

from perftune.io.store import finite, write_json_atomic, write_text_atomic

pytestmark = pytest.mark.smoke  # JSON and file modes: cheap, checked on the oldest set too


def test_non_finite_numbers_are_written_as_null(tmp_path):
    path = tmp_path / "trial.json"
    write_json_atomic(path, {"loss": math.nan, "curve": [[1, math.inf], [2, 1.5]], "nested": {"x": -math.inf},
                             "ok": 2.0, "label": "nan"})
    data = json.loads(path.read_text())  # strict JSON: the standard parser reads it back
    assert data == {"loss": None, "curve": [[1, None], [2, 1.5]], "nested": {"x": None}, "ok": 2.0, "label": "nan"}
    assert finite((1.0, math.nan)) == [1.0, None]


def test_files_respect_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "report.html", "<html></html>")
        assert stat.S_IMODE((tmp_path / "report.html").stat().st_mode) == 0o644
        os.umask(0o077)
        write_text_atomic(tmp_path / "private.txt", "x")
        assert stat.S_IMODE((tmp_path / "private.txt").stat().st_mode) == 0o600
    finally:
        os.umask(old)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left behind
