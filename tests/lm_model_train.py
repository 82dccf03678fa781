"""A small transformer language model trained the way LLM scripts are (nothing in it knows perftune): the built-in
tiny_gpt's network with its loss inside (``construct(tokens, labels)`` returns the loss, as mindformers'
``LlamaForCausalLM`` does), ``Model(network, optimizer=...)`` with no ``loss_fn``, LossMonitor and TimeMonitor.
``--loop`` trains the same job in a custom loop (``perftune.steps``) instead, for comparison.

    python tests/lm_model_train.py --epochs 1
"""

import argparse
import sys
from pathlib import Path

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import LossMonitor, Model, TimeMonitor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # perftune, when run from a copy of the repository
import perftune  # noqa: E402
from perftune.workloads.tiny_gpt import LMLoss, TinyGPT  # noqa: E402


class CausalLM(nn.Cell):
    """tokens, labels -> the mean token cross-entropy: the model computes its own loss."""

    def __init__(self, d: int, layers: int, heads: int, seq_len: int):
        super().__init__()
        self.model = TinyGPT(d, layers, heads, seq_len)
        self.loss = LMLoss()

    def construct(self, tokens, labels):
        return self.loss(self.model(tokens), labels)


def main():
    parser = argparse.ArgumentParser(description="a small causal LM on random byte windows")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--mode", choices=["graph", "pynative"], default="graph")
    parser.add_argument("--loop", action="store_true", help="a custom loop (perftune.steps) instead of Model.train")
    parser.add_argument("--sink", action="store_true", help="Model.train with dataset_sink_mode=True")
    args = parser.parse_args()

    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)
    ms.set_seed(1)
    rng = np.random.default_rng(1)
    text = rng.integers(0, 256, size=args.samples + args.seq_len + 1).astype(np.int32)
    windows = np.stack([text[i:i + args.seq_len + 1] for i in range(args.samples)])
    dataset = ds.NumpySlicesDataset({"tokens": windows[:, :-1], "labels": windows[:, 1:]}, shuffle=True)
    dataset = dataset.batch(args.batch_size, drop_remainder=True)

    network = CausalLM(args.hidden, args.layers, 4, args.seq_len)
    optimizer = nn.Adam(network.trainable_params(), learning_rate=1e-3)
    if not args.loop:
        model = Model(network, optimizer=optimizer)  # no loss_fn: the network computes its own
        model.train(args.epochs, dataset, callbacks=[LossMonitor(20), TimeMonitor()],
                    dataset_sink_mode=args.sink)
        return
    step = nn.TrainOneStepCell(network, optimizer)
    for epoch in range(args.epochs):
        for tokens, labels in perftune.steps(dataset.create_tuple_iterator()):
            loss = perftune.loss(step(tokens, labels))
        print(f"epoch {epoch}: loss {float(loss.asnumpy()):.4f}", flush=True)


if __name__ == "__main__":
    main()
