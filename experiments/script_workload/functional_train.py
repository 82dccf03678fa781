"""A MindSpore 2.x training script in the functional style (value_and_grad, an ``@ms.jit`` step, a GeneratorDataset
with a map, its own loop and a validation loop after each epoch), written without perftune: ``perftune sweep``
measures it unchanged, finding the loop by the training dataset's iterator (``perftune/burst/script_loop.py``).

    python functional_train.py --epochs 2
"""

import argparse

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn


class Points:
    def __init__(self, n, seed):
        rng = np.random.default_rng(seed)
        self.x = rng.normal(size=(n, 16)).astype(np.float32)
        self.y = (self.x.sum(axis=1, keepdims=True) > 0).astype(np.float32)

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __len__(self):
        return len(self.x)


def scale(x):
    return (x * 0.5).astype(np.float32)


def pipeline(n, seed, batch_size):
    data = ds.GeneratorDataset(Points(n, seed), column_names=["x", "y"], shuffle=False)
    return data.map(operations=scale, input_columns="x").batch(batch_size, drop_remainder=True)


def model_and_step(width, layers):
    """The network, its loss function and the ``@ms.jit`` training step."""
    hidden = [cell for _ in range(layers) for cell in (nn.Dense(width, width), nn.ReLU())]
    network = nn.SequentialCell(nn.Dense(16, width), nn.ReLU(), *hidden, nn.Dense(width, 1))
    loss_fn = nn.BCEWithLogitsLoss()
    optimizer = nn.Adam(network.trainable_params(), learning_rate=1e-3)

    def forward(inputs, labels):
        return loss_fn(network(inputs), labels)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    @ms.jit
    def train_step(inputs, labels):
        loss, grads = grad_fn(inputs, labels)
        optimizer(grads)
        return loss

    return network, forward, train_step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--mode", type=int, default=1, choices=[0, 1], help="0: GRAPH_MODE, 1: PYNATIVE_MODE")
    parser.add_argument("--validate-first", action="store_true", help="validate once before training")
    parser.add_argument("--hidden", type=int, default=64, help="hidden width")
    parser.add_argument("--layers", type=int, default=1,
                        help="hidden layers after the first (--hidden 1024 --layers 8: a step long enough to see an "
                             "@ms.jit step return early)")
    args = parser.parse_args()
    ms.set_context(mode=args.mode)

    train_data = pipeline(args.samples, 0, args.batch_size)
    val_data = pipeline(max(128, args.batch_size), 1, args.batch_size)  # at least one batch
    network, forward, train_step = model_and_step(args.hidden, args.layers)

    def evaluate():
        network.set_train(False)
        total = [float(forward(x, y).asnumpy()) for x, y in val_data.create_tuple_iterator()]
        network.set_train(True)
        return sum(total) / len(total)

    if args.validate_first:
        print(f"before training: val_loss {evaluate():.4f}", flush=True)
    network.set_train(True)
    for epoch in range(args.epochs):
        for inputs, labels in train_data.create_tuple_iterator():
            loss = train_step(inputs, labels)
        print(f"epoch {epoch}: loss {float(loss.asnumpy()):.4f} val_loss {evaluate():.4f}", flush=True)


if __name__ == "__main__":
    main()
