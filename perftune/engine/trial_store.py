"""The sweep folder's trials: each trial measured, or reused where an earlier run finished it and its file is the one
that run accepted; every accepted ``trial.json`` sealed; the folder watched for what vanishes or changes while the
sweep runs; ``results.json`` written again (atomically) after every change, so a killed sweep resumes from it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Optional, Union

from perftune.engine import graph_cache
from perftune.engine.progress import SweepProgress
from perftune.errors import UserError
from perftune.io.crosscheck import check_against_trials, differing_figures
from perftune.io.files import ESCAPED, RESULTS_NAME, TRIALS_DIR, read_sweep
from perftune.io.outdir import check_outputs
from perftune.io.records import TrialResult, TrialSpec
from perftune.io.seals import TrialSeals
from perftune.io.store import write_json_atomic
from perftune.io.sweep_records import PairedProcess, SweepResult, SweepTrial
from perftune.io.watch import FolderWatch

#: runs one trial in ``trial_dir`` and returns its result (``perftune.runner.run_trial``; tests pass scripted ones)
TrialRunner = Callable[[TrialSpec, Path], TrialResult]


class TrialStore:
    """One sweep's folder ``out``: its trial folders, compile caches, seals and ``results.json`` (``result``); what
    goes wrong with the folder is said on ``progress``."""

    def __init__(self, out: Path, run: TrialRunner, result: SweepResult, progress: SweepProgress):
        self.out = out
        self.trials_dir = out / TRIALS_DIR
        self.cache_dir = (out / "cache").resolve()
        self.run_trial = run
        self.result = result
        self.progress = progress
        self.lock = threading.RLock()  # a cluster's lanes share the records, the progress and results.json
        self.started = time.perf_counter()
        check_outputs(out)  # before anything is written: a refused resume leaves the folder as it was
        self.earlier = (out / RESULTS_NAME).exists()  # an earlier run's results.json, kept until this run records
        self.saves = 0
        self.witnesses: dict[str, TrialResult] = {}  # the earlier results.json's figures, by trial id
        self.seals = TrialSeals(out)  # each accepted trial.json's digest: a changed one is set aside (io/seals.py)
        self.watch = FolderWatch(out, self.seals)  # what vanishes from the folder while it runs (io/watch.py)

    def run_or_reuse(self, spec: TrialSpec, lane: Optional[int] = None) -> tuple[TrialResult, bool]:
        """``spec``'s result, from its folder when an earlier run finished it (True), else measured now (False);
        ``lane``: the runner's lane, from a lane's thread."""
        trial_dir = self.trials_dir / spec.trial_id
        result, set_aside = self.seals.reusable(trial_dir, spec.trial_id, self.witness)
        if set_aside is not None:
            self.warn(set_aside)
        found = result is not None
        if result is None:  # a compile cache that served another graph is dropped and the process run again
            result = graph_cache.run_checked(lambda s: self.run_trial(s, trial_dir) if lane is None
                                             else self.run_trial(s, trial_dir, lane=lane), spec)
            if ESCAPED in (result.containment or ""):  # a root script left the trial's cgroup: killed, and said
                self.warn(f"{TRIALS_DIR}/{spec.trial_id} ({spec.label}): {result.containment}")
        self.seals.seal(trial_dir, spec.trial_id)
        return result, found

    def recorded(self, trial_id: str) -> bool:
        """Whether this run recorded ``trial_id`` already: a folder it finds again is not "reused" from an earlier
        run."""
        with self.lock:
            return any(t.trial_id == trial_id for t in [*self.result.trials, *self.result.paired])

    def add(self, record: Union[SweepTrial, PairedProcess]) -> None:
        """A finished process recorded in ``results.json``."""
        with self.lock:
            (self.result.paired if isinstance(record, PairedProcess) else self.result.trials).append(record)
            self.save()

    def save(self) -> None:
        with self.lock:
            for line in self.watch.check():
                self.warn(line)
            self.result.wall_s = time.perf_counter() - self.started
            write_json_atomic(self.out / RESULTS_NAME, self.result.model_dump(mode="json"))
            self.saves += 1

    def save_last(self, finished: bool) -> None:
        """The sweep's last save; a run that ended by an error before it recorded anything keeps an earlier run's
        results.json as it was (a resume refused at its first trial once left a 0-trial record in its place)."""
        if finished or self.saves or not self.earlier:
            self.save()

    def check_earlier(self) -> None:
        """An earlier run's results.json checked against the trial files this run reuses: a figure it holds
        otherwise is said and kept in ``integrity`` (this run's results.json is written from the trial files).
        Where the folder's seals were lost, that is said loudly, and results.json is the trials' witness."""
        try:
            earlier = read_sweep(self.out) if self.earlier else None
        except UserError as exc:  # rewritten by this run; a trial it cannot reuse says so itself
            earlier = None
            self.warn(f"the earlier {RESULTS_NAME} cannot be read ({exc}); it is written again from the trial files")
        for t in earlier.trials if earlier is not None else []:
            self.witnesses.setdefault(t.trial_id, t.result)
        if self.seals.lost:
            self.warn(f"{self.seals.lost}: this folder was sealed, and its seals are gone: each trial file is reused "
                      f"only where it agrees with its own windows, its folder's own seal and the earlier "
                      f"{RESULTS_NAME}, else it is set aside and measured again")
        elif earlier is not None:
            for line in check_against_trials(earlier, self.out, sealed_only=True)[1]:
                self.warn(line)

    def witness(self, result: TrialResult, vouched: bool = False) -> Optional[str]:
        """Why the earlier results.json contradicts an unsealed trial file (or, where the folder's seals were lost
        and the trial folder's own seal does not vouch for it, cannot confirm it), or None."""
        known = self.witnesses.get(result.trial_id)
        if known is None:
            return (f"the earlier {RESULTS_NAME} has no record of it to confirm it"
                    if self.seals.lost and not vouched else None)
        names = differing_figures(known, result)
        return f"it disagrees with the earlier {RESULTS_NAME} on {', '.join(names)}" if names else None

    def warn(self, line: str) -> None:
        """What is wrong with the sweep's own folder (a trial file set aside): kept in results.json and said."""
        with self.lock:
            self.result.integrity.append(line)
            self.progress.done(f"  warning: {line}")
