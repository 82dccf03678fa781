"""The sweep's records: ``results.json`` (``SweepResult``) and what it holds per trial and per stack step."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from perftune.io.plan import Plan
from perftune.io.records import RESULTS_SCHEMA_VERSION, Environment, Record, TrialResult

TrialKind = Literal["baseline", "single", "stack", "leave_one_out"]
Verdict = Literal[
    "baseline", "kept", "not significant", "slower", "accuracy rejected", "failed", "timeout", "oom", "unsupported",
    "no effect", "dropped", "measured",
]


#: verdicts of trials that measured nothing (their status, as the verdict)
FAILED_VERDICTS = ("failed", "timeout", "oom", "unsupported")


class ComparisonRecord(Record):
    """Throughput of a trial relative to a reference, with its confidence interval (``perftune.engine.stats``)."""

    reference: str  # trial label it was compared with, e.g. "baseline" or "+mode=graph"
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    verdict: Literal["faster", "slower", "not significant"]
    df: float


class SweepTrial(Record):
    """One trial as the sweep saw it: what changed, what it measured (``trial.json`` less per-step rows), why."""

    trial_id: str
    label: str
    kind: TrialKind
    changes: dict[str, Any] = Field(default_factory=dict)  # knobs that differ from the baseline
    replicate: int = 0
    verdict: Verdict
    reason: str = ""
    vs_baseline: Optional[ComparisonRecord] = None
    vs_previous: Optional[ComparisonRecord] = None  # stacks: against the stack before it; LOO: final vs this
    accuracy_changes: dict[str, Optional[float]] = Field(default_factory=dict)  # metric -> relative change
    reused: bool = False  # came from an earlier, interrupted run of the same sweep
    result: TrialResult


class StackStep(Record):
    """One row of the cumulative ablation: the configuration after applying ``change`` on top of the rows above."""

    label: str  # "baseline", "+mode=graph", "+mode=graph +num_parallel_workers=2"
    change: Optional[dict[str, Any]] = None
    trial_id: str
    kept: bool
    reason: str = ""


class NodeComparison(Record):
    """A trial against the baseline runs of *its own* node (``perftune.engine.blocked``)."""

    trial_id: str
    label: str
    node: str  # node id (or host) that ran the trial
    comparison: Optional[ComparisonRecord] = None  # None: its node measured no baseline
    note: str = ""


class NodeSummary(Record):
    """Where a sweep's trials ran (``--executor ray``): the node effect and the within-node comparisons."""

    hosts: dict[str, str] = Field(default_factory=dict)  # node id -> host name
    trials_per_node: dict[str, int] = Field(default_factory=dict)
    #: each node's baseline throughput relative to the mean over nodes (0.8: 20% slower); empty with one node
    node_effect: dict[str, float] = Field(default_factory=dict)
    blocked: list[NodeComparison] = Field(default_factory=list)


class SweepResult(Record):
    """``results.json``: everything a report, a notebook or ``perftune compare`` needs."""

    schema_version: int = RESULTS_SCHEMA_VERSION
    kind: Literal["perftune-sweep"] = "perftune-sweep"
    plan: Plan
    plan_path: Optional[str] = None
    command: str = ""
    status: Literal["complete", "interrupted", "running"] = "running"
    started_utc: str
    finished_utc: Optional[str] = None
    wall_s: Optional[float] = None
    order_rule: str = ""
    trials: list[SweepTrial] = Field(default_factory=list)
    stack: list[StackStep] = Field(default_factory=list)
    aa_check: Optional[ComparisonRecord] = None  # baseline replicate vs the first baseline run
    best_label: Optional[str] = None
    best_trial_id: Optional[str] = None
    best_vs_baseline: Optional[ComparisonRecord] = None
    environment: Optional[Environment] = None
    nodes: Optional[NodeSummary] = None  # a sweep on a cluster (schema 3): which node ran what, the node effect
