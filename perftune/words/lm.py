"""The language-model view of a trial: tokens/s, perplexity, repetition and model FLOP/s, as values and as words.

A workload that sets ``tokens_per_sample`` is a language model, and its users think in tokens/s and perplexity,
not in samples/s.  One place derives these figures so that the sweep's progress lines, ``perftune run``'s summary,
the ablation tables, the data frames and the report say the same thing.  Perplexity and repetition are shown for
language models only (their validation loss is a mean token cross-entropy): for a classifier, exp(val_loss) means
nothing to its reader.  A perplexity of ``PERPLEXITY_LIMIT`` or more (a diverged or untrained model; the burst clips
exp at a loss of 700) is never printed as a number: it says "overflows" beside the loss.

The achieved model FLOP/s here needs only the workload's ``flops_per_sample``; MFU, its ratio to the machine's peak,
is ``perftune.report.efficiency``'s (against the peak ``perftune peak`` measured).
"""

from __future__ import annotations

import math
from typing import Optional

from perftune.io.derived import loss_rise
from perftune.io.records import TrialResult
from perftune.words.format import rate

#: exp(loss) from here on is no figure a reader can use (exp(13.8 nats); a byte-level or a 32k-token vocabulary
#: guessed uniformly is at 256 or 32,000): printed as "overflows", left out of tables
PERPLEXITY_LIMIT = 1e6


def is_language_model(r: TrialResult) -> bool:
    """A workload that sets ``tokens_per_sample``: its loss is a token cross-entropy, so exp(loss) is a perplexity."""
    return bool(r.tokens_per_sample)


def model_gflop_per_s(r: TrialResult) -> Optional[float]:
    """Achieved model FLOP/s (forward + backward FLOPs per sample x samples/s), in GFLOP/s; None if not known."""
    if not r.flops_per_sample or not r.samples_per_s:
        return None
    return r.flops_per_sample * r.samples_per_s / 1e9


def perplexity(r: TrialResult) -> Optional[float]:
    """The perplexity of a language model, None for other models and where it overflows (see ``overflows``)."""
    value = r.accuracy.perplexity if is_language_model(r) and r.accuracy else None
    return None if value is None or overflows(value) else value


def overflows(value: float) -> bool:
    return not math.isfinite(value) or value >= PERPLEXITY_LIMIT


def perplexity_text(r: TrialResult) -> str:
    """``perplexity 34.21``; ``perplexity overflows (val loss 323.0)`` past the limit; empty for other models."""
    acc = r.accuracy
    if not is_language_model(r) or acc is None or acc.perplexity is None:
        return ""
    if overflows(acc.perplexity):
        loss = f" (val loss {acc.val_loss:.1f})" if acc.val_loss is not None else ""
        return f"perplexity overflows{loss}"
    return f"perplexity {acc.perplexity:.2f}"


def repetition(r: TrialResult) -> Optional[float]:
    return r.accuracy.repetition_rate if is_language_model(r) and r.accuracy else None


def throughput_text(r: TrialResult) -> str:
    """``123.4 samples/s`` and, for a language model, ``, 7898 tokens/s``."""
    if not r.samples_per_s:
        return ""
    return f"{rate(r.samples_per_s)} samples/s" + (f", {r.tokens_per_s:.0f} tokens/s" if r.tokens_per_s else "")


def accuracy_text(r: TrialResult) -> str:
    """``perplexity 34.21, repetition 0.98`` for a language model with accuracy figures, else empty."""
    parts = [perplexity_text(r)] if perplexity_text(r) else []
    if repetition(r) is not None:
        parts.append(f"repetition {repetition(r):.2f}")
    return ", ".join(parts)


def progress_text(r: TrialResult) -> str:
    """One trial's figures for the sweep's progress line: throughput, then the language-model accuracy."""
    return ", ".join(p for p in (throughput_text(r), accuracy_text(r)) if p)


def verdict_suffix(r: TrialResult) -> str:
    """What a verdict line adds for a language model: `` [7898 tokens/s, perplexity 34.21, repetition 0.98]``."""
    if not is_language_model(r) or r.status != "ok":
        return ""
    parts = [f"{r.tokens_per_s:.0f} tokens/s" if r.tokens_per_s else "", accuracy_text(r)]
    text = ", ".join(p for p in parts if p)
    return f" [{text}]" if text else ""


def loss_text(value: Optional[float]) -> str:
    """A loss in three significant figures, its trailing zeros kept (``6.90``, ``862``, ``0.0123``)."""
    if value is None:
        return "NaN/Inf"
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    return f"{value:.{max(0, 2 - int(math.floor(math.log10(abs(value)))))}f}"


DIVERGED_CAUSE = ("this trial's accuracy figures describe a diverged run (a learning rate too high here, or float16 "
                  "overflowing without loss scaling)")


def diverged_text(head: float, tail: float, updates: int) -> str:
    """The warning of a training loss that rose (``io.derived.loss_rise``)."""
    return (f"training diverged: the training loss rose from {loss_text(head)} to {loss_text(tail)} over the accuracy "
            f"window's {updates} updates (median of the first steps, then of the last quarter: x{tail / head:.1f}); "
            + DIVERGED_CAUSE)


def nonfinite_loss_text(update: int, updates: int, before: Optional[float]) -> str:
    """The warning of a training loss that became NaN/Inf after finite ones."""
    return (f"training diverged: the training loss became NaN/Inf at update {update} of the accuracy window's "
            f"{updates} (it was {loss_text(before)} the update before); " + DIVERGED_CAUSE)


def divergence_of(r: TrialResult) -> Optional[str]:
    """A measured trial's divergence warning read from its accuracy record's loss curve (``io.derived.loss_rise``;
    the burst's own note says the same), for the report and the sweep's summary; None where it did not diverge."""
    acc = r.accuracy
    rise = loss_rise([v for _, v in acc.loss_curve]) if acc is not None and r.status == "ok" else None
    return diverged_text(*rise, acc.updates or len(acc.loss_curve)) if rise else None
