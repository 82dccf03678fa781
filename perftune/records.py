"""Typed records that flow between perftune's stages.

Each stage reads only the record before it: a burst writes a ``TrialResult`` (``trial.json``), the profiler
parser turns a profile folder into ``Splits`` and ``TopOp`` rows, the sweep engine collects trials and decisions
into a ``SweepResult`` (``results.json``), and the report and ``compare`` read that back.  Units are in every
field name (``_ms``, ``_bytes``, ``_per_s``) because unlabelled numbers are the first thing users of such tools
complain about.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

#: Bumped whenever a field changes meaning or disappears; readers refuse newer versions and upgrade older ones.
TRIAL_SCHEMA_VERSION = 1
RESULTS_SCHEMA_VERSION = 1

TrialStatus = Literal["ok", "failed", "timeout", "oom", "unsupported"]
PHASES = ("data", "forward", "backward", "optimizer", "communication", "other")


class Record(BaseModel):
    """Base: unknown fields are errors, so a typo in a writer shows up in tests, not in a report."""

    model_config = ConfigDict(extra="forbid")


class StepRecord(Record):
    """One training step as the burst saw it."""

    phase: Literal["accuracy", "warmup", "timed", "profiled"]
    window: Optional[int] = None  # timed windows are numbered from 0
    step_ms: float
    data_wait_ms: float  # time spent in next(iterator): the step waiting for its batch
    loss: Optional[float] = None
    grad_norm: Optional[float] = None
    learning_rate: Optional[float] = None
    samples_seen: int = 0


class WindowStats(Record):
    """One timed window: ``steps`` consecutive unprofiled steps."""

    steps: int
    total_ms: float
    median_step_ms: float
    samples_per_s: float


class Splits(Record):
    """Mean time per step by phase; the six phases add up to ``step_ms`` by construction (``other`` is the rest)."""

    step_ms: float
    data_ms: float
    forward_ms: float
    backward_ms: float
    optimizer_ms: float
    communication_ms: float
    other_ms: float
    #: share of the measured step that profiled ops and data waiting explain (1 - other/step, clipped to [0, 1])
    explained_share: float
    #: where the step time came from: profiled steps timed by the burst, or the profiler's own step markers
    step_source: str = "burst"

    def shares(self) -> dict[str, float]:
        total = self.step_ms or 1.0
        return {p: getattr(self, f"{p}_ms") / total for p in PHASES}


class TopOp(Record):
    name: str
    op_type: str
    phase: str
    count: int
    total_ms: float
    mean_ms: float
    share: float  # of all profiled op time


class ProfileSummary(Record):
    """What the burst learnt from its profiled steps."""

    profile_dir: Optional[str] = None  # relative to the trial folder
    trace_file: Optional[str] = None  # Chrome trace (opens in Perfetto), relative to the trial folder
    layout: Optional[str] = None
    profiled_steps: int = 0
    profiled_step_ms: Optional[float] = None  # mean step time with the profiler on
    unprofiled_step_ms: Optional[float] = None  # median timed step without it
    overhead_ratio: Optional[float] = None  # profiled / unprofiled
    analyse_s: Optional[float] = None
    splits: Optional[Splits] = None
    top_ops: list[TopOp] = Field(default_factory=list)
    peak_allocated_bytes: Optional[int] = None  # the allocator's peak (CPU: from profile_memory)
    error: Optional[str] = None  # profiling failed but the burst's speed figures still stand


class Accuracy(Record):
    """Accuracy after a fixed number of samples seen, from the same initial weights and data order."""

    samples_seen: int
    train_loss: Optional[float] = None  # mean of the last few training losses before samples_seen
    val_loss: Optional[float] = None
    perplexity: Optional[float] = None  # exp(val_loss)
    max_grad_norm: Optional[float] = None
    final_grad_norm: Optional[float] = None
    nonfinite: bool = False  # a NaN/Inf anywhere in losses or gradient norms
    repetition_rate: Optional[float] = None  # share of repeated n-grams in a greedy sample (language models)
    sample_text: Optional[str] = None
    loss_curve: list[tuple[int, float]] = Field(default_factory=list)  # (samples seen, training loss)


class Environment(Record):
    perftune_version: str
    mindspore_version: str
    python_version: str
    device: str
    host: str
    cpu_model: str
    cpu_count: int
    kernel_threads: Optional[int] = None
    git_commit: Optional[str] = None
    utc_time: str


class Memory(Record):
    host_rss_peak_bytes: Optional[int] = None
    allocator_peak_bytes: Optional[int] = None  # from the profiler (CPU) or device API (GPU/Ascend)
    device_peak_bytes: Optional[int] = None


class TrialResult(Record):
    """Everything one burst measured; written atomically as ``trial.json``."""

    schema_version: int = TRIAL_SCHEMA_VERSION
    trial_id: str
    status: TrialStatus
    reason: Optional[str] = None  # why it is not ok, in one line
    log_tail: Optional[str] = None
    workload: str
    device: str
    knobs: dict[str, Any]
    burst: dict[str, Any]
    notes: list[str] = Field(default_factory=list)  # e.g. knobs accepted but without effect on this backend
    parameter_count: Optional[int] = None
    samples_per_step: Optional[int] = None
    tokens_per_sample: Optional[int] = None
    compile_ms: Optional[float] = None  # first step: graph compile + one step
    warmup_steps: int = 0
    windows: list[WindowStats] = Field(default_factory=list)
    samples_per_s: Optional[float] = None  # median over windows
    tokens_per_s: Optional[float] = None
    step_ms_median: Optional[float] = None
    step_ms_p10: Optional[float] = None
    step_ms_p90: Optional[float] = None
    data_wait_ms_median: Optional[float] = None
    steps: list[StepRecord] = Field(default_factory=list)
    accuracy: Optional[Accuracy] = None
    memory: Memory = Field(default_factory=Memory)
    profile: Optional[ProfileSummary] = None
    environment: Optional[Environment] = None
    wall_s: Optional[float] = None
    flops_per_sample: Optional[float] = None


class TrialSpec(Record):
    """What a burst process is asked to run; its id hashes everything that changes the measurement."""

    trial_id: str
    label: str  # human name, e.g. "baseline" or "mode=graph"
    workload: str
    workload_params: dict[str, Any] = Field(default_factory=dict)
    device: str = "CPU"
    seed: int = 0
    knobs: dict[str, Any]
    burst: dict[str, Any]
    accuracy_samples: int
    cache_dir: Optional[str] = None  # where MindRecord files are written once and reused
    replicate: int = 0  # >0 for repeated measurements of the same configuration (A/A, interleaved baselines)


TrialKind = Literal["baseline", "single", "stack", "leave_one_out"]
Verdict = Literal[
    "baseline", "kept", "not significant", "slower", "accuracy rejected", "failed", "timeout", "oom", "unsupported",
    "no effect", "dropped", "measured",
]


class ComparisonRecord(Record):
    """Throughput of a trial relative to a reference, with its confidence interval (``perftune.stats``)."""

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


class SweepResult(Record):
    """``results.json``: everything a report, a notebook or ``perftune compare`` needs."""

    schema_version: int = RESULTS_SCHEMA_VERSION
    kind: Literal["perftune-sweep"] = "perftune-sweep"
    plan: dict[str, Any]
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
