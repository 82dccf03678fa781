"""The burst's phases driven from inside someone else's training loop: ``Meter`` is told when each step begins
and ends (by ``perftune.Callback`` or ``perftune.steps``) and decides which phase the step belongs to.

The same phases as ``phases.Burst``, in the same order: accuracy from the first step until ``accuracy_samples``
samples were seen (its first step, the graph compile, is ``compile_ms``), ``warmup_steps`` warm-up steps,
``repeats`` timed windows of ``steps`` steps (losses read back once per window), ``profile_steps`` steps under
the profiler.  Then ``done`` is true: the script burst stops the script, a standalone callback writes its
``trial.json``.

Timing from inside: a step's time runs from the end of the previous step to the end of this one, so it holds
everything the loop does per step (fetching the batch, every callback); its data wait is the part before the step
began (``Model.train``: between the previous step's end and this step's begin).  With ``dataset_sink_mode`` MindSpore
reports one step end per sink: each of its steps gets the sink's time over its step count.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional

from perftune.burst import contention
from perftune.burst.failures import one_line
from perftune.burst.results import (
    analyse_profile,
    calibrated_window_steps,
    finite_or_none,
    summarize_timed,
    training_accuracy,
    window_stats,
)
from perftune.io.records import Note, ProfileSummary, StepRecord, TrialResult, TrialSpec, failed_result


class BurstDone(BaseException):
    """Raised into the script once the burst has its steps: ends the script (not an ``Exception``, so the script's
    own ``except Exception`` does not swallow it)."""


def loss_value(loss: Any) -> Optional[float]:
    """A step's loss as a float: a Tensor, a NumPy value, a number, or a tuple/list whose first item is the loss
    (``Model.train``'s ``net_outputs`` with loss scaling is ``(loss, overflow, scale)``)."""
    if isinstance(loss, (tuple, list)):
        loss = loss[0] if loss else None
    return _figure(loss)[1]


def _figure(value: Any) -> tuple[bool, Optional[float]]:
    """(is it one number, its value or None where NaN/Inf)."""
    try:
        number = float(value.asnumpy()) if hasattr(value, "asnumpy") else float(value)
    except (TypeError, ValueError):  # None, a string, an array of several values
        return False, None
    return True, finite_or_none(number)


class Meter:
    def __init__(self, spec: TrialSpec, out_dir: Path, result: Optional[TrialResult] = None):
        self.spec = spec
        self.dir = Path(out_dir)
        self.result = result if result is not None else failed_result(spec, "failed", None)
        b = spec.burst
        self.repeat = spec.replicate > 0  # a repeat process: warm-up and timed windows only (as Burst)
        self.phase = "warmup" if self.repeat else "accuracy"
        if self.repeat and b.warmup_steps == 0:
            self.phase = "timed"
        self.records: list[StepRecord] = []
        self.result.steps = self.records  # the same list: the profile's splits read the timed steps from it
        self.in_phase: list[StepRecord] = []
        self.pending: list[tuple[StepRecord, Any]] = []  # a timed window's records and loss tensors
        self.window = 0
        self.window_steps = b.steps  # calibrated at the end of warm-up where burst.min_window_s asks
        self.window_reading: Optional[contention.Reading] = None
        self.samples_seen = 0
        self.batch_sizes: Counter = Counter()
        self.last_end: Optional[float] = None
        self.begin_t: Optional[float] = None
        self.learning_rate: Optional[float] = None
        self.sink_steps = 0  # steps that arrived several per call (dataset_sink_mode)
        self.session = None
        self.loop_refusal: Optional[str] = None  # why a custom loop cannot run this trial (set by the script burst)
        #: the script's validation, run once at the accuracy window's end (``Model.fit``'s valid_dataset)
        self.evaluate: Optional[Callable[[], dict]] = None
        self.val_metrics: dict[str, float] = {}
        self.val_metrics_samples: Optional[int] = None
        self.done = False
        self.started_wall = time.perf_counter()

    @property
    def steps_seen(self) -> int:
        return len(self.records)

    def needed_steps(self) -> str:
        """What the burst needs, for a "training ended early" reason."""
        b = self.spec.burst
        acc = "" if self.repeat else f"the accuracy window ({self.spec.accuracy_samples} samples), "
        return (f"{acc}{b.warmup_steps} warm-up, {b.repeats} x {self.window_steps} timed and {b.profile_steps} "
                "profiled steps")

    # -- the two calls per step -------------------------------------------------------------------------------
    def start(self) -> None:
        """Training (re)starts: the next step's time counts from here."""
        self.last_end = time.perf_counter()
        self.begin_t = None

    def begin(self) -> None:
        self.begin_t = time.perf_counter()
        if self.last_end is None:
            self.last_end = self.begin_t

    def end(self, loss: Any, samples: int, steps: int = 1) -> bool:
        """The step (``steps`` of them with dataset sinking) ended with ``loss``; ``samples`` taken in all.
        Returns ``done``."""
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
        sync = self.phase != "timed"
        value = loss_value(loss) if sync else None
        for i in range(steps):
            self.samples_seen += per_step
            record = StepRecord(phase=self.phase, window=self.window if self.phase == "timed" else None,
                                step_ms=step_ms, data_wait_ms=wait_ms, loss=value,
                                learning_rate=self.learning_rate, samples_seen=self.samples_seen)
            self.records.append(record)
            self.in_phase.append(record)
            if not sync:
                self.pending.append((record, loss if i == steps - 1 else None))
        self.advance()
        self.last_end = time.perf_counter()
        self.begin_t = None
        return self.done

    # -- phase changes ----------------------------------------------------------------------------------------
    def advance(self) -> None:
        b = self.spec.burst
        if self.phase == "accuracy" and self.samples_seen >= self.spec.accuracy_samples:
            self.result.compile_ms = self.in_phase[0].step_ms
            self.result.accuracy = training_accuracy(self.in_phase, self.samples_seen, self.spec.lr_scale,
                                                     with_norms=False)
            if self.evaluate is not None:
                self.validate()
            self.attach_metrics()
            if not b.warmup_steps:
                self.calibrate()
            self.next_phase("warmup" if b.warmup_steps else "timed")
        elif self.phase == "warmup" and len(self.in_phase) >= b.warmup_steps:
            if self.repeat:
                self.result.compile_ms = self.records[0].step_ms
            self.result.warmup_steps = len(self.in_phase)
            self.calibrate()
            self.next_phase("timed")
        elif self.phase == "timed" and len(self.in_phase) >= self.window_steps:
            self.close_window()
            if self.window + 1 < b.repeats:
                self.window += 1
                self.next_phase("timed")
            else:
                summarize_timed(self.result, [r for r in self.records if r.phase == "timed"], None)
                self.next_phase("profiled" if b.profile_steps and not self.repeat else "done")
        elif self.phase == "profiled" and len(self.in_phase) >= b.profile_steps:
            self.close_profile()
            self.next_phase("done")

    # -- the script's own validation -----------------------------------------------------------------------------
    def metric(self, name: str, value: Any) -> None:
        """``perftune.metric``: a validation figure the script computed.  Kept when reported before the timed
        windows (in the accuracy window or warm-up; the last report of a name wins), with the samples seen then:
        the gate compares two trials' figures only at equal samples seen."""
        numeric, figure = _figure(value)
        if self.phase not in ("accuracy", "warmup") or self.done or not numeric:
            return
        self.val_metrics[str(name)] = figure
        # reported inside a step (a callback before ours, or a custom loop before it fetches the next batch): that
        # step's batch is already trained on
        in_step = self.begin_t is not None and self.records
        self.val_metrics_samples = self.samples_seen + (self.samples_of(self.records[-1]) if in_step else 0)
        self.attach_metrics()

    def validate(self) -> None:
        """Run the script's validation once, at the accuracy window's end (not timed: the next step's time starts
        after it)."""
        try:
            figures = self.evaluate() or {}
        except Exception as exc:  # noqa: BLE001 - the speed figures stand without it
            self.result.notes.append(Note(kind="warning", text=f"the script's validation failed: {one_line(exc)}"))
            return
        for name, value in figures.items():
            numeric, figure = _figure(value)
            if numeric:  # a metric that is not one number (a confusion matrix) is not a gate's figure
                self.val_metrics[str(name)] = figure
        self.val_metrics_samples = self.samples_seen

    def attach_metrics(self) -> None:
        acc = self.result.accuracy
        if acc is None or not self.val_metrics:
            return
        acc.val_metrics = {k: v for k, v in self.val_metrics.items() if v is not None}
        acc.val_metrics_samples = self.val_metrics_samples
        loss = self.val_metrics.get("loss", self.val_metrics.get("val_loss"))
        acc.val_loss = loss
        if any(v is None for v in self.val_metrics.values()):
            acc.nonfinite = True

    def calibrate(self) -> None:
        """``burst.min_window_s``: as many steps per window as that takes (``summary.calibrated_window_steps``)."""
        warm = [r.step_ms for r in self.records if r.phase == "warmup"]
        self.window_steps, note = calibrated_window_steps(self.spec.burst, warm)
        if note is not None:
            self.result.notes.append(note)

    def next_phase(self, phase: str) -> None:
        self.phase = phase
        self.in_phase = []
        if phase == "timed":
            self.window_reading = contention.read()
        elif phase == "profiled":
            self.open_profile()
        elif phase == "done":
            self.finish()

    def close_window(self) -> None:
        """One synchronisation per window (the losses are read back at its end), as in ``Burst.timed_phase``."""
        t0 = time.perf_counter()
        for record, tensor in self.pending:
            if tensor is not None:
                record.loss = loss_value(tensor)
        window = self.in_phase
        window[-1].step_ms += (time.perf_counter() - t0) * 1e3  # the read-back belongs to the last step
        self.pending = []
        guard = contention.between(self.window_reading, contention.read())
        samples = window[-1].samples_seen - window[0].samples_seen + self.samples_of(window[0])
        self.result.windows.append(window_stats(window, sum(r.step_ms for r in window), samples, guard))

    def samples_of(self, record: StepRecord) -> int:
        i = self.records.index(record)
        return record.samples_seen - (self.records[i - 1].samples_seen if i else 0)

    def open_profile(self) -> None:
        from perftune.profile.session import ProfilerSession

        summary = ProfileSummary(profiled_steps=self.spec.burst.profile_steps,
                                 unprofiled_step_ms=self.result.step_ms_median)
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
                    f"the script's batches had {len(self.batch_sizes)} sizes "
                    f"({', '.join(str(b) for b in sorted(self.batch_sizes))}); throughput counts the samples taken")))
        if self.sink_steps:
            self.result.notes.append(Note(kind="info", knob="dataset_sink_mode", text=(
                f"dataset_sink_mode: MindSpore reported {self.sink_steps} steps in sinks, one callback per sink; "
                "each step's time is its sink's time over the sink's steps")))
        self.result.wall_s = time.perf_counter() - self.started_wall
