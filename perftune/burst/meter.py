"""The one state machine of a burst's phases.  Every route drives it the same way: perftune's own step loop
(``phases.Burst``), a script's ``Model.train`` (``perftune.Callback``) and a custom loop (``perftune.steps``) tell
the ``Meter`` when training starts and when each step begins and ends; the Meter decides which phase the step
belongs to, reads the losses, closes windows, starts and stops the profiler and fills the ``TrialResult``.

Why one machine: two copies of these phases had drifted (a script's repeat process skipped the accuracy window that
perftune's own repeats ran, and was timed after a different history; one took the median step, the other the mean).

The phases, in order (a phase of zero size is skipped: ``accuracy_samples`` 0, ``warmup_steps`` 0, ``drain_s`` 0,
``profile_steps`` 0):

1. accuracy: from the first step until ``accuracy_samples`` samples were seen (its first step, the graph compile,
   is ``compile_ms``), then the route's validation (``accuracy_end``).  Every process runs it, repeats included:
   a repeat that skipped it measured x0.865 of first processes (README, "What a sweep does").
2. warm-up: ``warmup_steps`` steps.
3. drain: the batches the pipeline prefetched during compile and validation, so that a data stall cannot hide
   behind a full queue (``drained``: until a step waits for its batch, the queue is spent, or ``drain_s``).
4. timed: ``repeats`` windows of ``steps`` steps (``burst.min_window_s`` calibrates the steps from the warm-up and
   drain steps); losses are read back once per window, at its end, as training does.
5. profiled: ``profile_steps`` steps under the profiler; only in a configuration's first process (replicate 0).

A paired process (``spec.pair``: ``perftune.engine.paired``) has two arms, the reference's pipeline (0) and the
candidate's (1), feeding one model; the driver takes each step's batch from the arm ``Meter.arm`` names.  Its
timed windows alternate ABBA / BAAB (``pair_schedule``), each closed once it has ``burst.steps`` steps and lasted
``pair.min_window_s``; before a window whose arm differs from the last step's, the new arm is switched in by untimed
steps: its warm-up the first time, then a drain of what its pipeline prefetched meanwhile (``burst.drain``), so a
full queue does not flatter it: the full capped drain until the arm's queue once ran dry, one queue's worth for an
arm whose capped drain never found its queue empty (``drained_once``).
It has no accuracy window (``accuracy_samples`` 0: both arms share one history) and no profile.

Timing: a step runs from the end of the previous step to the end of this one (``start`` sets the first origin), so
the steps of a window add up to its time; its data wait is the part before ``begin`` (fetching the batch).  With
``dataset_sink_mode`` MindSpore reports one end per sink: each of its steps gets the sink's time over its steps.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional

from perftune.burst import contention
from perftune.burst.drain import DRAIN_CAP_FACTOR, DRAIN_S, drain_done, queued_batches, waited
from perftune.burst.failures import one_line
from perftune.burst.results import (
    analyse_profile,
    MAX_WINDOW_FACTOR,
    calibrated_window_steps,
    finite_or_none,
    loss_value,
    read_memory,
    summarize_timed,
    training_accuracy,
    window_stats,
)
from perftune.io.records import Accuracy, Note, ProfileSummary, StepRecord, TrialResult, TrialSpec
from perftune.io.derived import failed_result

ORDER = ("accuracy", "warmup", "drain", "timed", "profiled", "done")
#: the phase each machine phase writes into a step record (the on-disk phases; drain steps are warm-up steps)
RECORD_PHASE = {"drain": "warmup"}
#: the warm-up and drain steps the window calibration reads: the last ones (the first took batches the pipeline had
#: queued during compile, 5x faster than a data-bound step: windows calibrated on them lasted 3 s, not 0.5)
CALIBRATE_FROM = 3


class BurstDone(BaseException):
    """Raised into the script once the burst has its steps: ends the script (not an ``Exception``, so the script's
    own ``except Exception`` does not swallow it)."""


class Meter:
    def __init__(self, spec: TrialSpec, out_dir: Path, result: Optional[TrialResult] = None, *,
                 grad_norms: bool = False, agree: Optional[Callable[[int], int]] = None):
        self.spec = spec
        #: a distributed burst's ranks must run the same steps (every step is a collective): ``agree`` gives the
        #: largest of the ranks' values, and drains run their cap, not until this rank's queue runs dry
        self.agree = agree
        self.dir = Path(out_dir)
        self.result = result if result is not None else failed_result(spec, "failed", None)
        self.grad_norms = grad_norms  # the driver passes each accuracy step's gradient norm (perftune's own step)
        # a repeat process: every phase but the profile (the first process has it); a paired process likewise
        self.repeat = spec.replicate > 0 or spec.pair is not None
        self.schedule = pair_schedule(spec.pair.blocks) if spec.pair is not None else [0] * spec.burst.repeats
        self.arm = 0  # the arm whose pipeline feeds the next step (always 0 but in a paired process)
        self.switching = False  # untimed steps switching the next window's arm in (warm-up, then drain)
        self.switch_steps: list[StepRecord] = []
        self.warmed = {0}
        self.never_dry: set[int] = set()  # arms whose capped drain never found the queue empty (``drained_once``)
        #: a paired process's windows close by time (``window_full``), a fresh process's at their calibrated steps
        self.by_time_ms = (max(spec.burst.min_window_s or 0.0, spec.pair.min_window_s) * 1e3
                           if spec.pair is not None and agree is None else None)
        if spec.pair is not None:
            self.result.notes.append(Note(kind="info", text=(
                f"paired process: {spec.pair.reference_label} (arm A) and {spec.pair.label} (arm B) fed one model "
                f"from two pipelines, {len(self.schedule)} timed windows in ABBA/BAAB order; the throughput figures "
                "are arm A's, the comparison is the sweep's")))
        elif self.repeat:
            self.result.notes.append(Note(kind="info", text=(
                f"repeat process {spec.replicate + 1} of this configuration: the profile comes from its first "
                "process; the accuracy window ran too, so that every process is timed after the same history")))
        self.records: list[StepRecord] = []
        self.result.steps = self.records  # the same list: the profile's splits read the timed steps from it
        self.in_phase: list[StepRecord] = []
        self.pending: list[tuple[StepRecord, Any]] = []  # a timed window's records and loss tensors
        self.window = 0
        self.window_ms = 0.0  # the open timed window's steps so far (a running sum: ``window_full`` reads it per step)
        self.window_steps = spec.burst.steps  # calibrated on entering the timed windows (burst.min_window_s)
        self.window_reading: Optional[contention.Reading] = None
        self.drain_cap = 0
        self.samples_seen = 0
        self.batch_sizes: Counter = Counter()
        self.last_end: Optional[float] = None
        self.begin_t: Optional[float] = None
        self.learning_rate: Optional[float] = None
        self.sink_steps = 0  # steps that arrived several per call (dataset_sink_mode)
        self.session = None
        self.loop_refusal: Optional[str] = None  # why a custom loop cannot run this trial (set by the script burst)
        #: the route's validation, called with the accuracy window's figures at its end (not timed)
        self.accuracy_end: Optional[Callable[[Accuracy], None]] = None
        self.figures: Any = None  # a script's own validation figures (``script_figures.ScriptFigures``)
        self.done = False
        self.started_wall = time.perf_counter()
        self.phase = "accuracy"
        self.in_phase = []
        self.advance()  # into the first phase of non-zero size

    @property
    def steps_seen(self) -> int:
        return len(self.records)

    @property
    def sync(self) -> bool:
        """Whether this step's loss is read back now (not in a timed window: there once, at its end)."""
        return self.phase != "timed" or self.switching

    def needed_steps(self) -> str:
        """What the burst needs, for a "training ended early" reason."""
        b = self.spec.burst
        profile = 0 if self.repeat else b.profile_steps
        return (f"the accuracy window ({self.spec.accuracy_samples} samples), {b.warmup_steps} warm-up steps and "
                f"the drain, {b.repeats} x {self.window_steps} timed and {profile} profiled steps")

    # -- the calls per step -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Training (re)starts: the next step's time counts from here."""
        self.last_end = time.perf_counter()
        self.begin_t = None

    def begin(self) -> None:
        """The step has its batch and begins to compute."""
        self.begin_t = time.perf_counter()
        if self.last_end is None:
            self.last_end = self.begin_t

    def end(self, loss: Any, samples: int, steps: int = 1, grad_norm: Any = None) -> bool:
        """The step (``steps`` of them with dataset sinking) ended with ``loss``; ``samples`` taken in all;
        ``grad_norm``: the accuracy step's gradient norm where the driver computes one.  Returns ``done``."""
        now = time.perf_counter()
        if self.done:
            return True
        if self.last_end is None:
            self.last_end = self.begin_t if self.begin_t is not None else now
        begin = self.begin_t if self.begin_t is not None else self.last_end
        steps = max(1, int(steps))
        if steps > 1:
            self.sink_steps += steps
        step_ms = (now - self.last_end) * 1e3 / steps
        wait_ms = max(0.0, begin - self.last_end) * 1e3 / steps
        per_step = max(1, int(samples) // steps)
        self.batch_sizes[per_step] += steps
        sync = self.sync
        value = loss_value(loss) if sync else None
        norm = None
        if self.phase == "accuracy" and grad_norm is not None:
            norm = finite_or_none(float(grad_norm.asnumpy()) if hasattr(grad_norm, "asnumpy") else float(grad_norm))
        timed = self.phase == "timed" and not self.switching
        for i in range(steps):
            self.samples_seen += per_step
            record = StepRecord(phase="warmup" if self.switching else RECORD_PHASE.get(self.phase, self.phase),
                                window=self.window if timed else None,
                                step_ms=step_ms, data_wait_ms=wait_ms, loss=value, grad_norm=norm,
                                learning_rate=self.learning_rate, samples_seen=self.samples_seen)
            self.records.append(record)
            (self.switch_steps if self.switching else self.in_phase).append(record)
            if not sync:
                self.pending.append((record, loss if i == steps - 1 else None))
        if timed:
            self.window_ms += step_ms * steps
        if self.result.compile_ms is None:
            self.result.compile_ms = self.records[0].step_ms  # the first step compiles the graph
        self.advance()
        self.last_end = time.perf_counter()
        self.begin_t = None
        return self.done

    # -- phase changes ----------------------------------------------------------------------------------------
    def complete(self) -> bool:
        """Whether the current phase has all its steps."""
        b, n = self.spec.burst, len(self.in_phase)
        if self.phase == "accuracy":
            return self.samples_seen >= self.spec.accuracy_samples
        if self.phase == "warmup":
            return n >= b.warmup_steps
        if self.phase == "drain":
            return self.drained()
        if self.phase == "timed":
            return self.window >= len(self.schedule)
        if self.phase == "profiled":
            return self.repeat or n >= b.profile_steps
        return True

    def drained(self) -> bool:
        return self.drain_over(self.in_phase)

    def drain_over(self, steps: list[StepRecord]) -> bool:
        """The drain's rule (``drain_done``); on a distributed burst, the cap alone (the same on every rank)."""
        if self.agree is not None:
            return len(steps) >= self.drain_cap
        bound = self.spec.burst.drain_s
        return drain_done(steps, self.drain_cap, DRAIN_S if bound is None else bound)

    def advance(self) -> None:
        """After each step: close a full timed window, then leave every complete phase (entering the next)."""
        while True:
            if self.switching and self.switched():
                self.drained_once(self.switch_steps[self.switch_warm():])
                self.switching = False
                self.warmed.add(self.arm)
                self.window_reading = contention.read()
            if self.phase == "timed" and not self.switching and self.window_full():
                self.close_window()
                if self.window < len(self.schedule):
                    self.next_window()
            if self.phase == "done" or self.switching or not self.complete():
                return
            self.leave()
            self.phase = ORDER[ORDER.index(self.phase) + 1]
            self.in_phase = []
            self.enter()

    def window_full(self) -> bool:
        """A window closes at its calibrated steps; a paired process's at ``burst.steps`` steps *and* its minimum
        time, measured as it runs: a calibration read off queue-fed warm-up steps once made 2.6 s windows of 0.5."""
        n = len(self.in_phase)
        if self.by_time_ms is None:
            return n >= self.window_steps
        return n >= MAX_WINDOW_FACTOR * self.spec.burst.steps or (
            n >= self.spec.burst.steps and self.window_ms >= self.by_time_ms)

    def enter(self) -> None:
        if self.phase == "drain":
            self.drain_cap = self.new_drain_cap()
        elif self.phase == "timed":
            self.calibrate()
            self.next_window()
        elif self.phase == "profiled" and not self.complete():
            self.open_profile()
        elif self.phase == "done":
            self.finish()

    def leave(self) -> None:
        if self.phase == "accuracy" and self.in_phase:
            acc = training_accuracy(self.in_phase, self.samples_seen, self.spec.lr_scale, with_norms=self.grad_norms)
            self.result.accuracy = acc
            if self.accuracy_end is not None:
                self.accuracy_end(acc)
        elif self.phase in ("warmup", "drain"):
            if self.phase == "drain":
                self.drained_once(self.in_phase)
            self.result.warmup_steps = sum(r.phase == "warmup" for r in self.records)
        elif self.phase == "timed":  # a paired process's figures are its reference arm's
            arm_a = {i for i, arm in enumerate(self.schedule) if arm == 0}
            summarize_timed(self.result, [r for r in self.records if r.phase == "timed" and r.window in arm_a],
                            self.result.tokens_per_sample, [w for w in self.result.windows if w.arm == 0])
        elif self.phase == "profiled":
            self.close_profile()

    def next_window(self) -> None:
        """Before each timed window: its arm switched in first where the last steps were the other arm's."""
        arm = self.schedule[self.window]
        if arm == self.arm and arm in self.warmed:
            self.window_reading = contention.read()
            return
        self.arm, self.switching, self.switch_steps = arm, True, []
        self.drain_cap = self.new_drain_cap()

    def new_drain_cap(self) -> int:
        """A drain's step cap, read as it begins (the warm-up's drain and every switch of a paired process): one
        queue's worth for an arm whose queue never ran dry (``never_dry``), else ``DRAIN_CAP_FACTOR`` of them."""
        if self.spec.burst.drain_s == 0:
            return 0
        factor = 1 if self.arm in self.never_dry and self.agree is None else DRAIN_CAP_FACTOR
        return factor * (queued_batches() + 2)

    def drained_once(self, steps: list[StepRecord]) -> None:
        """After a drain: an arm whose whole capped drain found its batch ready every step is fed faster than it
        trains, so its queue is full in the timed windows too and a later drain needs only the queue's worth.  In
        PyNative the quickstart's 12 switches drained 16 steps each, half of a paired process, for nothing."""
        if steps and len(steps) >= self.drain_cap and not any(waited(r) for r in steps):
            self.never_dry.add(self.arm)

    def switch_warm(self) -> int:
        """The switch's warm-up steps: the arm's first time only."""
        return 0 if self.arm in self.warmed else max(1, self.spec.burst.warmup_steps)

    def switched(self) -> bool:
        """The switch's warm-up (the arm's first time) and then its drain are done."""
        warm = self.switch_warm()
        if len(self.switch_steps) < warm:
            return False
        return self.drain_over(self.switch_steps[warm:])

    def calibrate(self) -> None:
        """``burst.min_window_s``: as many steps per window as that takes (``results.calibrated_window_steps``);
        a paired process's windows are closed by time instead (``window_full``)."""
        if self.by_time_ms is not None:
            return
        warm = [r.step_ms for r in self.records if r.phase == "warmup"]
        if len(warm) > CALIBRATE_FROM + 1:  # the drain's last steps: the pipeline's own rate, not its queue's
            warm = warm[:1] + warm[-CALIBRATE_FROM:]
        self.window_steps, note = calibrated_window_steps(self.spec.burst, warm)
        if self.agree is not None:  # each rank timed its own warm-up: the ranks take the longest window
            self.window_steps = self.agree(self.window_steps)
        if note is not None:
            self.result.notes.append(note)

    def close_window(self) -> None:
        """One synchronisation per window (the losses are read back at its end); the read-back belongs to the last
        step, so the steps add up to the window's time."""
        t0 = time.perf_counter()
        for record, tensor in self.pending:
            if tensor is not None:
                record.loss = loss_value(tensor)
        window = self.in_phase
        window[-1].step_ms += (time.perf_counter() - t0) * 1e3
        self.pending = []
        guard = contention.between(self.window_reading, contention.read())
        samples = window[-1].samples_seen - window[0].samples_seen + self.samples_of(window[0])
        stats = window_stats(window, sum(r.step_ms for r in window), samples, guard)
        stats.arm = self.arm
        self.result.windows.append(stats)
        self.window += 1
        self.in_phase = []
        self.window_ms = 0.0

    def samples_of(self, record: StepRecord) -> int:
        i = self.records.index(record)
        return record.samples_seen - (self.records[i - 1].samples_seen if i else 0)

    def open_profile(self) -> None:
        from perftune.profile.session import ProfilerSession

        summary = ProfileSummary(profiled_steps=self.spec.burst.profile_steps,
                                 unprofiled_step_ms=self.result.step_ms_mean)
        self.result.profile = summary
        try:
            self.session = ProfilerSession(self.dir / "profile", profile_memory=True)
            self.session.start()
        except Exception as exc:  # the speed figures stand without a profile
            summary.error = one_line(exc)
            self.session = None

    def close_profile(self) -> None:
        summary = self.result.profile
        if self.session is None or summary is None:
            return
        try:
            summary.analyse_s = self.session.stop_and_analyse()
        except Exception as exc:  # noqa: BLE001
            summary.error = one_line(exc)
            return
        analyse_profile(self.result, summary, self.in_phase, self.dir / "profile", self.dir)

    def finish(self) -> None:
        self.done = True
        self.result.steps = self.records
        if self.batch_sizes:
            self.result.samples_per_step = self.batch_sizes.most_common(1)[0][0]
            if len(self.batch_sizes) > 1:
                self.result.notes.append(Note(kind="info", text=(
                    f"the batches had {len(self.batch_sizes)} sizes "
                    f"({', '.join(str(b) for b in sorted(self.batch_sizes))}); throughput counts the samples taken")))
        if self.sink_steps:
            self.result.notes.append(Note(kind="info", knob="dataset_sink_mode", text=(
                f"dataset_sink_mode: MindSpore reported {self.sink_steps} steps in sinks, one callback per sink; "
                "each step's time is its sink's time over the sink's steps")))
        read_memory(self.result, self.spec.device)
        self.result.wall_s = time.perf_counter() - self.started_wall


def pair_schedule(blocks: int) -> list[int]:
    """Each timed window's arm in a paired process (0: reference, 1: candidate): ABBA, BAAB, ABBA, ..., so that
    linear drift and the window's place after a switch cancel within each block and across blocks."""
    out: list[int] = []
    for b in range(blocks):
        out += [0, 1, 1, 0] if b % 2 == 0 else [1, 0, 0, 1]
    return out
