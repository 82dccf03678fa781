"""The sweep's records: ``results.json`` (``SweepResult``) and what it holds per trial and per stack step."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from perftune.io.accuracy_window import StackCheck, WindowReach
from perftune.io.plan import KnobRange, Plan
from perftune.io.records import RESULTS_SCHEMA_VERSION, Accuracy, Environment, Record, TrialResult, TrialStatus

#: ``repeat``: a further process of a single or stack configuration, measured while its comparison was open;
#: ``search``: a value a range search tried (its found value's first process is the knob's ``single``)
TrialKind = Literal["baseline", "single", "stack", "leave_one_out", "repeat", "search"]
#: a trial's verdict in the sweep (a comparison's is ``ComparisonVerdict``, the interval's state
#: ``stats.IntervalOutcome``)
TrialVerdict = Literal[
    "baseline", "kept", "not significant", "slower", "accuracy rejected", "failed", "timeout", "oom", "unsupported",
    "no effect", "dropped", "measured", "equivalent", "undecided",
]


#: a comparison's verdict: beyond its interval (faster, slower), inside the equivalence margin, or neither when its
#: processes were spent (not significant: one look; undecided: sequential looks left it open)
ComparisonVerdict = Literal["faster", "slower", "not significant", "equivalent", "undecided"]
#: how a comparison measured: each side in its own processes, or both in one process (``perftune.engine.paired``)
Design = Literal["processes", "paired"]

#: which knobs the sweep races first (``OrderRule``)
KnobGroupFirst = Literal["data", "compute", "distributed"]

#: verdicts of trials that measured nothing (their status, as the verdict)
FAILED_VERDICTS = ("failed", "timeout", "oom", "unsupported")


class MemoryComparison(Record):
    """A trial's peak memory relative to its reference's, with its interval over the processes measured
    (``perftune.engine.memory``): beside the speed, what a change costs or frees in memory."""

    measure: Literal["device", "host_rss"]  # device peak where every process has one, else the host RSS peak
    ratio: float  # candidate / reference peak (< 1: the candidate needs less)
    ci_low: float
    ci_high: float
    processes: int  # candidate processes measured
    reference_processes: int
    candidate_mb: float  # the geometric means of the processes' peaks
    reference_mb: float
    #: ``burst.memory_limit_mb`` where the plan sets one: what the change frees (< 0: takes) against it, in MB
    limit_mb: Optional[float] = None
    frees_mb: Optional[float] = None


class ComparisonRecord(Record):
    """Throughput of a trial relative to a reference, with its interval (``perftune.engine.stats``)."""

    reference: str  # trial label it was compared with, e.g. "baseline" or "+mode=graph"
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    verdict: ComparisonVerdict
    df: float
    processes: Optional[int] = None  # candidate processes the comparison used (each a block between references)
    reference_processes: Optional[int] = None
    noise_sd: Optional[float] = None  # the sweep's pooled process noise (sd of log throughput) at the decision
    resolution: Optional[float] = None  # half the interval's width (relative): the smallest change it can tell
    #: contended processes (other processes competed for the cores) of this comparison: measured again in place of
    #: one it used, or used where contention persisted; before results schema 4 (``remeasured`` None) every
    #: contended process of either configuration in the sweep
    contended: int = 0
    remeasured: Optional[int] = None  # of ``contended``, those measured again (the rest were used)
    equivalence: Optional[float] = None  # the margin inside which the comparison calls the two equivalent
    runs_needed: Optional[int] = None  # undecided: about how many candidate processes would resolve it
    #: "paired": both sides in one process, alternating windows (``perftune.engine.paired``; ``processes`` counts
    #: the paired processes); None: each side in its own processes
    design: Optional[Design] = None
    paired_blocks: Optional[int] = None  # paired: the ABBA blocks of all its processes
    block_sd: Optional[float] = None  # paired: sd of one block's log ratio within a process
    process_sd: Optional[float] = None  # paired: sd of the log ratio between paired processes (with its prior)
    #: undecided before ``decision.max_runs``: the rest of the budget was unlikely to decide it (a futility stop)
    futile: bool = False
    reason: str = ""  # the decision in words (``perftune.words.reasons.comparison_text`` of the fields above)
    memory: Optional[MemoryComparison] = None  # peak memory against the same reference (None: not measured)


class RatioPart(Record):
    """A piece of a reason written before results schema 4: text, or a throughput ratio with its interval (the
    upgrade in ``perftune.io.schema`` lifts the ratios out of the old prose once, so nothing parses it again)."""

    text: str = ""
    ratio: Optional[float] = None
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None


class Why(Record):
    """A trial's verdict reason as data; ``perftune.words.reasons`` words it, the one renderer of every output.

    The numbers (ratio, interval, processes, noise, contention) are the comparison's that decided (``comparison``
    names it); the rest is what outranked or qualified the timing."""

    comparison: Optional[Literal["vs_baseline", "vs_previous"]] = None  # the comparison whose timing decided
    below_min_gain: Optional[float] = None  # significant, but the change is below this ``decision.min_gain``
    not_discovered: str = ""  # significant, but not a discovery across this family of comparisons
    no_effect: str = ""  # a known no-op, in the burst's words (``perftune.engine.noop``)
    accuracy: str = ""  # the accuracy gate's failure, in its words; the verdict whatever the speed
    speed: str = ""  # with ``accuracy``: the verdict the timing alone gave
    unjudged: list[str] = Field(default_factory=list)  # metrics the gate could not judge at this burst length
    gate_notes: list[str] = Field(default_factory=list)  # a pass the seeds could not separate or calibrate
    before: str = ""  # a stack row's verdict before the stack dropped it
    failure: str = ""  # the process failed: why
    stopped_sweep: bool = False  # ... and it was the baseline, so nothing else ran
    removed: Optional[str] = None  # leave-one-out: the change taken out of the final stack (its label)
    other_model: str = ""  # built-in knobs changed, yet the parameter count did too (``engine.noop``)
    legacy: list[RatioPart] = Field(default_factory=list)  # a reason written before schema 4, ratios lifted out


class WindowCount(Record):
    """How many timed windows a repeat process ran, and why (``perftune.engine.window_count``, Kalibera and Jones:
    ``optimum = sqrt(process_s / window_s * window_sd**2 / process_sd**2)``, rounded and bounded)."""

    windows: int
    optimum: float  # the formula's value before rounding and bounds
    default: int  # the plan's burst.repeats, which the configuration's first process ran
    process_s: float  # what a process costs besides its windows (median over the configuration's processes)
    window_s: float  # one timed window
    window_sd: float  # sd of log throughput between windows of one process (pooled)
    process_sd: float  # sd between processes once the windows' own noise is taken out (floored)


class SweepTrial(Record):
    """One trial as the sweep saw it: what changed, what it measured (``trial.json`` less per-step rows), why."""

    trial_id: str
    label: str
    kind: TrialKind
    changes: dict[str, Any] = Field(default_factory=dict)  # knobs that differ from the baseline
    replicate: int = 0
    verdict: TrialVerdict
    reason: str = ""  # ``why`` in words, as every output renders it (``perftune.words.reasons.reason_text``)
    why: Optional[Why] = None  # the reason as data (None: nothing decided, or a bare failure in ``reason``)
    vs_baseline: Optional[ComparisonRecord] = None
    vs_previous: Optional[ComparisonRecord] = None  # stacks: against the stack before it; LOO: final vs this
    accuracy_changes: dict[str, Optional[float]] = Field(default_factory=dict)  # metric -> relative change
    reused: bool = False  # came from an earlier, interrupted run of the same sweep
    excluded: str = ""  # why this process's timing is not used (contended: measured again)
    window_count: Optional[WindowCount] = None  # a repeat process: how its window count was chosen
    result: TrialResult


class StackStep(Record):
    """One row of the cumulative ablation: the configuration after applying ``change`` on top of the rows above."""

    label: str  # "baseline", "+mode=graph", "+mode=graph +num_parallel_workers=2"
    change: Optional[dict[str, Any]] = None
    trial_id: str
    kept: bool
    reason: str = ""


class KnobCeiling(Record):
    """The most a change confined to one split of the step can gain: the whole split removed
    (``perftune.engine.ceilings``).  A ceiling below ``1 + decision.min_gain`` is not raced: ``cannot gain``."""

    label: str  # the change, as ``+num_parallel_workers=2``
    changes: dict[str, Any]
    split: Literal["data", "communication"]
    split_ms: float  # the larger of the burst's timed wait and the profile's split
    step_ms: float
    ceiling: Optional[float] = None  # step / (step - split); None: the split is the whole step
    where: str = "baseline"  # the configuration it was read from: the baseline, or a stack row's label
    raced: bool = True  # False: the change cannot gain there, and was not measured there


class NodeComparison(Record):
    """A configuration on the nodes that ran it (``perftune.engine.blocked``): its ratio to the baseline within each
    node, beside the sweep's own comparison with the baseline (before results schema 4: a second comparison of all
    its runs against the baseline runs of the same nodes)."""

    trial_id: str  # its first run
    label: str
    node: str  # the node ids (or hosts) that ran it, comma-separated
    comparison: Optional[ComparisonRecord] = None  # the sweep's own (its first run's ``vs_baseline``)
    note: str = ""
    per_node_ratio: dict[str, float] = Field(default_factory=dict)  # node -> its throughput / the node's baseline


class NodeSummary(Record):
    """Where a sweep's trials ran (``--executor ray``): the node effect and the within-node comparisons."""

    hosts: dict[str, str] = Field(default_factory=dict)  # node id -> host name
    trials_per_node: dict[str, int] = Field(default_factory=dict)
    #: each node's baseline throughput relative to the mean over nodes (0.8: 20% slower); empty with one node
    node_effect: dict[str, float] = Field(default_factory=dict)
    blocked: list[NodeComparison] = Field(default_factory=list)


class PairedProcess(Record):
    """One paired process (``perftune.engine.paired``): a reference and a candidate pipeline in one process, its
    ABBA blocks' log ratios (candidate over reference throughput), and what it cost."""

    trial_id: str
    reference: str  # labels
    candidate: str
    replicate: int = 0
    swapped: bool = False  # the candidate ran as arm 0 (every other process: ``engine.paired.counterbalanced``)
    status: TrialStatus = "ok"
    reason: str = ""
    differences: list[float] = Field(default_factory=list)  # per block: log candidate - log reference (mean)
    windows: int = 0
    contended_windows: int = 0
    wall_s: Optional[float] = None
    timed_s: Optional[float] = None  # the timed windows' time, both arms
    reused: bool = False


class WindowSizing(Record):
    """How the accuracy window's length was chosen (``perftune.engine.accuracy.sizing``), as data;
    ``perftune.words.rules`` words it."""

    #: plan: ``accuracy.samples`` given; loss_fell: the baseline's training loss fell enough by ``samples``;
    #: budget: the longest window ``accuracy.window_budget_s`` allowed, the loss fell only ``loss_fall``;
    #: probe_failed: the probe of the baseline failed (``failure``); knee: where the baseline's loss curve flattened
    #: (``loss_fell`` is then the window extended past the budget to where the loss fell enough, and
    #: ``loss_fall`` is 1 - end / start).  None: written before results schema 6
    how: Optional[Literal["plan", "loss_fell", "budget", "probe_failed", "knee"]] = None
    samples: int = 0
    loss_fall: Optional[float] = None  # relative fall of the training loss over the window (None: too little to tell)
    fall_factor: float = 0.0  # the fall asked for, in multiples of the tolerance
    tolerance: float = 0.0  # the gate's relative tolerance
    budget_s: Optional[float] = None
    failure: str = ""
    legacy: str = ""  # written before results schema 6: the sizing in words


class OrderRule(Record):
    """Which singles the sweep raced first, and why (``perftune.engine.order``), as data; ``perftune.words.rules``
    words it."""

    data_share: Optional[float] = None  # the baseline's first process: share of the step waiting for data
    threshold: float = 0.0  # data-bound from this share on
    first: Optional[KnobGroupFirst] = None  # None: written before results schema 6
    #: the share of the step each group of knobs can reach (``perftune.engine.ceilings.group_shares``), and the
    #: groups in the order raced; empty in files written before the order followed the ceilings
    shares: dict[str, float] = Field(default_factory=dict)
    groups: list[KnobGroupFirst] = Field(default_factory=list)
    legacy: str = ""  # written before results schema 6: the rule in words


class Multiplicity(Record):
    """How the sweep's many comparisons are kept honest, as data; ``perftune.words.rules`` words it."""

    comparisons: int = 0  # the one-at-a-time comparisons of the Benjamini-Hochberg family
    false_discovery_rate: float = 0.0
    looks: int = 0  # the looks each interval allows for (Pocock)
    legacy: str = ""  # written before results schema 6: the rule in words


class AccuracyCalibration(Record):
    """How the accuracy gate was set up before the sweep (``perftune.engine.accuracy.seeds``): the accuracy window's
    length (given, or sized from the baseline) and the baseline's accuracy windows with other seeds."""

    samples: int  # samples seen when every trial's accuracy is measured
    sized: bool = False  # chosen by perftune (``accuracy.samples`` not given)
    sizing: Optional[WindowSizing] = None  # what was chosen and why
    sizing_s: float = 0.0  # wall time of the sizing probes (as measured, also when a resume reused them)
    seeds: list[int] = Field(default_factory=list)  # the seeds of ``runs`` (the plan's own is the baseline's)
    runs: list[Accuracy] = Field(default_factory=list)  # their accuracy windows, in seed order
    trial_ids: list[str] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)  # seed runs that measured nothing, and why
    seeds_s: float = 0.0  # wall time of the seed runs (as measured, also when a resume reused them)
    reach: Optional[WindowReach] = None  # what the window reached on the baseline's curve


#: why a range search stopped (``perftune.engine.search``): no neighbour faster by ``min_gain`` (peak), the fastest
#: at the range's end (edge: a value beyond might be faster), at the largest value that fits (fits), the comparison
#: budget spent (budget), a process failed where it stood (failed), the sweep's ``budget_s`` spent (time)
SearchStop = Literal["peak", "edge", "fits", "budget", "failed", "time"]
#: a range search's comparison of a candidate with the value it stood at
StepOutcome = Literal["better", "not better", "worse", "accuracy rejected", "failed"]


class SearchStep(Record):
    """One comparison of a range search: ``candidate`` raced against ``reference``, the value it stood at."""

    candidate: int
    reference: int
    outcome: StepOutcome
    comparison: Optional[ComparisonRecord] = None
    reason: str = ""  # accuracy rejected / failed: why, in the gate's or the burst's words


class FitTry(Record):
    """One value an ``until: fits`` search measured on its way up: its first process's status (not ok: it does not
    fit; ``oom`` is the usual answer)."""

    value: int
    status: TrialStatus
    trial_id: str = ""


class SearchPoint(Record):
    """One value on a searched knob's curve: its fresh processes' throughput (geometric mean) and 95% interval
    from the sweep's process noise."""

    value: int
    samples_per_s: float
    ci_low: float
    ci_high: float
    processes: int


class SearchRecord(Record):
    """One range search (``perftune.engine.search``): where it started and why, what it compared, what it found and
    why it stopped.  The found value's first process is then the knob's single, judged against the baseline."""

    knob: str
    range: KnobRange
    start: int
    start_rule: Literal["cores", "middle", "largest fit"]
    cores: Optional[int] = None  # the machine's cores where the start followed them (num_parallel_workers)
    budget: int = 0  # decision.search_steps
    min_gain: float = 0.0  # decision.min_gain: the least gain that moves the search
    fits: list[FitTry] = Field(default_factory=list)  # until: fits, in the order measured
    largest_fit: Optional[int] = None
    steps: list[SearchStep] = Field(default_factory=list)
    tried: list[int] = Field(default_factory=list)  # every value measured, in the order first measured
    found: Optional[int] = None  # None: nothing usable (every value failed)
    found_trial_id: Optional[str] = None
    stopped: SearchStop = "peak"
    processes: int = 0  # processes the search measured (fresh and paired, contended ones included)
    curve: list[SearchPoint] = Field(default_factory=list)  # the tried values' throughput, ascending


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
    order_rule: Optional[OrderRule] = None
    #: each confined change's ceiling where it was judged (the baseline, then the stack rows that raised it)
    ceilings: list[KnobCeiling] = Field(default_factory=list)
    trials: list[SweepTrial] = Field(default_factory=list)
    searches: list[SearchRecord] = Field(default_factory=list)  # every range search, in plan order
    stack: list[StackStep] = Field(default_factory=list)
    aa_check: Optional[ComparisonRecord] = None  # baseline replicate vs the first baseline run
    #: the baseline against itself in one paired process: the check of the paired comparisons (None: none made)
    aa_paired: Optional[ComparisonRecord] = None
    paired: list[PairedProcess] = Field(default_factory=list)  # every paired process, in measurement order
    noise_sd: Optional[float] = None  # between-process noise the sweep measured (pooled, with the prior)
    noise_df: Optional[int] = None  # its degrees of freedom: observed + the prior's
    noise_observed_df: Optional[int] = None
    multiplicity: Optional[Multiplicity] = None  # how the sweep's many comparisons are kept honest
    best_label: Optional[str] = None
    best_trial_id: Optional[str] = None
    best_vs_baseline: Optional[ComparisonRecord] = None
    environment: Optional[Environment] = None
    #: the accuracy window's length and the baseline's seed runs (None: a sweep from before the gate had them)
    accuracy_calibration: Optional[AccuracyCalibration] = None
    #: the final stack and the baseline trained for a longer window after stacking
    stack_check: Optional[StackCheck] = None
    nodes: Optional[NodeSummary] = None  # a sweep on a cluster (schema 3): which node ran what, the node effect
    #: what the sweep found wrong with its own folder (io/seals.py, io/watch.py): a trial file set aside and measured
    #: again, a file or folder that vanished while it ran
    integrity: list[str] = Field(default_factory=list)
    #: the processes (by label) and phases that ``decision.budget_s`` left unmeasured: none starts that would end
    #: past the budget (``perftune.engine.budget``)
    left_unmeasured: list[str] = Field(default_factory=list)
