"""Trial files sealed: a trial.json that changed after the sweep accepted it, or that cannot be read, is never believed.

A training script runs with the user's rights beside its results: one rewrote earlier trials' ``trial.json`` with
``samples_per_s: 1e9`` (valid JSON, every other field intact), and a resume reused them.  So the driver records each
trial file's SHA-256 when it accepts it, in the sweep folder's ``.perftune-seals.json`` (rewritten whole at every seal,
so a deleted seal file comes back with the next trial), and a resume, ``report``, ``compare`` and ``export`` check it.
A file that changed, or cannot be read (bad JSON, NaN, truncated, a throughput its windows do not give:
``files.read_trial``), is moved aside inside its trial folder (``trial.set-aside-<n>.json``: kept, never deleted:
perftune removes no file it cannot vouch for), named in the sweep's ``integrity`` notes, and the trial measured again.
A file with no seal (a sweep from before seals, or a driver killed between the burst's write and the seal) is believed
where the earlier ``results.json`` does not contradict it; where the folder's marker says it was sealed and the seals
file is gone or unreadable, that is said loudly and a file is reused only where ``results.json`` or its folder's own
seal confirms it (a deleted seals file was once the same as none, and the resume sealed an edited trial as it found
it).  The own seal (``trial.sha256`` beside trial.json, written with each seal) is the second witness: a consistent
edit of a trial.json is caught with the seals file deleted; whoever rewrites the trial file, its own seal and the
seals file (or deletes them and ``results.json``) together is not caught (perftune/README.md, "Faults and hostile
folders").  A file from a newer perftune is refused, not set aside.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import threading
from pathlib import Path
from typing import Callable, Optional

from perftune.errors import UserError
from perftune.io.files import (
    RESULTS_NAME,
    SEALS_NAME,
    TRIAL_NAME,
    TRIAL_SEAL_NAME,
    TRIALS_DIR,
    read_json,
    read_trial_if_present,
)
from perftune.io.outdir import is_sealed, mark_sealed
from perftune.io.records import TrialResult
from perftune.io.schema import NewerFileError
from perftune.io.store import write_json_atomic, write_text_atomic

SET_ASIDE = "trial.set-aside-{n}.json"
DIGEST = re.compile(r"[0-9a-f]{64}")
#: why another record of the sweep contradicts (or cannot confirm) a trial file, or None where it confirms it; its
#: second argument: whether the trial folder's own seal vouches for the file
Witness = Callable[[TrialResult, bool], Optional[str]]


def file_digest(path: Path) -> Optional[str]:
    """SHA-256 of a file's bytes, or None where it cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def read_seals(out: Path) -> dict[str, str]:
    """trial id -> the SHA-256 its trial.json had when the sweep accepted it: the seals file's, and for a trial it
    does not name (it is missing or unreadable), the seal in the trial's own folder (``own_seal``)."""
    return with_own_seals(out, load_seals(out)[0])


def with_own_seals(out: Path, central: dict[str, str]) -> dict[str, str]:
    """``central`` (the seals file's) with the own seal of each trial folder it does not name."""
    seals = dict(central)
    trials = Path(out) / TRIALS_DIR
    try:
        folders = [p for p in trials.iterdir() if p.name not in seals] if trials.is_dir() else []
    except OSError:
        folders = []
    for folder in folders:
        if (digest := own_seal(folder)) is not None:
            seals[folder.name] = digest
    return seals


def own_seal(trial_dir: Path) -> Optional[str]:
    """The digest in the trial folder's own seal (``trial.sha256``, written beside trial.json when the sweep accepted
    it: the second witness where the seals file is gone), or None: none, not a regular file, not a digest."""
    path = Path(trial_dir) / TRIAL_SEAL_NAME
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        try:
            text = os.read(fd, 256).decode("ascii")
        finally:
            os.close(fd)
    except (OSError, UnicodeDecodeError):
        return None
    digest = text.split(" ", 1)[0].strip()
    return digest if DIGEST.fullmatch(digest) else None


def write_own_seal(trial_dir: Path, digest: str) -> None:
    """Write the trial folder's own seal (``sha256sum -c`` checks it); a path that is not a file is left alone."""
    try:
        write_text_atomic(Path(trial_dir) / TRIAL_SEAL_NAME, f"{digest}  {TRIAL_NAME}\n")
    except (OSError, UserError):  # the seals file still holds the digest
        pass


def load_seals(out: Path) -> tuple[dict[str, str], Optional[str]]:
    """(``read_seals``; why the seals file is missing or cannot be read, else None)."""
    try:
        data = read_json(Path(out) / SEALS_NAME, "perftune's trial seals")
    except UserError as exc:
        return {}, str(exc)
    trials = data.get("trials") if isinstance(data, dict) else None
    if not isinstance(trials, dict):
        return {}, f"{Path(out) / SEALS_NAME}: not perftune's trial seals (no \"trials\" object)"
    return {k: v for k, v in trials.items() if isinstance(v, str)}, None


def lost_seals(out: Path) -> Optional[str]:
    """Why the seals of a folder whose marker says it is sealed are gone (missing, truncated, unreadable), else None
    (sealed and readable, or a folder from before seals)."""
    why = load_seals(out)[1]
    return why if why is not None and is_sealed(out) else None


def stat_key(path: Path) -> Optional[tuple[int, int, int]]:
    """(inode, size, mtime in ns) of a file, or None where it is gone: changed when any of them changed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def seal_mismatch(trial_file: Path, sealed: Optional[str], by: str = "") -> Optional[str]:
    """Why ``trial_file`` is not the file the sweep accepted (its digest differs from ``sealed``), or None; ``by``:
    which seal said so, where it is not the seals file."""
    if sealed is None:
        return None
    now = file_digest(trial_file)
    if now is None or now == sealed:
        return None
    return (f"{trial_file}: changed after the sweep accepted it (SHA-256 {now[:12]}..., sealed {sealed[:12]}..."
            f"{by}): edited or damaged")


def set_aside(trial_dir: Path) -> Path:
    """Move the trial folder's trial.json to the first free ``trial.set-aside-<n>.json`` beside it; its new path."""
    n = 1
    while (Path(trial_dir) / SET_ASIDE.format(n=n)).exists():
        n += 1
    target = Path(trial_dir) / SET_ASIDE.format(n=n)
    (Path(trial_dir) / TRIAL_NAME).rename(target)
    return target


class TrialSeals:
    """The seals of one sweep folder, as the driver holds them (lanes' threads share it)."""

    def __init__(self, out: Path):
        self.path = Path(out) / SEALS_NAME
        self.seals, _ = load_seals(out)
        #: why the seals of a folder that was sealed are gone: each trial is then reused only where another record
        #: of the sweep confirms it (``reusable``'s ``witness``)
        self.lost = lost_seals(out)
        self.lock = threading.Lock()
        #: trial id -> (inode, size, mtime) of the trial.json sealed by this run: a cheap look for the folder's watch
        self.stats: dict[str, tuple[int, int, int]] = {}

    def seal(self, trial_dir: Path, trial_id: str) -> None:
        """Record the digest of the trial.json just accepted (nothing where there is none)."""
        path = Path(trial_dir) / TRIAL_NAME
        digest = file_digest(path)
        if digest is None:
            return
        write_own_seal(trial_dir, digest)  # first: a driver killed between the two leaves the folder's own
        with self.lock:
            self.seals[trial_id] = digest
            self.stats[trial_id] = stat_key(path) or (0, 0, 0)
            write_json_atomic(self.path, {"kind": "perftune-seals", "trials": dict(sorted(self.seals.items()))})
            mark_sealed(self.path.parent)

    def reusable(self, trial_dir: Path, trial_id: str, witness: Optional[Witness] = None
                 ) -> tuple[Optional[TrialResult], Optional[str]]:
        """(A finished trial.json of this very trial left by an earlier run, or None; the note where its file was
        set aside).  Killed by a signal perftune did not send (``retry_on_resume``): None, measured again.

        A file the seals file does not name is checked against the seal in its own folder (``own_seal``), and is
        reused only where ``witness`` (another record of the sweep) finds nothing against it; where the folder's
        seals were lost (``lost``), the witness or the folder's own seal must confirm it: never sealed again as
        found."""
        path = Path(trial_dir) / TRIAL_NAME
        try:
            result = read_trial_if_present(path)
            own = own_seal(trial_dir) if trial_id not in self.seals else None
            why = seal_mismatch(path, self.seals.get(trial_id, own), "" if trial_id in self.seals else
                                f" in its folder's own {TRIAL_SEAL_NAME}") if result is not None else None
            if why is None and result is not None and trial_id not in self.seals and witness is not None:
                why = witness(result, own is not None)
                why = f"{path}: {'its seal was lost and ' if self.lost else 'not sealed, and '}{why}" if why else None
        except NewerFileError:
            raise
        except UserError as exc:
            result, why = None, str(exc)
        if why is not None:
            aside = set_aside(trial_dir)
            return None, f"{why}; kept as {aside.relative_to(Path(trial_dir).parent.parent)}, the trial measured again"
        if result is None or result.trial_id != trial_id or result.retry_on_resume:
            return None, None
        return result, None


def folder_doubts(out: Path) -> list[str]:
    """Every trial file of the sweep folder ``out`` that cannot be believed: unreadable, or changed since its seal
    (what ``report`` and ``compare`` say, as ``export`` does); first, seals lost from a folder that was sealed."""
    central = load_seals(out)[0]
    seals = with_own_seals(out, central)
    lost = lost_seals(out)
    doubts = [f"{lost}: this folder was sealed, so its trial files can no longer be checked against their seals "
              f"(only against their own windows, the seal in each trial folder ({TRIAL_SEAL_NAME}) and "
              f"{RESULTS_NAME})"] if lost else []
    trials = Path(out) / TRIALS_DIR
    try:
        folders = sorted(p for p in trials.iterdir() if p.is_dir()) if trials.is_dir() else []
    except OSError:
        return doubts
    for folder in folders:
        path = folder / TRIAL_NAME
        try:
            if read_trial_if_present(path) is None:
                continue
        except UserError as exc:
            doubts.append(str(exc))
            continue
        by = "" if folder.name in central else f" in its folder's own {TRIAL_SEAL_NAME}"
        if (why := seal_mismatch(path, seals.get(folder.name), by)) is not None:
            doubts.append(why)
    return doubts


def trial_file_doubt(trial_file: Path) -> Optional[str]:
    """For a lone trial.json inside a sweep folder (``<sweep>/trials/<id>/trial.json``): why it differs from its
    seal, or None."""
    trial_file = Path(trial_file)
    sweep = trial_file.parent.parent.parent
    if trial_file.parent.parent.name != TRIALS_DIR:
        return None
    return seal_mismatch(trial_file, read_seals(sweep).get(trial_file.parent.name))
