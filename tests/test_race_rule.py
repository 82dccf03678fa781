"""The race's one continuation rule (``Race.goes_on``), on scripted decisions: the same rule whether the rounds run
on one machine or on lanes (issue 35: each loop had a rule the other lacked)."""

from __future__ import annotations

import math

from perftune.engine.paired import PairedRun
from perftune.engine.race import Lanes, Race
from perftune.engine.stats import Decision, Policy, ProcessRun, interval

POLICY = Policy(max_runs=3)


def decision(diff: float, se: float = 0.01) -> Decision:
    return Decision.of(interval(diff, se, 20, POLICY, POLICY.max_runs), POLICY, blocks=1, reference_runs=2,
                       noise_sd=se)


def race(lanes: bool, **fields) -> Race:
    r = Race(lambda c: ProcessRun(c, (1.0,)), [], POLICY,
             lanes=Lanes(2, lambda seqs: [], lambda j: None) if lanes else None, **fields)
    r.processes, r.tried = {"C": 1}, {"C": 1}
    return r


def test_the_rule_is_one_for_both_loops():
    for lanes in (False, True):
        r = race(lanes)
        assert r.goes_on("C", "R", decision(0.0, 0.5), family=1)  # open, budget left
        assert r.goes_on("C", "R", None, family=1)  # no decision yet: measured again while it has budget
        assert not r.goes_on("C", "R", decision(math.log(1.5)), family=1)  # decided
        r.processes["C"] = POLICY.max_runs
        assert not r.goes_on("C", "R", decision(0.0, 0.5), family=1)  # out of budget
        assert not r.goes_on("C", "R", None, family=1)


def test_the_tried_cap_and_a_moot_timing_stop_every_race():
    for lanes in (False, True):
        r = race(lanes)
        r.tried["C"] = 2 * POLICY.max_runs  # unusable processes count: never past twice the budget
        assert not r.goes_on("C", "R", decision(0.0, 0.5), family=1)
        assert not race(lanes, timing_moot=lambda c: True).goes_on("C", "R", decision(0.0, 0.5), family=1)


def test_one_arm_order_gets_the_other_whatever_the_budget():
    for lanes in (False, True):
        r = race(lanes, pairs=[PairedRun("R", "C", (0.0, 0.01))])
        r.processes["C"] = POLICY.max_runs
        assert r.goes_on("C", "R", decision(math.log(1.5)), family=1)
        r.pairs.append(PairedRun("R", "C", (0.0, 0.01), swapped=True))
        assert not r.goes_on("C", "R", decision(math.log(1.5)), family=1)
