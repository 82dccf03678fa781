"""How to wrap a third-party language model for perftune (experiments/README.md, "A third-party language model"),
runnable.

Third-party LM packages (mindformers' ``LlamaForCausalLM``, mindnlp's models) do not install beside MindSpore 2.10 and
NumPy 2 here, so this file shows the wrapping on a stand-in with the same shape: ``CausalLMWithLoss`` below is built
like those models, a ``model`` (embeddings + decoder layers + final norm, returning hidden states) and an ``lm_head``,
and its ``construct(input_ids, labels)`` computes the loss itself.  perftune needs the opposite: a network that
returns logits, and the loss as a separate cell, so that every step knob (train_step, amp_level, loss_scale,
grad_accum_steps, recompute) wraps the same two pieces.  Swap the stand-in for the real class and keep the rest.

Use from a plan as ``workload: experiments.third_party_lm:build`` (run perftune from the repository root).
The four things to get right, each marked ``# (n)`` below:

1. a logits-returning wrapper around the model's backbone and head (``LogitsOnly``), the loss as its own cell;
2. under NumPy 2 the first eager MindSpore op of a process can raise ``SystemError`` and leave the next one failing
   inside grad: run a throw-away op first, before the model is built (``warm_eager``);
3. ``tokens_per_sample`` (the sequence length), so every output shows tokens/s, perplexity and repetition;
4. ``generate`` (greedy ids) and ``decode`` (ids -> text), so the report shows what the model writes; and
   ``recompute_cell_names`` as the *wrapper's* cell names of the decoder layers, for the ``recompute`` knob.
"""

from __future__ import annotations

import math

import mindspore as ms
import numpy as np
from mindspore import nn, ops
from mindspore.common.initializer import Normal, initializer

from perftune.workloads.base import Workload
from perftune.workloads.tiny_gpt import VOCAB, DecoderBlock, LMLoss, load_corpus

DEFAULTS = {"d_model": 64, "n_layers": 2, "n_heads": 4, "seq_len": 32, "train_samples": 1024, "val_samples": 64,
            "corpus_bytes": 200_000, "learning_rate": 1e-3}


# ---- the stand-in for a third-party model (replace with e.g. LlamaForCausalLM(config)) -----------------------------
class Backbone(nn.Cell):
    """Embeddings, decoder layers, final norm: (B, T) ids -> (B, T, d) hidden states."""

    def __init__(self, d: int, n_layers: int, n_heads: int, seq_len: int):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, d, embedding_table=Normal(0.02))
        self.wpe = ms.Parameter(initializer(Normal(0.02), (seq_len, d), ms.float32), name="wpe")
        self.layers = nn.SequentialCell([DecoderBlock(d, n_heads, seq_len, 0.02 / math.sqrt(2 * n_layers))
                                         for _ in range(n_layers)])
        self.norm = nn.LayerNorm((d,))

    def construct(self, input_ids):
        t = input_ids.shape[1]
        return self.norm(self.layers(self.embed_tokens(input_ids) + self.wpe[:t]))


class CausalLMWithLoss(nn.Cell):
    """Like many LM libraries' ``...ForCausalLM``: ``construct(input_ids, labels)`` returns the loss, not logits."""

    def __init__(self, d: int, n_layers: int, n_heads: int, seq_len: int):
        super().__init__()
        self.model = Backbone(d, n_layers, n_heads, seq_len)
        self.lm_head = nn.Dense(d, VOCAB, weight_init=Normal(0.02), has_bias=False)
        self.loss = LMLoss()

    def construct(self, input_ids, labels):
        return self.loss(self.lm_head(self.model(input_ids)), labels)


# ---- (1) the wrapper perftune trains: logits out, the loss outside ------------------------------------------------
class LogitsOnly(nn.Cell):
    """The third-party model's backbone and head, returning float32 logits (B, T, vocab)."""

    def __init__(self, lm: CausalLMWithLoss):
        super().__init__()
        self.backbone = lm.model  # the same Parameters: nothing is copied
        self.lm_head = lm.lm_head
        self.cast = ops.Cast()

    def construct(self, input_ids):
        return self.cast(self.lm_head(self.backbone(input_ids)), ms.float32)  # float32 also under amp O2/O3


def warm_eager() -> None:
    """(2) A throw-away eager op before the first real one (NumPy 2 trap; the op itself may raise SystemError)."""
    try:
        (ms.Tensor(np.ones(1, np.float32)) + 1).asnumpy()
    except SystemError:
        pass


def _windows(corpus: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    win = corpus[starts[:, None] + np.arange(seq_len + 1)[None, :]].astype(np.int32)
    return np.ascontiguousarray(win[:, :-1]), np.ascontiguousarray(win[:, 1:])  # 2-D columns (NumPy 2 datasets)


def build(params: dict, seed: int) -> Workload:
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"third_party_lm: unknown workload_params {sorted(unknown)} (allowed: {sorted(DEFAULTS)})")
    p = {**DEFAULTS, **params}
    warm_eager()  # (2) before anything else touches MindSpore
    d, n_layers, seq_len = p["d_model"], p["n_layers"], p["seq_len"]

    text = load_corpus(p["corpus_bytes"])  # any byte text; a real model would use its own tokenizer here
    corpus = np.frombuffer(text, np.uint8)
    split = len(corpus) - len(corpus) // 10
    rng = np.random.default_rng(seed)
    train_tokens, train_labels = _windows(corpus, rng.choice(split - seq_len, p["train_samples"], replace=False),
                                          seq_len)
    val_starts = split + np.linspace(0, len(corpus) - split - seq_len - 1, p["val_samples"]).astype(np.int64)
    val_tokens, val_labels = _windows(corpus, val_starts, seq_len)

    network = LogitsOnly(CausalLMWithLoss(d, n_layers, p["n_heads"], seq_len))  # (1)
    prompt = list(text[split : split + seq_len // 2])

    def generate(net, new_tokens: int) -> list[int]:  # (4) greedy continuation of a fixed prompt
        ids: list[int] = list(prompt)
        for _ in range(int(new_tokens)):
            ctx = ids[-seq_len:]
            window = np.zeros((1, seq_len), np.int32)
            window[0, : len(ctx)] = ctx
            ids.append(int(net(ms.Tensor(window)).asnumpy()[0, len(ctx) - 1].argmax()))
        return ids[len(prompt):]

    n_params = sum(int(np.prod(q.shape)) for q in network.trainable_params())
    return Workload(
        name="third_party_lm",
        network=network,
        loss_fn=LMLoss(),  # (1) the loss the model's construct computed, as its own cell
        make_optimizer=lambda weights: nn.Adam(weights, learning_rate=p["learning_rate"]),
        train_columns={"input_ids": train_tokens, "labels": train_labels},
        val_columns={"input_ids": val_tokens, "labels": val_labels},
        label_column="labels",
        tokens_per_sample=seq_len,  # (3)
        recompute_cell_names=[f"backbone.layers.{i}" for i in range(n_layers)],  # (4) names in the wrapper
        flops_per_sample=6.0 * n_params * seq_len,  # ~6 FLOPs per parameter per token: model GFLOP/s in the outputs
        generate=generate,  # (4)
        decode=lambda ids: bytes(int(i) & 0xFF for i in ids).decode("utf-8", errors="replace"),  # (4)
        extra={"params": p, "n_params": n_params},
    )
