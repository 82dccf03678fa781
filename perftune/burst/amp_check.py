"""Apply AMP and read back its *effect*, not the wrapper it returns; read back the loss scaler actually used.

``amp.auto_mixed_precision(net, "O1")`` rewrites the source of each cell's ``construct`` and casts around the
white-listed layers it sees called there.  A layer called from another method of the cell (``self.features(x)``, a
common pattern in wrappers that return tuples) is not seen: O1 then returns a new network that computes exactly what
O0 did.  So the burst runs one forward pass on a few training rows before and after AMP (eval mode, so BatchNorm
statistics and dropout are untouched) and records how much the output moved: bit-identical outputs mean nothing ran
in reduced precision.  When O1 changed nothing, perftune applies O1 per layer instead (each white-listed layer runs
in float16 and hands float32 on) and probes again; if that changes nothing either, the trial says so in a note.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from perftune.io.records import Note

PROBE_ROWS = 4  # rows of the training data in the forward probe: enough to show a change, cheap to run


@dataclass
class AmpOutcome:
    network: Any
    effect: dict[str, Any]
    notes: list[Note] = field(default_factory=list)


def white_list_types() -> tuple:
    """The layer types MindSpore's O1 runs in float16 (its own white list, cells only)."""
    from mindspore import nn
    from mindspore.train.amp import AMP_WHITE_LIST

    return tuple(t for t in AMP_WHITE_LIST if isinstance(t, type) and issubclass(t, nn.Cell))


def forward_outputs(network, inputs: tuple) -> list[np.ndarray]:
    """One forward pass in eval mode (no state changes), every output as float64; the training flag is restored.

    Through a fresh wrapper cell each time: in graph mode a second call of the same cell reuses its compiled graph
    even after its layers were switched to float16, and the probe would see the old network.
    """
    from mindspore import nn

    class Probe(nn.Cell):
        def __init__(self, inner):
            super().__init__(auto_prefix=False)
            self.inner = inner

        def construct(self, *args):
            return self.inner(*args)

    training = bool(network.training)
    network.set_train(False)
    try:
        out = Probe(network)(*inputs)
    finally:
        network.set_train(training)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.asnumpy().astype(np.float64) for o in outs if hasattr(o, "asnumpy")]


def max_change(before: list[np.ndarray], after: list[np.ndarray]) -> float:
    if len(before) != len(after) or any(a.shape != b.shape for a, b in zip(before, after)):
        return float("inf")
    return max((float(np.max(np.abs(a - b))) if a.size else 0.0 for a, b in zip(before, after)), default=0.0)


def cast_output_cell(cell, dtype):
    """``cell`` run in ``dtype`` (MindSpore casts its inputs and weights), its output cast back to float32."""
    import mindspore as ms
    from mindspore import nn, ops

    class CastBack(nn.Cell):
        def __init__(self, inner):
            super().__init__(auto_prefix=False)  # keep the parameter names the optimizer and checkpoints know
            self.inner = inner.to_float(dtype)

        def construct(self, *args):
            return ops.cast(self.inner(*args), ms.float32)

    return CastBack(cell)


def per_layer_o1(network, dtype=None) -> int:
    """O1 by layer: every white-listed layer inside ``network`` runs in float16 and returns float32.  Returns how
    many layers were switched (in place)."""
    import mindspore as ms

    dtype = dtype or ms.float16
    kinds = white_list_types()
    targets = [(name, cell) for name, cell in network.cells_and_names() if name and isinstance(cell, kinds)]
    for name, cell in targets:
        parent = network
        *path, attr = name.split(".")
        for part in path:
            parent = parent.name_cells()[part]
        setattr(parent, attr, cast_output_cell(cell, dtype))
    return len(targets)


def apply_amp(network, level: str, inputs: tuple) -> AmpOutcome:
    """``amp.auto_mixed_precision`` with a forward probe before and after; see the module docstring."""
    from mindspore import amp

    if level == "O0":
        return AmpOutcome(network, {"level": "O0", "method": "none"})
    before = forward_outputs(network, inputs)
    amped = amp.auto_mixed_precision(network, level)
    change = max_change(before, forward_outputs(amped, inputs))
    effect: dict[str, Any] = {"level": level, "method": "auto_mixed_precision", "probe_rows": _rows(inputs),
                              "max_abs_output_change": change}
    notes: list[Note] = []
    if change == 0.0 and level == "O1":
        switched = per_layer_o1(amped)
        change = max_change(before, forward_outputs(amped, inputs))
        effect.update(method="per-layer O1 (auto_mixed_precision changed nothing)", float16_layers=switched,
                      max_abs_output_change=change)
        if change > 0.0:
            notes.append(Note(kind="info", knob="amp_level",
                              text=f"amp_level=O1: MindSpore's O1 rewrite changed nothing on {type(network).__name__} "
                                   f"(its layers are called from methods other than construct); perftune ran its "
                                   f"{switched} white-listed layers in float16 instead"))
    effect["changed"] = change > 0.0
    if change == 0.0:
        notes.append(Note(kind="no_effect", knob="amp_level",
                          text=f"amp_level={level} has no effect on this network: a forward pass on {_rows(inputs)} "
                               f"training rows gives outputs identical to O0 ({_reason(level, amped)})"))
    return AmpOutcome(amped, effect, notes)


def probe_inputs(train_columns: dict, label_column: str, rows: int = PROBE_ROWS) -> tuple:
    """The first rows of each input column, as tensors: what the network is called with in a step."""
    import mindspore as ms

    return tuple(ms.Tensor(np.ascontiguousarray(col[:rows])) for name, col in train_columns.items()
                 if name != label_column)


def scaler_read_back(scaler, scaled: bool) -> dict[str, Any]:
    """``loss_scaler``: ``"none"`` when the step leaves scaling out, else the class; ``loss_scale_value``: its scale."""
    if scaler is None or not scaled:
        return {"loss_scaler": "none", "loss_scale_value": None}
    return {"loss_scaler": type(scaler).__name__, "loss_scale_value": float(scaler.scale_value.asnumpy())}


def _rows(inputs: tuple) -> Optional[int]:
    return int(inputs[0].shape[0]) if inputs else None


def _reason(level: str, network) -> str:
    if level == "O1":
        return ("O1 casts only white-listed layers called directly in a construct, and per-layer O1 found none "
                "that changed the output")
    return f"{type(network).__name__} computes in float32 throughout"
