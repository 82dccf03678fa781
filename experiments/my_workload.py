"""An example of a user's own workload: a small convolutional classifier on synthetic 16x16 images.

Use it from a plan as ``workload: experiments.my_workload:build`` (run perftune from the repository root, or put
the module anywhere on PYTHONPATH).  A workload is one function ``build(params, seed) -> perftune.Workload``:
perftune builds the dataset pipeline, the training step and the timing around it.
"""

from __future__ import annotations

import numpy as np
from mindspore import nn, ops

from perftune.workloads.base import Workload

DEFAULTS = {"channels": 16, "train_samples": 2048, "val_samples": 256, "learning_rate": 1e-3}


class SmallCNN(nn.Cell):
    def __init__(self, channels: int, classes: int = 4):
        super().__init__()
        self.body = nn.SequentialCell(
            nn.Conv2d(1, channels, 3, pad_mode="same"), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(channels, channels, 3, pad_mode="same"), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Flatten(), nn.Dense(channels * 16, classes),
        )

    def construct(self, x):
        return self.body(x)


class SqueezedCrossEntropy(nn.Cell):
    """Labels are stored (N, 1): MindSpore datasets under NumPy 2 refuse 1-D columns."""

    def __init__(self):
        super().__init__()
        self.ce = nn.CrossEntropyLoss()

    def construct(self, logits, labels):
        return self.ce(logits, ops.squeeze(labels, -1))


def _images(rng: np.random.Generator, n: int):
    """Four classes: a bright bar in one of four quadrants, plus noise."""
    y = rng.integers(0, 4, size=n)
    x = rng.normal(0, 0.5, size=(n, 1, 16, 16)).astype(np.float32)
    for i, cls in enumerate(y):
        r, c = divmod(int(cls), 2)
        x[i, 0, r * 8 + 2:r * 8 + 6, c * 8:c * 8 + 8] += 2.0
    return x, y.astype(np.int32).reshape(n, 1)


def build(params: dict, seed: int) -> Workload:
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"my_workload: unknown workload_params {sorted(unknown)} (allowed: {sorted(DEFAULTS)})")
    p = {**DEFAULTS, **params}
    rng = np.random.default_rng(seed)
    x_train, y_train = _images(rng, p["train_samples"])
    x_val, y_val = _images(rng, p["val_samples"])
    network = SmallCNN(p["channels"])
    return Workload(
        name="my_workload",
        network=network,
        loss_fn=SqueezedCrossEntropy(),
        make_optimizer=lambda weights: nn.Adam(weights, learning_rate=p["learning_rate"]),
        train_columns={"image": x_train, "label": y_train},
        val_columns={"image": x_val, "label": y_val},
        label_column="label",
    )
