"""``mlp``: a small, fast classifier for tests and the quickstart.

The data is synthetic but learnable: labels come from a fixed random "teacher" network, so the loss really falls
and an accuracy change is visible.  ``preprocess_ms`` adds a per-sample preprocessing cost in the dataset's map
(a sleep, as waiting on storage or a decoder would), which makes the data-pipeline knobs matter.
"""

from __future__ import annotations

import time

import numpy as np
from mindspore import nn, ops

from perftune.workloads.base import Workload

DEFAULTS = {
    "in_dim": 256,
    "hidden": 512,
    "layers": 2,
    "classes": 16,
    "train_samples": 8192,
    "val_samples": 512,
    "learning_rate": 1e-3,
    "preprocess_ms": 0.0,
}


def check_params(params: dict) -> dict:
    unknown = sorted(set(params) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"mlp: unknown workload_params {unknown} (allowed: {', '.join(DEFAULTS)})")
    merged = {**DEFAULTS, **params}
    for key in ("in_dim", "hidden", "layers", "classes", "train_samples", "val_samples"):
        if not isinstance(merged[key], int) or isinstance(merged[key], bool) or merged[key] < 1:
            raise ValueError(f"mlp: workload_params.{key} must be a positive integer (got {merged[key]!r})")
    for key in ("learning_rate", "preprocess_ms"):
        if not isinstance(merged[key], (int, float)) or merged[key] < 0:
            raise ValueError(f"mlp: workload_params.{key} must be a number >= 0 (got {merged[key]!r})")
    return merged


def _teacher_data(rng: np.random.Generator, n: int, in_dim: int, classes: int, w1, w2):
    x = rng.standard_normal((n, in_dim)).astype(np.float32)
    logits = np.tanh(x @ w1) @ w2
    y = logits.argmax(axis=1).astype(np.int32).reshape(n, 1)
    return x, y


class DenseBlock(nn.Cell):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.dense = nn.Dense(d_in, d_out)
        self.act = nn.ReLU()

    def construct(self, x):
        return self.act(self.dense(x))


class MLP(nn.Cell):
    def __init__(self, in_dim: int, hidden: int, layers: int, classes: int):
        super().__init__()
        dims = [in_dim] + [hidden] * layers
        self.blocks = nn.CellList([DenseBlock(a, b) for a, b in zip(dims[:-1], dims[1:])])
        self.head = nn.Dense(dims[-1], classes)

    def construct(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Loss(nn.Cell):
    """Cross-entropy with the (B, 1) label column squeezed (1-D columns fail under NumPy 2)."""

    def __init__(self):
        super().__init__()
        self.ce = nn.CrossEntropyLoss()

    def construct(self, logits, labels):
        return self.ce(logits, ops.squeeze(labels, -1))


def build(params: dict, seed: int) -> Workload:
    p = check_params(params)
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((p["in_dim"], 64)).astype(np.float32) / np.sqrt(p["in_dim"])
    w2 = rng.standard_normal((64, p["classes"])).astype(np.float32)
    x_train, y_train = _teacher_data(rng, p["train_samples"], p["in_dim"], p["classes"], w1, w2)
    x_val, y_val = _teacher_data(rng, p["val_samples"], p["in_dim"], p["classes"], w1, w2)

    network = MLP(p["in_dim"], p["hidden"], p["layers"], p["classes"])
    lr = float(p["learning_rate"])
    delay_s = float(p["preprocess_ms"]) / 1000.0

    def preprocess(x, y):
        time.sleep(delay_s)
        return x, y

    dims = [p["in_dim"]] + [p["hidden"]] * p["layers"] + [p["classes"]]
    weights = sum(a * b for a, b in zip(dims[:-1], dims[1:]))
    return Workload(
        name="mlp",
        network=network,
        loss_fn=Loss(),
        make_optimizer=lambda params_: nn.Adam(params_, learning_rate=lr),
        train_columns={"x": x_train, "label": y_train},
        val_columns={"x": x_val, "label": y_val},
        label_column="label",
        preprocess=preprocess if delay_s > 0 else None,
        recompute_cell_names=[f"blocks.{i}" for i in range(p["layers"])],
        flops_per_sample=6.0 * weights,  # forward 2*weights, backward 4*weights multiply-adds
    )
