"""Comparisons blocked by machine: a trial is compared with the baseline measured on *its own* node.

Two machines of "the same" type differ in speed by more than many knob effects (a cluster's nodes: 5-20%), so a
candidate measured on node B must not be compared with a baseline measured on node A.  Each node is a block: the
within-node difference of mean log throughput (candidate - reference) removes the node's speed from both sides, and
the blocks are pooled by inverse variance.  The between-process noise is estimated from the spread of processes
*around their own node's mean*, so a slow node does not inflate the noise either.  With one node and a candidate
measured in one process (a sweep's single) this is exactly ``stats.compare`` with the noise of the reference's runs
(same formula, same prior, same verdict rule), so a sweep on one machine decides as before.

Interface: ``blocked_compare(reference, candidate, ...)`` takes ``{node: Measurement}`` for each side and returns a
``BlockedComparison`` holding a ``stats.Comparison`` (None when no node measured both sides); ``node_effect`` says how
much the nodes differ on the reference; ``by_node`` groups ``TrialResult`` records by the node that ran them;
``node_summary`` applies them to a finished ``SweepResult``.  Pure: no processes, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Iterable, Mapping, Optional, Sequence

import numpy as np

from perftune.engine import stats
from perftune.engine.sequential import ProcessRun
from perftune.io.records import TrialResult
from perftune.io.sweep_records import ComparisonRecord, NodeComparison, NodeSummary, SweepResult

#: the block of trials that carry no node (a local sweep): they all ran on one machine
LOCAL_NODE = "local"


def node_of(result: TrialResult) -> str:
    """The block a trial belongs to: its Ray node id, else its host name, else ``LOCAL_NODE``."""
    if result.node is not None:
        return result.node.node_id or result.node.host
    return LOCAL_NODE


def process_run(key: Hashable, result: TrialResult) -> ProcessRun:
    """A usable process as the races see it: its windows' throughputs and the node that ran it."""
    return ProcessRun(key, tuple(w.samples_per_s for w in result.windows), node_of(result))


def by_node(results: Iterable[TrialResult]) -> dict[str, stats.Measurement]:
    """One ``Measurement`` per node from the trials of one configuration (failed trials are left out)."""
    grouped: dict[str, list[TrialResult]] = {}
    for r in results:
        grouped.setdefault(node_of(r), []).append(r)
    out = {}
    for node, rs in grouped.items():
        m = stats.measurement_of(rs)
        if m is not None:
            out[node] = m
    return out


@dataclass(frozen=True)
class BlockedComparison:
    """The pooled comparison and what went into it."""

    comparison: stats.Comparison
    nodes: tuple[str, ...]  # the blocks that measured both sides
    unpaired: tuple[str, ...]  # nodes that measured the candidate but not the reference (left out)
    per_node_ratio: dict[str, float]  # candidate / reference within each block


def _within(measurements: Sequence[stats.Measurement]) -> float:
    ss, df = 0.0, 0
    for m in measurements:
        var, d = m.within_var()
        ss += var * d
        df += d
    return ss / df if df else 0.0


def blocked_compare(reference: Mapping[str, stats.Measurement], candidate: Mapping[str, stats.Measurement],
                    confidence: float = 0.95, min_gain: float = 0.0,
                    noise_from: Sequence[stats.Measurement] = ()) -> Optional[BlockedComparison]:
    """Candidate vs reference throughput, compared within each node and pooled across nodes.

    ``noise_from``: further per-node measurements of repeated configurations whose spread estimates the
    between-process noise (the reference and candidate blocks are always used).  None if no node has both sides.
    """
    nodes = tuple(sorted(n for n in candidate if n in reference))
    unpaired = tuple(sorted(n for n in candidate if n not in reference))
    if not nodes:
        return None
    noise = stats.Noise.estimate([*reference.values(), *candidate.values(), *noise_from])
    within = _within([reference[n] for n in nodes] + [candidate[n] for n in nodes])
    diffs, variances = [], []
    for n in nodes:
        ref, cand = reference[n], candidate[n]
        var_ref = noise.between_var + within / ref.windows_per_process
        var_cand = noise.between_var + within / cand.windows_per_process
        diffs.append(float(cand.process_means().mean() - ref.process_means().mean()))
        variances.append(var_ref / len(ref.processes) + var_cand / len(cand.processes))
    weights = 1.0 / np.array(variances)
    diff = float(np.sum(weights * np.array(diffs)) / np.sum(weights))
    se = math.sqrt(1.0 / float(np.sum(weights)))
    comparison = stats.comparison_of(diff, se, float(noise.df), confidence, min_gain)
    return BlockedComparison(comparison, nodes, unpaired, {n: math.exp(d) for n, d in zip(nodes, diffs)})


def node_effect(reference: Mapping[str, stats.Measurement]) -> dict[str, float]:
    """Each node's reference throughput relative to the mean over nodes (geometric): 0.8 = 20% below the mean.

    Empty with fewer than two nodes: one machine has no node effect to show.
    """
    if len(reference) < 2:
        return {}
    means = {n: float(m.process_means().mean()) for n, m in reference.items()}
    centre = float(np.mean(list(means.values())))
    return {n: math.exp(v - centre) for n, v in sorted(means.items())}


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
    baseline = by_node(t.result for t in result.trials if t.kind == "baseline")
    decision = result.plan.decision
    configs: dict[str, list] = {}  # label -> every process of that configuration (its repeats included)
    for t in result.trials:
        if t.kind != "baseline" and t.result.status == "ok":
            configs.setdefault(t.label, []).append(t)
    rows = []
    for label, trials in configs.items():
        b = blocked_compare(baseline, by_node(t.result for t in trials), decision.confidence, decision.min_gain)
        nodes = sorted({node_of(t.result) for t in trials})
        reference = "baseline on " + ", ".join(hosts.get(n, n) for n in (b.nodes if b else nodes))
        record = ComparisonRecord(reference=reference, **b.comparison.as_dict()) if b is not None else None
        note = "" if b is None or not b.unpaired else f"left out: {len(b.unpaired)} node(s) without a baseline"
        rows.append(NodeComparison(trial_id=trials[0].trial_id, label=label, node=",".join(nodes),
                                   comparison=record, note=note if b else "its node measured no baseline"))
    return NodeSummary(hosts=hosts, trials_per_node=per_node, node_effect=node_effect(baseline), blocked=rows)
