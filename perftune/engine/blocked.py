"""Comparisons blocked by machine: a trial is compared with the baseline measured on *its own* node.

Two machines of "the same" type differ in speed by more than many knob effects (a cluster's nodes: 5-20%), so a
candidate measured on node B must not be compared with a baseline measured on node A.  Each node is a block: the
within-node difference of mean log throughput (candidate - reference, ``stats.unpaired``) removes the node's speed
from both sides, and the blocks are pooled by inverse variance.  The noise is ``stats.Noise`` pooled per node, so a
slow node does not inflate it either, and the interval and verdict are ``stats.estimate``'s: with one node this is
exactly ``stats.compare``.

Interface: ``blocked_compare(reference, candidate, ...)`` takes every usable ``ProcessRun`` of each side (each
carrying its node) and returns a ``BlockedComparison`` holding a ``stats.Decision`` (None when no node measured both
sides); ``node_effect`` says how much the nodes differ on the reference; ``node_summary`` applies them to a finished
``SweepResult``.  Pure: no processes, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Iterable, Optional, Sequence

import numpy as np

from perftune.engine import stats, verdicts
from perftune.engine.stats import ProcessRun
from perftune.io.records import TrialResult
from perftune.io.sweep_records import ComparisonRecord, NodeComparison, NodeSummary, SweepResult

#: the block of trials that carry no node (a local sweep): they all ran on one machine
LOCAL_NODE = "local"


def node_of(result: TrialResult) -> str:
    """The block a trial belongs to: its Ray node id, else its host name, else ``LOCAL_NODE``."""
    if result.node is not None:
        return result.node.node_id or result.node.host
    return LOCAL_NODE


def process_run(key: Hashable, result: TrialResult, remeasured: int = 0) -> ProcessRun:
    """A usable process as the comparisons see it: its windows' throughputs, the node that ran it, whether it was
    contended, and how many contended processes of ``key`` were measured again before it."""
    return ProcessRun(key, tuple(stats.throughput_windows(result)), node_of(result), bool(result.contended_windows),
                      remeasured)


def usable_runs(key: Hashable, results: Iterable[TrialResult]) -> list[ProcessRun]:
    """The processes of ``results`` that measured (failed ones are left out), as ``key``'s."""
    return [process_run(key, r) for r in results if r.status == "ok" and r.windows]


def by_node(runs: Sequence[ProcessRun]) -> dict[str, list[ProcessRun]]:
    """Processes grouped by the node that ran them, in the order given."""
    out: dict[str, list[ProcessRun]] = {}
    for r in runs:
        out.setdefault(r.node, []).append(r)
    return out


@dataclass(frozen=True)
class BlockedComparison:
    """The pooled comparison and what went into it."""

    comparison: stats.Decision
    nodes: tuple[str, ...]  # the blocks that measured both sides
    unpaired: tuple[str, ...]  # nodes that measured the candidate but not the reference (left out)
    per_node_ratio: dict[str, float]  # candidate / reference within each block


def blocked_compare(reference: Sequence[ProcessRun], candidate: Sequence[ProcessRun],
                    policy: stats.Policy = stats.ONCE,
                    noise_from: Sequence[ProcessRun] = ()) -> Optional[BlockedComparison]:
    """Candidate vs reference throughput, compared within each node and pooled across nodes, looked at once.

    ``noise_from``: further processes of repeated configurations whose spread estimates the between-process noise
    (the reference and candidate processes are always used).  None if no node has both sides.
    """
    ref, cand = by_node(reference), by_node(candidate)
    nodes = tuple(sorted(n for n in cand if n in ref))
    unpaired = tuple(sorted(n for n in cand if n not in ref))
    if not nodes:
        return None
    noise = stats.Noise.pooled([*reference, *candidate, *noise_from])
    diffs, variances = zip(*(stats.unpaired(ref[n], cand[n], noise) for n in nodes))
    weights = 1.0 / np.array(variances)
    diff = float(np.sum(weights * np.array(diffs)) / np.sum(weights))
    se = math.sqrt(1.0 / float(np.sum(weights)))
    decision = stats.estimate(diff, se, noise, policy, 1, [r for n in nodes for r in cand[n]],
                              [r for n in nodes for r in ref[n]])
    return BlockedComparison(decision, nodes, unpaired, {n: math.exp(d) for n, d in zip(nodes, diffs)})


def node_effect(reference: Sequence[ProcessRun]) -> dict[str, float]:
    """Each node's reference throughput relative to the mean over nodes (geometric): 0.8 = 20% below the mean.

    Empty with fewer than two nodes: one machine has no node effect to show.
    """
    grouped = by_node(reference)
    if len(grouped) < 2:
        return {}
    means = {n: stats.centre(runs) for n, runs in grouped.items()}
    mid = float(np.mean(list(means.values())))
    return {n: math.exp(v - mid) for n, v in sorted(means.items())}


def node_summary(result: SweepResult) -> Optional[NodeSummary]:
    """Which node ran what, the node effect on the baseline, and every measured trial against its own node's
    baseline; None for a sweep whose trials carry no node (a local sweep)."""
    ran = [t for t in result.trials if t.result.node is not None]
    if not ran:
        return None
    hosts = {node_of(t.result): t.result.node.host for t in ran}
    per_node: dict[str, int] = {}
    for t in ran:
        per_node[node_of(t.result)] = per_node.get(node_of(t.result), 0) + 1
    baseline = usable_runs("baseline", (t.result for t in result.trials if t.kind == "baseline"))
    d = result.plan.decision
    policy = stats.Policy(confidence=d.confidence, equivalence=0.0, max_runs=1, min_gain=d.min_gain)
    configs: dict[str, list] = {}  # label -> every process of that configuration (its repeats included)
    for t in result.trials:
        if t.kind != "baseline" and t.result.status == "ok":
            configs.setdefault(t.label, []).append(t)
    rows = []
    for label, trials in configs.items():
        b = blocked_compare(baseline, usable_runs(label, (t.result for t in trials)), policy)
        nodes = sorted({node_of(t.result) for t in trials})
        reference = "baseline on " + ", ".join(hosts.get(n, n) for n in (b.nodes if b else nodes))
        record = verdicts.record(b.comparison, reference, final=False) if b is not None else None
        note = "" if b is None or not b.unpaired else f"left out: {len(b.unpaired)} node(s) without a baseline"
        rows.append(NodeComparison(trial_id=trials[0].trial_id, label=label, node=",".join(nodes),
                                   comparison=record, note=note if b else "its node measured no baseline"))
    return NodeSummary(hosts=hosts, trials_per_node=per_node, node_effect=node_effect(baseline), blocked=rows)
