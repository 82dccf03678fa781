"""A small language-model job driven by a YAML config, as an LLM launcher is (mindformers' ``run_mindformer.py
--config``): the model's shape and the batch come from ``--config``, the sequence length and a flag from the
command line, the kernel threads from the environment.  It trains with ``mindspore.train.Model`` and knows nothing
of perftune:

    python train.py --config conf/run.yaml --seq-len 32 [--tie-embeddings]

``plan.yaml`` beside it sweeps a config field, an option and an environment variable of it with perftune.
"""

import argparse
import os

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import yaml
from mindspore import nn, ops
from mindspore.train import LossMonitor, Model

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--config", required=True, help="the run's YAML config")
parser.add_argument("--seq-len", type=int, default=32, help="tokens per sample")
parser.add_argument("--tie-embeddings", action="store_true", help="share the input and output embeddings")
parser.add_argument("--samples", type=int, default=4096, help="sequences in the synthetic corpus")
parser.add_argument("--seed", type=int, default=0, help="initialisation and data order")
args = parser.parse_args()

with open(args.config, encoding="utf-8") as fh:
    cfg = yaml.safe_load(fh)
threads = os.environ.get("LM_KERNEL_THREADS")
if threads:  # the job's own environment knob: MindSpore's CPU kernel threads
    ms.set_context(runtime_num_threads=int(threads))
print(f"config {args.config}: hidden={cfg['model']['hidden']} batch={cfg['train']['batch_size']} "
      f"seq_len={args.seq_len} tie={args.tie_embeddings} LM_KERNEL_THREADS={threads}", flush=True)
ms.set_context(mode=ms.GRAPH_MODE)
ms.set_seed(args.seed)
ds.config.set_seed(args.seed)


def corpus(samples: int, seq_len: int, vocab: int, seed: int = 0):
    """Token sequences from a fixed random bigram table: a language a small model can learn."""
    rng = np.random.default_rng(seed)
    table = rng.dirichlet(np.full(vocab, 0.1), size=vocab)
    tokens = np.empty((samples, seq_len + 1), dtype=np.int32)
    tokens[:, 0] = rng.integers(0, vocab, samples)
    for t in range(seq_len):
        cum = table[tokens[:, t]].cumsum(axis=1)
        tokens[:, t + 1] = (cum < rng.random((samples, 1))).sum(axis=1).clip(0, vocab - 1)
    return tokens[:, :-1], tokens[:, 1:]


class TinyLM(nn.Cell):
    def __init__(self, vocab: int, hidden: int, layers: int, tie: bool):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.SequentialCell([nn.SequentialCell([nn.Dense(hidden, hidden * 2), nn.GELU(),
                                                            nn.Dense(hidden * 2, hidden)]) for _ in range(layers)])
        self.tie = tie
        self.head = nn.Dense(hidden, vocab, has_bias=False)

    def construct(self, tokens):
        x = self.embed(tokens)
        x = x + self.blocks(x)
        if self.tie:
            return ops.matmul(x, self.embed.embedding_table.T)
        return self.head(x)


class TokenLoss(nn.Cell):
    """Cross-entropy over every token: logits (batch, seq, vocab) against targets (batch, seq)."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab
        self.ce = nn.CrossEntropyLoss()

    def construct(self, logits, targets):
        return self.ce(logits.reshape(-1, self.vocab), targets.reshape(-1))


model_cfg, train_cfg = cfg["model"], cfg["train"]
inputs, targets = corpus(args.samples, args.seq_len, model_cfg["vocab_size"])
data = ds.NumpySlicesDataset({"tokens": inputs, "targets": targets}, shuffle=True)
data = data.batch(train_cfg["batch_size"], drop_remainder=True)
net = TinyLM(model_cfg["vocab_size"], model_cfg["hidden"], model_cfg["layers"], args.tie_embeddings)
if model_cfg.get("compute_dtype") == "float16":
    net.to_float(ms.float16)
optimizer = nn.Adam(net.trainable_params(), learning_rate=train_cfg["learning_rate"])
model = Model(net, loss_fn=TokenLoss(model_cfg["vocab_size"]), optimizer=optimizer)
model.train(train_cfg["epochs"], data, callbacks=[LossMonitor(50)], dataset_sink_mode=False)
