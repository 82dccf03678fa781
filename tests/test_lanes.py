"""Races measured on several lanes at once (issue 16: a Ray cluster's nodes), on scripted and simulated measurements.

The real cluster is in ``test_ray.py``; here the lanes are threads running a scripted runner that says which node
ran each process (lane ``j`` on node ``j``, one node 20% slower where a test wants it) and sleeps a random few
milliseconds, so the lanes finish in a different order every time.  What is checked: the rounds' shape (each
candidate process between reference processes of its own node), that lanes really overlap, that verdicts and trial
ids do not depend on which lane finished first, resume, contended processes, Ctrl-C, and the false-alarm rate and
power with a slow node.
"""

from __future__ import annotations

import _thread
import math
import random
import threading
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
from scripted_sweeps import FIXED_WINDOW, Script, ScriptedRunner

from perftune.engine.lanes import ParallelRunner, run_lanes
from perftune.engine.race import EXCLUDED, Lanes, Race, plan_round
from perftune.engine.stats import Policy, ProcessRun
from perftune.engine.sweep import Sweep
from perftune.io.plan import Plan
from perftune.io.records import NodeRecord, TrialResult, TrialSpec
from perftune.io.store import write_json_atomic


class LaneRunner(ScriptedRunner):
    """A scripted runner with ``lanes`` lanes: lane ``j`` runs on node ``n{j}``, whose speed is ``speeds[j]``."""

    def __init__(self, scripts: dict[str, Script], lanes: int = 2, speeds: tuple[float, ...] = (1.0, 1.0),
                 seed: int = 0):
        super().__init__(scripts)
        self.lanes = lanes
        self.speeds = speeds
        self.jitter = random.Random(seed)
        self.guard = threading.Lock()
        self.active = self.most_active = 0
        self.stopped = threading.Event()
        self.placed: dict[tuple[str, int], str] = {}  # (label, replicate) -> node

    def lane_node(self, lane: int) -> Optional[str]:
        return f"n{lane % self.lanes}"

    def stop(self) -> None:
        self.stopped.set()

    def __call__(self, spec: TrialSpec, trial_dir: Path, lane: Optional[int] = None) -> TrialResult:
        lane = spec.replicate % self.lanes if lane is None else lane
        with self.guard:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
            delay = self.jitter.uniform(0.0, 0.03)
        time.sleep(delay)  # the lanes finish in a different order from run to run
        with self.guard:
            result = super().__call__(spec, trial_dir)
            self.active -= 1
        node = self.lane_node(lane)
        self.placed[(spec.label, spec.replicate)] = node
        speed = self.speeds[lane % self.lanes]
        for w in result.windows:
            w.samples_per_s *= speed
        result.node = NodeRecord(host=node, node_id=node)
        write_json_atomic(trial_dir / "trial.json", result.model_dump(mode="json"))
        return result


def lane_sweep(out: Path, runner: LaneRunner, variables: dict, **decision) -> Sweep:
    """A sweep on two lanes; the stack tries only kept changes (``retry_on_stack`` off), so every single's process
    is a one-at-a-time one (the slower workers change would otherwise be retried on the stack, with a single as the
    stack's reference: test_sweep_logic covers that)."""
    decision = {"retry_on_stack": False, **decision}
    plan = Plan(name="lanes", workload="tiny_mlp", variables=variables, decision=decision, accuracy=FIXED_WINDOW)
    return Sweep(plan, out, runner)


SCRIPTS = {"baseline": Script(), "+prefetch_size=4": Script(factor=1.3), "+prefetch_size=8": Script(factor=1.0),
           "+num_parallel_workers=2": Script(factor=0.7)}
VARIABLES = {"prefetch_size": [4, 8], "num_parallel_workers": [2]}


def test_a_round_deals_candidates_to_the_lanes_between_reference_processes():
    # three candidates on two lanes; lane 0's node last measured the reference, lane 1's did not
    assert plan_round(["a", "b", "c"], {}, 4, 2, "R", [True, False]) == [["a", "R", "c", "R"], ["R", "b", "R"]]
    # one candidate, two lanes: the idle lane measures it too (its second process), beside its own reference
    assert plan_round(["a"], {"a": 0}, 4, 2, "R", [True, False]) == [["a", "R"], ["R", "a", "R"]]
    # ... but never past max_runs
    assert plan_round(["a"], {"a": 3}, 4, 2, "R", [True, True]) == [["a", "R"], []]
    # more lanes than work: the open candidates with the fewest processes get the extra ones
    assert plan_round(["a", "b"], {"a": 2, "b": 0}, 4, 3, "R", [True] * 3) == [["a", "R"], ["b", "R"], ["b", "R"]]


def test_lanes_run_at_once_each_candidate_beside_the_reference_of_its_node(tmp_path):
    runner = LaneRunner(SCRIPTS)
    assert isinstance(runner, ParallelRunner)
    sweep = lane_sweep(tmp_path / "out", runner, VARIABLES)
    result = sweep.run()
    assert runner.most_active == 2, "the two lanes never overlapped"
    verdicts = {t.label: t.verdict for t in result.trials if t.kind == "single"}
    assert verdicts == {"+prefetch_size=4": "kept", "+prefetch_size=8": "undecided",
                        "+num_parallel_workers=2": "slower"}
    # every usable candidate process has a reference process of its own node before it and after it
    for config, (_, kind) in sweep.procs.configs.items():
        if kind != "single":
            continue
        for run_index, run in enumerate(sweep.procs.runs):
            if run.config != config:
                continue
            same_node = [r for r in sweep.procs.runs if r.node == run.node]
            k = same_node.index(run)
            assert k > 0 and same_node[k - 1].config == sweep.base, (config, run_index)
    # both nodes measured the baseline, and the trial records say which node ran them
    assert {t.result.node.host for t in result.trials if t.kind == "baseline"} == {"n0", "n1"}
    # the undecided candidate got its max_runs processes in fewer rounds, on both nodes
    undecided = [t for t in result.trials if t.label == "+prefetch_size=8"]
    assert len(undecided) == 4 and {t.result.node.host for t in undecided} == {"n0", "n1"}
    assert result.status == "complete"


def test_verdicts_and_trial_ids_do_not_depend_on_which_lane_finished_first(tmp_path):
    outcomes = []
    for seed in range(3):
        result = lane_sweep(tmp_path / f"out{seed}", LaneRunner(SCRIPTS, seed=seed), VARIABLES).run()
        outcomes.append((sorted(t.trial_id for t in result.trials),
                         {t.label: (t.verdict, t.reason) for t in result.trials if t.kind in ("single", "stack")}))
    assert outcomes[0] == outcomes[1] == outcomes[2]


def test_an_interrupted_lane_sweep_resumes_with_every_finished_trial_reused(tmp_path):
    out = tmp_path / "out"
    complete = lane_sweep(tmp_path / "whole", LaneRunner(SCRIPTS), VARIABLES).run()
    first = LaneRunner(SCRIPTS)
    first.interrupt_at = 6  # Ctrl-C as the sixth trial starts (in a lane's thread)
    with pytest.raises(KeyboardInterrupt):
        lane_sweep(out, first, VARIABLES).run()
    finished = {p.parent.name for p in (out / "trials").glob("*/trial.json")}
    assert finished and first.stopped.is_set()
    again = LaneRunner(SCRIPTS)
    result = lane_sweep(out, again, VARIABLES).run()
    assert {t.trial_id for t in result.trials if t.reused} == finished
    assert len(again.calls) == len(complete.trials) - len(finished)
    assert sorted(t.trial_id for t in result.trials) == sorted(t.trial_id for t in complete.trials)
    assert {t.label: t.verdict for t in result.trials} == {t.label: t.verdict for t in complete.trials}


def test_a_contended_lane_process_is_left_out_and_the_candidate_measured_again(tmp_path):
    scripts = {**SCRIPTS, "+prefetch_size=4": Script(factor=1.3, contended=(0,))}
    sweep = lane_sweep(tmp_path / "out", LaneRunner(scripts), {"prefetch_size": [4]}, remeasure_contended=1)
    result = sweep.run()
    trials = sorted((t for t in result.trials if t.label == "+prefetch_size=4"), key=lambda t: t.replicate)
    assert trials[0].excluded and "contended" in trials[0].excluded
    assert not any(r.config != sweep.base and r.windows[0] == trials[0].result.windows[0].samples_per_s
                   for r in sweep.procs.runs)
    assert trials[0].verdict == "kept" and trials[0].vs_baseline.processes >= 1
    assert len(trials) >= 2 and not any(t.excluded for t in trials[1:])


def test_ctrl_c_stops_every_lane_and_starts_nothing_more():
    stopped = threading.Event()
    started: list[tuple[int, int]] = []

    def work(lane: int, item: int) -> int:
        started.append((lane, item))
        stopped.wait(10)  # a trial running on a node until the runner cancels it
        if stopped.is_set():
            raise KeyboardInterrupt
        return item

    # Ctrl-C as Python sees it (the SIGINT handler, in the main thread), without a signal to the process: under
    # pytest-xdist that signal also reached the worker's own machinery and took the worker down
    threading.Timer(0.3, _thread.interrupt_main).start()
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_lanes([[1, 2, 3], [4, 5]], work, stopped.set)
    assert time.monotonic() - began < 5 and sorted(started) == [(0, 1), (1, 4)]


def test_an_error_in_one_lane_stops_the_others_and_is_raised():
    stopped = threading.Event()

    def work(lane: int, item: int) -> int:
        if lane == 1:
            raise RuntimeError("the trial raised on its node")
        stopped.wait(10)
        return item

    with pytest.raises(RuntimeError, match="raised on its node"):
        run_lanes([[1, 2], [3]], work, stopped.set)
    assert stopped.is_set()


class Cluster:
    """Simulated lanes: node ``b`` is 20% slower than node ``a``; process noise ``sigma``; windows within 2%."""

    def __init__(self, effect: float, seed: int, sigma: float = 0.03, slow: float = math.log(0.8)):
        self.effect, self.sigma, self.slow = effect, sigma, slow
        self.rng = np.random.default_rng(seed)

    def node(self, lane: int) -> str:
        return "ab"[lane]

    def run_round(self, sequences):
        out = []
        for lane, seq in enumerate(sequences):
            done = []
            for config in seq:
                log_mean = (self.effect if config == "cand" else 0.0) + (self.slow if lane == 1 else 0.0)
                mean = 100.0 * math.exp(log_mean + self.rng.normal(0, self.sigma))
                done.append(ProcessRun(config, tuple(mean * np.exp(self.rng.normal(0, 0.02, 3))), self.node(lane)))
            out.append(done)
        return out


def raced_on_two_nodes(effect: float, seed: int) -> str:
    cluster = Cluster(effect, seed)
    runs: list[ProcessRun] = []
    first = cluster.run_round([["base"], []])[0]  # the baseline's first process, on node a
    runs += first
    race = Race(lambda c: None, runs, Policy(), lanes=Lanes(2, cluster.run_round, cluster.node))
    d = race.run(["cand"], "base")["cand"]
    return d.outcome if d else "none"


def test_with_a_slow_node_no_false_alarms_and_a_true_gain_is_found():
    """Issue 16, with the lanes as the race runs them: one node 20% slower, no true effect -> no faster/slower beyond
    the 5% the confidence allows; a true 15% gain is found."""
    null = [raced_on_two_nodes(0.0, seed) for seed in range(300)]
    assert sum(o in ("faster", "slower") for o in null) <= 0.05 * len(null)
    found = [raced_on_two_nodes(math.log(1.15), seed) for seed in range(200)]
    assert sum(o == "faster" for o in found) >= 0.9 * len(found) and "slower" not in found


def test_a_lane_round_whose_processes_are_never_usable_still_ends():
    def run_round(sequences):
        return [[EXCLUDED if c == "cand" else ProcessRun(c, (100.0,) * 3, "ab"[j]) for c in seq]
                for j, seq in enumerate(sequences)]

    race = Race(lambda c: None, [], Policy(max_runs=3), lanes=Lanes(2, run_round, lambda j: "ab"[j]))
    assert race.run(["cand"], "base") == {"cand": None}
