"""A plain MindSpore training script, written the way training scripts usually are (nothing in it knows perftune):
argparse, its own set_context, a GeneratorDataset with a per-sample Python map, Model.train with LossMonitor,
TimeMonitor and a callback of its own.

    python train.py --epochs 2 --batch-size 32        # trains on its own
    perftune sweep plan.yaml                          # the same file, unchanged, under a sweep

The per-sample map ("slow_decode") stands in for image decoding: NumPy work per sample, in Python.  Its
num_parallel_workers comes from a config dict, as in the practitioners' guide, where a config default of 1 halved
throughput behind the code's back; --pin-decode-workers makes it explicit on the map, which perftune reports.
"""

import argparse
import time

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Callback, LossMonitor, Model, TimeMonitor

CONFIG = {"decode_workers": None}  # None: the dataset config's value (the one perftune sets)


class ToyImages:
    """A random-access source of (image, label) rows: 8x8 "images" whose class is a noisy function of the pixels."""

    def __init__(self, n, seed=0, held_out=0):
        rng = np.random.default_rng(seed)
        self.images = rng.normal(size=(n, 64)).astype(np.float32)
        w = rng.normal(size=(64, 10)).astype(np.float32)
        if held_out:  # other images of the same task: a validation set
            self.images = np.random.default_rng(seed + 1).normal(size=(held_out, 64)).astype(np.float32)
        self.labels = (self.images @ w).argmax(axis=1).astype(np.int32)

    def __getitem__(self, i):
        return self.images[i], np.array(self.labels[i])  # a 0-d array: NumPy 2 refuses a NumPy scalar row

    def __len__(self):
        return len(self.images)


def slow_decode(image, label):
    """Per-sample Python work, as image decoding is: a little NumPy on each row."""
    for _ in range(4):
        image = np.tanh(image * 1.01).astype(np.float32)
    return image, label


class StepCounter(Callback):
    """The script's own callback: counts the steps it saw (perftune must not stop it from running)."""

    def __init__(self):
        super().__init__()
        self.steps = 0
        self.started = time.time()

    def on_train_step_end(self, run_context):
        self.steps += 1

    def on_train_end(self, run_context):
        print(f"StepCounter: {self.steps} steps in {time.time() - self.started:.1f} s", flush=True)


def build_dataset(batch_size, samples, pin_workers, held_out=0):
    data = ds.GeneratorDataset(ToyImages(samples, held_out=held_out), column_names=["image", "label"], shuffle=False)
    workers = 1 if pin_workers else CONFIG["decode_workers"]
    data = data.map(operations=slow_decode, input_columns=["image", "label"], num_parallel_workers=workers)
    return data.batch(batch_size, drop_remainder=True)


def main():
    parser = argparse.ArgumentParser(description="toy image classifier")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--log-every", type=int, default=20, help="LossMonitor's period in steps")
    parser.add_argument("--pin-decode-workers", action="store_true", help="num_parallel_workers=1 on the map")
    parser.add_argument("--fit", action="store_true", help="train with Model.fit, validating on held-out samples")
    parser.add_argument("--fail", choices=["raise", "exit", "no-train"], help="(tests) fail the way a script can")
    args = parser.parse_args()

    ms.set_context(mode=ms.PYNATIVE_MODE)  # scripts hard-code their mode; perftune's knob wins under a sweep
    ms.set_seed(1)
    if args.fail == "raise":
        raise RuntimeError("the script's data folder is missing")
    if args.fail == "exit":
        raise SystemExit(4)
    if args.fail == "no-train":
        print("nothing to train", flush=True)
        return

    network = nn.SequentialCell(nn.Dense(64, 128), nn.ReLU(), nn.Dense(128, 10))
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(network.trainable_params(), learning_rate=args.lr, momentum=0.9)
    model = Model(network, loss_fn=loss, optimizer=optimizer, metrics={"accuracy", "loss"})
    dataset = build_dataset(args.batch_size, args.samples, args.pin_decode_workers)
    counter = StepCounter()
    callbacks = [LossMonitor(args.log_every), TimeMonitor(), counter]
    if args.fit:  # validation after every epoch (under perftune: once, at the accuracy window's end)
        valid = build_dataset(args.batch_size, args.samples, args.pin_decode_workers, held_out=256)
        model.fit(args.epochs, dataset, valid_dataset=valid, callbacks=callbacks)
    else:
        model.train(args.epochs, dataset, callbacks=callbacks)
    print(f"trained {counter.steps} steps", flush=True)
    ms.save_checkpoint(network, "toy.ckpt")


if __name__ == "__main__":
    main()
