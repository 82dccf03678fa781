"""The sequential decision rule on simulated measurements: known effects, known noise, deterministic seeds.

These are the numbers the rule is designed to: at most 1 in 20 A/A comparisons called faster or slower, a 10%
effect found at least 9 times in 10 when the process noise is 3%, never the wrong sign, budgets respected, blocks
that cancel drift.  Real bursts never decide anything here: the machine's mood cannot fail this file.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pytest

from perftune.engine.accuracy.gate import GateResult
from perftune.engine.race import Race, round_order
from perftune.engine.sequential import blocks, decide
from perftune.engine.stats import Decision, Noise, Policy, ProcessRun, benjamini_hochberg, per_look_alpha, runs_needed
from perftune.engine.verdicts import record, verdict
from perftune.io.plan import BurstSettings
from perftune.io.records import TrialResult
from perftune.io.sweep_records import ComparisonRecord, SweepTrial, Why
from perftune.words.reasons import comparison_text, reason_text


class Machine:
    """Simulated burst processes: log throughput = effect + drift x time + process noise; windows add within noise."""

    def __init__(self, effects: dict, sigma: float, seed: int, drift: float = 0.0, within: float = 0.02,
                 windows: int = 3):
        self.effects, self.sigma, self.drift, self.within, self.windows = effects, sigma, drift, within, windows
        self.rng = np.random.default_rng(seed)
        self.clock = 0
        self.calls: list = []

    def __call__(self, config) -> ProcessRun:
        self.clock += 1
        self.calls.append(config)
        mean = 100.0 * math.exp(self.effects[config] + self.drift * self.clock + self.rng.normal(0, self.sigma))
        return ProcessRun(config, tuple(mean * np.exp(self.rng.normal(0, self.within, self.windows))))


def race(effects: dict, sigma: float, seed: int, policy: Policy = Policy(), drift: float = 0.0):
    machine = Machine({"base": 0.0, **effects}, sigma, seed, drift)
    runs: list = []
    decisions = Race(machine, runs, policy).run(list(effects), "base")
    return decisions, machine


def outcomes(effect: float, sigma: float, n: int, policy: Policy = Policy(), drift: float = 0.0) -> list[str]:
    """``n`` comparisons of a candidate with a true ``effect``, raced beside three others as a sweep would."""
    out = []
    for seed in range(n // 4):
        decisions, _ = race({f"c{i}": effect for i in range(4)}, sigma, seed, policy, drift)
        out += [d.outcome for d in decisions.values()]
    return out


@pytest.mark.parametrize("sigma", [0.03, 0.07])
def test_aa_false_alarms_at_most_one_in_twenty(sigma):
    results = outcomes(0.0, sigma, 1000, drift=0.002)
    alarms = sum(o in ("faster", "slower") for o in results)
    assert len(results) == 1000
    assert alarms / len(results) <= 0.05, alarms


def test_a_ten_percent_gain_is_found_at_three_percent_noise():
    results = outcomes(0.10, 0.03, 400)
    assert sum(o == "faster" for o in results) / len(results) >= 0.90
    assert not any(o == "slower" for o in results)


def test_a_five_percent_loss_is_never_called_faster():
    results = outcomes(-0.05, 0.05, 400)
    assert not any(o == "faster" for o in results)
    assert sum(o == "slower" for o in results) > 0


def test_budget_is_respected_and_reference_brackets_every_candidate():
    policy = Policy(max_runs=3)
    decisions, machine = race({"a": 0.0, "b": 0.0, "c": 0.5}, 0.07, seed=3, policy=policy)
    for name in ("a", "b", "c"):
        assert 1 <= machine.calls.count(name) <= 3
    # R C R C R ...: every candidate process has a reference process right before and right after it
    for i, config in enumerate(machine.calls):
        if config != "base":
            assert machine.calls[i - 1] == "base" and machine.calls[i + 1] == "base"
    # a decided candidate is not measured again: a 65% gain is decided after its first process
    assert decisions["c"].outcome == "faster" and machine.calls.count("c") == 1


def test_open_comparisons_get_more_processes_until_undecided():
    decisions, machine = race({"tiny": 0.01}, 0.07, seed=1, policy=Policy(max_runs=5))
    assert decisions["tiny"].outcome == "open" and decisions["tiny"].blocks == 5
    assert machine.calls.count("tiny") == 5


def test_out_of_time_stops_adding_rounds():
    machine = Machine({"base": 0.0, "tiny": 0.01}, 0.07, seed=1)
    decisions = Race(machine, [], Policy(max_runs=8), out_of_time=lambda: True).run(["tiny"], "base")
    assert machine.calls == ["base", "tiny", "base"]
    assert decisions["tiny"].blocks == 1


def test_blocks_cancel_drift_that_an_unpaired_comparison_would_call_a_change():
    # a machine slowing down 3% per process: the candidate, measured late, would look slower against early baselines
    runs = [ProcessRun("base", (100.0 * math.exp(-0.03 * t),)) for t in range(4)]
    runs.append(ProcessRun("cand", (100.0 * math.exp(-0.03 * 4),)))
    runs.append(ProcessRun("base", (100.0 * math.exp(-0.03 * 5),)))
    (block,) = blocks(runs, "cand", "base")
    assert block.neighbours == (3, 5)  # the baseline processes right before and after it
    assert block.difference == pytest.approx(0.0, abs=1e-12)  # midpoint of its neighbours: drift gone
    unpaired = np.mean([math.log(r.windows[0]) for r in runs if r.config == "cand"]) - \
        np.mean([math.log(r.windows[0]) for r in runs if r.config == "base"])
    assert unpaired < -0.05


def test_equivalent_when_the_interval_lies_inside_the_margin():
    runs = []
    for _ in range(12):
        runs += [ProcessRun("base", (100.0,)), ProcessRun("same", (100.2,))]
    runs.append(ProcessRun("base", (100.0,)))
    quiet = Noise(var=0.01**2, df=200)
    d = decide(runs, "same", "base", quiet, Policy(equivalence=0.03, max_runs=12))
    assert d.outcome == "equivalent" and d.ci_low > 1 / 1.03 and d.ci_high < 1.03


def test_noise_pools_successive_differences_and_the_prior():
    runs = [ProcessRun("base", (100.0,)), ProcessRun("base", (110.0,)), ProcessRun("x", (90.0,)),
            ProcessRun("x", (90.0,))]
    noise = Noise.pooled(runs, prior_sd=0.07, prior_df=4)
    expected = (4 * 0.07**2 + math.log(1.1) ** 2 / 2) / (4 + 2)
    assert noise.var == pytest.approx(expected) and noise.df == 6 and noise.observed_df == 2
    assert Noise.pooled([], 0.07, 4).sd == pytest.approx(0.07)


def test_per_look_alpha_uses_pocock_and_falls_back_to_bonferroni():
    assert per_look_alpha(0.95, 1) == pytest.approx(0.05, rel=1e-3)
    assert per_look_alpha(0.95, 3) == pytest.approx(0.0221, rel=0.01)  # Pocock, 3 looks
    assert per_look_alpha(0.90, 4) == pytest.approx(0.025)
    assert per_look_alpha(0.95, 4) < per_look_alpha(0.95, 3)
    assert per_look_alpha(0.95, 12) == per_look_alpha(0.95, 15)  # between tabled counts: the next larger
    assert per_look_alpha(0.95, 30) == pytest.approx(0.05 / 30)


def test_runs_needed_grows_with_noise_over_effect():
    assert runs_needed(0.03, 0.10) < runs_needed(0.07, 0.10) < runs_needed(0.07, 0.05)


def test_benjamini_hochberg():
    assert benjamini_hochberg([0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205], 0.05) == \
        [True, True, False, False, False, False, False, False]
    assert benjamini_hochberg([0.01, 0.02, 0.03], 0.05) == [True, True, True]
    assert benjamini_hochberg([], 0.05) == []


def test_a_failed_candidate_leaves_the_race_and_others_go_on():
    machine = Machine({"base": 0.0, "ok": 0.3, "bad": 0.0}, 0.03, seed=0)

    def measure(config):
        return None if config == "bad" else machine(config)

    decisions = Race(measure, [], Policy()).run(["bad", "ok"], "base")
    assert decisions["bad"] is None and isinstance(decisions["ok"], Decision)
    assert decisions["ok"].outcome == "faster"


def test_a_failed_reference_process_does_not_end_the_race():
    machine = Machine({"base": 0.0, "tiny": 0.01}, 0.03, seed=2)
    calls = []

    def measure(config):
        calls.append(config)
        return None if config == "base" and len(calls) == 3 else machine(config)  # the 2nd baseline process fails

    decisions = Race(measure, [], Policy(max_runs=3)).run(["tiny"], "base")
    assert calls.count("tiny") == 3 and decisions["tiny"].blocks == 3


def test_candidates_whose_timing_is_moot_are_not_raced():
    machine = Machine({"base": 0.0, "noop": 0.01, "open": 0.01}, 0.07, seed=1)
    Race(machine, [], Policy(max_runs=4), timing_moot=lambda c: c == "noop").run(["noop", "open"], "base")
    assert machine.calls.count("noop") == 1 and machine.calls.count("open") == 4


def test_the_words_say_what_was_decided_and_what_would_resolve_an_open_comparison():
    runs = [ProcessRun("base", (100.0,)), ProcessRun("c", (104.0,)), ProcessRun("base", (100.0,))]
    d = decide(runs, "c", "base", Noise(var=0.09**2, df=20), Policy(max_runs=8))
    c = record(d, "baseline")
    text = comparison_text(c)
    assert text == c.reason  # stored as the one renderer words it
    assert d.outcome == "open" and text.startswith("x1.04 faster [") and " vs baseline: undecided after 1 run: " in text
    assert c.runs_needed is not None and c.equivalence == 0.03  # what the words say is in the record's fields
    assert "noise 9.0% cannot resolve 4.0%" in text and "runs would: decision.max_runs" in text
    assert decide(runs, "c", "base", Noise(var=0.001**2, df=20)).outcome == "faster"
    # one look plans for one look: a narrower interval than the same data under a four-look boundary
    wide, narrow = decide(runs, "c", "base", Noise(0.05**2, 20)), decide(runs, "c", "base", Noise(0.05**2, 20), looks=1)
    assert narrow.ci_high - narrow.ci_low < wide.ci_high - wide.ci_low and narrow.level == pytest.approx(0.95, abs=1e-4)


# -- the verdict's precedence (perftune.engine.verdicts): timing never outranks what the burst knows -------------------
def comparison(outcome: str, ratio: float) -> ComparisonRecord:
    return ComparisonRecord(reference="baseline", ratio=ratio, ci_low=ratio * 0.95, ci_high=ratio * 1.05,
                            p_value=0.001, verdict=outcome, df=20, processes=2)


def worded(c: Optional[ComparisonRecord], *args, **kwargs) -> tuple[str, str]:
    """The verdict, and its reason as the one renderer words it for a trial holding ``c`` as ``vs_baseline``."""
    name, why = verdict(c, *args, **kwargs)
    trial = SweepTrial(trial_id="t", label="+x=1", kind="single", verdict=name, why=why, vs_baseline=c,
                       result=TrialResult(trial_id="t", status="ok", workload="mlp", device="CPU", knobs={},
                                          burst=BurstSettings()))
    return name, reason_text(trial)


def test_a_known_noop_is_no_effect_even_when_the_timing_says_faster():
    fast = comparison("faster", 1.8)
    assert verdict(fast, [], None, min_gain=0.03) == ("kept", Why(comparison="vs_baseline"))
    assert worded(fast, [], None, min_gain=0.03) == ("kept", comparison_text(fast))
    assert worded(fast, ["dataset_sink_mode=true has no effect on CPU"], None, min_gain=0.03) == \
        ("no effect", "dataset_sink_mode=true has no effect on CPU")


def test_an_accuracy_failure_outranks_every_speed_verdict():
    bad = GateResult(ok=False, reason="val_loss +25%")
    for outcome, ratio in (("faster", 1.8), ("slower", 0.5), ("equivalent", 1.0), ("undecided", 1.01)):
        name, reason = worded(comparison(outcome, ratio), [], bad, min_gain=0.03)
        assert name == "accuracy rejected" and "val_loss +25%" in reason, outcome
    assert worded(comparison("faster", 1.8), [], bad, min_gain=0.03)[1] == "x1.80 faster but val_loss +25%"
    name, reason = worded(comparison("faster", 1.0), ["no-op"], bad, min_gain=0.03)
    assert name == "accuracy rejected" and "speed: no effect (no-op)" in reason


def test_small_or_undiscovered_changes_are_not_significant():
    name, reason = worded(comparison("faster", 1.02), [], None, min_gain=0.03)
    assert name == "not significant" and reason.endswith(", but the change +2.0% is below min_gain 3%")
    name, reason = worded(comparison("slower", 0.8), [], None, min_gain=0.03, discovered=False,
                          family="the 8 one-at-a-time comparisons")
    assert name == "not significant" and "not a discovery across the 8 one-at-a-time comparisons" in reason
    assert reason.startswith("x1.25 slower [")  # the one ratio convention, from the record's numbers
    assert verdict(comparison("equivalent", 1.0), [], None, min_gain=0.03)[0] == "equivalent"
    assert verdict(comparison("undecided", 1.0), [], None, min_gain=0.03)[0] == "undecided"
    assert worded(None, [], None, min_gain=0.03) == ("failed", "no throughput to compare")


def test_record_of_an_informational_comparison_is_not_undecided():
    runs = [ProcessRun("base", (100.0,)), ProcessRun("c", (101.0,)), ProcessRun("base", (100.0,))]
    d = decide(runs, "c", "base", Noise(0.05**2, 20), looks=1)
    assert record(d, "baseline").verdict == "undecided" and record(d, "baseline", final=False).verdict == \
        "not significant"
    assert record(d, "baseline").processes == 1 and record(d, "baseline").reference_processes == 2


def two_node_sweep(effect: float, seed: int, slow_node: float = math.log(0.8), sigma: float = 0.03) -> str:
    """A cluster sweep's processes: run r of every configuration on node r mod 2 (as the Ray executor places them),
    node "b" 20% slower; the comparison as the engine makes it after max_runs rounds."""
    rng = np.random.default_rng(seed)
    runs = []
    for r in range(4):
        node = "ab"[r % 2]
        for config, e in (("base", 0.0), ("cand", effect)):
            mean = 100.0 * math.exp(e + (slow_node if node == "b" else 0.0) + rng.normal(0, sigma))
            runs.append(ProcessRun(config, tuple(mean * np.exp(rng.normal(0, 0.02, 3))), node))
    runs.append(ProcessRun("base", (100.0 * math.exp(rng.normal(0, sigma)),) * 3, "a"))
    d = decide(runs, "cand", "base", Noise.pooled(runs), Policy())
    return d.outcome if d else "none"


def test_a_slow_node_is_blocked_away_not_called_a_change():
    """Issue 16: with one node 20% slower and no true effect, blocks within a node keep false alarms rare; the same
    runs pooled as if one machine would see node effects as noise or as a change."""
    outcomes = [two_node_sweep(0.0, seed) for seed in range(400)]
    assert sum(o in ("faster", "slower") for o in outcomes) <= 0.05 * len(outcomes)
    found = [two_node_sweep(math.log(1.15), seed) for seed in range(200)]
    assert sum(o == "faster" for o in found) >= 0.9 * len(found) and "slower" not in found
    # a candidate process with no reference process on its node gives no block
    lone = [ProcessRun("base", (100.0,) * 3, "a"), ProcessRun("cand", (90.0,) * 3, "b")]
    assert blocks(lone, "cand", "base") == []


def test_later_rounds_measure_the_open_candidates_in_a_seeded_shuffle():
    """Random interleaving (issue 25 item 5): round one in the caller's order, later rounds shuffled, with a seed
    that holds nothing of the clock, so a rerun (a resumed sweep) plans the same order."""
    effects = {f"c{i}": 0.0 for i in range(5)}
    quiet = Policy(max_runs=4, equivalence=0.0)  # nothing can become equivalent: every candidate runs 4 rounds
    _, first = race(effects, 0.07, seed=5, policy=quiet)
    _, again = race(effects, 0.07, seed=5, policy=quiet)
    assert first.calls == again.calls
    measured = [c for c in first.calls if c != "base"]
    rounds = [measured[i:i + 5] for i in range(0, len(measured), 5)]
    assert len(rounds) == 4 and rounds[0] == list(effects)
    assert all(sorted(r) == sorted(effects) for r in rounds)
    assert any(r != list(effects) for r in rounds[1:])  # shuffled, not the plan's order again
    assert round_order(list(effects), "base", 2) == round_order(list(reversed(effects)), "base", 2)
    assert round_order(list(effects), "base", 0) == list(effects)
