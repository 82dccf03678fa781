"""A language-model training script of the usual shape (not written for perftune): mindformers' ``LlamaForCausalLM``
(2 layers, hidden 64, vocabulary 1000, sequence 32) trained by ``Model.train`` on (input_ids, labels) batches, with
its own loss inside the model and LossMonitor / TimeMonitor callbacks.

    python llama_train.py --epochs 1                  # trains on its own
    perftune sweep llama_plan.yaml                    # the same file, unchanged, under a sweep

The model and the token windows come from ``experiments/third_party_lm.py`` (``make_model``, ``token_windows``): the
``build()`` route's workload trains the very same job, so the two routes can be compared.  Without mindformers
(installed in its own virtualenv: experiments/README.md) it trains the stand-in there, or refuses with
``--require-mindformers``.
"""

import argparse
import sys
from pathlib import Path

import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn
from mindspore.train import LossMonitor, Model, TimeMonitor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/, for the shared model and data
from third_party_lm import DEFAULTS, make_model, mindformers_available, token_windows  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description="LlamaForCausalLM on token windows of real text")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--mode", choices=["graph", "pynative"], default="graph")
    parser.add_argument("--require-mindformers", action="store_true", help="refuse to train the stand-in")
    args = parser.parse_args()

    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    ms.set_seed(1)
    if args.require_mindformers and not mindformers_available():
        raise SystemExit("mindformers is not importable here (see experiments/README.md for its virtualenv)")
    p = {**DEFAULTS, "seq_len": args.seq_len, "train_samples": args.samples}
    input_ids, labels = token_windows(p, seed=1)["train"]
    dataset = ds.NumpySlicesDataset({"input_ids": input_ids, "labels": labels}, shuffle=True)
    dataset = dataset.batch(args.batch_size, drop_remainder=True)

    network = make_model(p)  # LlamaForCausalLM: construct(input_ids, labels) returns the loss
    print(f"model: {type(network).__name__}, {sum(q.size for q in network.trainable_params()):,} parameters",
          flush=True)
    optimizer = nn.Adam(network.trainable_params(), learning_rate=args.lr)
    model = Model(network, optimizer=optimizer)  # no loss_fn: the network computes its own
    model.train(args.epochs, dataset, callbacks=[LossMonitor(20), TimeMonitor()], dataset_sink_mode=False)


if __name__ == "__main__":
    main()
