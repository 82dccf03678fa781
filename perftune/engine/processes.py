"""The sweep's processes and their records: each trial measured (or reused), booked, recorded in ``results.json``,
said on the progress display, and turned into a ``ProcessRun`` the comparisons use, or left out.

One rule for a process measured while other processes competed for the cores (``TrialResult.contended_windows``),
whether it ran alone (measured again at once) or on a lane of a cluster (left out, and the race gives the candidate
another): it is not used, and does not count as a look, while contention looks passing, that is while at most
``decision.remeasure_contended`` processes in a row (in the order the sweep uses them) were contended, and the
sweep has time left.  Once more were, contention is the machine's state: measuring again would double the cost for
nothing, so the process is used and counted as contended in its comparison.  The next usable process of its
configuration carries how many were measured again in its place (``ProcessRun.remeasured``), so a comparison counts
the contended processes it used and those it measured again, of its own processes only.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Hashable, Optional

from perftune import knobs
from perftune.engine import graph_cache, window_count
from perftune.engine.blocked import process_run
from perftune.engine.paired import (
    PairedRun,
    available_memory,
    counterbalanced,
    fits_twice,
    pairable_change,
    paired_line,
    paired_record,
    paired_run,
)
from perftune.engine.progress import SweepProgress
from perftune.engine.race import EXCLUDED, LaneOutcome
from perftune.engine.specs import make_spec, paired_label, paired_spec
from perftune.engine.stats import Noise, ProcessRun
from perftune.io.files import RESULTS_NAME, TRIALS_DIR
from perftune.io.plan import Plan
from perftune.io.records import TrialResult, TrialSpec
from perftune.io.seals import TrialSeals
from perftune.io.store import write_json_atomic
from perftune.io.sweep_records import FAILED_VERDICTS, SweepResult, SweepTrial
from perftune.io.watch import FolderWatch
from perftune.words import lm
from perftune.words.reasons import process_flags

#: runs one trial in ``trial_dir`` and returns its result (``perftune.runner.run_trial``; tests pass scripted ones)
TrialRunner = Callable[[TrialSpec, Path], TrialResult]


class Processes:
    """Every process of one sweep, by configuration (``key``: its first process's trial id), in measurement order."""

    def __init__(self, plan: Plan, out: Path, run: TrialRunner, result: SweepResult, progress: SweepProgress,
                 out_of_time: Callable[[], bool]):
        self.plan = plan
        self.out = out
        self.trials_dir = out / TRIALS_DIR
        self.cache_dir = (out / "cache").resolve()
        self.run_trial = run
        self.result = result
        self.progress = progress
        self.out_of_time = out_of_time
        self.started = time.perf_counter()
        self.lock = threading.RLock()  # a cluster's lanes share the records, the progress and results.json
        self.runs: list[ProcessRun] = []  # every usable process, in measurement order (config = its key)
        self.configs: dict[Hashable, tuple[dict[str, Any], str]] = {}  # key -> (changes, kind)
        self.of: dict[Hashable, list[SweepTrial]] = {}  # key -> its processes, in replicate order
        self.booked: dict[Hashable, int] = {}  # key -> replicates reserved so far
        self.left_out: dict[Hashable, int] = {}  # key -> contended processes not used since its last usable one
        self.streak = 0  # contended processes in a row, whatever their configuration
        self.expected = self.ticks = 0  # progress lines expected so far, and given
        self.pairs_booked: dict[tuple[Hashable, Hashable], int] = {}  # (reference, candidate) -> paired processes
        self.seals = TrialSeals(out)  # each accepted trial.json's digest: a changed one is set aside (io/seals.py)
        self.watch = FolderWatch(out, self.seals)  # what vanishes from the folder while it runs (io/watch.py)

    # -- configurations and trials ----------------------------------------------------------------------------
    def spec(self, changes: dict[str, Any], replicate: int = 0, windows: Optional[int] = None) -> TrialSpec:
        return make_spec(self.plan, changes, knobs.label_of(changes), replicate, self.cache_dir, windows)

    def register(self, changes: dict[str, Any], kind: str) -> Hashable:
        """A configuration's key (its first process's trial id) for the races."""
        key = self.spec(changes).trial_id
        self.configs.setdefault(key, (changes, kind))
        self.of.setdefault(key, [])
        return key

    def first(self, key: Hashable) -> SweepTrial:
        return self.of[key][0]

    def run_or_reuse(self, spec: TrialSpec, lane: Optional[int] = None) -> tuple[TrialResult, bool]:
        """``spec``'s result, from its folder when an earlier run finished it (True), else measured now (False)."""
        trial_dir = self.trials_dir / spec.trial_id
        result, set_aside = self.seals.reusable(trial_dir, spec.trial_id)
        if set_aside is not None:
            self.warn(set_aside)
        found = result is not None
        if result is None:  # a compile cache that served another graph is dropped and the process run again
            result = graph_cache.run_checked(lambda s: self.run_trial(s, trial_dir) if lane is None
                                             else self.run_trial(s, trial_dir, lane=lane), spec)
        self.seals.seal(trial_dir, spec.trial_id)
        return result, found

    def first_result(self, key: Hashable) -> Optional[TrialResult]:  # the configuration's first, once measured
        with self.lock:
            return next((t.result for t in self.of.get(key, []) if t.replicate == 0), None)

    def measure(self, changes: dict[str, Any], kind: str, replicate: int = 0, lane: Optional[int] = None) -> SweepTrial:
        """One trial (reused when an earlier run finished it); ``lane``: the runner's lane, from a lane's thread."""
        key = self.spec(changes).trial_id
        with self.lock:  # a repeat's timed windows, from its configuration's processes so far
            done, noise = [t.result for t in self.of.get(key, []) if not t.excluded], Noise.pooled(self.runs)
        choice = window_count.for_repeat(self.plan, replicate, done, noise)
        spec = graph_cache.for_process(self.spec(changes, replicate, choice.windows if choice else None),
                                       self.first_result(key))
        if lane is None:  # the lanes' runner says itself what runs where
            self.progress.start(spec.label + (f" (run {replicate + 1})" if replicate else ""))
        with self.lock:  # measured already by this run: a folder found again is not "reused" from an earlier one
            seen = any(t.trial_id == spec.trial_id for t in self.result.trials)
        result, found = self.run_or_reuse(spec, lane)
        reused = found and not seen
        verdict = result.status if result.status in FAILED_VERDICTS else \
            ("baseline" if kind == "baseline" else "measured")
        trial = SweepTrial(trial_id=spec.trial_id, label=spec.label, kind=kind, changes=changes,
                           replicate=replicate, verdict=verdict, reason=result.reason or "", reused=reused,
                           window_count=choice,
                           result=result.model_copy(update={"steps": []}))
        with self.lock:
            self.result.trials.append(trial)
            self.save()
        return trial

    def book(self, key: Hashable) -> int:
        """The next replicate of ``key``, reserved (a lane's process gets its number before the round starts)."""
        with self.lock:
            replicate = self.booked.get(key, 0)  # every process of ``key`` is booked first
            self.booked[key] = replicate + 1
            return replicate

    def measure_replicate(self, key: Hashable, replicate: int, lane: Optional[int] = None) -> SweepTrial:
        """Process ``replicate`` of ``key``: the first carries the configuration's kind, later ones are repeats."""
        changes, kind = self.configs[key]
        trial = self.measure(changes, kind if replicate == 0 or kind == "baseline" else "repeat", replicate, lane)
        with self.lock:
            self.of[key].append(trial)
            self.of[key].sort(key=lambda t: t.replicate)
        return trial

    # -- paired processes (``engine/paired.py``) ------------------------------------------------------------------
    def pairable(self, reference: Hashable, candidate: Hashable) -> Optional[str]:
        """Why ``candidate`` pairs with ``reference`` in one process, or None (``pairable_change``, ``fits_twice``)."""
        if not self.plan.decision.paired:
            return None
        ref, cand = self.spec(self.configs[reference][0]), self.spec(self.configs[candidate][0])
        if ref.script is not None or int(ref.knobs["workers"]) > 1 or int(cand.knobs["workers"]) > 1:
            return None
        why = pairable_change(ref.knobs, cand.knobs, ref.workload, ref.workload_params, cand.workload_params)
        if why is None or not knobs.model_change(ref.knobs, cand.knobs):
            return why
        firsts = self.first_result(reference), self.first_result(candidate)
        return why if fits_twice(*firsts, available_memory()) else None

    def measure_pair(self, reference: Hashable, candidate: Hashable) -> Optional[PairedRun]:
        """One paired process of ``candidate`` against ``reference`` (reused when an earlier run finished it),
        recorded in ``results.json``; its blocks, or None when it failed."""
        d = self.plan.decision
        with self.lock:
            replicate = self.pairs_booked.get((reference, candidate), 0)
            self.pairs_booked[(reference, candidate)] = replicate + 1
        ref, cand = self.spec(self.configs[reference][0]), self.spec(self.configs[candidate][0])
        swapped = counterbalanced(replicate)
        spec = paired_spec(cand if swapped else ref, ref if swapped else cand, replicate, d.paired_blocks,
                           d.paired_window_s)
        spec = spec.model_copy(update={"label": paired_label(ref.label, cand.label, replicate)})
        spec = graph_cache.for_process(spec, self.first_result(candidate if swapped else reference))  # arm 0's
        self.progress.start(spec.label)
        with self.lock:
            seen = any(p.trial_id == spec.trial_id for p in self.result.paired)
        result, found = self.run_or_reuse(spec)
        run = paired_run(reference, candidate, result, swapped=swapped) if result.status == "ok" else None
        record = paired_record(spec, result, run, knobs.label_of(self.configs[reference][0]),
                               knobs.label_of(self.configs[candidate][0]), found and not seen)
        with self.lock:
            self.result.paired.append(record)
            self.save()
        self.say(paired_line(spec.label, record, run))
        return run

    # -- usable or not: the one contention rule ----------------------------------------------------------------
    def use(self, key: Hashable, trial: SweepTrial) -> LaneOutcome:
        """A finished process of ``key``: failed (None), left out (``EXCLUDED``: contended while contention looks
        passing), or its ``ProcessRun``; called in the order the sweep uses its processes."""
        r = trial.result
        if trial.verdict in FAILED_VERDICTS or not r.windows:
            return None
        self.streak = self.streak + 1 if r.contended_windows else 0
        limit = self.plan.decision.remeasure_contended
        if r.contended_windows and self.streak <= limit and not self.out_of_time():
            self.left_out[key] = self.left_out.get(key, 0) + 1
            trial.excluded = (f"{r.contended_windows} of {len(r.windows)} timed windows contended (other processes "
                              "used the cores): not used")
            self.save()
            return EXCLUDED
        return process_run(key, r, self.left_out.pop(key, 0))

    def measure_process(self, key: Hashable) -> Optional[ProcessRun]:
        """One more usable process of ``key``, measured again at once while ``use`` leaves one out; None if it
        failed."""
        while True:
            trial = self.measure_replicate(key, self.book(key))
            outcome = self.use(key, trial)
            self.said(trial)
            if outcome != EXCLUDED:
                return outcome  # type: ignore[return-value]

    def measure_booked(self, key: Hashable, replicate: int, lane: int) -> SweepTrial:
        """A lane's process (in the lane's thread): measured once and said; ``settle`` decides whether it is used."""
        trial = self.measure_replicate(key, replicate, lane)
        self.said(trial)
        return trial

    def settle(self, key: Hashable, trial: SweepTrial) -> LaneOutcome:
        """A lane's finished process, in lane order (``use``: the race gives an open candidate another)."""
        return self.use(key, trial)

    # -- results.json and the progress display ----------------------------------------------------------------------
    def save(self) -> None:
        with self.lock:
            for line in self.watch.check():
                self.warn(line)
            self.result.wall_s = time.perf_counter() - self.started
            write_json_atomic(self.out / RESULTS_NAME, self.result.model_dump(mode="json"))

    def warn(self, line: str) -> None:
        """What is wrong with the sweep's own folder (a trial file set aside): kept in results.json and said."""
        with self.lock:
            self.result.integrity.append(line)
            self.progress.done(f"  warning: {line}")

    def say(self, line: str) -> None:
        """One progress line (a process measured, or a verdict); the bar grows past what was expected."""
        with self.lock:
            self.ticks += 1
            if self.ticks > self.expected:
                self.progress.grow(1)  # an extra round, a re-measure, stacking or leave-one-out
            self.progress.done(line)

    def said(self, trial: SweepTrial) -> None:
        """A process's line: what it measured, or why it failed."""
        self.say(process_line(trial))


def process_line(trial: SweepTrial) -> str:
    """A finished process's progress line: what it measured, or why it failed."""
    r = trial.result
    what = lm.progress_text(r) if r.status == "ok" and r.samples_per_s else f"{trial.verdict}: {trial.reason}"
    run = f" (run {trial.replicate + 1})" if trial.replicate else ""
    return f"  {trial.label}{run}: {what}{process_flags(trial)}"
