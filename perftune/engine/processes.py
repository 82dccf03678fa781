"""The sweep's processes: each configuration's booked, measured (or reused) and recorded, paired ones too, and each
finished one used or left out by the one contention rule: a process measured while others competed for the cores
(``TrialResult.contended_windows``) is left out and measured again while at most ``decision.remeasure_contended``
processes in a row were contended and the sweep has time left; past that, contention is the machine's state and
measuring again would double the cost for nothing, so the process is used, counted as contended in its comparison
(the next usable process of its configuration carries ``ProcessRun.remeasured``)."""

from __future__ import annotations

from typing import Any, Callable, Hashable, Optional

from perftune.engine.blocked import process_run
from perftune.engine.budget import Budget
from perftune.engine.paired import PairedRun, counterbalanced, paired_line, paired_record, paired_run, pairing
from perftune.engine.process_spec import process_spec
from perftune.engine.progress import process_line
from perftune.engine.race import EXCLUDED, LaneOutcome
from perftune.engine.specs import make_spec
from perftune.engine.stats import Noise, ProcessRun
from perftune.engine.trial_store import TrialStore
from perftune.io.plan import Plan
from perftune.io.records import TrialResult, TrialSpec
from perftune.io.sweep_records import FAILED_VERDICTS, SweepTrial
from perftune.knobs import label_of


class Processes:
    """Every process of one sweep, by configuration (``key``: its first process's trial id), in measurement order;
    ``say``: one progress line."""

    def __init__(self, plan: Plan, store: TrialStore, say: Callable[[str], None], out_of_time: Callable[[], bool],
                 budget: Optional[Budget] = None):
        self.plan, self.store, self.say, self.out_of_time = plan, store, say, out_of_time
        self.budget = budget or Budget(None)  # ``decision.budget_s``: a process that would end past it never starts
        self.runs: list[ProcessRun] = []  # every usable process, in measurement order (config = its key)
        self.configs: dict[Hashable, tuple[dict[str, Any], str]] = {}  # key -> (changes, kind)
        self.of: dict[Hashable, list[SweepTrial]] = {}  # key -> its processes, in replicate order
        self.booked: dict[Hashable, int] = {}  # key, or (reference, candidate) of paired ones -> processes reserved
        self.left_out: dict[Hashable, int] = {}  # key -> contended processes not used since its last usable one
        self.streak = 0  # contended processes in a row, whatever their configuration

    def spec(self, changes: dict[str, Any], replicate: int = 0, windows: Optional[int] = None) -> TrialSpec:
        """A configuration's trial as ``make_spec`` gives it (a benchmark swaps in its own: ``experiments/``)."""
        return make_spec(self.plan, changes, label_of(changes), replicate, self.store.cache_dir, windows)

    def register(self, changes: dict[str, Any], kind: str) -> Hashable:
        """A configuration's key (its first process's trial id) for the races."""
        key = self.spec(changes).trial_id
        self.configs.setdefault(key, (changes, kind))
        self.of.setdefault(key, [])
        return key

    def first(self, key: Hashable) -> SweepTrial:
        return self.of[key][0]

    def first_result(self, key: Hashable) -> Optional[TrialResult]:  # the configuration's first, once measured
        with self.store.lock:
            return next((t.result for t in self.of.get(key, []) if t.replicate == 0), None)

    def measure(self, changes: dict[str, Any], kind: str, replicate: int = 0, lane: Optional[int] = None) -> SweepTrial:
        """One trial (reused when an earlier run finished it); ``lane``: the runner's lane, from a lane's thread."""
        key = self.spec(changes).trial_id
        with self.store.lock:  # a repeat's timed windows, from its configuration's processes so far
            done, noise = [t.result for t in self.of.get(key, []) if not t.excluded], Noise.pooled(self.runs)
        spec, windows = process_spec(self.plan, self.spec, changes, replicate,
                                     first=self.first_result(key), done=done, noise=noise)
        if lane is None and not (kind == "baseline" and replicate == 0):  # the baseline's first always runs
            self.budget.claim_new(spec, self.store.trials_dir, "single")
        if lane is None:  # the lanes' runner says itself what runs where
            self.store.progress.start(spec.label + (f" (run {replicate + 1})" if replicate else ""))
        seen = self.store.recorded(spec.trial_id)
        result, found = self.budget.timed(self.store.run_or_reuse, spec, "single", lane)
        verdict = result.status if result.status in FAILED_VERDICTS else {"baseline": "baseline"}.get(kind, "measured")
        trial = SweepTrial(trial_id=spec.trial_id, label=spec.label, kind=kind, changes=changes,
                           replicate=replicate, verdict=verdict, reason=result.reason or "", reused=found and not seen,
                           window_count=windows, result=result.model_copy(update={"steps": []}))
        self.store.add(trial)
        return trial

    def book(self, key: Hashable) -> int:
        """The next replicate of ``key``, reserved (a lane's process gets its number before the round starts)."""
        with self.store.lock:  # every process of ``key`` is booked first
            self.booked[key] = self.booked.get(key, 0) + 1
            return self.booked[key] - 1

    def measure_replicate(self, key: Hashable, replicate: int, lane: Optional[int] = None) -> SweepTrial:
        """Process ``replicate`` of ``key``: the first carries the configuration's kind, later ones are repeats."""
        changes, kind = self.configs[key]
        trial = self.measure(changes, kind if replicate == 0 or kind == "baseline" else "repeat", replicate, lane)
        with self.store.lock:
            self.of[key].append(trial)
            self.of[key].sort(key=lambda t: t.replicate)
        return trial

    def pairable(self, reference: Hashable, candidate: Hashable) -> Optional[str]:
        """Why ``candidate`` pairs with ``reference`` in one process, or None (``paired.pairing``)."""
        if not self.plan.decision.paired:
            return None
        ref, cand = (self.spec(self.configs[k][0]) for k in (reference, candidate))
        return pairing(ref, cand, self.first_result(reference), self.first_result(candidate))

    def measure_pair(self, reference: Hashable, candidate: Hashable) -> Optional[PairedRun]:
        """One paired process of ``candidate`` against ``reference`` (reused when an earlier run finished it),
        recorded in ``results.json``; its blocks, or None when it failed."""
        replicate = self.book((reference, candidate))
        (ref, _), (cand, _), swapped = self.configs[reference], self.configs[candidate], counterbalanced(replicate)
        spec, _ = process_spec(self.plan, self.spec, cand, replicate, reference=ref,
                               first=self.first_result(candidate if swapped else reference))  # arm 0's
        self.budget.claim_new(spec, self.store.trials_dir, "paired")
        self.store.progress.start(spec.label)
        seen = self.store.recorded(spec.trial_id)
        result, found = self.budget.timed(self.store.run_or_reuse, spec, "paired")
        run = paired_run(reference, candidate, result, swapped=swapped) if result.status == "ok" else None
        record = paired_record(spec, result, run, label_of(ref), label_of(cand), found and not seen)
        self.store.add(record)
        self.say(paired_line(spec.label, record, run))
        return run

    def use(self, key: Hashable, trial: SweepTrial) -> LaneOutcome:
        """A finished process of ``key``: failed (None), left out (``EXCLUDED``: contended while contention looks
        passing), or its ``ProcessRun``; called in the order the sweep uses its processes (a lane's in lane
        order, in the main thread)."""
        r = trial.result
        if trial.verdict in FAILED_VERDICTS or not r.windows:
            return None
        self.streak = self.streak + 1 if r.contended_windows else 0
        limit = self.plan.decision.remeasure_contended
        if r.contended_windows and self.streak <= limit and not self.out_of_time():
            self.left_out[key] = self.left_out.get(key, 0) + 1
            trial.excluded = (f"{r.contended_windows} of {len(r.windows)} timed windows contended (other processes "
                              "used the cores): not used")
            self.store.save()
            return EXCLUDED
        return process_run(key, r, self.left_out.pop(key, 0))

    def measure_process(self, key: Hashable) -> Optional[ProcessRun]:
        """One more usable process of ``key`` (measured again while ``use`` leaves one out); None if it failed."""
        while True:
            trial = self.measure_replicate(key, self.book(key))
            outcome = self.use(key, trial)
            self.say(process_line(trial))
            if outcome != EXCLUDED:
                return outcome  # type: ignore[return-value]

    def measure_booked(self, key: Hashable, replicate: int, lane: int) -> SweepTrial:
        """A lane's process (in the lane's thread): measured once and said; ``use`` decides whether it is used."""
        trial = self.measure_replicate(key, replicate, lane)
        self.say(process_line(trial))
        return trial

