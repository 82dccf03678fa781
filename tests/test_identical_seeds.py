"""Seed runs that trained identically (a ``build()`` calling ``mindspore.set_seed`` with the data seed perftune
passes it, the same in every seed run) leave the gate uncalibrated: its words say the likely cause and the fix; one
seed run says only that the spread could not be measured."""

from __future__ import annotations

from perftune.engine.accuracy.seed_band import judge
from perftune.words.gate_words import judgement_text, pass_notes


def test_identical_seed_runs_name_the_cause_and_the_fix():
    j = judge("val_loss", 5.907, [5.347, 5.347, 5.347], tolerance=0.05, q=0.95)
    assert j.outcome == "uncalibrated"
    text = judgement_text(j)
    assert "uncalibrated: its seed spread could not be measured: the 3 seed runs trained identically" in text
    assert "build() must not call mindspore.set_seed" in text and "perftune seeds MindSpore and NumPy" in text
    assert text.endswith("judged by the 5.0% tolerance alone)")
    passing = judge("val_loss", 5.35, [5.347, 5.347, 5.347], tolerance=0.05, q=0.95)
    assert "the 3 seed runs trained identically" in pass_notes([passing], "")[0]


def test_one_seed_run_says_only_that_it_could_not_measure():
    text = judgement_text(judge("val_loss", 5.907, [5.347], tolerance=0.05, q=0.95))
    assert "(uncalibrated: its seed spread could not be measured, judged by the 5.0% tolerance alone)" in text
    assert "set_seed" not in text
