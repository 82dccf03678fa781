"""The report's language-model block: the greedy samples of the baseline and of the final stack side by side.

A reader of an LM sweep wants to see what the model writes, not only a repetition number.  The texts are data: the
template escapes them like every other string from the results.  (The metrics the accuracy gate could not judge
are ``perftune.report.accuracy_notes``'s: they need the engine's gate.)
"""

from __future__ import annotations

from typing import Optional

from perftune.io.sweep_records import SweepResult, SweepTrial
from perftune.words import lm
from perftune.words.format import num


def _first_ok_baseline(result: SweepResult) -> Optional[SweepTrial]:
    return next((t for t in result.trials if t.kind == "baseline" and t.result.status == "ok"), None)


def _sample(trial: SweepTrial, label: str) -> dict:
    r = trial.result
    acc = r.accuracy
    facts = [f"{num(r.tokens_per_s, '.0f')} tokens/s" if r.tokens_per_s else "",
             lm.perplexity_text(r),
             f"repetition {num(acc.repetition_rate, '.2f')}" if acc and acc.repetition_rate is not None else "",
             f"after {acc.samples_seen} samples" if acc else ""]
    text = acc.sample_text if acc else None
    # a model stuck on one byte writes only spaces or newlines: an empty-looking box would hide that
    blank = f"({len(text)} whitespace characters and nothing else)" if text is not None and not text.strip() else ""
    return {"label": label, "trial_id": trial.trial_id, "facts": ", ".join(f for f in facts if f), "text": text,
            "blank": blank}


def samples(result: SweepResult) -> dict:
    """The baseline's and the final stack's greedy samples; ``shown`` is false where there is none to show."""
    base = _first_ok_baseline(result)
    if base is None or not lm.is_language_model(base.result) or not (base.result.accuracy and
                                                                    base.result.accuracy.sample_text is not None):
        return {"shown": False, "columns": [], "note": ""}
    best = next((t for t in result.trials if t.trial_id == result.best_trial_id), None)
    columns = [_sample(base, "baseline")]
    note = ""
    if best is None or best.trial_id == base.trial_id:
        note = "No change was kept: the final stack is the baseline."
    elif best.result.status == "ok":
        columns.append(_sample(best, f"final stack: {result.best_label}"))
    return {"shown": True, "columns": columns, "note": note}

