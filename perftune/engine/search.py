"""Range search: a numeric knob's fastest value, found by the sweep's own decided comparisons between neighbours.

A plan lists every value it tries, so a user who does not know the best one pays a burst for each of many, or misses
it with few.  ``variables: {knob: {range: [lo, hi]}}`` asks perftune to search instead, assuming the speed is
unimodal in the value (it rises to an optimum and falls after it: too few threads idle the cores, too many contend):

- **start** where the practitioners' rule points: ``num_parallel_workers`` at 75% of the machine's cores (the guide's
  70-80%), any other knob in the middle of the range, in the scale's steps (``start``);
- **compass search** (``compass``): compare the value it stands at with the value ``step`` steps above and below,
  each comparison a race of the sweep (``Race``: ``R C R`` rounds, paired processes where the knob pairs, the
  sequential decision, the accuracy gate stopping a candidate that fails it); move to a neighbour that is faster by
  at least ``decision.min_gain`` and keep going that way; when neither is, halve the step; stop at step 1 when
  neither neighbour is faster (``peak``), at the range's end (``edge``: a value beyond might be faster), or when the
  comparisons (``decision.search_steps``) or the sweep's ``budget_s`` are spent.  Larger first steps make larger,
  cheaper-to-decide differences; the halving brackets the optimum;
- **until fits** (``fits``): first the largest value that runs within memory: double from ``lo`` until a process
  does not fit (status ``oom``, recorded as a trial, never a failure of the sweep), then bisect between the last that
  fit and the first that did not (a log2 range's answer is the largest fitting power of two); then search speed below
  it, starting from it (the larger batch is usually the faster).

Deterministic given the measurements (no clock, no randomness), so a resumed sweep makes the same comparisons and
reuses every finished trial.  The processes are the sweep's (``SearchSide``, ``perftune.engine.search_runs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

from perftune.engine.stats import Noise, ProcessRun, below_min_gain, level_interval
from perftune.io.plan import KnobRange
from perftune.io.sweep_records import (
    ComparisonRecord,
    FitTry,
    SearchPoint,
    SearchRecord,
    SearchStep,
    SearchStop,
    StepOutcome,
)

#: the share of the machine's cores the practitioners' guide gives data workers (70-80%)
WORKER_SHARE = 0.75


@dataclass(frozen=True)
class ValueState:
    """A value's first process as the search sees it: its status, its trial id, and why it cannot be the answer
    (the burst's failure, or the accuracy gate's refusal: ``refused``), "" when it can."""

    status: str
    trial_id: str
    refusal: str = ""
    refused: Optional[StepOutcome] = None  # "failed" or "accuracy rejected"


class SearchSide(Protocol):
    """What a search uses of the sweep (``perftune.engine.search_runs.SweepSearch``)."""

    def measure_value(self, knob: str, value: int) -> ValueState: ...  # its first process, measured if not yet
    def race_value(self, knob: str, candidate: int, reference: int) -> Optional[ComparisonRecord]: ...
    def state(self, knob: str, value: int) -> Optional[ValueState]: ...  # None: never measured
    def out_of_time(self) -> bool: ...
    def processes(self) -> int: ...  # processes measured so far in the sweep (fresh and paired)
    def value_runs(self, knob: str, value: int) -> list[ProcessRun]: ...  # its usable fresh processes
    def noise(self) -> Noise: ...


@dataclass(frozen=True)
class Space:
    """What one search searches: ``values`` ascending (``KnobRange.values``), the comparisons it may make, the least
    gain worth a move, and the machine's cores (for the workers' start)."""

    knob: str
    values: tuple[int, ...]
    budget: int
    min_gain: float
    cores: Optional[int] = None


def start(space: Space, top: int) -> tuple[int, str]:
    """The index of the first value to stand at among ``space.values[:top + 1]``, and the rule that chose it."""
    values = space.values[:top + 1]
    if space.knob == "num_parallel_workers" and space.cores:
        target = max(1.0, WORKER_SHARE * space.cores)
        return min(range(len(values)), key=lambda i: (abs(values[i] - target), values[i])), "cores"
    return (len(values) - 1) // 2, "middle"


def outcome(c: Optional[ComparisonRecord], min_gain: float) -> StepOutcome:
    """What a comparison says of the candidate: ``better`` only when faster by at least ``min_gain``."""
    if c is None:
        return "failed"
    if c.verdict in ("faster", "slower") and not below_min_gain(c.ratio, min_gain):
        return "better" if c.verdict == "faster" else "worse"
    return "not better"


def reverse(o: StepOutcome) -> StepOutcome:
    """The outcome of the same comparison seen from the other side."""
    return {"better": "worse", "worse": "better"}.get(o, "not better")  # type: ignore[return-value]


class Compass:
    """The compass search over ``space.values[:top + 1]`` (see the module docstring); ``steps`` as they were made."""

    def __init__(self, side: SearchSide, space: Space, top: int):
        self.side, self.space, self.top = side, space, top
        self.steps: list[SearchStep] = []
        self.memo: dict[tuple[int, int], StepOutcome] = {}

    def compare(self, j: int, pos: int) -> Optional[StepOutcome]:
        """Value ``j`` against value ``pos`` (indices): remembered, or raced now; None when out of budget."""
        cand, ref = self.space.values[j], self.space.values[pos]
        if (cand, ref) in self.memo:
            return self.memo[(cand, ref)]
        if (ref, cand) in self.memo:
            return reverse(self.memo[(ref, cand)])
        if len(self.steps) >= self.space.budget or self.side.out_of_time():
            return None
        c = self.side.race_value(self.space.knob, cand, ref)
        state = self.side.state(self.space.knob, cand)
        o = state.refused if state is not None and state.refused else outcome(c, self.space.min_gain)
        self.steps.append(SearchStep(candidate=cand, reference=ref, outcome=o, comparison=c,
                                     reason=state.refusal if state is not None else "not measured"))
        self.memo[(cand, ref)] = o
        return o

    def run(self, pos: int) -> tuple[int, SearchStop]:
        """The index found from ``pos``, and why the search stopped there."""
        step, way, moved_to = max(1, self.top // 4), +1, 0
        while True:
            moved = False
            for d in (way, -way):
                j = min(max(pos + d * step, 0), self.top)
                if j == pos:
                    continue
                o = self.compare(j, pos)
                if o is None:
                    return pos, "time" if self.side.out_of_time() else "budget"
                if o == "better":
                    pos, way, moved, moved_to = j, d, True, d
                    break
            if moved:
                continue
            if step == 1:
                at_end = (pos == 0 and moved_to < 0) or (pos == len(self.space.values) - 1 and moved_to > 0)
                return pos, "edge" if at_end else "peak"
            step = max(1, step // 2)


def fits(side: SearchSide, r: KnobRange, knob: str) -> tuple[Optional[int], list[FitTry]]:
    """The largest value that fits (None: not even ``lo``) and each value measured on the way: doubling from ``lo``
    (a log2 range: its powers of two in turn), then, on a linear range, bisecting between the last that fit and the
    first that did not."""
    tries: list[FitTry] = []

    def fit(value: int) -> bool:
        s = side.measure_value(knob, value)
        tries.append(FitTry(value=value, status=s.status, trial_id=s.trial_id))  # type: ignore[arg-type]
        return s.status == "ok"

    ladder = r.values() if r.scale == "log2" else [r.lo * 2 ** k for k in range(64) if r.lo * 2 ** k <= r.hi]
    if r.lo == 0 and r.scale == "linear":
        ladder = [0] + [2 ** k for k in range(64) if 2 ** k <= r.hi]
    good, bad = None, None
    for value in ladder:
        if not fit(value):
            bad = value
            break
        good = value
    if good is None or r.scale == "log2":
        return good, tries
    if bad is None and good < r.hi:  # every doubling fit: the range's top decides whether to bisect
        if fit(r.hi):
            return r.hi, tries
        bad = r.hi
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fit(mid) else (good, mid)
    return good, tries


def curve(side: SearchSide, knob: str, values: list[int]) -> list[SearchPoint]:
    """Each tried value's throughput (geometric mean of its usable fresh processes) with a 95% interval from the
    sweep's pooled process noise."""
    noise, points = side.noise(), []
    for value in sorted(set(values)):
        runs = side.value_runs(knob, value)
        if not runs:
            continue
        low, mid, high = level_interval(runs, noise)
        points.append(SearchPoint(value=value, samples_per_s=mid, ci_low=low, ci_high=high, processes=len(runs)))
    return points


def search(side: SearchSide, knob: str, r: KnobRange, budget: int, min_gain: float,
           cores: Optional[int] = None) -> SearchRecord:
    """Search knob ``knob`` over ``r``: its record, the found value's trial id included."""
    before = side.processes()
    space = Space(knob, tuple(r.values()), budget, min_gain, cores)
    record = SearchRecord(knob=knob, range=r, start=space.values[0], start_rule="middle", budget=budget,
                          min_gain=min_gain)
    top = len(space.values) - 1
    if r.until == "fits":
        record.largest_fit, record.fits = fits(side, r, knob)
        if record.largest_fit is None:
            return finish(side, record, None, "failed", before)
        space = Space(knob, tuple(v for v in r.values() if v <= record.largest_fit) or (record.largest_fit,),
                      budget, min_gain, cores)
        top = len(space.values) - 1
        pos, rule = top, "largest fit"
    else:
        pos, rule = start(space, top)
    record.start, record.start_rule = space.values[pos], rule  # type: ignore[assignment]
    record.cores = cores if rule == "cores" else None
    first = side.measure_value(knob, space.values[pos])
    if first.refused == "failed":
        return finish(side, record, None, "failed", before)
    compass = Compass(side, space, top)
    pos, stopped = compass.run(pos)
    record.steps = compass.steps
    if r.until == "fits" and stopped in ("peak", "edge") and space.values[pos] == record.largest_fit:
        # the largest that fits is the fastest found: larger ones did not fit, or the range ends there
        stopped = "edge" if record.largest_fit == r.values()[-1] else "fits"
    return finish(side, record, space.values[pos], stopped, before)


def finish(side: SearchSide, record: SearchRecord, found: Optional[int], stopped: SearchStop,
           before: int) -> SearchRecord:
    """The record completed: what was tried, found and why it stopped, what it cost, the curve."""
    tried = [f.value for f in record.fits] + [record.start] + [s.candidate for s in record.steps]
    record.tried = [v for i, v in enumerate(tried) if v not in tried[:i] and side.state(record.knob, v) is not None]
    record.found, record.stopped = found, stopped
    state = side.state(record.knob, found) if found is not None else None
    record.found_trial_id = state.trial_id if state is not None else None
    record.processes = side.processes() - before
    record.curve = curve(side, record.knob, record.tried)
    return record
