"""A training script of the usual mindcv shape (not written for perftune): a mindcv model, loss and optimizer from
its factories, an image pipeline with mindspore.dataset.vision transforms, Model.train with its callbacks.  Random
images stand in for a dataset folder, so nothing is downloaded.

    python mindcv_train.py --model resnet18 --epochs 1
    perftune sweep mindcv_plan.yaml
"""

import argparse

import mindspore as ms
import mindspore.dataset as ds
import mindspore.dataset.vision as vision
import numpy as np
from mindcv.loss import create_loss
from mindcv.models import create_model
from mindcv.optim import create_optimizer
from mindspore.train import LossMonitor, Model, TimeMonitor


class RandomImages:
    def __init__(self, n, size, classes, seed=0):
        rng = np.random.default_rng(seed)
        self.images = rng.integers(0, 256, size=(n, size, size, 3), dtype=np.uint8)
        self.labels = rng.integers(0, classes, size=n).astype(np.int32)

    def __getitem__(self, i):
        return self.images[i], np.array(self.labels[i])

    def __len__(self):
        return len(self.labels)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--mode", type=int, default=0, help="0: GRAPH_MODE, 1: PYNATIVE_MODE")
    args = parser.parse_args()

    ms.set_context(mode=args.mode)
    data = ds.GeneratorDataset(RandomImages(args.samples, args.image_size, args.num_classes),
                               column_names=["image", "label"], shuffle=True)
    transforms = [vision.Normalize(mean=[127.5] * 3, std=[127.5] * 3), vision.HWC2CHW()]
    data = data.map(operations=transforms, input_columns="image")
    data = data.batch(args.batch_size, drop_remainder=True)

    network = create_model(args.model, num_classes=args.num_classes, pretrained=False)
    loss = create_loss(name="CE")
    optimizer = create_optimizer(network.trainable_params(), opt="momentum", lr=args.lr)
    model = Model(network, loss_fn=loss, optimizer=optimizer, metrics={"accuracy"})
    model.train(args.epochs, data, callbacks=[LossMonitor(10), TimeMonitor()])
    ms.save_checkpoint(network, f"{args.model}.ckpt")


if __name__ == "__main__":
    main()
