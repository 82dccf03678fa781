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
``SweepResult`` (per node ratios beside the sweep's own verdicts: one verdict per configuration).  Pure: no
processes, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Iterable, Optional, Sequence

import numpy as np

from perftune.engine import stats
from perftune.engine.stats import ProcessRun
from perftune.io.records import TrialResult
from perftune.io.sweep_records import NodeComparison, NodeSummary, SweepResult

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


def node_blocks(reference: Sequence[ProcessRun], candidate: Sequence[ProcessRun], noise: stats.Noise) -> tuple[
        tuple[str, ...], tuple[str, ...], list[float], list[float]]:
    """The nodes that measured both sides, those that measured only the candidate, and each block's difference of
    mean log throughput (candidate - reference) with its variance."""
    ref, cand = by_node(reference), by_node(candidate)
    nodes = tuple(sorted(n for n in cand if n in ref))
    pairs = [stats.unpaired(ref[n], cand[n], noise) for n in nodes]
    return nodes, tuple(sorted(n for n in cand if n not in ref)), [d for d, _ in pairs], [v for _, v in pairs]


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
    noise = stats.Noise.pooled([*reference, *candidate, *noise_from])
    nodes, unpaired, diffs, variances = node_blocks(reference, candidate, noise)
    if not nodes:
        return None
    ref, cand = by_node(reference), by_node(candidate)
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
    """Which node ran what, the node effect on the baseline, and each configuration's ratio to the baseline within
    each node beside the sweep's own comparison (its one verdict: the races already pair processes by node); None
    for a sweep whose trials carry no node (a local sweep)."""
    ran = [t for t in result.trials if t.result.node is not None]
    if not ran:
        return None
    hosts = {node_of(t.result): t.result.node.host for t in ran}
    per_node: dict[str, int] = {}
    for t in ran:
        per_node[node_of(t.result)] = per_node.get(node_of(t.result), 0) + 1
    baseline = usable_runs("baseline", (t.result for t in result.trials if t.kind == "baseline"))
    configs: dict[str, list] = {}  # label -> every process of that configuration (its repeats included)
    for t in result.trials:
        if t.kind != "baseline" and t.result.status == "ok":
            configs.setdefault(t.label, []).append(t)
    rows = []
    for label, trials in configs.items():
        runs = usable_runs(label, (t.result for t in trials))
        paired, unpaired, diffs, _ = node_blocks(baseline, runs, stats.Noise.pooled([*baseline, *runs]))
        nodes = sorted({node_of(t.result) for t in trials})
        note = "its node measured no baseline" if not paired else \
            (f"left out: {len(unpaired)} node(s) without a baseline" if unpaired else "")
        first = min(trials, key=lambda t: t.replicate)  # not trials[0]: a cluster lists trials as they finished
        rows.append(NodeComparison(trial_id=first.trial_id, label=label, node=",".join(nodes),
                                   comparison=first.vs_baseline, note=note,
                                   per_node_ratio={n: math.exp(d) for n, d in zip(paired, diffs)}))
    return NodeSummary(hosts=hosts, trials_per_node=per_node, node_effect=node_effect(baseline), blocked=rows)
