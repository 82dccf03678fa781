"""A regression whose targets sit on a large offset: harm that shows only late (issue 37).

The targets are ``offset`` (default 1000) plus a smooth function of the inputs (a fixed random "teacher", scale
about 1), and the network adds the offset to its output.  In float32 the model keeps improving for thousands of
samples; in float16 (AMP O3) the output near 1000 is quantised to steps of 0.5, so its mean squared error cannot
fall below about 0.5^2 / 12 = 0.02: a floor that a short accuracy window, where both are still far above it, does
not see.  ``lr_growth`` multiplies the learning rate linearly up to that factor over ``lr_ramp_samples`` samples:
a rate that is fine early and makes training diverge later.

Used by ``experiments/benchmarks/accuracy_gate.py --workloads offset``; as a workload:
``workload: experiments.offset_regression:build`` from the repository root.
"""

from __future__ import annotations

import numpy as np
from mindspore import Tensor, nn
from mindspore import dtype as mstype

from perftune.workloads.base import Workload

DEFAULTS = {"in_dim": 16, "hidden": 64, "offset": 1000.0, "train_samples": 8192, "val_samples": 512,
            "learning_rate": 1e-3, "lr_growth": 1.0, "lr_ramp_samples": 4096, "batch_for_ramp": 32}


class OffsetNet(nn.Cell):
    """A two-layer MLP whose output is added to the offset (in the network's own precision)."""

    def __init__(self, in_dim: int, hidden: int, offset: float):
        super().__init__()
        self.body = nn.SequentialCell([nn.Dense(in_dim, hidden), nn.Tanh(), nn.Dense(hidden, hidden), nn.Tanh(),
                                       nn.Dense(hidden, 1)])
        self.offset = offset

    def construct(self, x):
        return self.body(x) + self.offset


def _schedule(p: dict, steps: int = 200_000) -> object:
    """The learning rate per step: constant, or growing linearly to ``lr_growth`` x over the ramp."""
    lr = float(p["learning_rate"])
    if p["lr_growth"] == 1.0:
        return lr
    ramp = max(1, int(p["lr_ramp_samples"]) // int(p["batch_for_ramp"]))
    t = np.minimum(np.arange(steps, dtype=np.float32) / ramp, 1.0)
    return Tensor((lr * (1.0 + (float(p["lr_growth"]) - 1.0) * t)).astype(np.float32), mstype.float32)


def build(params: dict, seed: int) -> Workload:
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"offset_regression: unknown workload_params {sorted(unknown)} (allowed: {sorted(DEFAULTS)})")
    p = {**DEFAULTS, **params}
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((p["in_dim"], 32)).astype(np.float32) / np.sqrt(p["in_dim"])
    w2 = rng.standard_normal((32, 1)).astype(np.float32) / np.sqrt(32)
    v = rng.standard_normal((p["in_dim"], 1)).astype(np.float32) / np.sqrt(p["in_dim"])

    def labelled(count: int) -> dict[str, np.ndarray]:
        x = rng.standard_normal((count, p["in_dim"])).astype(np.float32)
        y = (p["offset"] + x @ v + 0.5 * np.tanh(x @ w1) @ w2).astype(np.float32)
        return {"x": x, "y": y}

    schedule = _schedule(p)
    return Workload(
        name="offset_regression",
        network=OffsetNet(p["in_dim"], p["hidden"], float(p["offset"])),
        loss_fn=nn.MSELoss(),
        make_optimizer=lambda weights: nn.Adam(weights, learning_rate=schedule),
        train_columns=labelled(p["train_samples"]),
        val_columns=labelled(p["val_samples"]),
        label_column="y",
    )
