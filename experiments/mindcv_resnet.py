"""A model from a MindSpore model library as a perftune workload: mindcv's ResNet-18 on synthetic 32x32 images.

Shows perftune beside a user's stack (.ci/README.md, "Compatibility"): with mindcv in the venv that holds perftune
(it is in the ``test`` extra), ``perftune run experiments/mindcv_resnet.yaml`` from the repository root.  mindcv 0.3.0
declares only ``numpy>=1.17, PyYAML>=5.3, tqdm``, so it installs beside every supported MindSpore and NumPy.
mindcv builds its models in inference mode; the burst's train step switches them to training.

The images are noise plus a coarse pattern: a ``grid`` x ``grid`` grid of per-channel offsets (``signal`` times a
standard normal each), and the label is the class whose projection of those offsets by a fixed random linear
"teacher" is largest.  A task the network generalises from: 4096 samples at batch 16 took the validation loss from
ln 10 = 2.30 to 1.18-1.44 (five seeds through perftune, 2048 images of 16 x 16; accuracy_gate.py).  The
first teacher projected every pixel: the network memorised the training images instead (its training loss fell to
0.01-0.05 while validation stayed at 2.9-4.5, measured 2026-12-04), and with random labels a short run's validation
loss is chaotic (mode=graph was "accuracy rejected +17%" for no reason but that; issue 14's closing note).
"""

from __future__ import annotations

import numpy as np
from mindspore import nn, ops

from perftune.workloads.base import Workload

DEFAULTS = {"model": "resnet18", "image_size": 32, "classes": 10, "train_samples": 512, "val_samples": 64,
            "learning_rate": 1e-3, "grid": 2, "signal": 0.5}


class SqueezedLoss(nn.Cell):
    """perftune stores labels as (N, 1) columns; mindcv's losses want them 1-D."""

    def __init__(self, loss):
        super().__init__()
        self.loss = loss

    def construct(self, logits, labels):
        return self.loss(logits, ops.squeeze(labels, -1))


def build(params: dict, seed: int) -> Workload:
    import mindcv

    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"mindcv_resnet: unknown workload_params {sorted(unknown)} (allowed: {sorted(DEFAULTS)})")
    p = {**DEFAULTS, **params}
    rng = np.random.default_rng(seed)
    size, n, n_val, grid = p["image_size"], p["train_samples"], p["val_samples"], p["grid"]
    if grid < 1 or size % grid:
        raise ValueError(f"mindcv_resnet: grid must divide image_size ({size}), got {grid}")
    network = mindcv.create_model(p["model"], num_classes=p["classes"], pretrained=False)
    teacher = rng.standard_normal((3 * grid * grid, p["classes"])).astype(np.float32)

    def labelled(count: int) -> dict[str, np.ndarray]:
        offsets = rng.standard_normal((count, 3, grid, grid)).astype(np.float32)
        pattern = np.repeat(np.repeat(offsets, size // grid, axis=2), size // grid, axis=3)
        images = (rng.standard_normal((count, 3, size, size)) + p["signal"] * pattern).astype(np.float32)
        labels = np.argmax(offsets.reshape(count, -1) @ teacher, axis=1).reshape(-1, 1).astype(np.int32)
        return {"image": images, "label": labels}

    return Workload(
        name=f"mindcv_{p['model']}",
        network=network,
        loss_fn=SqueezedLoss(mindcv.create_loss(name="CE")),
        make_optimizer=lambda weights: nn.Adam(weights, learning_rate=p["learning_rate"]),
        train_columns=labelled(n),
        val_columns=labelled(n_val),
        label_column="label",
    )
