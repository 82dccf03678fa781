"""A sweep folder has one writer at a time and holds only what perftune made.

Two sweeps writing one folder run every trial twice and lose each other's profiles; ``output_dir: ../victim`` with
``--fresh`` must never delete a file perftune did not write.  So a sweep first checks that the folder is its own
(empty, or marked by ``.perftune-sweep``, or holding a perftune ``results.json`` from before the marker existed),
then takes ``.perftune.lock`` (``flock``: the kernel drops it when its owner dies, even by SIGKILL; the file names
the owner's PID, host and driver tag: a later owner kills what a dead one left running), and ``--fresh`` deletes
only perftune's own files: in a trial folder, what the runner writes there (``files.TRIAL_OUTPUTS``), never a
user's file beside them.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from perftune.errors import UserError
from perftune.io.files import (
    LOG_NAME,
    RESULTS_NAME,
    SEALS_NAME,
    SPEC_NAME,
    SWEEP_KIND,
    TRIAL_OUTPUTS,
    TRIALS_DIR,
    file_kind,
    read_json,
)

LOCK_NAME = ".perftune.lock"
MARKER_NAME = ".perftune-sweep"
#: files a sweep writes at the top of its folder (besides results.json, trials/ and cache/)
OWN_FILES = ("ablation.csv", "ablation.md", "singles.csv", "report.html", SEALS_NAME)
TRIAL_DIR_PATTERN = re.compile(r"^[0-9a-f]{12}$")
#: what MindSpore's profiler accepts in its output path (mindspore/profiler/common/path_manager.py)
PROFILER_PATH = re.compile(r"(\.|/|_|-|\s|[~0-9a-zA-Z]|[\u4e00-\u9fa5])+")


def cannot_write(path: Path, exc: OSError) -> UserError:
    """The one-line error for an output that cannot be written (read-only folder, disk full, ...)."""
    return UserError(f"{path}: cannot be written ({exc.strerror or exc})")


#: the folder locks this process holds, by folder (the sweep's folder watch restores a deleted one: io/watch.py)
HELD: dict[Path, FolderLock] = {}


def _is_own_results(path: Path) -> bool:
    try:
        data = read_json(path)  # bounded: a hostile file is "not ours", never a crash
    except UserError:
        return False
    return isinstance(data, dict) and data.get("kind") == SWEEP_KIND


def _is_own_trial_dir(path: Path) -> bool:
    """A folder perftune made for a trial: named by a trial id, holding its spec.json (or still empty)."""
    if not (path.is_dir() and not path.is_symlink() and TRIAL_DIR_PATTERN.match(path.name)):
        return False
    return (path / SPEC_NAME).is_file() or not any(path.iterdir())


def check_own_folder(out: Path) -> None:
    """Refuse (one line) a folder that holds files perftune did not write, or a results.json of someone else."""
    out = Path(out)
    if not out.exists():
        return
    if not out.is_dir():
        raise UserError(f"{out}: not a folder (the sweep's output folder must be a folder)")
    results = out / RESULTS_NAME
    if results.exists() and not _is_own_results(results):
        raise UserError(f"{out}: its {RESULTS_NAME} was not written by a perftune sweep; refusing to overwrite it "
                        "(choose another --out or output_dir)")
    check_outputs(out)
    if (out / MARKER_NAME).is_file() or results.exists():
        return
    foreign = sorted(p.name for p in out.iterdir() if p.name != LOCK_NAME)
    if foreign:
        shown = ", ".join(foreign[:3]) + (" ..." if len(foreign) > 3 else "")
        raise UserError(f"{out}: holds files perftune did not write ({shown}); a sweep writes only into an empty "
                        "folder or one of its own (choose another --out or output_dir)")


def check_outputs(out: Path) -> None:
    """Refuse (one line) a sweep folder where a file a sweep rewrites (at its top, and each trial folder's spec and
    log) is not a regular file (a folder, a link to a device): checked before anything is written, so a refused
    resume leaves the folder as it was (a seals file made a folder once let ``results.json`` be replaced by an empty
    record before the refusal)."""
    trials = Path(out) / TRIALS_DIR
    if os.path.lexists(trials) and not trials.is_dir():
        raise UserError(f"{trials}: not a folder; a sweep keeps its trials there (remove it, or choose another --out)")
    try:
        folders = sorted(p for p in trials.iterdir() if p.is_dir()) if trials.is_dir() else []
    except OSError as exc:
        raise UserError(f"{trials}: cannot be read ({exc.strerror or exc}); a sweep keeps its trials there") from None
    for path in [Path(out) / name for name in (RESULTS_NAME, MARKER_NAME, *OWN_FILES)] + \
            [folder / name for folder in folders for name in (SPEC_NAME, LOG_NAME)]:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UserError(f"{path}: cannot be read ({exc.strerror or exc}); perftune rewrites it during a sweep "
                            "(repair or remove it, or choose another --out)") from None
        if not stat.S_ISREG(mode):
            raise UserError(f"{path}: {file_kind(mode)}, not a regular file; a sweep rewrites it, so it refuses to "
                            "start (remove it, or choose another --out)")


def check_own_trial_folder(trial_dir: Path) -> None:
    """``perftune run --out DIR``: DIR must be empty, new, or a trial folder perftune made (it holds spec.json)."""
    trial_dir = Path(trial_dir)
    held = trial_dir.is_dir() and any(p.name != LOCK_NAME for p in trial_dir.iterdir())
    if held and not (trial_dir / SPEC_NAME).is_file():
        raise UserError(f"{trial_dir}: holds files perftune did not write; a trial runs only in an empty folder or "
                        "one of its own trial folders (choose another --out)")


def check_profiler_path(out: Path) -> None:
    """MindSpore's profiler refuses some characters in its path and every profile would fail: refuse up front."""
    resolved = str(Path(out).resolve())
    if not PROFILER_PATH.fullmatch(resolved):
        bad = sorted({c for c in resolved if not PROFILER_PATH.fullmatch(c)})
        raise UserError(f"{out}: MindSpore's profiler refuses the character(s) {' '.join(map(repr, bad))} in its "
                        "path (allowed: letters, digits, space, . / _ - ~); choose another --out or set "
                        "burst.profile_steps: 0")


@dataclass
class FolderLock:
    """The held ``.perftune.lock`` of a sweep folder; ``stale`` names the dead owner it was taken from, if any."""

    path: Path
    fd: int
    stale: Optional[str] = None
    #: the dead owner's driver tag where it ran on this host (its leftover processes carry it), else None
    stale_tag: Optional[str] = None
    text: str = ""  # what the lock file says (this owner)

    def held(self) -> bool:
        """Whether the lock file on disk is still the one this owner holds (not deleted or replaced)."""
        try:
            return self.fd >= 0 and os.fstat(self.fd).st_ino == os.stat(self.path).st_ino
        except OSError:
            return False

    def restore(self) -> Optional[str]:
        """Write the lock file again where it vanished (a script deleted it) and hold the new one; None when done,
        else why not (another process took the new file meanwhile)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            return f"cannot be written again ({exc.strerror or exc})"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return "another process holds the new lock file: two sweeps may now write this folder"
        os.ftruncate(fd, 0)
        os.pwrite(fd, self.text.encode(), 0)
        os.close(self.fd)
        self.fd = fd
        HELD[self.path.parent.resolve()] = self
        return None

    def release(self) -> None:
        HELD.pop(self.path.parent.resolve(), None)
        if self.fd < 0:
            return
        try:
            os.unlink(self.path)  # while still holding it: a waiting sweep re-checks the inode and retries
        except OSError:
            pass
        os.close(self.fd)
        self.fd = -1


def _owner_text(raw: str) -> str:
    try:
        owner = json.loads(raw)
        return f"process {owner['pid']} on host {owner['host']} (since {owner.get('since', '?')})"
    except (ValueError, KeyError, TypeError):
        return "another process"


def _stale_tag(raw: str) -> Optional[str]:
    """The driver tag of a dead owner that ran on this host (``pid-`` for a lock written before tags existed)."""
    try:
        owner = json.loads(raw)
        if owner.get("host") != socket.gethostname():
            return None
        return str(owner.get("tag") or f"{int(owner['pid'])}")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def lock_folder(out: Path, since: str = "", tag: str = "") -> FolderLock:
    """Take the folder's lock or raise ``UserError`` naming its owner; a dead owner's lock is taken over.

    ``tag`` (the driver's, ``runner.cgroup.driver_tag``) is written in the lock so that a later owner can kill the
    processes this one leaves if it dies (``stale_tag``)."""
    out = Path(out)
    path = out / LOCK_NAME
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(out, exc) from None
    for _ in range(10):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise cannot_write(path, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            raw = os.pread(fd, 4096, 0).decode("utf-8", "replace")
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise cannot_write(path, exc) from None
            raise UserError(f"{out}: another sweep is writing this folder ({_owner_text(raw)}); wait for it, "
                            "stop it, or choose another --out") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # its owner released (unlinked) it between our open and flock: try the new file
            os.close(fd)
            continue
        previous = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        stale = _owner_text(previous) if previous else None
        text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since, "tag": tag}) + "\n"
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, text.encode(), 0)
        except OSError as exc:
            os.close(fd)
            raise cannot_write(path, exc) from None
        lock = FolderLock(path, fd, stale, _stale_tag(previous) if previous else None, text)
        HELD[out.resolve()] = lock
        return lock
    raise UserError(f"{out}: the lock {LOCK_NAME} keeps changing hands; is another sweep starting there?")


#: the marker's line that says the folder's trial files are sealed (added at the sweep's first seal): a seals file
#: missing there was lost, not never written (a deleted seals file was once the same as none, and the resume sealed
#: an edited trial as it found it)
SEALED_LINE = f"sealed: every trial.json this sweep accepts has its SHA-256 in {SEALS_NAME}"
MARKER_TEXT = "This folder holds a perftune sweep: perftune writes and deletes only its own files here.\n"


def mark_own(out: Path, sealed: bool = False) -> None:
    """Mark the folder as a perftune sweep folder (so a later sweep or ``--fresh`` knows it may write there);
    ``sealed``: its trial files are sealed (written again so where the marker vanished)."""
    marker = Path(out) / MARKER_NAME
    if not marker.exists():
        marker.write_text(MARKER_TEXT + (f"{SEALED_LINE}\n" if sealed else ""), encoding="utf-8")


def mark_sealed(out: Path) -> None:
    """Add the sealed line to the folder's marker (at the sweep's first seal: the folder is sealed from then on);
    a folder with no marker (a sweep run from the API) gets none."""
    marker = Path(out) / MARKER_NAME
    if marker.is_file() and not is_sealed(out):
        marker.write_text(f"{MARKER_TEXT}{SEALED_LINE}\n", encoding="utf-8")


def is_sealed(out: Path) -> bool:
    """Whether the folder's marker says its trial files are sealed (read bounded: a marker is two short lines)."""
    marker = Path(out) / MARKER_NAME
    try:
        if not marker.is_file():
            return False
        with open(marker, "rb") as fh:
            return SEALED_LINE.encode() in fh.read(4096)
    except OSError:
        return False


def clear_trial_outputs(trial_dir: Path, spec_too: bool = False) -> list[str]:
    """Delete what perftune writes in a trial folder (``TRIAL_OUTPUTS``, and ``spec.json`` with ``spec_too``) and
    the folder where nothing else is left; a user's file beside them stays.  Returns what was left in place."""
    for pattern in TRIAL_OUTPUTS + ((SPEC_NAME,) if spec_too else ()):
        for path in Path(trial_dir).glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    left = sorted(str(p) for p in Path(trial_dir).iterdir())
    if spec_too and not left:
        Path(trial_dir).rmdir()
    return left


def clear_own(out: Path) -> list[str]:
    """``--fresh``: delete perftune's results and trial folders, nothing else; returns what was left in place."""
    out = Path(out)
    results = out / RESULTS_NAME
    if results.exists() and _is_own_results(results):
        results.unlink()
    for name in OWN_FILES:
        (out / name).unlink(missing_ok=True)
    kept: list[str] = []
    trials = out / TRIALS_DIR
    if trials.is_dir() and not trials.is_symlink():
        for child in sorted(trials.iterdir()):
            if _is_own_trial_dir(child):
                kept += clear_trial_outputs(child, spec_too=True)
            else:
                kept.append(str(child))
        if not kept:
            trials.rmdir()
    return kept
