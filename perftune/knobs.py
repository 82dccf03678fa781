"""The one registry of knobs: name, allowed values, what it changes, its group, which backends run it.

The burst (``perftune/burst/``) applies knobs by name; this module is the single source for what a value may be
and what a backend can do with it, so ``perftune knobs``, plan validation and the burst never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from perftune.io.records import Note

BACKENDS = ("CPU", "GPU", "Ascend")
KnobGroup = Literal["data", "compute", "distributed"]
KnobKind = Literal["choice", "int", "bool"]
#: how a knob reaches a user's script from outside (``Knob.script_route``); "" = only through the plan's ``knob_args``
ScriptRoute = Literal["context", "dataset", "model", ""]
ConfinedSplit = Literal["data", "communication"]


@dataclass(frozen=True)
class Knob:
    name: str
    kind: KnobKind
    default: Any
    help: str
    #: data | compute | distributed: the sweep tries a data-bound baseline's data knobs first, else the compute ones
    group: KnobGroup
    choices: tuple = ()
    minimum: Optional[int] = None
    maximum: Optional[int] = None
    #: backends that can run every value; values outside ``runs_on`` are still tried, and a failure is "unsupported"
    runs_on: tuple = BACKENDS
    #: value -> backends known to refuse it (tried anyway: MindSpore's own message becomes the trial's reason)
    refused: dict = field(default_factory=dict)
    #: backends where MindSpore accepts the knob and silently ignores it
    no_effect_on: tuple = ()
    #: how the knob reaches a user's script (``workload: {script: ...}``) from outside: "context" (set before the
    #: script and kept against its own set_context), "dataset" (mindspore.dataset.config), "model" (where the
    #: script builds mindspore.train.Model / calls Model.train); "" = only through the plan's ``knob_args``
    script_route: ScriptRoute = ""
    #: a knob of the data pipeline alone (one pipeline's own argument, not process-wide state): a change of it is
    #: compared in one process, with both pipelines feeding one model in alternating windows (``engine/paired.py``)
    pairable: bool = False
    #: a knob of one model's own objects (its network, loss scaler, step, its pipeline's batch): a change of it is
    #: compared in one process with two models, each fed by its own pipeline (``engine/paired.py``)
    model_pairable: bool = False
    #: a slower change is tried again on top of the stack (``decision.retry_on_stack``): a data-pipeline change's
    #: extra threads only take cores from a compute-bound step, and can help once the stack made the step fast
    retry_when_slower: bool = False
    #: the split of the step a change of this knob is confined to (None: not confined): it can gain at most that
    #: split, so a baseline that hardly waits there does not race it (``perftune.engine.ceilings``)
    confined: Optional[ConfinedSplit] = None

    def normalize(self, value: Any) -> Any:
        """YAML 1.1 reads ``on``/``off`` as booleans; give them back their names where the knob has those choices."""
        if self.kind == "choice" and isinstance(value, bool) and {"on", "off"} <= set(self.choices):
            return "on" if value else "off"
        return value

    def check(self, value: Any) -> Optional[str]:
        """None when ``value`` is allowed, else what is allowed (for a one-line error)."""
        if self.kind == "bool":
            if isinstance(value, bool):
                return None
            return "allowed: true | false"
        if self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                return f"allowed: an integer{self._range()}"
            too_low = self.minimum is not None and value < self.minimum
            if too_low or (self.maximum is not None and value > self.maximum):
                return f"allowed: an integer{self._range()}"
            return None
        if value in self.choices and not isinstance(value, bool):
            return None
        return "allowed: " + " | ".join(str(c) for c in self.choices)

    def _range(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f" from {self.minimum} to {self.maximum}"
        if self.minimum is not None:
            return f" >= {self.minimum}"
        return ""

    def values_text(self) -> str:
        if self.kind == "bool":
            return "true | false"
        if self.kind == "int":
            return "integer" + self._range()
        return " | ".join(str(c) for c in self.choices)

    def known_refusal(self, value: Any, backend: str) -> bool:
        return backend in self.refused.get(value, ()) or backend not in self.runs_on


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in [
        Knob("batch_size", "int", 32, "samples per optimizer step (the dataset's batch)", "compute", minimum=1,
             maximum=65536, model_pairable=True),
        Knob("mode", "choice", "graph", "GRAPH_MODE: the step is compiled into one graph at its first call; "
             "PYNATIVE_MODE: each op runs eagerly as Python reaches it", "compute",
             choices=("graph", "pynative"), script_route="context"),
        Knob("jit_level", "choice", "O0", "compile level of the graph-mode step (O2: whole-graph sinking, Ascend); "
             "no effect in pynative mode, where nothing is compiled", "compute",
             choices=("O0", "O1", "O2"), refused={"O2": ("CPU",)}, script_route="context", model_pairable=True),
        Knob("graph_kernel", "choice", "off", "graph-kernel fusion of the graph-mode step (on = MindSpore's default "
             "opt level, O1/O2 = --opt_level); no effect in pynative mode", "compute",
             choices=("off", "on", "O1", "O2"), refused={"on": ("CPU",), "O1": ("CPU",), "O2": ("CPU",)},
             script_route="context"),
        Knob("amp_level", "choice", "O0", "automatic mixed precision: O0 fp32, O1 white-list fp16, O2 most ops "
             "fp16 (BN fp32), O3 all fp16", "compute", choices=("O0", "O1", "O2", "O3"), script_route="model",
             model_pairable=True),
        Knob("loss_scale", "choice", "none", "loss scaling for fp16 gradients: none, static (1024) or dynamic "
             "(grows 2x every 50 finite steps, halves and skips the update on overflow)", "compute",
             choices=("none", "static", "dynamic"), script_route="model", model_pairable=True),
        Knob("num_parallel_workers", "int", 1, "dataset worker threads for map and batch (MindSpore refuses more than "
             "the machine's cores)", "data", minimum=1, maximum=256, script_route="dataset", pairable=True,
             retry_when_slower=True, confined="data"),
        Knob("prefetch_size", "int", 16, "dataset queue depth per operator (ds.config.set_prefetch_size)", "data",
             minimum=1, maximum=1024, script_route="dataset", confined="data"),
        Knob("dataset_autotune", "bool", False, "MindSpore's own dataset autotuning (ds.config.set_enable_autotune): "
             "it adjusts workers and queue sizes while training runs; compare it with perftune's choice", "data",
             script_route="dataset", confined="data"),
        Knob("python_multiprocessing", "bool", False, "run the Python map in worker processes instead of threads "
             "(escapes the GIL)", "data", pairable=True, retry_when_slower=True, confined="data"),
        Knob("dataset_format", "choice", "numpy", "feed the data from NumPy arrays or from a MindRecord file "
             "(written once per dataset and reused)", "data", choices=("numpy", "mindrecord"), pairable=True,
             retry_when_slower=True, confined="data"),
        Knob("drop_remainder", "bool", True, "drop the last incomplete batch (avoids a shape change and a "
             "recompile)", "data"),
        Knob("grad_accum_steps", "int", 1, "split each batch into k micro-batches and accumulate their gradients "
             "(same samples per update, less activation memory)", "compute", minimum=1, maximum=64,
             model_pairable=True),
        Knob("recompute", "bool", False, "recompute the workload's recompute cells in backward instead of keeping "
             "activations", "compute", model_pairable=True),
        Knob("dataset_sink_mode", "bool", False, "sink the dataset to the device and run steps there without "
             "returning to Python", "compute", no_effect_on=("CPU",), script_route="model"),
        Knob("kernel_threads", "int", 0, "CPU kernel threads (op_tuning.threads_num); 0 = MindSpore's default",
             "compute", minimum=0, maximum=256, script_route="context"),
        Knob("dispatch_threads", "int", 0, "runtime dispatch threads (runtime.dispatch_threads_num); 0 = default",
             "compute", minimum=0, maximum=256, script_route="context"),
        Knob("train_step", "choice", "cell", "how the step is written: a Cell (TrainOneStepCell style) or a "
             "function around value_and_grad + the optimizer; in graph mode the Cell is compiled and the function "
             "wrapped in ms.jit (at jit_level), in pynative mode both run eagerly", "compute",
             choices=("cell", "function"), model_pairable=True),
        # -- distributed (perftune/runner/msrun.py): workers >= 2 launches the burst under msrun, one rank per worker
        Knob("workers", "int", 1, "ranks (processes) in total: 1 runs the burst in one process; >= 2 launches it "
             "with msrun, batch_size split evenly over the ranks (batch_size stays the global batch)", "distributed",
             minimum=1, maximum=4096),
        Knob("parallel_mode", "choice", "data_parallel", "set_auto_parallel_context(parallel_mode=...) when "
             "workers >= 2 (semi/auto parallel: MindSpore shards the operators; Ascend/GPU only)", "distributed",
             choices=("data_parallel", "semi_auto_parallel", "auto_parallel"),
             refused={"semi_auto_parallel": ("CPU",), "auto_parallel": ("CPU",)}),
        Knob("search_mode", "choice", "sharding_propagation", "strategy search of parallel_mode=auto_parallel "
             "(MindSpore 2.10 offers these three)", "distributed",
             choices=("sharding_propagation", "recursive_programming", "dynamic_programming")),
        Knob("gradients_mean", "bool", True, "data parallel: average (true) or sum (false) the gradients over the "
             "ranks", "distributed"),
    ]
}


def defaults() -> dict[str, Any]:
    return {name: knob.default for name, knob in KNOBS.items()}


def effective(values: dict[str, Any]) -> dict[str, Any]:
    """Every knob's value: the defaults overlaid with ``values`` (so a trial's id covers all of them)."""
    out = defaults()
    out.update(values)
    return out


def in_group(group: KnobGroup) -> tuple[str, ...]:
    """The knobs of one group, in registry order."""
    return tuple(name for name, knob in KNOBS.items() if knob.group == group)


def pairable(name: str) -> bool:
    """Whether knob ``name`` changes only one pipeline's own arguments (``Knob.pairable``): such a change can be
    compared inside one process."""
    return name in KNOBS and KNOBS[name].pairable


def model_pairable(name: str) -> bool:
    """Whether knob ``name`` changes only one model's own objects (``Knob.model_pairable``): such a change can be
    compared inside one process, with two models."""
    return name in KNOBS and KNOBS[name].model_pairable


def model_change(reference: dict[str, Any], candidate: dict[str, Any]) -> bool:
    """Whether two configurations' knobs differ in a model-side knob (``Knob.model_pairable``): a paired process
    of the two then builds two models, one per arm."""
    return any(model_pairable(k) for k in set(reference) | set(candidate) if reference.get(k) != candidate.get(k))


def confined(name: str) -> Optional[ConfinedSplit]:
    """The split of the step a change of knob ``name`` is confined to (``Knob.confined``; None for own knobs)."""
    return KNOBS[name].confined if name in KNOBS else None


def retry_when_slower(name: str) -> bool:
    """Whether a slower change of knob ``name`` is still tried on top of the stack (``Knob.retry_when_slower``)."""
    return name in KNOBS and KNOBS[name].retry_when_slower


def format_value(value: Any) -> str:
    """A knob value as plans and labels write it (booleans in YAML's lower case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def label_of(changes: dict[str, Any], empty: str = "baseline") -> str:
    """``+mode=graph +prefetch_size=4``: the label of a configuration by its changes from the baseline."""
    return " ".join(f"+{k}={format_value(v)}" for k, v in changes.items()) or empty


def no_effect_notes(values: dict[str, Any], backend: str) -> list[Note]:
    """Knobs set away from their default that MindSpore accepts but ignores on ``backend``."""
    notes = []
    for name, value in values.items():
        knob = KNOBS.get(name)  # a plan's own knob (``perftune.routes``) has no registry entry
        if knob is not None and backend in knob.no_effect_on and value != knob.default:
            notes.append(Note(kind="no_effect", knob=name, text=f"{name}={format_value(value)} has no effect on "
                                                                 f"{backend}: MindSpore accepts it and ignores it"))
    return notes
