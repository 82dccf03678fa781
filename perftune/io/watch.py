"""The sweep's folder watched while it runs: what vanishes or changes is noticed, said, and restored where it can be.

A training script runs beside its results with the user's rights: one deleted the other trial folders,
``results.json``, the lock and the sweep marker during a burst, and the sweep ended with exit 0 reporting 4 trials
with one folder on disk, the marker gone and the lock gone while it held it.  After every trial (each
save of ``results.json``) the sweep looks: its lock (restored: ``outdir.FolderLock.restore``), the marker (written
again), ``results.json`` (written again by the save that follows), and each trial file this run sealed (a cheap
``stat`` first, the digest only where that changed).  Each finding is said once and kept in ``results.json``
(``integrity``); the sweep's results stay those it accepted.
"""

from __future__ import annotations

from pathlib import Path

from perftune.io.files import RESULTS_NAME, TRIAL_NAME, TRIALS_DIR
from perftune.io.outdir import HELD, MARKER_NAME, mark_own
from perftune.io.seals import TrialSeals, file_digest, stat_key


class FolderWatch:
    """What a sweep expects in its folder ``out``; ``check`` returns what it found missing or changed, once each."""

    def __init__(self, out: Path, seals: TrialSeals):
        self.out = Path(out)
        self.seals = seals
        self.results_written = (self.out / RESULTS_NAME).exists()
        self.marked = (self.out / MARKER_NAME).is_file()  # (a sweep run from the API may have no marker)
        self.said: set[str] = set()

    def check(self) -> list[str]:
        """Look now (before ``results.json`` is written again); the new findings."""
        found = self._lock() + self._marker() + self._trials()
        if self.results_written and not (self.out / RESULTS_NAME).exists():
            found.append(f"{RESULTS_NAME} vanished while the sweep ran (written again from the sweep's records)")
        self.results_written = True
        new = [line for line in found if line not in self.said]
        self.said.update(new)
        return new

    def _lock(self) -> list[str]:
        lock = HELD.get(self.out.resolve())
        if lock is None or lock.held():
            return []
        why = lock.restore()
        what = "restored" if why is None else f"not restored: {why}"
        return [f"the folder's lock {lock.path.name} vanished or was replaced while the sweep held it ({what})"]

    def _marker(self) -> list[str]:
        if not self.marked or (self.out / MARKER_NAME).is_file():
            return []
        mark_own(self.out, sealed=bool(self.seals.seals))
        return [f"the sweep marker {MARKER_NAME} vanished while the sweep ran (written again)"]

    def _trials(self) -> list[str]:
        found = []
        with self.seals.lock:
            sealed = {tid: (key, self.seals.seals.get(tid)) for tid, key in self.seals.stats.items()}
        for trial_id, (key, digest) in sorted(sealed.items()):
            folder = self.out / TRIALS_DIR / trial_id
            path = folder / TRIAL_NAME
            now = stat_key(path)
            if now == key:
                continue
            if not folder.is_dir():
                found.append(f"{TRIALS_DIR}/{trial_id} vanished while the sweep ran (results.json keeps its result; "
                              "its log and profile are lost)")
            elif now is None:
                found.append(f"{TRIALS_DIR}/{trial_id}/{TRIAL_NAME} vanished while the sweep ran (results.json keeps "
                              "its result; a resume measures it again)")
            elif file_digest(path) != digest:
                found.append(f"{TRIALS_DIR}/{trial_id}/{TRIAL_NAME} changed after the sweep accepted it (results.json "
                              "keeps the result as accepted; a resume sets the file aside and measures it again)")
        return found
