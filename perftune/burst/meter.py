"""The one state machine of a burst's phases (one, because two copies of these phases had drifted apart).  Every
route drives it the same way: perftune's own step loop (``own_workload.Burst``), a script's ``Model.train``
(``perftune.Callback``) and a custom loop (``perftune.steps``) tell the ``Meter`` when training starts and when each
step begins and ends; the Meter decides which phase the step belongs to, completes and times it, and fills the
``TrialResult``.  The policies it consults live beside it: ``arms.Arms`` (a paired process's arms, the drains),
``windows.TimedWindows``, ``profiled.ProfiledSteps``, ``settle.RepeatWarmup``, ``completion`` and ``agreement``.

The phases, in order (one of zero size is skipped: ``accuracy_samples``, ``warmup_steps``, ``drain_s`` 0 ...):

1. accuracy: from the first step until ``accuracy_samples`` samples were seen (its first step, the graph compile
   to its completion, is ``compile_ms``), then the route's validation (``accuracy_end``).  A configuration's first
   process runs it; its repeats do not (the gate reads the first process's).
2. warm-up: ``warmup_steps`` steps; in a repeat, then on until its step time settles (``settle``).
3. drain: the batches the pipeline prefetched during compile and validation, so that a data stall cannot hide
   behind a full queue (``arms.Arms.drain_over``).
4. timed: ``repeats`` windows of ``steps`` steps (``burst.min_window_s`` calibrates the steps from the warm-up and
   drain steps); a paired process's windows alternate its two arms, each switched in by untimed steps.
5. profiled: ``profile_steps`` steps under the profiler; only in a configuration's first process (replicate 0).

Timing: a step runs from the end of the previous step to the end of this one (``start`` sets the first origin), so
a window's steps add up to its time; its data wait is the part before ``begin`` (fetching the batch).  A step ends
when its work has: ``end`` reads its loss back before it reads the clock (``completion``).  With
``dataset_sink_mode`` MindSpore reports one end per sink: each of its steps gets the sink's time over its steps.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional

from perftune.burst.agreement import PhaseLoad, check_phases
from perftune.burst.arms import Arms
from perftune.burst.completion import complete, read_norm
from perftune.burst.graph_count import GraphCount
from perftune.burst.profiled import ProfiledSteps
from perftune.burst.results import finish_notes, process_notes, read_memory, summarize_timed, training_accuracy
from perftune.burst.settle import RepeatWarmup
from perftune.burst.windows import TimedWindows
from perftune.io.derived import failed_result
from perftune.io.records import Accuracy, StepRecord, TrialResult, TrialSpec

ORDER = ("accuracy", "warmup", "drain", "timed", "profiled", "done")
#: the phase each machine phase writes into a step record (the on-disk phases; drain steps are warm-up steps)
RECORD_PHASE = {"drain": "warmup"}


class BurstDone(BaseException):
    """Raised into the script once the burst has its steps: ends the script (not an ``Exception``, so the script's
    own ``except Exception`` does not swallow it)."""


class Meter:
    """One burst's phases, driven by its route's calls per step; ``agree``: a distributed burst's ranks take the
    same phase decisions (the largest of their values)."""

    def __init__(self, spec: TrialSpec, out_dir: Path, result: Optional[TrialResult] = None, *,
                 grad_norms: bool = False, agree: Optional[Callable[[int], int]] = None):
        self.spec, self.dir = spec, Path(out_dir)
        self.result = result if result is not None else failed_result(spec, "failed", None)
        self.grad_norms = grad_norms  # the driver passes each accuracy step's gradient norm (perftune's own step)
        self.repeat = spec.replicate > 0 or spec.pair is not None  # no profile (the first process has it)
        self.warmup = RepeatWarmup(spec, agree)  # a repeat warms up to a steady state instead (``settle``)
        self.arms = Arms(spec, agree)
        self.windows = TimedWindows(spec, agree)
        self.profiler = ProfiledSteps(self.dir)
        self.result.notes += process_notes(spec, len(self.arms.schedule))
        self.records: list[StepRecord] = []
        self.result.steps = self.records  # the same list: the profile's splits read the timed steps from it
        self.in_phase: list[StepRecord] = []
        self.samples_seen = 0
        self.batch_sizes: Counter = Counter()
        self.last_end: Optional[float] = None
        self.begin_t: Optional[float] = None  # when the step got its batch
        self.learning_rate: Optional[float] = None
        self.sink_steps = 0  # steps that arrived several per call (dataset_sink_mode)
        #: the route's validation, called with the accuracy window's figures at its end (not timed)
        self.accuracy_end: Optional[Callable[[Accuracy], None]] = None
        self.done = False
        self.graphs = GraphCount(self.result)  # at each phase's end
        self.started_wall = time.perf_counter()
        self.phase = "accuracy"
        self.load = PhaseLoad(self.phase)  # others' use of the cores in each phase, for the phase check
        self.advance()  # into the first phase of non-zero size

    @property
    def steps_seen(self) -> int:
        return len(self.records)

    @property
    def arm(self) -> int:
        """The arm whose pipeline feeds the next step (always 0 but in a paired process)."""
        return self.arms.arm

    def samples_of(self, record: StepRecord) -> int:
        """The samples one step took."""
        i = self.records.index(record)
        return record.samples_seen - (self.records[i - 1].samples_seen if i else 0)

    # -- the calls per step -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Training (re)starts: the next step's time counts from here."""
        self.last_end, self.begin_t = time.perf_counter(), None

    def begin(self) -> None:
        """The step has its batch and begins to compute."""
        self.begin_t = time.perf_counter()
        if self.last_end is None:
            self.last_end = self.begin_t

    def end(self, loss: Any, samples: int, steps: int = 1, grad_norm: Any = None) -> bool:
        """The step (``steps`` of them with dataset sinking) ended with ``loss``; ``samples`` taken in all;
        ``grad_norm``: the accuracy step's gradient norm where the driver computes one.  The step is completed
        (its loss read back) before the clock is read.  Returns ``done``."""
        if self.done:
            return True
        value = complete(loss, self.spec.device)
        norm = read_norm(grad_norm) if self.phase == "accuracy" else None
        now = time.perf_counter()
        if self.last_end is None:
            self.last_end = self.begin_t if self.begin_t is not None else now
        begin = self.begin_t if self.begin_t is not None else self.last_end
        steps = max(1, int(steps))
        if steps > 1:
            self.sink_steps += steps
        step_ms = (now - self.last_end) * 1e3 / steps
        wait_ms = max(0.0, begin - self.last_end) * 1e3 / steps
        self.record(steps, step_ms, wait_ms, value, norm, max(1, int(samples) // steps))
        if self.result.compile_ms is None:
            self.result.compile_ms = self.records[0].step_ms  # the first step compiles the graph
            self.result.first_loss = value
        self.advance()
        self.last_end, self.begin_t = time.perf_counter(), None
        return self.done

    def record(self, steps: int, step_ms: float, wait_ms: float, loss: Optional[float], norm: Optional[float],
               per_step: int) -> None:
        """``steps`` step records of the current phase (or of an arm's switch)."""
        switching = self.arms.switching
        timed = self.phase == "timed" and not switching
        self.batch_sizes[per_step] += steps
        for _ in range(steps):
            self.samples_seen += per_step
            record = StepRecord(phase="warmup" if switching else RECORD_PHASE.get(self.phase, self.phase),
                                window=self.windows.index if timed else None,
                                step_ms=step_ms, data_wait_ms=wait_ms, loss=loss, grad_norm=norm,
                                learning_rate=self.learning_rate, samples_seen=self.samples_seen)
            self.records.append(record)
            (self.arms.switch_steps if switching else self.in_phase).append(record)
        if timed:
            self.windows.add(step_ms * steps, per_step * steps)

    # -- phase changes ----------------------------------------------------------------------------------------
    def complete(self) -> bool:
        """Whether the current phase has all its steps."""
        b, n = self.spec.burst, len(self.in_phase)
        if self.phase == "accuracy":
            return self.warmup.on or self.samples_seen >= self.spec.accuracy_samples
        if self.phase == "warmup":
            return n >= b.warmup_steps and (
                not self.warmup.on or self.warmup.state(self.in_phase, self.records, self.samples_seen).done)
        if self.phase == "drain":  # a settled warm-up after the compile drained the queue as the drain would
            return self.arms.drain_over(self.warmup.steps + self.in_phase)
        if self.phase == "timed":
            return self.windows.index >= len(self.arms.schedule)
        if self.phase == "profiled":
            return self.repeat or n >= b.profile_steps
        return True

    def advance(self) -> None:
        """After each step: close a full timed window, then leave every complete phase (entering the next)."""
        while True:
            if self.arms.switch_done():
                self.windows.open()
            if self.phase == "timed" and not self.arms.switching and self.windows.full(len(self.in_phase)):
                self.result.windows.append(self.windows.close(self.in_phase, self.arms.arm))
                self.in_phase = []
                self.next_window()
            if self.phase == "done" or self.arms.switching or not self.complete():
                return
            self.leave()
            self.phase, self.in_phase = ORDER[ORDER.index(self.phase) + 1], []
            self.enter()

    def next_window(self) -> None:
        """Before each timed window: its arm switched in first where the last steps were the other arm's."""
        if self.windows.index < len(self.arms.schedule) and not self.arms.switch_for(self.windows.index):
            self.windows.open()

    def enter(self) -> None:
        self.load.mark(RECORD_PHASE.get(self.phase, self.phase))
        if self.phase == "drain":
            self.arms.begin_drain()
        elif self.phase == "timed":
            note = self.windows.calibrate([r for r in self.records if r.phase == "warmup"])
            if note is not None:
                self.result.notes.append(note)
            self.next_window()
        elif self.phase == "profiled" and not self.complete():
            self.profiler.open(self.result, self.spec.burst.profile_steps)
        elif self.phase == "done":
            self.finish()

    def leave(self) -> None:
        self.graphs.count(RECORD_PHASE.get(self.phase, self.phase))
        if self.phase == "accuracy" and self.in_phase:
            acc = training_accuracy(self.in_phase, self.samples_seen, self.spec.lr_scale, with_norms=self.grad_norms)
            self.result.accuracy = acc
            if self.accuracy_end is not None:
                self.accuracy_end(acc)
                self.graphs.count("validation")
        elif self.phase in ("warmup", "drain"):
            if self.phase == "warmup" and self.warmup.on:
                self.result.notes.append(self.warmup.end(self.in_phase, self.records, self.samples_seen))
            if self.phase == "drain":
                self.arms.drained_once(self.in_phase)
            self.result.warmup_steps = sum(r.phase == "warmup" for r in self.records)
        elif self.phase == "timed":  # a paired process's figures are its reference arm's
            summarize_timed(self.result, self.arm_a_timed(), self.result.tokens_per_sample,
                            [w for w in self.result.windows if w.arm == 0])
        elif self.phase == "profiled":
            self.profiler.close(self.result, self.in_phase)

    def arm_a_timed(self) -> list[StepRecord]:
        """The timed steps the trial's figures describe: all of them, or a paired process's reference arm's."""
        arm_a = {i for i, arm in enumerate(self.arms.schedule) if arm == 0}
        return [r for r in self.records if r.phase == "timed" and r.window in arm_a]

    def finish(self) -> None:
        self.done = True
        self.result.steps = self.records
        self.result.phase_agreement, disagreement = check_phases(self.records, self.arm_a_timed(),
                                                                    self.load.shares)
        if disagreement is not None:
            self.result.notes.append(disagreement)
        if self.batch_sizes:
            self.result.samples_per_step = self.batch_sizes.most_common(1)[0][0]
        self.result.notes += finish_notes(self.batch_sizes, self.sink_steps, self.records)
        read_memory(self.result, self.spec.device)
        self.result.wall_s = time.perf_counter() - self.started_wall


def needed_steps(meter: Meter) -> str:
    """What the burst needs, for a "training ended early" reason."""
    b = meter.spec.burst
    profile = 0 if meter.repeat else b.profile_steps
    first = (f"a warm-up of up to {meter.spec.accuracy_samples} samples and {b.warmup_steps} steps" if meter.warmup.on
             else f"the accuracy window ({meter.spec.accuracy_samples} samples), {b.warmup_steps} warm-up steps")
    return f"{first} and the drain, {b.repeats} x {meter.windows.steps} timed and {profile} profiled steps"
