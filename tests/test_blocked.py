"""The machine-blocked comparison (perftune/engine/blocked.py), checked on simulated sweeps with known truth."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perftune.engine import blocked, stats
from perftune.io.plan import BurstSettings
from perftune.io.records import NodeRecord, TrialResult, WindowStats

PROCESS_SD = 0.03  # between-process spread of log throughput on a quiet machine
WINDOW_SD = 0.02  # between windows of one process
WINDOWS = 4
SLOW_NODE = 0.8  # node B is 20% slower than node A


POLICY = stats.Policy(confidence=0.95, equivalence=0.0, max_runs=1, min_gain=0.03)


def simulate(rng, speed: float, processes: int, config: str = "base", node: str = "local") -> list[stats.ProcessRun]:
    """``processes`` bursts of a configuration whose true throughput is ``speed``."""
    out = []
    for _ in range(processes):
        level = np.log(100.0 * speed) + rng.normal(0, PROCESS_SD)
        out.append(np.exp(level + rng.normal(0, WINDOW_SD, WINDOWS)))
    return stats.process_runs(config, out, node)


def simulated_sweep(rng, effect: float, base_runs: int = 3, cand_runs: int = 2):
    """Nodes A and B (B 20% slower) each measure the baseline and the candidate (true ratio ``effect``)."""
    nodes = {"A": 1.0, "B": SLOW_NODE}
    ref = {n: simulate(rng, s, base_runs, "base", n) for n, s in nodes.items()}
    cand = {n: simulate(rng, s * effect, cand_runs, "cand", n) for n, s in nodes.items()}
    return ref, cand


def flat(by_node):
    return [r for runs in by_node.values() for r in runs]


def test_a_slow_node_is_no_verdict_when_nothing_changed():
    rng = np.random.default_rng(16)
    verdicts = []
    for _ in range(400):
        ref, cand = simulated_sweep(rng, 1.0)
        verdicts.append(blocked.blocked_compare(flat(ref), flat(cand), POLICY).comparison.verdict)
    wrong = sum(v != "not significant" for v in verdicts)
    assert wrong <= 400 * 0.02, f"{wrong} of 400 no-effect sweeps got a faster/slower verdict"


def test_the_naive_pooled_comparison_is_fooled_by_the_slow_node():
    """What blocking prevents: baseline measured on node A, candidate on node B, compared as one machine."""
    rng = np.random.default_rng(17)
    slower = 0
    for _ in range(200):
        ref, cand = simulated_sweep(rng, 1.0)
        c = stats.compare(ref["A"], cand["B"], stats.Noise.pooled(ref["A"]), POLICY)
        slower += c.verdict == "slower"
    assert slower >= 180  # a 20% slower machine reads as a 20% slower knob
    # the blocked comparison of the same design refuses to compare across machines
    assert blocked.blocked_compare(ref["A"], cand["B"]) is None
    one_sided = blocked.blocked_compare(flat(ref), cand["B"], POLICY)
    assert one_sided.nodes == ("B",) and one_sided.comparison.verdict == "not significant"


@pytest.mark.parametrize("effect, verdict", [(1.15, "faster"), (1 / 1.15, "slower")])
def test_a_true_15_percent_effect_is_found(effect, verdict):
    rng = np.random.default_rng(18)
    found = []
    for _ in range(400):
        ref, cand = simulated_sweep(rng, effect)
        b = blocked.blocked_compare(flat(ref), flat(cand), POLICY)
        found.append(b.comparison.verdict == verdict)
        assert b.nodes == ("A", "B") and b.unpaired == ()
    assert sum(found) >= 400 * 0.95
    # the estimate is centred on the truth, not on the node mix
    assert b.per_node_ratio["A"] == pytest.approx(effect, rel=0.15)


def test_one_node_decides_exactly_as_the_unblocked_comparison():
    rng = np.random.default_rng(19)
    for effect in (1.0, 1.05, 1.2):
        ref, cand = simulate(rng, 1.0, 3), simulate(rng, effect, 1, "cand")
        old = stats.compare(ref, cand, stats.Noise.pooled(ref), POLICY)
        new = blocked.blocked_compare(ref, cand, POLICY).comparison
        assert new.verdict == old.verdict
        assert (new.ratio, new.ci_low, new.ci_high, new.df) == pytest.approx((old.ratio, old.ci_low, old.ci_high,
                                                                              old.df))


def test_node_effect_shows_the_slow_node():
    rng = np.random.default_rng(20)
    ref, _ = simulated_sweep(rng, 1.0, base_runs=6)
    effect = blocked.node_effect(flat(ref))
    assert effect["B"] / effect["A"] == pytest.approx(SLOW_NODE, rel=0.05)
    assert blocked.node_effect(ref["A"]) == {}


def _trial(samples_per_s: float, node: NodeRecord | None, status: str = "ok") -> TrialResult:
    windows = [WindowStats(steps=10, total_ms=1.0, median_step_ms=0.1, samples_per_s=samples_per_s)]
    return TrialResult(trial_id="t", status=status, workload="mlp", device="CPU", knobs={},
                       burst=BurstSettings(), windows=windows if status == "ok" else [], node=node)


def test_trials_are_grouped_by_the_node_that_ran_them():
    a, b = NodeRecord(host="h1", node_id="aa"), NodeRecord(host="h2", node_id="bb")
    grouped = blocked.by_node(blocked.usable_runs("c", [_trial(100, a), _trial(90, a), _trial(80, b),
                                                        _trial(1, b, status="failed"), _trial(50, None)]))
    assert sorted(grouped) == ["aa", "bb", blocked.LOCAL_NODE]
    assert len(grouped["aa"]) == 2 and len(grouped["bb"]) == 1  # the failed one is left out


def test_node_summary_of_a_cluster_sweep():
    """Scripted sweep: node bb is 20% slower; the single ran on bb and is compared with bb's baseline only."""
    from perftune.io.plan import Plan
    from perftune.io.sweep_records import ComparisonRecord, SweepResult, SweepTrial

    a, b = NodeRecord(host="h1", node_id="aa"), NodeRecord(host="h2", node_id="bb")

    def trial(kind, replicate, speed, node, label="baseline"):
        r = _trial(speed, node)
        r.windows = [r.windows[0].model_copy(update={"samples_per_s": speed * f}) for f in (0.99, 1.0, 1.01)]
        return SweepTrial(trial_id=f"{kind}{replicate}{node.node_id}", label=label, kind=kind,
                          replicate=replicate, verdict="baseline" if kind == "baseline" else "measured", result=r)

    plan = Plan(name="s", workload="mlp")
    # a cluster lists trials as they finished: the single's repeat (no comparison of its own) came back first
    trials = [trial("baseline", 0, 100, a), trial("baseline", 1, 80, b), trial("baseline", 2, 101, a),
              trial("repeat", 1, 82, b, "+mode=pynative"), trial("single", 0, 81, b, "+mode=pynative"),
              trial("single", 0, 100, NodeRecord(host="h3"), "+x=1")]
    own = ComparisonRecord(reference="baseline", ratio=1.01, ci_low=0.9, ci_high=1.1, p_value=0.5, verdict="undecided",
                           df=6)
    trials[4].vs_baseline = own  # the sweep's own comparison, made by its races
    summary = blocked.node_summary(SweepResult(plan=plan, started_utc="now", trials=trials))
    assert summary.hosts == {"aa": "h1", "bb": "h2", "h3": "h3"}
    assert summary.trials_per_node == {"aa": 2, "bb": 3, "h3": 1}
    assert summary.node_effect["bb"] / summary.node_effect["aa"] == pytest.approx(0.8, rel=0.01)
    single, orphan = summary.blocked
    assert single.node == "bb" and single.trial_id == "single0bb"
    assert single.per_node_ratio == {"bb": pytest.approx(math.sqrt(81 * 82) / 80, rel=1e-6)}  # both processes on bb
    assert single.comparison == own  # one verdict per configuration: the sweep's, not a second one
    assert orphan.per_node_ratio == {} and "no baseline" in orphan.note
    assert blocked.node_summary(SweepResult(plan=plan, started_utc="now", trials=[])) is None
