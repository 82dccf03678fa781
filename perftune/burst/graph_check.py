"""The burst's side of the per-configuration compile cache (``perftune.engine.graph_cache``): point MindSpore at the
folder before anything compiles, and check a process that may have loaded its step from it.

A process without its configuration's first loss (the first process) empties the folder first, so it compiles cold
(its ``compile_ms`` is the real compile), fills the folder in its own order and records in it what it computes
(``perftune.io.graph_key``: the key, the configuration, each file's digest).  A process with it loads the folder only
where that record names its own key and every file is the one recorded; and what it loaded must reproduce the first
and second steps' losses (the same seed, weights and batches give the same losses unless the graph is another one;
the second step's loss carries the first update).  A folder holding anything but regular files and folders (a FIFO,
a link, a device) is refused without opening it: MindSpore would block reading a FIFO until the trial's timeout.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import stat
from pathlib import Path
from typing import Optional

from perftune.io.graph_key import MANIFEST, graph_fields, graph_key
from perftune.io.records import Note, TrialResult, TrialSpec

#: how far a loss from the cached graph may be from the first process's: threads that sum in another order move a
#: float32 loss by about 1e-7 relative; another graph moves it by far more
LOSS_RTOL = 1e-4
#: the most entries a folder is walked for (a few dozen are MindSpore's; more is not a cache this process made)
MAX_ENTRIES = 10_000
MAX_MANIFEST_BYTES = 1 << 20


class GraphMismatch(Exception):
    """The compile cache served a graph that does not reproduce the configuration's first losses."""


def use_compile_cache(spec: TrialSpec, result: TrialResult) -> None:
    """Set MindSpore's cache variables for this process (before its first compile)."""
    if not spec.compile_cache:
        return
    folder = Path(spec.compile_cache)
    refused = refusal(folder, spec) if spec.first_loss is not None else "cold"
    if refused is None:
        result.compile_cache = "loaded"
    else:
        if refused not in ("cold", "empty"):
            result.notes.append(Note(kind="warning", text=f"the compile cache {folder} {refused}: removed, and this "
                                                          "process compiled its own graphs"))
        remove(folder)
        result.compile_cache = "filled"
        folder.mkdir(parents=True, exist_ok=True)
        write_manifest(folder, spec, files={})
    os.environ["MS_COMPILER_CACHE_ENABLE"] = "1"
    os.environ["MS_COMPILER_CACHE_PATH"] = str(folder)


def refusal(folder: Path, spec: TrialSpec) -> Optional[str]:
    """Why ``folder`` is not loaded (``"empty"``: nothing to load), or None where it holds this configuration's
    graphs as its first process recorded them.  Nothing in it is opened before every entry is known regular."""
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return "empty"
    if not stat.S_ISDIR(mode):
        return f"is {kind(mode)}, not a folder"
    files, odd = walk(folder)
    if odd:
        return f"holds {odd}, not a regular file"
    if not any(name.endswith(".mindir") for name in files):
        return "empty"
    record = read_manifest(folder)
    key = graph_key(spec)
    if record is None:
        return "has no readable record of what it computes"
    if record.get("key") != key or folder.name != key:
        return f"holds another configuration's graphs (its record names {record.get('key')}, this one is {key})"
    recorded = record.get("files") or {}
    if not any(name.endswith(".mindir") for name in recorded):
        return "has no digest of its graphs (its first process did not finish)"
    for name, digest in recorded.items():
        if name not in files or file_digest(folder / name) != digest:
            return f"holds a {name} that is not the one its first process wrote"
    return None


def walk(folder: Path) -> tuple[list[str], Optional[str]]:
    """The regular files under ``folder`` (relative names) and the first entry that is neither a file nor a folder
    (``'x.mindir, a FIFO'``), by ``lstat`` only."""
    files: list[str] = []
    pending, seen = [folder], 0
    while pending:
        here = pending.pop()
        with os.scandir(here) as entries:
            for entry in entries:
                seen += 1
                if seen > MAX_ENTRIES:
                    return files, f"more than {MAX_ENTRIES} entries"
                mode = entry.stat(follow_symlinks=False).st_mode
                name = os.path.relpath(entry.path, folder)
                if stat.S_ISDIR(mode):
                    pending.append(Path(entry.path))
                elif stat.S_ISREG(mode):
                    files.append(name)
                else:
                    return files, f"{name}, {kind(mode)}"
    return files, None


def kind(mode: int) -> str:
    for test, what in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISREG, "a file")):
        if test(mode):
            return what
    return "a special file"


def remove(folder: Path) -> None:
    """Remove the folder without following links (a link itself is unlinked, never what it points to)."""
    try:
        if os.path.islink(folder) or (folder.exists() and not folder.is_dir()):
            folder.unlink()
        else:
            shutil.rmtree(folder, ignore_errors=True)
    except FileNotFoundError:
        pass


def file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def read_manifest(folder: Path) -> Optional[dict]:
    path = folder / MANIFEST
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode) or os.lstat(path).st_size > MAX_MANIFEST_BYTES:
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_manifest(folder: Path, spec: TrialSpec, files: dict[str, str]) -> None:
    record = {"key": graph_key(spec), "computes": graph_fields(spec), "files": files}
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, folder / MANIFEST)


def seal_folder(spec: TrialSpec, result: TrialResult) -> None:
    """At the end of a process that filled the folder: record the digest of every file MindSpore wrote."""
    if not spec.compile_cache or result.compile_cache != "filled":
        return
    folder = Path(spec.compile_cache)
    files, odd = walk(folder)
    if odd is None:
        write_manifest(folder, spec, {name: file_digest(folder / name) for name in sorted(files)
                                      if name != MANIFEST})


def check_loaded_graph(spec: TrialSpec, result: TrialResult, steps_done: int) -> None:
    """After the first and the second step: raise ``GraphMismatch`` where a loaded graph did not reproduce the
    configuration's loss of that step (a paired process's second step may be another arm's: only the first)."""
    if steps_done == 2 and spec.pair is None and len(result.steps) >= 2:
        result.second_loss = result.steps[1].loss
    if result.compile_cache != "loaded":
        return
    which, expected, got = (("first", spec.first_loss, result.first_loss) if steps_done == 1 else
                            ("second", spec.second_loss, result.second_loss))
    if steps_done not in (1, 2) or expected is None or (steps_done == 2 and spec.pair is not None):
        return
    if got is None or not (math.isfinite(got) and math.isclose(got, expected, rel_tol=LOSS_RTOL, abs_tol=1e-6)):
        result.compile_cache = "mismatch"
        shown = "not finite" if got is None else f"{got:.6g}"
        raise GraphMismatch(f"the compile cache {spec.compile_cache} served another graph: {which} loss {shown}, "
                            f"the configuration's first process had {expected:.6g}")
