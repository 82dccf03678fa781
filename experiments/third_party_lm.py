"""How to wrap a third-party language model for perftune (experiments/README.md, "A third-party language model"),
runnable: mindformers' own ``LlamaForCausalLM`` where mindformers is importable (its own virtualenv: see the README),
else a stand-in built the same way.

``LlamaForCausalLM`` is built like most LM libraries' ``...ForCausalLM``: a ``model`` (embeddings + decoder layers +
final norm, returning hidden states) and an ``lm_head``, and its ``construct(input_ids, labels)`` computes the loss
itself.  perftune needs the opposite: a network that returns logits, and the loss as a separate cell, so that every
step knob (train_step, amp_level, loss_scale, grad_accum_steps, recompute) wraps the same two pieces.

Use from a plan as ``workload: experiments.third_party_lm:build`` (run perftune from the repository root);
``workload_params.model`` picks ``mindformers``, ``standin`` or ``auto`` (the default: mindformers when importable).
The five things to get right, each marked ``# (n)`` below:

1. a logits-returning wrapper around the model's backbone and head (``LogitsOnly``), and the loss as a cell of its
   own over the model's vocabulary (``TokenLoss``: never a loss written for another vocabulary);
2. the model's CPU settings: mindformers' fused RMSNorm and un-sliced RoPE have no CPU kernels
   (``fused_rms_norm=False``, ``use_rope_slice=True``), and its float16 defaults become float32;
3. under NumPy 2 the first eager MindSpore op of a process can raise ``SystemError`` and leave the next one failing
   inside grad: run a throw-away op first, before the model is built (``warm_eager``);
4. ``tokens_per_sample`` (the sequence length), so every output shows tokens/s, perplexity and repetition;
5. ``generate`` (greedy ids) and ``decode`` (ids -> text), so the report shows what the model writes; and
   ``recompute_cell_names`` as the *wrapper's* cell names of the decoder layers, for the ``recompute`` knob.

``make_model`` and ``token_windows`` are shared with ``experiments/script_workload/llama_train.py``, the same model
and data trained by an unchanged ``Model.train`` script, so the two routes measure the same job.
"""

from __future__ import annotations

import math
import re
import sysconfig
from collections import Counter
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import nn, ops
from mindspore.common.initializer import Normal

from perftune.workloads.base import Workload

DEFAULTS = {"model": "auto", "d_model": 64, "n_layers": 2, "n_heads": 4, "seq_len": 32, "vocab": 1000,
            "train_samples": 1024, "val_samples": 64, "corpus_bytes": 200_000, "learning_rate": 1e-3}
MODELS = ("auto", "mindformers", "standin")
WORD = re.compile(r"\w+|[^\w\s]")


def mindformers_available() -> bool:
    try:
        import mindformers  # noqa: F401
    except ImportError:
        return False
    return True


# ---- data: a word-level vocabulary of the model's size over real text ----------------------------------------------
def corpus_text(corpus_bytes: int) -> str:
    """The first ``corpus_bytes`` of the standard library's sources, in a fixed order: real text, no download."""
    chunks, total = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        if total >= corpus_bytes:
            break
        chunks.append(path.read_text(encoding="utf-8", errors="replace"))
        total += len(chunks[-1])
    return "".join(chunks)[:corpus_bytes]


def token_windows(p: dict, seed: int) -> dict:
    """Train and validation windows of ``seq_len`` token ids (and their next tokens as labels) over a vocabulary of
    ``vocab`` ids: the most frequent words and symbols of the training text, id 0 for every other one.  A real
    model would use its own tokenizer here."""
    words = WORD.findall(corpus_text(p["corpus_bytes"]))
    split = len(words) - len(words) // 10
    vocab = ["<unk>"] + [w for w, _ in Counter(words[:split]).most_common(p["vocab"] - 1)]
    index = {w: i for i, w in enumerate(vocab)}
    ids = np.array([index.get(w, 0) for w in words], np.int32)
    seq_len, rng = p["seq_len"], np.random.default_rng(seed)

    def windows(starts):
        win = ids[np.asarray(starts)[:, None] + np.arange(seq_len + 1)[None, :]]
        return np.ascontiguousarray(win[:, :-1]), np.ascontiguousarray(win[:, 1:])  # 2-D columns (NumPy 2)

    train = windows(rng.choice(split - seq_len - 1, p["train_samples"], replace=False))
    val = windows(split + np.linspace(0, len(ids) - split - seq_len - 2, p["val_samples"]).astype(np.int64))
    return {"train": train, "val": val, "vocab": vocab, "prompt": ids[split: split + seq_len // 2].tolist()}


# ---- the stand-in for LlamaForCausalLM, used where mindformers is not installed ------------------------------------
class RMSNorm(nn.Cell):
    def __init__(self, d: int):
        super().__init__()
        self.weight = ms.Parameter(ms.Tensor(np.ones(d, np.float32)), name="weight")

    def construct(self, x):
        return x * ops.rsqrt((x * x).mean(-1, keep_dims=True) + 1e-6) * self.weight


class DecoderLayer(nn.Cell):
    """LLaMA's layer: x + attention(norm(x)), then x + SwiGLU(norm(x)); causal attention, learned positions."""

    def __init__(self, d: int, n_heads: int, seq_len: int):
        super().__init__()
        self.n_heads = n_heads
        self.attention_norm, self.ffn_norm = RMSNorm(d), RMSNorm(d)
        self.wqkv = nn.Dense(d, 3 * d, weight_init=Normal(0.02), has_bias=False)
        self.wo = nn.Dense(d, d, weight_init=Normal(0.02), has_bias=False)
        self.w1 = nn.Dense(d, 4 * d, weight_init=Normal(0.02), has_bias=False)
        self.w3 = nn.Dense(d, 4 * d, weight_init=Normal(0.02), has_bias=False)
        self.w2 = nn.Dense(4 * d, d, weight_init=Normal(0.02), has_bias=False)
        self.mask = ms.Tensor(np.triu(np.full((seq_len, seq_len), -1e9, np.float32), 1))

    def construct(self, x):
        b, t, d = x.shape
        h = self.n_heads
        q, k, v = ops.split(self.wqkv(self.attention_norm(x)), d, axis=-1)
        q = q.reshape(b, t, h, d // h).transpose(0, 2, 1, 3)
        k = k.reshape(b, t, h, d // h).transpose(0, 2, 3, 1)
        v = v.reshape(b, t, h, d // h).transpose(0, 2, 1, 3)
        att = ops.softmax(ops.matmul(q, k) / math.sqrt(d // h) + self.mask[:t, :t], axis=-1)
        x = x + self.wo(ops.matmul(att, v).transpose(0, 2, 1, 3).reshape(b, t, d))
        y = self.ffn_norm(x)
        return x + self.w2(ops.silu(self.w1(y)) * self.w3(y))


class Backbone(nn.Cell):
    """Embeddings, decoder layers, final norm: (B, T) ids -> (B, T, d) hidden states (LlamaModel's shape)."""

    def __init__(self, vocab: int, d: int, n_layers: int, n_heads: int, seq_len: int):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, d, embedding_table=Normal(0.02))
        self.positions = ms.Parameter(ms.Tensor(np.random.default_rng(0).normal(0, 0.02, (seq_len, d)),
                                                ms.float32), name="positions")
        self.layers = nn.CellList([DecoderLayer(d, n_heads, seq_len) for _ in range(n_layers)])
        self.norm_out = RMSNorm(d)

    def construct(self, tokens):
        x = self.tok_embeddings(tokens) + self.positions[: tokens.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.norm_out(x)


class TokenLoss(nn.Cell):
    """(1) Mean cross-entropy over every position, for any vocabulary: (B, T, V) logits, (B, T) int labels."""

    def __init__(self):
        super().__init__()
        self.ce = nn.CrossEntropyLoss()  # reduction="mean"

    def construct(self, logits, labels):
        return self.ce(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


class StandInForCausalLM(nn.Cell):
    """Like ``LlamaForCausalLM``: ``model`` and ``lm_head``, and ``construct(input_ids, labels)`` returns the loss."""

    def __init__(self, vocab: int, d: int, n_layers: int, n_heads: int, seq_len: int):
        super().__init__()
        self.model = Backbone(vocab, d, n_layers, n_heads, seq_len)
        self.lm_head = nn.Dense(d, vocab, weight_init=Normal(0.02), has_bias=False)
        self.loss = TokenLoss()

    def construct(self, input_ids, labels):
        return self.loss(self.lm_head(self.model(input_ids)), labels)


def make_model(p: dict) -> nn.Cell:
    """mindformers' ``LlamaForCausalLM`` (``model``: mindformers or auto where importable), else the stand-in; both
    take ``(input_ids, labels)`` of ``seq_len`` tokens each and return the loss."""
    choice = p.get("model", "auto")
    if choice not in MODELS:
        raise ValueError(f"third_party_lm: model must be one of {list(MODELS)}, got {choice!r}")
    if choice == "standin" or (choice == "auto" and not mindformers_available()):
        return StandInForCausalLM(p["vocab"], p["d_model"], p["n_layers"], p["n_heads"], p["seq_len"])
    from mindformers import LlamaConfig, LlamaForCausalLM

    f32 = "float32"  # (2) mindformers defaults to float16 compute and parameters, which CPU kernels refuse or slow
    config = LlamaConfig(num_layers=p["n_layers"], hidden_size=p["d_model"], num_heads=p["n_heads"],
                         vocab_size=p["vocab"], seq_length=p["seq_len"],
                         fused_rms_norm=False, use_rope_slice=True,  # (2) no CPU kernel for the fused / sliced ops
                         compute_dtype=f32, param_init_type=f32, layernorm_compute_type=f32,
                         softmax_compute_type=f32, rotary_dtype=f32,
                         input_sliced_sig=True)  # input_ids and labels are seq_len each (no seq_len + 1 input)
    return LlamaForCausalLM(config)


# ---- (1) the wrapper perftune trains: logits out, the loss outside ------------------------------------------------
class LogitsOnly(nn.Cell):
    """The model's backbone and head, returning float32 logits (B, T, vocab)."""

    def __init__(self, lm: nn.Cell):
        super().__init__()
        self.backbone = lm.model  # the same Parameters: nothing is copied
        self.lm_head = lm.lm_head
        self.cast = ops.Cast()

    def construct(self, input_ids):
        return self.cast(self.lm_head(self.backbone(input_ids)), ms.float32)  # float32 also under amp O2/O3


def warm_eager() -> None:
    """(3) A throw-away eager op before the first real one (NumPy 2 trap; the op itself may raise SystemError)."""
    try:
        (ms.Tensor(np.ones(1, np.float32)) + 1).asnumpy()
    except SystemError:
        pass


def build(params: dict, seed: int) -> Workload:
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"third_party_lm: unknown workload_params {sorted(unknown)} (allowed: {sorted(DEFAULTS)})")
    p = {**DEFAULTS, **params}
    warm_eager()  # (3) before anything else touches MindSpore
    data = token_windows(p, seed)
    lm = make_model(p)
    network = LogitsOnly(lm)  # (1)
    seq_len, vocab, prompt = p["seq_len"], data["vocab"], data["prompt"]

    def generate(net, new_tokens: int) -> list[int]:  # (5) greedy continuation of a fixed prompt
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
        loss_fn=TokenLoss(),  # (1) the loss the model's construct computed, as its own cell, over its vocabulary
        make_optimizer=lambda weights: nn.Adam(weights, learning_rate=p["learning_rate"]),
        train_columns={"input_ids": data["train"][0], "labels": data["train"][1]},
        val_columns={"input_ids": data["val"][0], "labels": data["val"][1]},
        label_column="labels",
        tokens_per_sample=seq_len,  # (4)
        recompute_cell_names=[f"backbone.layers.{i}" for i in range(p["n_layers"])],  # (5) names in the wrapper
        flops_per_sample=6.0 * n_params * seq_len,  # ~6 FLOPs per parameter per token: model GFLOP/s in the outputs
        generate=generate,  # (5)
        decode=lambda ids: " ".join(vocab[int(i)] if 0 <= int(i) < len(vocab) else "<unk>" for i in ids),  # (5)
        extra={"params": p, "n_params": n_params, "model": type(lm).__name__},
    )
