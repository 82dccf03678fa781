"""Typed records that flow between perftune's stages.

Each stage reads only the record before it: a burst writes a ``TrialResult`` (``trial.json``), the profiler
parser turns a profile folder into ``Splits`` and ``TopOp`` rows, the sweep engine collects trials and decisions
into a ``SweepResult`` (``results.json``), and the report and ``compare`` read that back.  Units are in every
field name (``_ms``, ``_bytes``, ``_per_s``) because unlabelled numbers are the first thing users of such tools
complain about.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from perftune.io.plan import BurstSettings, DistributedSettings, ScriptWorkload

#: Bumped whenever a field changes meaning or disappears; ``perftune.io.schema`` upgrades older files step by step
#: and refuses newer ones.  Version 2: ``notes`` are ``Note`` records instead of strings.  Version 3: a trial may
#: record the cluster ``node`` that ran it (``NodeRecord``), a sweep its ``nodes`` (both absent when run locally).
TRIAL_SCHEMA_VERSION = 4
RESULTS_SCHEMA_VERSION = 6

TrialStatus = Literal["ok", "failed", "timeout", "oom", "unsupported"]
PHASES = ("data", "forward", "backward", "optimizer", "communication", "other")
#: communication above this share of the step: a distributed trial is flagged (ProfileSummary, the report's note)
COMMUNICATION_FLAG_SHARE = 0.20
#: waiting for data at least this share of the step: the input pipeline is the bottleneck (data knobs go first)
DATA_BOUND_SHARE = 0.25


class Record(BaseModel):
    """Base: unknown fields are errors, so a typo in a writer shows up in tests, not in a report."""

    model_config = ConfigDict(extra="forbid")


NoteKind = Literal["no_effect", "warning", "info"]
#: what a reader of a trial's phase splits must know (``SplitWarning``)
SplitWarningKind = Literal["launch_steps", "ops_overlap", "profiled_slower", "profiled_faster", "op_scale_far",
                           "ops_exceed_step"]


class Note(Record):
    """A remark on a trial.  Decisions read ``kind`` and ``knob`` (never the wording); people read ``text``.

    ``no_effect``: ``knob`` was accepted but changes nothing here (the sweep's "no effect" verdict); ``warning``:
    part of the measurement is missing or suspect; ``info``: how a figure was made.
    """

    kind: NoteKind
    knob: Optional[str] = None
    text: str

    def __str__(self) -> str:
        return self.text


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
    #: the contention guard (burst/contention.py): others' share of the cores, steal, load average, > CONTENDED_SHARE?
    others_cpu_share: Optional[float] = None
    steal_share: Optional[float] = None
    load_avg_1m: Optional[float] = None
    contended: bool = False
    #: a paired process (``TrialSpec.pair``): 0 for the reference's pipeline, 1 for the candidate's
    arm: int = 0


class SplitWarning(Record):
    """Something a reader of the splits must know, as data (``perftune.words.split_notes`` words it).

    kind: ``launch_steps`` (the profile's launches split into ``figures["launch_steps"]`` steps, not the
    ``profiled_steps`` the burst ran), ``ops_overlap`` (op time exceeded the profiled steps' own compute: squeezed),
    ``profiled_slower`` / ``profiled_faster`` (the profiled steps' compute ran at another speed than the timed
    steps': ``profiled_ms``, ``timed_ms``), ``op_scale_far`` (that difference beyond ``limit``: each phase lies in
    ``Splits.phase_ranges``, compare phases of two trials by it), ``ops_exceed_step`` (no profiled step time:
    ``op_ms`` squeezed into ``budget_ms``).
    """

    kind: SplitWarningKind
    figures: dict[str, float] = Field(default_factory=dict)


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
    #: the part of backward_ms that re-runs forward ops (recompute), where the profile's launches could be placed by
    #: time (None where not: the Ascend layout, or launches that do not split into steps)
    recompute_ms: Optional[float] = None
    #: the profiled steps' own mean step and data wait: the op phases are their shares of the profiled steps'
    #: compute time (step - data), carried to the timed step; None in splits written before (or without them)
    profiled_step_ms: Optional[float] = None
    profiled_data_ms: Optional[float] = None
    #: the factor on the profiled op times: timed compute / profiled compute (0.64: the profiled steps' compute
    #: ran x1.57 slower, the profiler's overhead), and in words why (None: within 5%, or not scaled)
    op_scale: Optional[float] = None
    op_scale_cause: Optional[str] = None  # written before ``warnings`` existed; new splits leave it None
    #: share of step_ms whose phase came from where its launches ran in the step, not from the op's name or type
    #: (bare PyNative ops, ``Default/<op>``, ``Expand/...``; None where not known)
    by_time_share: Optional[float] = None
    #: forward / backward / optimizer: [low, high] ms per step where the phase can lie, given the profiled steps'
    #: spread and a speed difference between profiled and timed steps that may fall in any phase (op_scale_far)
    phase_ranges: dict[str, list[float]] = Field(default_factory=dict)
    #: what a reader must know about these splits, as data (rendered by the report)
    warnings: list[SplitWarning] = Field(default_factory=list)
    #: each phase's share of step_ms (filled from the ms fields; written to trial.json for readers of the file)
    shares: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _fill_shares(self) -> Splits:
        if not self.shares:
            total = self.step_ms or 1.0
            self.shares = {p: getattr(self, f"{p}_ms") / total for p in PHASES}
        return self


class TopOp(Record):
    name: str
    op_type: str
    phase: str
    count: int
    total_ms: float
    mean_ms: float
    share: float  # of all profiled op time


class TopOpType(Record):
    """One operator type over all its instances and phases (``Default/Conv2D-op9``, ``Conv2D-op12`` -> ``Conv2D``)."""

    op_type: str
    phases: list[str]  # the phases its time fell in, most time first
    calls_per_step: float
    ms_per_step: float
    share: float  # of all profiled op time


class ProfileSummary(Record):
    """What the burst learnt from its profiled steps."""

    profile_dir: Optional[str] = None  # relative to the trial folder
    trace_file: Optional[str] = None  # Chrome trace (opens in Perfetto), relative to the trial folder
    layout: Optional[str] = None
    profiled_steps: int = 0
    profiled_step_ms: Optional[float] = None  # mean step time with the profiler on
    unprofiled_step_ms: Optional[float] = None  # mean timed step without it (a median in older files)
    overhead_ratio: Optional[float] = None  # profiled / unprofiled
    analyse_s: Optional[float] = None
    splits: Optional[Splits] = None
    top_ops: list[TopOp] = Field(default_factory=list)
    #: the top operators aggregated by type (empty in results written before; the report then aggregates top_ops)
    top_op_types: list[TopOpType] = Field(default_factory=list)
    peak_allocated_bytes: Optional[int] = None  # the allocator's peak (CPU: from profile_memory)
    error: Optional[str] = None  # profiling failed but the burst's speed figures still stand
    #: distributed: the ranks' mean communication_ms / step_ms, above COMMUNICATION_FLAG_SHARE? (per rank: ranks[i])
    communication_share: Optional[float] = None
    communication_flag: bool = False


class Accuracy(Record):
    """Accuracy after a fixed number of samples seen, from the same initial weights and data order."""

    samples_seen: int
    updates: Optional[int] = None  # optimizer updates in the accuracy window (samples_seen / batch size)
    lr_scale: float = 1.0  # the factor applied to the workload's learning rate (plan accuracy.lr_scaling)
    train_loss: Optional[float] = None  # mean of the last few training losses before samples_seen
    val_loss: Optional[float] = None
    perplexity: Optional[float] = None  # exp(val_loss)
    max_grad_norm: Optional[float] = None
    final_grad_norm: Optional[float] = None
    nonfinite: bool = False  # a NaN/Inf anywhere in losses or gradient norms
    repetition_rate: Optional[float] = None  # share of repeated n-grams in a greedy sample (language models)
    sample_text: Optional[str] = None
    loss_curve: list[tuple[int, float]] = Field(default_factory=list)  # (samples seen, training loss)
    #: a script's own validation (``Model.fit``'s ``valid_dataset`` evaluated at the accuracy window's end, or
    #: ``perftune.metric(name, value)``), name -> value, measured after ``val_metrics_samples`` samples seen
    val_metrics: dict[str, float] = Field(default_factory=dict)
    val_metrics_samples: Optional[int] = None


class PhaseAgreement(Record):
    """The median compute time (a step less its wait for data; ms, first steps left out) of each phase that runs
    the same computation (accuracy, warm-up, timed, profiled) and whether they agree: a phase that differs from the
    timed steps by more than ``limit`` (``burst.agreement``: the one that judged ``worst_phase``) was timed
    differently, e.g. an asynchronous step timed from its dispatch, and the trial's figures are suspect."""

    medians_ms: dict[str, float]
    worst_phase: Optional[str] = None  # the phase furthest from the timed steps
    ratio: float = 1.0  # that phase's median over the timed median, or the inverse: >= 1
    limit: float
    agree: bool  # judged on the phases that ran uncontended (against uncontended timed steps)
    others_share: dict[str, float] = Field(default_factory=dict)  # others' use of the cores, by phase (PhaseLoad)


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


class RankSummary(Record):
    """One rank of a distributed burst (``workers >= 2``), as every rank learnt it at the end of the burst.

    The ranks exchange these with one collective after their profiled steps, so every node's ``trial.json`` holds
    all ranks, including those of other machines.  ``samples_per_s`` is the *global* batch over this rank's own
    time (``throughput`` of its windows); the trial's throughput takes the slowest rank (see ``TrialResult``).
    """

    rank: int
    host: Optional[str] = None
    node_rank: Optional[int] = None
    pid: Optional[int] = None
    result_dir: Optional[str] = None  # this rank's folder (``rank_<r>``), relative to the trial folder
    log_file: Optional[str] = None  # msrun's log of this rank, relative to the trial folder (on its own node)
    status: TrialStatus = "ok"
    samples_per_s: Optional[float] = None
    step_ms_median: Optional[float] = None
    step_ms_p10: Optional[float] = None
    step_ms_p90: Optional[float] = None
    data_wait_ms_median: Optional[float] = None
    compile_ms: Optional[float] = None
    windows: list[WindowStats] = Field(default_factory=list)
    train_loss: Optional[float] = None  # this rank's part of the batch; the trial's train loss is the mean over ranks
    nonfinite: bool = False
    loss_curve: list[tuple[int, float]] = Field(default_factory=list)
    #: this rank's profiled splits (they add up to this rank's step time) and its top ops
    splits: Optional[Splits] = None
    top_ops: list[TopOp] = Field(default_factory=list)
    communication_share: Optional[float] = None  # splits.communication_ms / splits.step_ms
    profile_error: Optional[str] = None
    host_rss_peak_bytes: Optional[int] = None
    allocator_peak_bytes: Optional[int] = None


class NodeRecord(Record):
    """The cluster node that ran a trial (``perftune sweep --executor ray``); a local trial has none.

    The sweep compares a trial with the baseline processes of its own node (``perftune.engine.sequential.blocks``;
    per-node ratios in ``perftune.engine.blocked``), so a slow machine does not look like a slow knob.
    """

    executor: Literal["ray"] = "ray"
    host: str
    node_id: Optional[str] = None  # Ray's node id (hex)
    ip: Optional[str] = None
    attempts: int = Field(1, ge=1)  # > 1: an earlier attempt was lost with its node and the trial was re-run
    lost: list[str] = Field(default_factory=list)  # why each earlier attempt was lost, one line each


class TrialResult(Record):
    """Everything one burst measured; written atomically as ``trial.json``."""

    schema_version: int = TRIAL_SCHEMA_VERSION
    trial_id: str
    status: TrialStatus
    reason: Optional[str] = None  # why it is not ok, in one line
    #: ended by a signal perftune did not send (not by its configuration): a resume measures it again
    retry_on_resume: bool = False
    log_tail: Optional[str] = None
    workload: str
    device: str
    knobs: dict[str, Any]
    burst: BurstSettings
    notes: list[Note] = Field(default_factory=list)  # e.g. knobs accepted but without effect on this backend
    #: knob -> what the burst read back from MindSpore after applying it (evidence that it took effect)
    applied: dict[str, Any] = Field(default_factory=dict)
    parameter_count: Optional[int] = None
    samples_per_step: Optional[int] = None
    tokens_per_sample: Optional[int] = None
    compile_ms: Optional[float] = None  # first step: graph compile + one step, to its completion (read-back)
    first_loss: Optional[float] = None  # the first step's loss (what a process with a cached graph is checked by)
    second_loss: Optional[float] = None  # the second step's: the first update's effect, checked likewise
    compile_cache: Optional[Literal["filled", "loaded", "mismatch"]] = None  # what the cache did (burst/graph_check)
    compiles: dict[str, int] = Field(default_factory=dict)  # graphs made ready, by phase (burst.graph_count)
    warmup_steps: int = 0
    windows: list[WindowStats] = Field(default_factory=list)
    samples_per_s: Optional[float] = None  # timed samples / summed window time: batch / mean step (derived.throughput)
    tokens_per_s: Optional[float] = None
    step_ms_median: Optional[float] = None
    step_ms_p10: Optional[float] = None
    step_ms_p90: Optional[float] = None
    data_wait_ms_median: Optional[float] = None
    contended_windows: int = 0  # timed windows measured while other processes competed for the cores
    phase_agreement: Optional[PhaseAgreement] = None  # the phases' step times checked against each other
    steps: list[StepRecord] = Field(default_factory=list)
    accuracy: Optional[Accuracy] = None
    memory: Memory = Field(default_factory=Memory)
    profile: Optional[ProfileSummary] = None
    environment: Optional[Environment] = None
    wall_s: Optional[float] = None
    flops_per_sample: Optional[float] = None
    # -- distributed bursts (knob workers >= 2, perftune/runner/msrun.py); defaults describe a one-process burst.
    # The trial's throughput is global: global batch (batch_size) x steps / the slowest rank's window time; its
    # step_ms_* and data_wait_ms_median are the slowest rank's; profile.splits is the mean of the ranks' splits.
    world_size: int = 1
    ranks: list[RankSummary] = Field(default_factory=list)  # every rank, sorted by rank
    straggler_rank: Optional[int] = None  # the rank with the slowest median timed step
    rank_spread: Optional[float] = None  # (slowest - fastest) / fastest median timed step over the ranks
    node: Optional[NodeRecord] = None  # the cluster node that ran it (schema 3); None: run locally
    #: what held every process of the trial so that none outlived it (a cgroup v2, or the fallback), runner-set
    containment: Optional[str] = None

    @property
    def step_ms_mean(self) -> Optional[float]:
        """Mean timed step (window time / steps, the read-backs included): THE step time of the tables, the splits,
        the report and compare; throughput is batch / this.  ``step_ms_median`` is shown beside it."""
        steps = sum(w.steps for w in self.windows)
        return sum(w.total_ms for w in self.windows) / steps if steps else None

    @property
    def data_wait_ms_mean(self) -> Optional[float]:
        """Mean time the timed steps waited for their batch (the splits' ``data``)."""
        waits = [s.data_wait_ms for s in self.steps if s.phase == "timed"]
        return sum(waits) / len(waits) if waits else None


class PairArm(Record):
    """The candidate of a paired process (``perftune.engine.paired``): its data pipeline is built beside the
    reference's in one process over one model, and the timed windows alternate between the two."""

    label: str
    reference_label: str = ""  # the reference's own label (the process's label names both)
    knobs: dict[str, Any]  # the candidate's knob values (they differ from the reference's in pairable knobs only)
    workload_params: dict[str, Any] = Field(default_factory=dict)  # differ only in the workload's data parameters
    blocks: int = Field(6, ge=1, le=200)  # ABBA blocks: 4 timed windows each
    min_window_s: float = Field(0.5, gt=0, le=600)  # each window lasts at least this long (calibrated steps)


class TrialSpec(Record):
    """What a burst process is asked to run; its id hashes everything that changes the measurement."""

    trial_id: str
    label: str  # human name, e.g. "baseline" or "mode=graph"
    workload: str
    workload_params: dict[str, Any] = Field(default_factory=dict)
    device: str = "CPU"
    seed: int = 0
    #: the seed of the workload's data (its synthetic dataset); None: ``seed``.  The accuracy gate's seed runs vary
    #: ``seed`` (initialisation and data order) on the same data
    data_seed: Optional[int] = None
    knobs: dict[str, Any]
    burst: BurstSettings
    accuracy_samples: int
    cache_dir: Optional[str] = None  # where MindRecord files are written once and reused
    replicate: int = 0  # >0 for repeated measurements of the same configuration (A/A, interleaved baselines)
    #: the plan's ``distributed`` section (nodes, node_rank, master_addr, master_port); None: one node
    distributed: Optional[DistributedSettings] = None
    lr_scale: float = 1.0  # factor on the workload's learning rate (``accuracy.lr_scaling``, a batch-size change)
    #: a script workload (``workload`` is then ``script:<file name>``): run by ``perftune.burst.script``
    script: Optional[ScriptWorkload] = None
    #: the knobs the plan names (baseline or variables): imposed on the script; the others stay as it sets them
    script_knobs: list[str] = Field(default_factory=list)
    env: dict[str, Optional[str]] = Field(default_factory=dict)  # set by own knobs (knob_env); None: removed
    #: a paired process: the reference (this spec) and ``pair``'s pipeline alternate, window by window, in one process
    pair: Optional[PairArm] = None
    compile_cache: Optional[str] = None  # this configuration's compile cache folder (``engine.graph_cache``)
    first_loss: Optional[float] = None  # its first process's first loss, which a cached graph must reproduce
    second_loss: Optional[float] = None  # and its second step's loss (after the first update), likewise
