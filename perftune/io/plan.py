"""The plan's typed records (``plan.yaml`` as validated): also embedded in every ``spec.json`` / ``trial.json``
(``burst``, ``distributed``) and in ``results.json`` (``plan``).  Loading and the cross-field checks with their
one-line messages are ``perftune.engine.plan_load``'s job; these models only hold the values and their ranges.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

#: accuracy metrics a gate (and ``perftune compare``) can judge; lower is better for each
ACCURACY_METRICS = ("val_loss", "train_loss", "perplexity")
AccuracyMetric = Literal["val_loss", "train_loss", "perplexity"]


#: upper bounds of a burst: far beyond any useful tuning burst, low enough that a typo fails validation instead of
#: hanging a sweep for days
MAX_STEPS = 100_000
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_SEED = 2**32 - 1  # NumPy's and MindSpore's seed range


class PlanRecord(BaseModel):
    """Strict: ``steps: "10"``, ``10.0`` or ``true`` is an error, not 10 or 1; NaN and infinities are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class BurstSettings(PlanRecord):
    warmup_steps: int = Field(3, ge=0, le=MAX_STEPS)
    steps: int = Field(30, ge=1, le=MAX_STEPS)
    #: timed windows of a configuration's first process; its repeat processes choose theirs from what the
    #: configuration's processes cost and how they vary (``perftune.engine.window_count``) unless ``windows: fixed``
    repeats: int = Field(3, ge=1, le=1000)
    windows: Optional[Literal["chosen", "fixed"]] = None  # None: chosen
    profile_steps: int = Field(5, ge=0, le=1000)
    timeout_s: float = Field(300, gt=0, le=MAX_TIMEOUT_S)
    #: calibrate the timed windows as pyperf/timeit do: each window runs at least ``steps`` steps and at least this
    #: many seconds, the steps per window chosen from the warm-up's step time (None: exactly ``steps`` per window)
    min_window_s: Optional[float] = Field(None, gt=0, le=600)
    #: the longest the warm-up's drain of prefetched batches may last, in seconds (None: the burst's default,
    #: ``perftune.burst.drain.DRAIN_S``; 0: no drain); ``perftune.burst.drain.drain_done`` says why it is bounded
    #: by time
    drain_s: Optional[float] = Field(None, ge=0, le=600)
    #: every trial process runs under this memory limit, enforced by the kernel in a memory cgroup per trial
    #: (``perftune.runner.memcg``; on CPU it stands in for device memory): a trial past it is recorded "oom" and the
    #: sweep goes on.  Under msrun, per rank.  None: no limit; refused where no memory cgroup can be used
    memory_limit_mb: Optional[float] = Field(None, gt=0, le=2**30)


class AccuracyGate(PlanRecord):
    metric: AccuracyMetric = "val_loss"
    rel_tolerance: float = Field(0.05, ge=0, le=1000)
    #: per-metric tolerances, overriding rel_tolerance for that metric
    tolerances: dict[Literal[AccuracyMetric, "repetition_rate"], float] = Field(
        default_factory=dict
    )
    #: samples every trial has seen when accuracy is measured; default: sized from the baseline before the sweep
    #: (``perftune.engine.accuracy.knee``): until its training-loss curve flattens, within ``window_budget_s``
    samples: Optional[int] = Field(None, ge=1, le=10**12)
    #: wall-time budget of the sized accuracy window (one baseline process's window, compile excluded); every
    #: process of the sweep trains this window, so it drives the sweep's cost
    window_budget_s: float = Field(4.0, gt=0, le=3600)
    #: after stacking, the final stack and the baseline's seeds train this many times the window
    #: (``perftune.engine.accuracy.stack_check``), to catch a harm that shows late; 0: no such check
    verify_multiple: float = Field(4.0, ge=0, le=100)
    #: wall-time budget of that check's training, all its runs together (estimated from the baseline's speed)
    verify_budget_s: float = Field(30.0, gt=0, le=36000)
    #: accuracy windows of the baseline with different seeds (initialisation and data order; the plan's seed is
    #: the baseline's own run): their spread calibrates the gate (``perftune.engine.accuracy.seed_band``);
    #: 1: uncalibrated
    seeds: int = Field(4, ge=1, le=50)
    #: points of the training-loss curve compared at equal samples seen (besides the end of the window)
    checkpoints: int = Field(4, ge=0, le=20)
    #: a trial whose largest gradient norm exceeds this factor times the baseline's is rejected
    grad_norm_factor: float = Field(10.0, gt=1, le=1e12)
    #: the learning-rate rule that goes with a batch-size change (linear: lr x b/b0; sqrt: lr x sqrt(b/b0)), so a
    #: larger batch is not judged with the small batch's rate; none keeps the workload's rate
    lr_scaling: Literal["none", "linear", "sqrt"] = "none"


class DecisionRule(PlanRecord):
    """How comparisons are decided (``perftune.engine.stats``; the sweep's races: ``perftune.engine.sequential``)
    and how much they may spend."""

    min_gain: float = Field(0.03, ge=0, le=10)
    confidence: float = Field(0.95, gt=0.5, lt=1)
    #: a change whose interval lies inside +-equivalence of the reference is ``equivalent``
    equivalence: float = Field(0.03, ge=0, lt=1)
    #: processes of a candidate per comparison (the first included): an open comparison gets more, up to this
    max_runs: int = Field(4, ge=1, le=20)
    #: cap on the sweep's wall time in seconds: no process starts that would end past it (``perftune.engine.budget``;
    #: none: no limit)
    budget_s: Optional[float] = Field(None, gt=0)
    #: a process measured while other processes competed for the cores is measured again, at most this many times
    remeasure_contended: int = Field(1, ge=0, le=5)
    #: the baseline is measured at least this many times (it is also measured between the candidates, R C1 R C2 R
    #: ..., so this only adds processes to a sweep with fewer than baseline_runs - 1 candidates)
    baseline_runs: int = Field(3, ge=1, le=20)
    #: also try the not-significant, equivalent and undecided changes on top of the stack (the bottleneck may move)
    retry_on_stack: bool = True
    #: a change confined to one split of the step (``perftune knobs``: confined) whose ceiling from the baseline's
    #: own splits is below ``min_gain`` is not raced alone (``cannot gain``), only on a stack that raises its ceiling
    #: (``perftune.engine.ceilings``); false races every change
    skip_cannot_gain: bool = True
    #: a change of the data pipeline alone (``perftune knobs``: pairable) is decided, after its first process, by
    #: paired processes: both pipelines feed one model in one process, windows alternating (``engine/paired.py``);
    #: false: every comparison in fresh processes
    paired: bool = True
    #: ABBA blocks (4 timed windows each, at least ``paired_window_s`` long) per paired process
    paired_blocks: int = Field(6, ge=1, le=200)
    paired_window_s: float = Field(0.5, gt=0, le=600)
    #: comparisons one range search (``variables: {knob: {range: [lo, hi]}}``, ``perftune.engine.search``) may
    #: make before it stops at the best value so far
    search_steps: int = Field(6, ge=1, le=100)


class DistributedSettings(PlanRecord):
    """Where the ranks of a ``workers >= 2`` trial run: ``nodes`` machines, ``workers / nodes`` ranks on each.

    Every machine runs the same plan; only ``node_rank`` differs (or set ``PERFTUNE_NODE_RANK`` in the
    environment of the second machine's sweep).  The master (node 0) runs msrun's scheduler on
    ``master_addr:master_port``; on one node the port is chosen free per trial when not given.
    """

    nodes: int = Field(1, ge=1, le=1024)
    node_rank: int = Field(0, ge=0)
    master_addr: str = Field("127.0.0.1", min_length=1, max_length=255)
    master_port: Optional[int] = Field(None, ge=1024, le=65535)


KnobValue = Union[bool, int, float, str]
#: how a range's values step: every integer, or the powers of two between its ends
RangeScale = Literal["linear", "log2"]


class KnobRange(PlanRecord):
    """``variables: {kernel_threads: {range: [1, 8]}}``: a numeric knob searched for its fastest value instead of
    listed (``perftune.engine.search``); ``until: fits`` first finds the largest value that fits in memory.  The
    loader moves it from ``variables`` to ``Plan.ranges`` and checks it (``perftune.engine.plan_ranges``)."""

    range: list[int] = Field(min_length=2, max_length=2)  # [lo, hi], both tried, lo < hi
    scale: RangeScale = "linear"
    until: Optional[Literal["fits"]] = None

    @property
    def lo(self) -> int:
        return self.range[0]

    @property
    def hi(self) -> int:
        return self.range[1]

    def values(self) -> list[int]:
        """Every value a search may try, ascending: lo..hi, or the powers of two between them (``log2``)."""
        if self.scale == "linear":
            return list(range(self.lo, self.hi + 1))
        return [2 ** k for k in range(max(self.lo, 1).bit_length() - 1, self.hi.bit_length())
                if self.lo <= 2 ** k <= self.hi]


class KnobArg(PlanRecord):
    """``knob_args: {mode: {arg: "--mode", value_map: {graph: 0, pynative: 1}}}``: a knob reaching a script option
    whose values are not the knob's own (the string form ``mode: "--mode"`` passes the knob's value as written)."""

    arg: str = Field(min_length=1, max_length=100)
    #: knob value -> what the script's option is given instead; a value not in the map is passed as written
    value_map: dict[KnobValue, KnobValue] = Field(default_factory=dict)
    #: the option is an argparse flag: a boolean knob reaches it by its presence (``store_true``: present for true,
    #: ``store_false``: present for false) instead of a value.  Filled from the script's own ``add_argument`` when
    #: the plan is loaded; give it where the script's parser cannot be read
    flag: Optional[Literal["store_true", "store_false"]] = None


class ScriptWorkload(PlanRecord):
    """``workload: {script: train.py, ...}``: the user's own training script, run unchanged in the burst process as
    ``python train.py ARGS`` would run it (see ``perftune.burst.script``).  ``script`` is made absolute (relative to
    the plan file) when the plan is loaded; the script runs with its own folder as working directory."""

    script: str = Field(min_length=1)
    #: the script's own arguments, passed on unchanged
    args: list[str] = Field(default_factory=list)
    #: knob -> the script's option that takes it (``{batch_size: "--batch-size"}``): ``--batch-size 64`` is appended
    knob_args: dict[str, Union[str, KnobArg]] = Field(default_factory=dict)
    #: own knob -> ``"FILE:dotted.path"``: a field of a YAML or JSON file the script reads (FILE as written in
    #: ``args``).  Each trial gets its own copy with the fields set, passed in place of FILE; the file is never
    #: written.  A built-in knob can be routed here too (``batch_size: "conf/run.yaml:train.batch_size"``)
    knob_config: dict[str, str] = Field(default_factory=dict)
    #: own knob -> an environment variable set for the trial's process (``omp_threads: OMP_NUM_THREADS``)
    knob_env: dict[str, str] = Field(default_factory=dict)
    #: the script's own seed option (``--seed``): the accuracy gate's seed runs pass it ``--seed N`` (perftune
    #: seeds MindSpore, NumPy and the dataset itself in any case)
    seed_arg: Optional[str] = Field(None, min_length=1, max_length=100)
    #: tokens in one sample, where the training batch's token ids do not say it (their sequence dimension is read
    #: by default, see ``perftune.burst.script_lm``); 0: not a language model (no tokens/s)
    tokens_per_sample: Optional[int] = Field(None, ge=0)
    #: ``token_cross_entropy``: the script's loss is a mean token cross-entropy, so exp(loss) is a perplexity
    #: (recognised without it where ``Model`` trains with a cross-entropy over token labels)
    loss: Optional[Literal["token_cross_entropy"]] = None
    #: ``FILE.py:function`` (relative to the plan file): ``function(network)`` returns a greedy sample (token ids,
    #: or text) of the network the script trains, called at the accuracy window's end for the repetition check
    #: (``perftune.burst.script_generate``)
    generate: Optional[str] = Field(None, min_length=3, max_length=500)

    def __str__(self) -> str:
        return f"script:{Path(self.script).name}"


class RaySettings(PlanRecord):
    """Where a ``executor: ray`` sweep sends its trials (``perftune sweep --executor ray``, README "Running on a Ray
    cluster").  Every node offers the custom resource ``perftune: 1``, so one trial runs per node at a time."""

    #: the cluster's head, ``HOST:PORT`` (``ray start --head`` prints it); None: the cluster running on this machine
    address: Optional[str] = Field(None, min_length=1, max_length=300)
    #: runs of a trial whose node (or Ray worker) died under it, before it is recorded as failed
    max_attempts: int = Field(3, ge=1, le=10)


class Plan(PlanRecord):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=80)
    workload: Union[str, ScriptWorkload]
    workload_params: dict[str, Any] = Field(default_factory=dict)
    device: Literal["CPU", "GPU", "Ascend"] = "CPU"
    seed: int = Field(0, ge=0, le=MAX_SEED)
    burst: BurstSettings = Field(default_factory=BurstSettings)
    baseline: dict[str, Any] = Field(default_factory=dict)
    variables: dict[str, list[Any]] = Field(default_factory=dict)
    #: numeric knobs searched over a range instead of listed: written in ``variables`` as ``{range: [lo, hi]}``,
    #: moved here by the loader (``perftune.engine.plan_ranges``)
    ranges: dict[str, KnobRange] = Field(default_factory=dict)
    accuracy: AccuracyGate = Field(default_factory=AccuracyGate)
    decision: DecisionRule = Field(default_factory=DecisionRule)
    output_dir: Optional[str] = None
    distributed: Optional[DistributedSettings] = None
    #: own knob -> a parameter of the built-in (or ``module:function``) workload: ``knob_params: {width: hidden}``
    #: sweeps ``workload_params.hidden`` by the knob ``width`` (the same name is fine: ``{hidden: hidden}``)
    knob_params: dict[str, str] = Field(default_factory=dict)
    #: own knob -> an environment variable set for every trial's process (a script workload names them in
    #: ``workload.knob_env``)
    knob_env: dict[str, str] = Field(default_factory=dict)
    #: where the trials run: this machine, or one Ray task each on a Ray cluster's nodes (``ray``)
    executor: Literal["local", "ray"] = "local"
    ray: RaySettings = Field(default_factory=RaySettings)
