"""The workload protocol: what perftune needs from a model to run a burst on it.

A workload is a function ``build(params: dict, seed: int) -> Workload``.  It supplies the network, the loss, the
optimizer and the data as NumPy columns; perftune itself builds the dataset pipeline, the training step and the
timing around them, so that every data and step knob works the same way for every workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np


@dataclass
class Workload:
    name: str
    #: the model; called as ``network(*inputs)`` with the batch's input columns
    network: Any
    #: ``loss_fn(logits, label) -> scalar``; label is the batch's label column as stored (keep it 2-D, see notes)
    loss_fn: Any
    #: ``make_optimizer(params) -> mindspore.nn.Optimizer``
    make_optimizer: Callable[[list], Any]
    #: column name -> array; first axis is the sample.  Inputs first, the label column last.
    train_columns: dict[str, np.ndarray]
    val_columns: dict[str, np.ndarray]
    label_column: str
    #: optional per-row Python preprocessing, applied in the dataset's ``map`` (workers and multiprocessing
    #: knobs act on it).  Takes and returns the row's columns in order.
    preprocess: Optional[Callable[..., tuple]] = None
    #: tokens per sample for language models (tokens/s is reported where set)
    tokens_per_sample: Optional[int] = None
    #: names (as in ``network.cells_and_names()``) of the cells to recompute when the ``recompute`` knob is on,
    #: e.g. the transformer blocks.  Names, not objects: AMP O1 rewrites the network into new cell objects.
    recompute_cell_names: list[str] = field(default_factory=list)
    #: forward+backward FLOPs for one sample (for MFU); None when unknown
    flops_per_sample: Optional[float] = None
    #: ``generate(network, new_tokens) -> list[int]`` greedy sample for repetition checks (LMs only)
    generate: Optional[Callable[[Any, int], list]] = None
    #: turns generated ids back into text for the report
    decode: Optional[Callable[[list], str]] = None
    extra: dict = field(default_factory=dict)

    @property
    def input_columns(self) -> list[str]:
        return [c for c in self.train_columns if c != self.label_column]

    def check(self) -> None:
        """Refuse a malformed workload early, with the field that is wrong."""
        if self.label_column not in self.train_columns:
            raise ValueError(f"workload {self.name!r}: label column {self.label_column!r} not in train_columns")
        if list(self.train_columns)[-1] != self.label_column:
            raise ValueError(f"workload {self.name!r}: the label column must come last in train_columns")
        if set(self.train_columns) != set(self.val_columns):
            raise ValueError(f"workload {self.name!r}: train and validation columns differ")
        sizes = {len(v) for v in self.train_columns.values()}
        if len(sizes) != 1:
            raise ValueError(f"workload {self.name!r}: train columns have different lengths {sorted(sizes)}")
        for name, col in {**self.train_columns}.items():
            if col.ndim < 2:
                raise ValueError(
                    f"workload {self.name!r}: column {name!r} is 1-D; use shape (N, 1) (MindSpore datasets "
                    "under NumPy 2 refuse 1-D and scalar columns)"
                )

    @property
    def train_size(self) -> int:
        return len(next(iter(self.train_columns.values())))


def repetition_rate(ids: list, n: int = 3) -> float:
    """Share of n-grams in ``ids`` that already occurred earlier: ~0 for varied text, -> 1 for a model that loops."""
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    if not grams:
        return 0.0
    seen: set = set()
    repeats = 0
    for g in grams:
        if g in seen:
            repeats += 1
        seen.add(g)
    return repeats / len(grams)
