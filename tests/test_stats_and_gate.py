"""The decision rules on their own: the process-level comparison and the accuracy gate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perftune.engine import stats
from perftune.engine.accuracy.gate import check
from perftune.io.plan import AccuracyGate
from perftune.io.records import Accuracy


def windows(rng, mean, n_proc=1, n_win=3, between=0.03, within=0.01):
    return [list(mean * math.exp(rng.normal(0, between)) * np.exp(rng.normal(0, within, n_win)))
            for _ in range(n_proc)]


def runs(windows_by_process, config="base"):
    return stats.process_runs(config, windows_by_process)


def policy(min_gain):
    return stats.Policy(confidence=0.95, equivalence=0.0, max_runs=1, min_gain=min_gain)


def test_process_runs_reject_nonsense():
    assert runs([]) == []
    with pytest.raises(ValueError):
        runs([[100.0, -1.0]])
    with pytest.raises(ValueError):
        runs([[float("nan")]])


def test_noise_prior_dominates_with_no_repeats_and_yields_to_data():
    single = runs([[100, 101, 99]])
    assert stats.Noise.pooled(single).var == pytest.approx(stats.PRIOR_SD ** 2)
    spread = runs([[100] * 3, [130] * 3, [80] * 3, [120] * 3])
    noisy = stats.Noise.pooled(spread)
    assert noisy.var > 4 * stats.PRIOR_SD ** 2 and noisy.df == stats.PRIOR_DF + 3


def test_a_clear_speedup_is_faster_and_a_clear_slowdown_is_slower():
    rng = np.random.default_rng(1)
    base = runs(windows(rng, 100, n_proc=3))
    noise = stats.Noise.pooled(base)
    fast = stats.compare(base, runs(windows(rng, 200), "c"), noise, policy(0.03))
    slow = stats.compare(base, runs(windows(rng, 50), "c"), noise, policy(0.03))
    assert fast.verdict == "faster" and fast.ci_low > 1 and fast.ratio == pytest.approx(2, rel=0.15)
    assert slow.verdict == "slower" and slow.ci_high < 1


def test_aa_comparisons_are_mostly_not_significant():
    """Same distribution on both sides: at 95% confidence about 1 in 20 may come out significant, not more."""
    rng = np.random.default_rng(7)
    verdicts = []
    for _ in range(200):
        base = runs(windows(rng, 100, n_proc=3))
        cand = runs(windows(rng, 100), "c")
        verdicts.append(stats.compare(base, cand, stats.Noise.pooled(base), policy(0.0)).verdict)
    false_alarms = sum(v != "not significant" for v in verdicts) / len(verdicts)
    assert false_alarms <= 0.08, false_alarms


def test_min_gain_keeps_a_real_but_small_gain_from_counting():
    base = runs([[100, 100.1, 99.9]] * 3)
    cand = runs([[102, 102.1, 101.9]], "c")
    tight = stats.Noise(var=1e-8, df=20)
    assert stats.compare(base, cand, tight, policy(0.0)).verdict == "faster"
    assert stats.compare(base, cand, tight, policy(0.03)).verdict == "not significant"


def acc(**kw):
    base = dict(samples_seen=1000, train_loss=2.0, val_loss=2.0, perplexity=math.exp(2.0), max_grad_norm=1.0)
    base.update(kw)
    return Accuracy(**base)


def test_gate_passes_equal_or_better_accuracy():
    gate = AccuracyGate(metric="val_loss", rel_tolerance=0.05)
    assert check(acc(), acc(val_loss=2.09), gate).ok  # +4.5% < 5%
    assert check(acc(), acc(val_loss=1.5), gate).ok  # better is never a rejection


@pytest.mark.parametrize("candidate,words", [
    (dict(val_loss=2.2), ["val_loss 2.2 vs baseline 2", "+10.0%", "tolerance 5.0%"]),
    (dict(nonfinite=True), ["NaN/Inf"]),
    (dict(max_grad_norm=50.0), ["gradient norm blew up", "limit x10"]),
    (dict(samples_seen=2000), ["not comparable"]),
    (dict(val_loss=None), ["val_loss is missing"]),
])
def test_gate_rejects_with_the_metric_and_the_amount(candidate, words):
    result = check(acc(), acc(**candidate), AccuracyGate(metric="val_loss", rel_tolerance=0.05))
    assert not result.ok
    for word in words:
        assert word in result.reason


def test_gate_per_metric_tolerances_and_repetition():
    gate = AccuracyGate(metric="val_loss", rel_tolerance=0.05, tolerances={"train_loss": 0.01})
    assert "train_loss" in check(acc(), acc(train_loss=2.05), gate).reason
    lm = dict(repetition_rate=0.1)
    assert check(acc(**lm), acc(repetition_rate=0.15), gate).ok
    bad = check(acc(**lm), acc(repetition_rate=0.6), gate)
    assert not bad.ok and "repetition rate" in bad.reason


def test_gate_judges_a_scripts_own_validation_metrics_by_their_direction():
    """A script's ``Model.eval``/``perftune.metric`` figures: losses may not rise, accuracies may not fall, beyond
    the tolerance, and only figures measured at the same samples seen are compared."""
    base = acc(val_metrics={"accuracy": 0.80, "top_5_error": 0.10}, val_metrics_samples=128)
    gate = AccuracyGate(rel_tolerance=0.05)
    same = check(base, acc(val_metrics={"accuracy": 0.79, "top_5_error": 0.104}, val_metrics_samples=128), gate)
    assert same.ok and same.changes["val:accuracy"] == pytest.approx(0.79 / 0.80 - 1)
    better = check(base, acc(val_metrics={"accuracy": 0.95, "top_5_error": 0.02}, val_metrics_samples=128), gate)
    assert better.ok
    fell = check(base, acc(val_metrics={"accuracy": 0.70, "top_5_error": 0.10}, val_metrics_samples=128), gate)
    assert not fell.ok and fell.reason.startswith("the script's accuracy 0.7 vs baseline 0.8: -12.5% (tolerance "
                                                  "5.0% down, at 128 samples seen)")
    rose = check(base, acc(val_metrics={"accuracy": 0.80, "top_5_error": 0.2}, val_metrics_samples=128), gate)
    assert not rose.ok and "the script's top_5_error" in rose.reason and "up" in rose.reason
    elsewhere = check(base, acc(val_metrics={"accuracy": 0.10}, val_metrics_samples=96), gate)
    assert elsewhere.ok and "val:accuracy" not in elsewhere.changes
