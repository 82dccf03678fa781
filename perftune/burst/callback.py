"""``perftune.Callback``, ``perftune.steps`` and ``perftune.loss``: measuring a training job from inside it.

* In a script burst (``workload: {script: ...}``), perftune adds a ``Callback`` to every ``Model.train`` call of the
  script by itself; a custom loop adds two lines (``for batch in perftune.steps(iterator):`` and
  ``perftune.loss(loss)``).  Once the burst has its steps the callback stops training and the script ends.
* By hand, ``model.train(..., callbacks=[perftune.Callback(out="DIR")])`` measures any job: after its first few
  hundred steps it writes ``DIR/trial.json`` (and ``DIR/profile``), which ``perftune report`` and ``perftune
  compare`` read, and lets training go on (``stop=True`` ends it there).
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from mindspore.train import Callback as MindSporeCallback

from perftune.burst.context import environment, learning_rate
from perftune.burst.failures import KnobRefused
from perftune.burst.meter import BurstDone, Meter, needed_steps
from perftune.io.plan import BurstSettings
from perftune.io.records import Note, TrialSpec

#: the script burst running in this process: its meter, its own validation figures (``script_figures``), why a
#: custom loop cannot run it (None: it can), the loss its loop gave, and whether it says its loop itself
_active: dict[str, Any] = {"meter": None, "figures": None, "loop_refusal": None, "loss": None, "explicit": False}


def activate(meter: Optional[Meter]) -> None:
    """The script burst's meter: what the injected callbacks and ``steps`` report to (None: none, the burst over,
    and its figures and loop refusal with it)."""
    _active["meter"] = meter
    _active["explicit"] = False
    if meter is None:
        _active["figures"] = _active["loop_refusal"] = None


def attach_figures(figures: Any) -> None:
    """The script burst's own validation figures (a ``script_figures.ScriptFigures``): what ``metric`` feeds."""
    _active["figures"] = figures


def active_figures() -> Any:
    return _active["figures"]


def refuse_custom_loops(reason: Optional[str]) -> None:
    """Why a custom loop cannot run the script burst (None: it can): ``steps`` and the loop the burst finds by
    itself (``script_loop``) raise it as ``KnobRefused``."""
    _active["loop_refusal"] = reason


def loop_refusal() -> Optional[str]:
    return _active["loop_refusal"]


def explicit_loop() -> bool:
    """Whether the script measures its loop itself (``perftune.steps``): the found loop (``script_loop``) stands
    down."""
    return _active["explicit"]


def active_meter() -> Optional[Meter]:
    return _active["meter"]


def observe_batch(batch: Any, network: Any = None) -> None:
    """A training batch of the script burst (and the network ``Model`` trains, loss included): its language-model
    view reads the tokens per sample from the first one's shape (``script_lm``)."""
    figures = _active["figures"]
    if figures is not None and _active["meter"] is not None and not figures.lm.seen:
        figures.observe(batch, network)


def standalone_spec(out: Path, burst: BurstSettings, accuracy_samples: int, replicate: int = 0) -> TrialSpec:
    """The spec of a job measured by a hand-added callback: the job is its own workload."""
    import mindspore as ms

    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "job"
    device = str(ms.get_context("device_target"))
    ident = hashlib.sha256(f"{Path(out).resolve()}|{name}|{time.time()}".encode()).hexdigest()[:12]
    return TrialSpec(trial_id=ident, label=f"callback:{name}", workload=f"script:{name}", device=device,
                     knobs={}, burst=burst, accuracy_samples=accuracy_samples, replicate=replicate)


def batch_samples(batch: Any) -> int:
    """Samples in a batch: the first axis of its first column (tuple, list or dict of columns, or one array)."""
    if isinstance(batch, dict):
        batch = next(iter(batch.values()), None)
    elif isinstance(batch, (tuple, list)):
        batch = batch[0] if batch else None
    shape = getattr(batch, "shape", None)
    return int(shape[0]) if shape else 1


class Callback(MindSporeCallback):
    """A ``mindspore.train.Callback`` that runs perftune's burst phases inside ``Model.train``.

    ``out``: where a hand-added callback writes ``trial.json`` (default ``perftune-callback``); ``stop``: end
    training once measured.  The ``warmup_steps``/``steps``/``repeats``/``profile_steps``/``drain_s`` are the plan's
    ``burst`` settings; the accuracy window is ``accuracy_samples`` samples (default: one timed window's);
    ``replicate`` > 0 measures the job again as a repeat process (no profile: the first process has it).
    """

    def __init__(self, out: Optional[str | Path] = None, *, warmup_steps: int = 3, steps: int = 30,
                 repeats: int = 3, profile_steps: int = 5, accuracy_samples: Optional[int] = None,
                 drain_s: Optional[float] = None, replicate: int = 0, stop: bool = False,
                 meter: Optional[Meter] = None):
        super().__init__()
        self.stop = stop
        # by hand without ``out``: ./perftune-callback/; inside a script burst (``meter`` given) the burst writes
        self.out = Path(out) if out is not None else (None if meter is not None else Path("perftune-callback"))
        self.meter = meter
        self.settings = BurstSettings(warmup_steps=warmup_steps, steps=steps, repeats=repeats,
                                      profile_steps=profile_steps, drain_s=drain_s)
        self.accuracy_samples = accuracy_samples
        self.replicate = replicate
        self.last_step_num = 0
        self.written = False
        #: a callback the script made itself, inside a burst: the burst measures (its own callback on every
        #: Model.train); this one does nothing, so its ``out`` folder (a standalone trial.json) is left as it is
        self.standing_down = meter is None and active_meter() is not None
        if self.standing_down:
            active_meter().result.notes.append(Note(kind="info", text=(
                "the script's own perftune.Callback stood down inside the burst (perftune measures every "
                f"Model.train itself); its output{f' ({self.out})' if self.out else ''} was left as it was")))

    def ensure_meter(self, batch_size: int) -> Meter:
        if self.meter is None:
            out = self.out.resolve()
            out.mkdir(parents=True, exist_ok=True)
            samples = self.accuracy_samples or batch_size * self.settings.steps
            self.meter = Meter(standalone_spec(out, self.settings, samples, self.replicate), out)
        return self.meter

    def on_train_begin(self, run_context) -> None:
        if self.standing_down:
            return
        cb = run_context.original_args()
        dataset = getattr(cb, "train_dataset", None)
        meter = self.ensure_meter(_dataset_batch_size(dataset))
        self.last_step_num = int(getattr(cb, "cur_step_num", 0) or 0)
        meter.learning_rate = learning_rate(getattr(cb, "optimizer", None))
        network = getattr(cb, "network", None)
        if meter.result.parameter_count is None and network is not None:
            meter.result.parameter_count = int(sum(p.size for p in network.trainable_params()))
        meter.start()

    def on_train_step_begin(self, run_context) -> None:
        if self.meter is not None:
            self.meter.begin()

    def on_train_step_end(self, run_context) -> None:
        meter = self.meter
        if meter is None or meter.done:
            return
        cb = run_context.original_args()
        now = int(getattr(cb, "cur_step_num", 0) or 0)
        steps = max(1, now - self.last_step_num)
        self.last_step_num = now
        batch = _dataset_batch_size(getattr(cb, "train_dataset", None))
        observe_batch(getattr(cb, "train_dataset_element", None), getattr(cb, "train_network", None))
        if meter.end(getattr(cb, "net_outputs", None), batch * steps, steps):
            self.finished(run_context)

    def on_train_end(self, run_context) -> None:
        if self.meter is not None and not self.meter.done and self.out is not None and not self.written:
            self.write(f"training ended after {self.meter.steps_seen} steps, before the burst had "
                       f"{needed_steps(self.meter)}")

    def finished(self, run_context) -> None:
        if self.out is not None:
            self.write(None)
        if self.stop:
            run_context.request_stop()

    def write(self, reason: Optional[str]) -> None:
        """A standalone callback's ``trial.json``."""
        from perftune.io.files import TRIAL_NAME
        from perftune.io.store import write_json_atomic

        result = self.meter.result
        result.status = "ok" if reason is None else "failed"
        result.reason = reason
        if reason is not None:
            result.steps = self.meter.records
        result.environment = environment(self.meter.spec.device, None)
        write_json_atomic(self.meter.dir / TRIAL_NAME, result.model_dump(mode="json"))
        self.written = True


def _dataset_batch_size(dataset) -> int:
    try:
        return int(dataset.get_batch_size())
    except Exception:  # noqa: BLE001 - no dataset or not a batched one: count one sample per step
        return 1


def steps(iterable: Iterable) -> Iterator:
    """``for batch in perftune.steps(iterator):`` -- a custom training loop measured by the script burst.

    Outside a burst it yields the batches unchanged.  Inside one, a step ends when the loop asks for the next
    batch, before it is fetched: the loss that ``perftune.loss`` was given during the step is read back then (an
    ``@ms.jit`` step returns before its work is done), and the fetch is the next step's wait for its batch.  Once
    the burst has its steps the loop (and the script) ends.
    """
    meter = active_meter()
    if meter is None:
        yield from iterable
        return
    if loop_refusal():
        raise KnobRefused(loop_refusal())
    _active["explicit"] = True  # the explicit form wins over the loop the burst finds by itself
    _active["loss"] = None
    meter.start()
    for batch in iterable:
        meter.begin()
        observe_batch(batch)
        yield batch
        if meter.end(_take_loss(), batch_samples(batch)):
            raise BurstDone()


def _take_loss() -> Any:
    value, _active["loss"] = _active["loss"], None
    return value


def loss(value: Any) -> Any:
    """``perftune.loss(loss)``: the step's loss for the burst's accuracy gate (returns ``value`` unchanged)."""
    _active["loss"] = value
    return value


def metric(name: str, value: Any) -> Any:
    """``perftune.metric(name, value)``: a validation figure the script computed itself (a custom loop's evaluation,
    or one outside ``Model.fit``).  Reported before the burst's timed windows, it reaches the accuracy gate, compared
    at equal samples seen; outside a burst it does nothing.  Returns ``value`` unchanged."""
    figures = active_figures()
    if active_meter() is not None and figures is not None:
        figures.metric(name, value)
    return value
