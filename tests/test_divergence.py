"""A training loss that diverged in the accuracy window is said (``burst.results.divergence_note``,
``io.derived.loss_rise``): the tester's float16 LLaMA run, whose loss rose from 6.90 to ~860 while ``perftune run``
said only ``ok`` with ``perplexity overflows``; a loss that settles, or one spike, says nothing."""

from __future__ import annotations

from collections import Counter

from perftune.burst.results import divergence_note, finish_notes
from perftune.io.records import Accuracy, StepRecord, TrialResult
from perftune.words.lm import divergence_of

#: the tester's accuracy window (float16 defaults, 32 updates of batch 16)
DIVERGED = [6.903, 6.880, 25.55, 59.42, 304.6, 361.7, 467.5, 518.9, 540.0, 553.5, 632.4, 637.9, 608.1, 680.2, 635.0,
            748.6, 703.3, 751.5, 788.7, 812.6, 790.1, 806.2, 759.5, 793.3, 851.4, 859.7, 812.0, 827.4, 868.6, 873.8,
            863.8, 863.3]


def steps(losses, phase="accuracy"):
    return [StepRecord(phase=phase, step_ms=5.0, data_wait_ms=0.0, loss=v, samples_seen=16 * (i + 1))
            for i, v in enumerate(losses)]


def test_the_float16_run_is_said_to_have_diverged():
    note = divergence_note(steps(DIVERGED))
    assert note.kind == "warning"
    assert note.text.startswith("training diverged: the training loss rose from 6.90 to 862 over the accuracy "
                                "window's 32 updates")
    # at the burst's end, from the accuracy steps only (``Meter.finish``): and so in ``perftune run``'s notes
    records = steps(DIVERGED) + steps([900.0] * 10, phase="timed")
    assert [n.text for n in finish_notes(Counter(), 0, records)] == [note.text]
    # the report and the sweep summary read the same from the accuracy record's loss curve
    result = TrialResult.model_construct(status="ok", accuracy=Accuracy(
        samples_seen=512, updates=32, loss_curve=[(16 * (i + 1), v) for i, v in enumerate(DIVERGED)]))
    assert divergence_of(result) == note.text


def test_a_loss_that_becomes_nan_is_said():
    note = divergence_note(steps([6.9, 6.8, 7.5, None, None]))
    assert note.text.startswith("training diverged: the training loss became NaN/Inf at update 4 of the accuracy "
                                "window's 5 (it was 7.50 the update before)")


def test_learning_a_spike_or_no_loss_says_nothing():
    assert divergence_note(steps([6.9 - 0.1 * i for i in range(32)])) is None  # learning
    assert divergence_note(steps([6.9, 6.8, 6.7, 40.0, 6.5, 6.4, 6.3, 6.2, 6.1, 6.0, 5.9, 5.8])) is None  # one spike
    assert divergence_note(steps([None] * 12)) is None  # a script that reports no loss
    assert divergence_note(steps([6.9, 20.0, 40.0])) is None  # too few updates to judge
    assert finish_notes(Counter(), 0, steps([6.9 - 0.1 * i for i in range(32)])) == []
