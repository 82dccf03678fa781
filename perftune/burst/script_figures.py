"""A script's own validation figures for the accuracy gate: ``Model.fit``'s ``valid_dataset`` (run once, at the
accuracy window's end) and what the script reports with ``perftune.metric``.  The gate compares two trials' figures
only at equal samples seen, so each figure keeps the samples seen when it was computed."""

from __future__ import annotations

from typing import Any, Callable, Optional

from perftune.burst.callback import attach_figures
from perftune.burst.failures import one_line
from perftune.burst.meter import Meter
from perftune.burst.results import figure
from perftune.burst.script_generate import sample_into
from perftune.burst.script_lm import ScriptLanguageModel
from perftune.io.records import Accuracy, Note


class ScriptFigures:
    """Attached to a script burst's ``Meter`` (its ``accuracy_end``), and what ``perftune.metric`` feeds
    (``callback.attach_figures``)."""

    def __init__(self, meter: Meter):
        self.meter = meter
        #: the script's validation, run once at the accuracy window's end (``Model.fit``'s valid_dataset)
        self.evaluate: Optional[Callable[[], dict]] = None
        self.values: dict[str, Optional[float]] = {}
        self.samples: Optional[int] = None
        #: tokens per sample from the first training batch, perplexity where the loss is a token cross-entropy
        self.lm = ScriptLanguageModel(meter.spec, meter.result)
        #: the network the script trains, for ``workload.generate`` (``ScriptBurst`` gives the hooks' finding)
        self.network: Callable[[], Any] = lambda: None
        meter.accuracy_end = self.at_accuracy_end
        attach_figures(self)

    def metric(self, name: str, value: Any) -> None:
        """``perftune.metric``: a validation figure the script computed.  Kept when reported before the timed
        windows (in the accuracy window, warm-up or drain; the last report of a name wins), with the samples seen
        then."""
        meter = self.meter
        numeric, number = figure(value)
        if meter.phase not in ("accuracy", "warmup", "drain") or meter.done or not numeric:
            return
        self.values[str(name)] = number
        # reported inside a step (a callback before ours, or a custom loop before it fetches the next batch): that
        # step's batch is already trained on
        in_step = meter.begin_t is not None and meter.records
        self.samples = meter.samples_seen + (meter.samples_of(meter.records[-1]) if in_step else 0)
        self.attach(meter.result.accuracy)

    def at_accuracy_end(self, acc: Accuracy) -> None:
        """Run the script's validation once, at the accuracy window's end (not timed: the next step's time starts
        after it), and put every figure into the window's ``Accuracy``."""
        if self.evaluate is not None:
            try:
                figures = self.evaluate() or {}
            except Exception as exc:  # noqa: BLE001 - the speed figures stand without it
                self.meter.result.notes.append(Note(kind="warning",
                                                    text=f"the script's validation failed: {one_line(exc)}"))
                figures = None
            for name, value in (figures or {}).items():
                numeric, number = figure(value)
                if numeric:  # a metric that is not one number (a confusion matrix) is not a gate's figure
                    self.values[str(name)] = number
            if figures is not None:
                self.samples = self.meter.samples_seen
        self.attach(acc)
        script = self.meter.spec.script
        if script is not None and script.generate:
            sample_into(acc, script.generate, self.network(), self.meter.result.notes)

    def observe(self, batch: Any, network: Any = None) -> None:
        """A training batch the script took (``callback.observe_batch``): the language-model view reads its
        shape."""
        self.lm.observe(batch, network)

    def attach(self, acc: Optional[Accuracy]) -> None:
        if acc is None:
            return
        if self.values:
            acc.val_metrics = {k: v for k, v in self.values.items() if v is not None}
            acc.val_metrics_samples = self.samples
            acc.val_loss = self.values.get("loss", self.values.get("val_loss"))
            if any(v is None for v in self.values.values()):
                acc.nonfinite = True
        self.lm.accuracy(acc)  # after val_loss: the perplexity is of the validation loss where there is one
