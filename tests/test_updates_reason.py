"""Issue 39: every accuracy reason where the batch sizes differ says the optimizer updates compared ("20 optimizer
updates vs the baseline's 40"): a refusal, and a pass whose seed band could not separate the change (the seed-band
note had dropped it).  Scripted accuracy records, as test_accuracy_gate."""

from __future__ import annotations

from test_accuracy_gate import BASE, GATE, SEEDS, acc

from perftune.engine.accuracy.gate import check

UPDATES = "20 optimizer updates vs the baseline's 40"


def test_a_seed_band_pass_note_says_the_updates_when_the_batch_differs():
    noisy = [acc(2.3, 2.3, seed=1), acc(2.75, 2.75, seed=2), acc(2.45, 2.45, seed=3)]
    gate = check(BASE, acc(2.64, 2.5, batch=64), GATE, noisy)
    assert gate.ok and gate.pass_notes() and all(UPDATES in n for n in gate.pass_notes()), gate.pass_notes()
    same = check(BASE, acc(2.64, 2.5), GATE, noisy)  # same batch: nothing to say about updates
    assert same.ok and not any("optimizer updates" in n for n in same.pass_notes())


def test_refusals_say_the_updates_when_the_batch_differs():
    refused = check(BASE, acc(2.575, 2.575, batch=64), GATE, SEEDS)
    assert not refused.ok and UPDATES in refused.reason
    blown = check(BASE.model_copy(update={"max_grad_norm": 1.0}),
                  acc(2.5, 2.5, batch=64, max_grad_norm=100.0), GATE, SEEDS)
    assert not blown.ok and blown.reason.startswith("gradient norm blew up") and UPDATES in blown.reason
