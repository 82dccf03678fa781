"""A training job as a user writes it, for the own-knob tests: its model's width and learning rate in a JSON config
(``--config job.json``), its depth and a store_false flag as options, a tag from the environment, and a second
config (``--extra-config``) it takes but never reads.  It prints what it got, so a test can see each route arrive.
"""

import argparse
import json
import os

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Model

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True)
parser.add_argument("--extra-config", default=None)  # taken, never opened
parser.add_argument("--depth", type=int, default=1)
parser.add_argument("--no-bias", dest="bias", action="store_false")
parser.add_argument("--epochs", type=int, default=200)
args = parser.parse_args()
with open(args.config, encoding="utf-8") as fh:
    cfg = json.load(fh)
print(f"JOB width={cfg['model']['width']} lr={cfg['train']['lr']} depth={args.depth} bias={args.bias} "
      f"tag={os.environ.get('JOB_TAG')}", flush=True)

rng = np.random.default_rng(0)
x = rng.standard_normal((512, 16)).astype(np.float32)
y = (x[:, :4].sum(axis=1) > 0).astype(np.int32).reshape(-1, 1)  # 2-D: NumPy 2 refuses 1-D dataset columns here
data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=True).batch(32, drop_remainder=True)
width = cfg["model"]["width"]
layers = [nn.Dense(16, width, has_bias=args.bias), nn.ReLU()]
for _ in range(args.depth - 1):
    layers += [nn.Dense(width, width, has_bias=args.bias), nn.ReLU()]
net = nn.SequentialCell(layers + [nn.Dense(width, 2)])


class Loss(nn.Cell):
    def __init__(self):
        super().__init__()
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def construct(self, logits, labels):
        return self.ce(logits, labels.reshape(-1))


model = Model(net, loss_fn=Loss(),
              optimizer=nn.Adam(net.trainable_params(), learning_rate=cfg["train"]["lr"]))
ms.set_seed(0)
model.train(args.epochs, data, dataset_sink_mode=False)
