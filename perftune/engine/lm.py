"""The language-model view of a trial: tokens/s, perplexity, repetition and model FLOP/s, as values and as words.

A workload that sets ``tokens_per_sample`` is a language model, and its users think in tokens/s and perplexity,
not in samples/s.  One place derives these figures so that the sweep's progress lines, ``perftune run``'s summary,
the ablation tables and the report say the same thing.  Perplexity and repetition are shown for language models
only: for a classifier, exp(val_loss) means nothing to its reader.

MFU (model FLOP/s over the hardware's peak) is not computed: perftune knows the model's FLOPs per sample where the
workload gives ``flops_per_sample`` but not the peak FLOP/s of a CPU (it depends on the vector units, the clock and
the threads MindSpore uses), so it reports the achieved model FLOP/s and leaves the ratio to the reader.
"""

from __future__ import annotations

from typing import Optional

from perftune.io.records import TrialResult


def is_language_model(r: TrialResult) -> bool:
    return bool(r.tokens_per_sample)


def model_gflop_per_s(r: TrialResult) -> Optional[float]:
    """Achieved model FLOP/s (forward + backward FLOPs per sample x samples/s), in GFLOP/s; None if not known."""
    if not r.flops_per_sample or not r.samples_per_s:
        return None
    return r.flops_per_sample * r.samples_per_s / 1e9


def perplexity(r: TrialResult) -> Optional[float]:
    return r.accuracy.perplexity if is_language_model(r) and r.accuracy else None


def repetition(r: TrialResult) -> Optional[float]:
    return r.accuracy.repetition_rate if is_language_model(r) and r.accuracy else None


def throughput_text(r: TrialResult) -> str:
    """``123.4 samples/s`` and, for a language model, ``, 7898 tokens/s``."""
    if not r.samples_per_s:
        return ""
    return f"{r.samples_per_s:.1f} samples/s" + (f", {r.tokens_per_s:.0f} tokens/s" if r.tokens_per_s else "")


def accuracy_text(r: TrialResult) -> str:
    """``perplexity 34.21, repetition 0.98`` for a language model with accuracy figures, else empty."""
    parts = []
    if perplexity(r) is not None:
        parts.append(f"perplexity {perplexity(r):.2f}")
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
