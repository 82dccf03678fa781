"""The version-dependent parts (perftune/compat.py) against the MindSpore and libraries installed in this venv.

Marked ``smoke``: ``.ci/run`` runs these on the newest and on the oldest supported set, so each assertion here is
checked on both ends of the declared ranges.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import sys
import termios
from importlib.metadata import version
from pathlib import Path

import pytest
from conftest import REPO
from packaging.requirements import Requirement

from perftune.burst.failures import classify_failure
from perftune.cli import SweepProgressDisplay, main
from perftune.compat import MissingApi, cli_runner, lookup, recompute_cells, threads_configured
from perftune.engine.plan_load import parse_plan
from perftune.engine.specs import make_spec

try:
    import tomllib
except ImportError:  # Python 3.10: pytest's own TOML reader
    import tomli as tomllib

pytestmark = pytest.mark.smoke

CONSTRAINTS = {name: REPO / ".ci" / f"constraints-{name}.txt" for name in ("newest", "oldest")}


def test_lookup_finds_the_thread_apis_and_names_what_is_missing():
    assert callable(lookup("mindspore.device_context.cpu.op_tuning.threads_num", "kernel_threads"))
    assert callable(lookup("mindspore.runtime.dispatch_threads_num", "dispatch_threads"))
    assert lookup("mindspore._c_expression.RuntimeConf") is not None  # a submodule, imported on the way
    with pytest.raises(MissingApi) as err:
        lookup("mindspore.runtime.no_such_setting", "kernel_threads")
    assert str(err.value) == (f"kernel_threads: MindSpore {version('mindspore')} has no "
                              "mindspore.runtime.no_such_setting")


def test_a_missing_api_makes_the_trial_unsupported_with_its_reason():
    spec = make_spec(parse_plan({"name": "c", "workload": "mlp", "baseline": {"kernel_threads": 1}}), {}, "c")
    status, reason = classify_failure(MissingApi("kernel_threads: MindSpore 2.7.0 has no mindspore.x"), spec)
    assert (status, reason) == ("unsupported", "kernel_threads: MindSpore 2.7.0 has no mindspore.x")


def test_thread_read_back_is_known_on_this_mindspore():
    # nothing was set in this process: MindSpore must say "not configured", not "cannot say" (None)
    assert threads_configured() == {"kernel_threads_configured": False, "dispatch_threads_configured": False}


def test_recompute_cells_names_the_cells_it_was_called_on():
    from perftune.workloads.mlp import build

    network = build({"in_dim": 8, "hidden": 16, "layers": 3, "classes": 4, "train_samples": 64,
                     "val_samples": 16}, 0).network
    assert recompute_cells(network) == []
    blocks = [name for name, _ in network.cells_and_names() if re.fullmatch(r"blocks\.\d+", name)]
    assert len(blocks) == 3
    for name, cell in network.cells_and_names():
        if name in blocks[:2]:
            cell.recompute()
    assert recompute_cells(network) == blocks[:2]  # not their sub-cells, not the third block


def test_cli_runner_keeps_stderr_apart(tmp_path):
    result = cli_runner().invoke(main, ["validate", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "missing.yaml" in lines[0], result.stderr
    assert result.stdout == ""


def test_progress_bar_on_a_terminal(monkeypatch):
    """The tqdm bar is only drawn on a terminal, so give it a real one (a pseudo-terminal) and read what it drew."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 0 columns: tqdm drops the format
    with os.fdopen(slave, "w", buffering=1) as tty:
        monkeypatch.setattr(sys, "stderr", tty)
        bar = SweepProgressDisplay()
        bar.begin(2)
        assert bar.bar is not None
        bar.start("baseline")
        bar.done("baseline: 123 samples/s")
        bar.grow(1)
        bar.done("mode=graph: 456 samples/s")
        bar.end()
    drawn = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other end is closed and everything was read
            break
        if not chunk:
            break
        drawn += chunk
    os.close(master)
    text = drawn.decode(errors="replace")
    assert "baseline: 123 samples/s" in text and "mode=graph: 456 samples/s" in text
    assert "2/3 trials" in text


def _pins(path: Path) -> dict[str, list[str]]:
    """Package -> every version the file pins for it (one per Python-version marker)."""
    pins: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{path.name}: {line!r} is not a pin"
            pins.setdefault(_canonical(req.name), []).append(spec.version)
    return pins


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize("which", sorted(CONSTRAINTS))
def test_constraints_sets_lie_inside_the_declared_ranges(which):
    """Each tested set must be installable from the ranges in pyproject.toml, or the ranges claim too little."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]
    pins = _pins(CONSTRAINTS[which])
    checked = 0
    for req in declared:
        name = _canonical(req.name)
        assert name in pins, f"{CONSTRAINTS[which].name} pins no {req.name}"
        for pinned in pins[name]:
            assert req.specifier.contains(pinned, prereleases=True), f"{req.name}=={pinned} is outside {req}"
        checked += 1
    assert checked >= 13  # the eleven runtime dependencies, pytest and mindcv
