"""A custom training loop (value_and_grad, no Model.train), made measurable by perftune with two lines: the loop
goes over ``perftune.steps(...)`` and the step's loss goes to ``perftune.loss(...)``; its own validation may go to
``perftune.metric(...)`` too.  Outside a burst they do nothing, so the script still runs on its own:

    python custom_loop.py --epochs 1
"""

import argparse

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn

import perftune


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--validate-every", type=int, default=4, help="steps between validations")
    parser.add_argument("--hidden", type=int, default=32, help="hidden width")
    parser.add_argument("--layers", type=int, default=0, help="extra hidden layers (--hidden 1024 --layers 4: a step "
                                                              "long enough to see an @ms.jit step return early)")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.samples, 16)).astype(np.float32)
    y = (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)
    data = ds.NumpySlicesDataset((x, y), column_names=["x", "y"], shuffle=False).batch(args.batch_size)

    hidden = [cell for _ in range(args.layers) for cell in (nn.Dense(args.hidden, args.hidden), nn.ReLU())]
    network = nn.SequentialCell(nn.Dense(16, args.hidden), nn.ReLU(), *hidden, nn.Dense(args.hidden, 1))
    loss_fn = nn.BCEWithLogitsLoss()
    optimizer = nn.SGD(network.trainable_params(), learning_rate=0.1)

    def forward(inputs, labels):
        return loss_fn(network(inputs), labels)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    @ms.jit
    def train_step(inputs, labels):
        loss, grads = grad_fn(inputs, labels)
        optimizer(grads)
        return loss

    x_val = rng.normal(size=(256, 16)).astype(np.float32)
    y_val = (x_val.sum(axis=1, keepdims=True) > 0).astype(np.float32)

    def validate():
        logits = network(ms.Tensor(x_val))
        return float(loss_fn(logits, ms.Tensor(y_val)).asnumpy()), float(((logits.asnumpy() > 0) == y_val).mean())

    for epoch in range(args.epochs):
        for step, (inputs, labels) in enumerate(perftune.steps(data.create_tuple_iterator())):  # perftune line 1
            loss = train_step(inputs, labels)
            perftune.loss(loss)  # perftune line 2
            if step % args.validate_every == args.validate_every - 1:
                val_loss, val_acc = validate()
                perftune.metric("val_loss", val_loss)  # optional: the script's own validation reaches the gate
                perftune.metric("accuracy", val_acc)
        print(f"epoch {epoch}: loss {float(loss.asnumpy()):.4f}", flush=True)


if __name__ == "__main__":
    main()
