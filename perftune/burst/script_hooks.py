"""How knobs reach an unchanged script from outside: the context before it starts (kept when the script calls
``set_context`` itself), ``mindspore.dataset.config``, and ``mindspore.train.Model`` (its construction and every
``Model.train`` call, which also gets perftune's callback).  What the script asked for is recorded, never lost.

Only the knobs the plan names (``TrialSpec.script_knobs``) are imposed; the others stay as the script sets them.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

from perftune import knobs as knob_registry
from perftune.burst.callback import active_figures
from perftune.burst.context import GRAPH_KERNEL_FLAGS
from perftune.burst.failures import KnobRefused, one_line
from perftune.burst.meter import BurstDone, Meter
from perftune.burst.script_loop import LoopState, wrap_iterator_factory
from perftune.io.records import Note, TrialSpec

#: set_context keywords that a knob owns: dropped from the script's call when that knob is imposed
CONTEXT_KEYWORDS = {"mode": ("mode",), "graph_kernel": ("enable_graph_kernel", "graph_kernel_flags")}
STATIC_LOSS_SCALE = 1024.0


def printable(value: Any) -> Any:
    return value if isinstance(value, (bool, int, float, str, type(None))) else repr(value)


def apply_script_context(spec: TrialSpec, imposed: set[str]) -> None:
    """The context knobs the plan names, before the script starts (device: always the plan's)."""
    import mindspore as ms

    k = spec.knobs
    ms.set_device(spec.device)
    if "mode" in imposed:
        ms.set_context(mode=ms.GRAPH_MODE if k["mode"] == "graph" else ms.PYNATIVE_MODE)
    if "jit_level" in imposed:
        ms.set_context(jit_config={"jit_level": k["jit_level"]})
    if "graph_kernel" in imposed and k["graph_kernel"] != "off":
        ms.set_context(enable_graph_kernel=True, graph_kernel_flags=GRAPH_KERNEL_FLAGS[k["graph_kernel"]])
    if "kernel_threads" in imposed and k["kernel_threads"] and spec.device == "CPU":
        ms.device_context.cpu.op_tuning.threads_num(int(k["kernel_threads"]))
    if "dispatch_threads" in imposed and k["dispatch_threads"]:
        ms.runtime.dispatch_threads_num(int(k["dispatch_threads"]))


def apply_dataset_config(k: dict, imposed: set[str]) -> None:
    import mindspore.dataset as ds

    if "num_parallel_workers" in imposed:
        ds.config.set_num_parallel_workers(int(k["num_parallel_workers"]))
    if "prefetch_size" in imposed:
        ds.config.set_prefetch_size(int(k["prefetch_size"]))
    if "dataset_autotune" in imposed:
        ds.config.set_enable_autotune(bool(k["dataset_autotune"]))


def pipeline_ops(dataset) -> list[dict[str, Any]]:
    """Every operator of the pipeline that takes ``num_parallel_workers``, with what it was given (None: the
    config's value, which the knob sets; ``default``: the value is the operator's own default, e.g.
    GeneratorDataset's 1, so the script may not have written it)."""
    out, todo, seen = [], [dataset], set()
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        todo += list(getattr(node, "children", None) or [])
        parameter = inspect.signature(type(node).__init__).parameters.get("num_parallel_workers")
        if parameter is None:
            continue
        name = type(node).__name__
        if name == "MapDataset":
            name = f"map({', '.join(getattr(op, '__name__', type(op).__name__) for op in node.operations)})"
        value = getattr(node, "num_parallel_workers", None)
        out.append({"op": name, "num_parallel_workers": value,
                    "default": value is not None and value == parameter.default})
    return out


def pinned_notes(ops: list[dict[str, Any]], workers: int) -> list[Note]:
    """The operators where the script's own value keeps ``num_parallel_workers`` from acting, by name.  When no map
    (the per-sample work) takes the knob, its verdict is "no effect".  An operator's own default (a source's 1) is
    in the read-back, not in a note: the script did not write it."""
    pinned = [o for o in ops if o["num_parallel_workers"] not in (None, workers) and not o["default"]]
    if not pinned:
        return []
    where = ", ".join(f"num_parallel_workers={o['num_parallel_workers']} on {o['op']}" for o in pinned)
    maps = [o for o in ops if o["op"].startswith("map(")] or ops
    if all(o in pinned for o in maps):
        reached = [o["op"] for o in ops if o["num_parallel_workers"] is None]
        return [Note(kind="no_effect", knob="num_parallel_workers", text=(
            f"the script sets {where}; the knob (num_parallel_workers={workers}) did not reach "
            + ("any operator" if not reached else f"the per-sample work (only {', '.join(reached)})")))]
    return [Note(kind="warning", knob="num_parallel_workers", text=(
        f"the script sets {where}; the knob (num_parallel_workers={workers}) did not reach "
        f"{'that operator' if len(pinned) == 1 else 'those operators'}"))]


def loss_scale_manager(value: str):
    from mindspore import amp

    if value == "static":
        return amp.FixedLossScaleManager(STATIC_LOSS_SCALE, drop_overflow_update=False)
    if value == "dynamic":
        return amp.DynamicLossScaleManager(2.0**16, 2, 50)
    return None


def noting_network(original: Callable, hooks: Any, also: Optional[Callable[[bool], None]] = None) -> Callable:
    """``Cell.set_train`` / ``Cell.set_grad`` noting the first Cell put in training mode or asked for gradients as
    the network the script trains (``ScriptHooks.network``; ``nn.TrainOneStepCell`` asks its network)."""

    def call(cell, flag=True):
        if also is not None:
            also(flag)
        if flag and hooks.network is None:
            hooks.network = cell
        return original(cell, flag)

    return call


class ScriptHooks:
    """Installed around the script's run (``install`` / ``remove``); ``asked`` holds what the script asked for."""

    def __init__(self, spec: TrialSpec, imposed: set[str], meter: Meter, make_callback: Callable[[], Any]):
        self.spec = spec
        self.k = spec.knobs
        self.imposed = imposed
        self.meter = meter
        self.make_callback = make_callback
        self.asked: dict[str, list] = {"set_context": [], "set_device": [], "Model": [], "Model.train": []}
        self.notes: list[Note] = []
        self.pipeline: list[dict[str, Any]] = []
        self.trained = False
        self.loop = LoopState(meter)  # the script's own loop, found by its dataset iterators (``script_loop``)
        #: the network the script trains: ``Model``'s, else the first Cell its loop put in training mode or asked
        #: for gradients (``nn.TrainOneStepCell`` asks its network)
        self.network: Any = None
        self.originals: list[tuple[Any, str, Any]] = []

    def patch(self, owner: Any, name: str, replacement: Any) -> None:
        self.originals.append((owner, name, getattr(owner, name)))
        setattr(owner, name, replacement)

    def install(self) -> None:
        import mindspore as ms
        from mindspore import context, device_manager
        from mindspore.train import Model

        original_set_context = context.set_context
        dropped = {kw for knob, kws in CONTEXT_KEYWORDS.items() if knob in self.imposed for kw in kws}

        def set_context(**kwargs):
            self.asked["set_context"].append({key: printable(v) for key, v in kwargs.items()})
            kept = {key: v for key, v in kwargs.items() if key not in dropped and key != "device_target"}
            if "jit_config" in kept and "jit_level" in self.imposed and isinstance(kept["jit_config"], dict):
                kept["jit_config"] = {**kept["jit_config"], "jit_level": self.k["jit_level"]}
            if kept:
                original_set_context(**kept)

        def set_device(device_target, device_id=None):  # the plan's device stays
            self.asked["set_device"].append({"device_target": device_target, "device_id": device_id})

        for owner in (ms, context):
            self.patch(owner, "set_context", set_context)
        for owner in (ms, device_manager):
            self.patch(owner, "set_device", set_device)
        self.patch(Model, "__init__", self.wrap_init(Model.__init__))
        self.patch(Model, "train", self.wrap_train(Model.train))
        self.patch(Model, "fit", self.wrap_train(Model.fit))  # fit trains through Model._train, not Model.train
        self.patch(Model, "eval", self.inside_model(Model.eval))
        self.install_loop()

    def install_loop(self) -> None:
        """A custom loop's steps, found by the dataset iterators it takes its batches from."""
        from mindspore import nn
        from mindspore.dataset.engine.datasets import Dataset

        for name in ("create_tuple_iterator", "create_dict_iterator"):
            self.patch(Dataset, name, wrap_iterator_factory(getattr(Dataset, name), self.loop))
        loop = self.loop

        def eval_mode(training: bool) -> None:
            loop.eval_mode = not training

        self.patch(nn.Cell, "set_train", noting_network(nn.Cell.set_train, self, eval_mode))
        self.patch(nn.Cell, "set_grad", noting_network(nn.Cell.set_grad, self))

    def inside_model(self, original):
        """``Model``'s own iteration is measured by perftune's callback, not as a custom loop."""
        loop = self.loop

        def call(*args, **kwargs):
            loop.in_model += 1
            try:
                return original(*args, **kwargs)
            finally:
                loop.in_model -= 1

        call.__name__ = original.__name__
        return call

    def remove(self) -> None:
        for owner, name, original in reversed(self.originals):
            setattr(owner, name, original)
        self.originals = []

    def wrap_init(self, original):
        signature = inspect.signature(original)
        hooks = self

        def init(model, *args, **kwargs):
            bound = signature.bind(model, *args, **kwargs)
            extra = dict(bound.arguments.pop("kwargs", {}))
            arguments = {name: v for name, v in bound.arguments.items() if name != "self"}
            hooks.network = arguments.get("network", hooks.network)
            hooks.asked["Model"].append({"amp_level": printable(arguments.get("amp_level", "O0")),
                                         "loss_scale_manager": printable(extra.get("loss_scale_manager"))})
            if "amp_level" in hooks.imposed:
                arguments["amp_level"] = hooks.k["amp_level"]
            if "loss_scale" in hooks.imposed:
                extra.pop("loss_scale_manager", None)
                manager = loss_scale_manager(hooks.k["loss_scale"])
                if manager is not None:
                    extra["loss_scale_manager"] = manager
            try:
                original(model, **arguments, **extra)
            except (ValueError, TypeError, RuntimeError) as exc:
                changed = [n for n in ("amp_level", "loss_scale") if n in hooks.imposed]
                if not changed:
                    raise
                values = ", ".join(f"{n}={knob_registry.format_value(hooks.k[n])}" for n in changed)
                raise KnobRefused(f"{values}: mindspore.train.Model refuses it on {hooks.spec.device}: "
                                  f"{one_line(exc)}") from exc

        return init

    def wrap_train(self, original):
        signature = inspect.signature(original)
        hooks = self

        def train(model, *args, **kwargs):
            arguments = signature.bind(model, *args, **kwargs).arguments
            arguments.pop("self", None)
            hooks.asked["Model.train"].append({"epoch": printable(arguments.get("epoch")),
                                               "dataset_sink_mode": arguments.get("dataset_sink_mode", False),
                                               **({"method": "fit"} if original.__name__ == "fit" else {})})
            if hooks.meter.done:  # the burst already has its steps: a later train call of the script is skipped
                raise BurstDone()
            if not hooks.pipeline:
                hooks.read_pipeline(arguments.get("train_dataset"))
            if "dataset_sink_mode" in hooks.imposed:
                arguments["dataset_sink_mode"] = bool(hooks.k["dataset_sink_mode"])
            callbacks = arguments.get("callbacks")
            callbacks = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) \
                else [callbacks]
            arguments["callbacks"] = callbacks + [hooks.make_callback()]  # last: its step time holds theirs
            valid = arguments.get("valid_dataset")  # Model.fit: the script's validation, run at equal samples seen
            figures = active_figures()
            if valid is not None and figures is not None and figures.evaluate is None:
                figures.evaluate = lambda: model.eval(valid, dataset_sink_mode=False)
            hooks.trained = True
            hooks.loop.in_model += 1
            try:
                out = original(model, **arguments)
            finally:
                hooks.loop.in_model -= 1
            if hooks.meter.done:
                raise BurstDone()
            return out

        return train

    def read_pipeline(self, dataset) -> None:
        if dataset is None:
            return
        try:
            self.pipeline = pipeline_ops(dataset)
        except Exception as exc:  # noqa: BLE001 - the read-back is evidence, not a requirement
            self.notes.append(Note(kind="warning", text=f"could not read the script's pipeline back: {exc}"))
            return
        if "num_parallel_workers" in self.imposed:
            self.notes += pinned_notes(self.pipeline, int(self.k["num_parallel_workers"]))

    def read_back(self) -> dict[str, Any]:
        """What ran, after the script: the context and dataset config as MindSpore reports them, and what the
        script asked for."""
        import mindspore as ms
        import mindspore.dataset as ds

        jit = ms.get_context("jit_config") or {}
        return {
            "mode": "graph" if ms.get_context("mode") == ms.GRAPH_MODE else "pynative",
            "device": str(ms.get_context("device_target")),
            "jit_level": jit.get("jit_level") or None,
            "graph_kernel": bool(ms.get_context("enable_graph_kernel")),
            "num_parallel_workers": ds.config.get_num_parallel_workers(),
            "prefetch_size": ds.config.get_prefetch_size(),
            "dataset_autotune": bool(ds.config.get_enable_autotune()),
            "pipeline_ops": self.pipeline,
            "imposed": sorted(self.imposed),
            "script_asked": {key: v for key, v in self.asked.items() if v},
        }

    def custom_loop_refusal(self) -> Optional[str]:
        """Why a custom loop (``perftune.steps``) cannot run this trial: Model knobs set away from their default."""
        changed = [f"{name}={knob_registry.format_value(self.k[name])}" for name in sorted(self.imposed)
                   if name in knob_registry.KNOBS and knob_registry.KNOBS[name].script_route == "model"
                   and self.k[name] != knob_registry.KNOBS[name].default]
        if not changed:
            return None
        return (f"{', '.join(changed)}: the script trains with a custom loop, without mindspore.train.Model, where "
                "perftune cannot apply this knob; map it to the script's own option with workload.knob_args")
