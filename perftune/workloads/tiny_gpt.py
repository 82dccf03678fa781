"""tiny_gpt: a byte-level decoder-only Transformer trained on the Python standard library's own source code.

The corpus is real text that ships with every Python install: the ``*.py`` files under
``sysconfig.get_paths()["stdlib"]`` (``site-packages`` left out, since what is installed there differs between
machines), walked depth first in name order, concatenated until ``corpus_bytes``.  Nothing is downloaded or
cached: reading ~1 MB takes milliseconds.  The last ``VAL_FRACTION`` of the corpus is the validation text; training
windows are drawn only from the bytes before it, so the two never overlap.

The model is nanoGPT-shaped: learned token and position embeddings, pre-LayerNorm blocks (causal self-attention +
GELU MLP), a final LayerNorm and an **untied** output head (a separate ``Dense(d_model, 256)``: tying it to the
embedding table would share one Parameter between a Gather and a MatMul, which is one more thing for mixed precision
and recompute to trip on, for only 65 k parameters saved).  No dropout, so training is deterministic given the seed.
"""

from __future__ import annotations

import math
import numbers
import sysconfig
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import nn, ops
from mindspore.common.initializer import Normal, initializer

from perftune.workloads.base import Workload

VOCAB = 256
#: the last tenth of the corpus is validation text
VAL_FRACTION = 0.1

DEFAULTS: dict = {
    "d_model": 256,
    "n_layers": 2,
    "n_heads": 4,
    "seq_len": 64,
    "learning_rate": 1e-3,
    "train_samples": 4096,
    "val_samples": 256,
    "corpus_bytes": 1_000_000,
}
_FLOAT_KEYS = {"learning_rate"}


def check_params(params: dict | None) -> dict:
    """The defaults overlaid with ``params``; ValueError naming the key for an unknown key, wrong type or bad value."""
    params = dict(params or {})
    unknown = sorted(set(params) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"tiny_gpt: unknown parameter {unknown[0]!r}; allowed: {', '.join(sorted(DEFAULTS))}")
    out = dict(DEFAULTS)
    for key, value in params.items():
        if key in _FLOAT_KEYS:
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"tiny_gpt: parameter {key!r} must be a number, got {value!r}")
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"tiny_gpt: parameter {key!r} must be a positive finite number, got {value!r}")
            out[key] = float(value)
        else:
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"tiny_gpt: parameter {key!r} must be an integer, got {value!r}")
            if value < 1:
                raise ValueError(f"tiny_gpt: parameter {key!r} must be >= 1, got {value!r}")
            out[key] = int(value)
    if out["d_model"] % out["n_heads"]:
        raise ValueError(
            f"tiny_gpt: parameter 'd_model' ({out['d_model']}) must be a multiple of 'n_heads' ({out['n_heads']})"
        )
    return out


def _source_files(folder: Path):
    """``*.py`` files under ``folder``, depth first, entries in name order; ``site-packages`` (differs between
    machines) and ``__pycache__`` skipped.  A generator, so reading stops as soon as the budget is met."""
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.is_dir():
            if entry.name not in ("site-packages", "__pycache__"):
                yield from _source_files(entry)
        elif entry.suffix == ".py":
            yield entry


def load_corpus(corpus_bytes: int) -> bytes:
    """The first ``corpus_bytes`` bytes of the standard library's source files, concatenated in a fixed order."""
    chunks, total = [], 0
    for path in _source_files(Path(sysconfig.get_paths()["stdlib"])):
        if total >= corpus_bytes:
            break
        chunks.append(path.read_bytes())
        total += len(chunks[-1])
    return b"".join(chunks)[:corpus_bytes]


def _windows(corpus: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    idx = starts[:, None] + np.arange(seq_len + 1)[None, :]
    win = corpus[idx].astype(np.int32)
    return np.ascontiguousarray(win[:, :-1]), np.ascontiguousarray(win[:, 1:])


# ---- model: module-level Cells (graph mode and the O1 rewrite parse their source; keep config on self) --------------


class CausalSelfAttention(nn.Cell):
    def __init__(self, d: int, n_heads: int, seq_len: int, proj_sigma: float):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Dense(d, 3 * d, weight_init=Normal(0.02))
        self.proj = nn.Dense(d, d, weight_init=Normal(proj_sigma))
        self.scale = 1.0 / math.sqrt(d // n_heads)
        # additive causal mask, a constant built once: 0 on and below the diagonal, -1e9 above
        self.mask = ms.Tensor(np.triu(np.full((seq_len, seq_len), -1e9, np.float32), k=1))
        # primitives held on self, not ops.* functions: the O1 rewrite can't parse ops.softmax and only casts
        # white-listed primitives (BatchMatMul) to float16
        self.qk = ops.BatchMatMul(transpose_b=True)
        self.av = ops.BatchMatMul()
        self.softmax = ops.Softmax(axis=-1)
        self.cast = ops.Cast()

    def construct(self, x):
        b, t, c = x.shape
        qkv = self.qkv(x).reshape(b, t, 3, self.n_heads, c // self.n_heads).transpose(2, 0, 3, 1, 4)  # 3,B,H,T,hd
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = self.qk(q, k) * self.scale
        # mask and softmax in float32 whatever the mixed-precision level (-1e9 overflows float16)
        att = self.softmax(self.cast(att, ms.float32) + self.mask[:t, :t])
        y = self.av(self.cast(att, v.dtype), v).transpose(0, 2, 1, 3).reshape(b, t, c)
        return self.proj(y)


class DecoderBlock(nn.Cell):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x)) with a 4x GELU MLP."""

    def __init__(self, d: int, n_heads: int, seq_len: int, proj_sigma: float):
        super().__init__()
        self.ln1 = nn.LayerNorm((d,))
        self.attn = CausalSelfAttention(d, n_heads, seq_len, proj_sigma)
        self.ln2 = nn.LayerNorm((d,))
        self.fc = nn.Dense(d, 4 * d, weight_init=Normal(0.02))
        self.gelu = nn.GELU(approximate=False)
        self.fc_proj = nn.Dense(4 * d, d, weight_init=Normal(proj_sigma))

    def construct(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc_proj(self.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Cell):
    """tokens (B, T) int32 -> logits (B, T, 256) float32, T <= seq_len."""

    def __init__(self, d: int, n_layers: int, n_heads: int, seq_len: int):
        super().__init__()
        proj_sigma = 0.02 / math.sqrt(2 * n_layers)  # GPT-2: scaled init of the residual projections
        self.wte = nn.Embedding(VOCAB, d, embedding_table=Normal(0.02))
        self.wpe = ms.Parameter(initializer(Normal(0.02), (seq_len, d), ms.float32), name="wpe")
        self.blocks = nn.SequentialCell([DecoderBlock(d, n_heads, seq_len, proj_sigma) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm((d,))
        self.head = nn.Dense(d, VOCAB, weight_init=Normal(0.02), has_bias=False)
        self.cast = ops.Cast()

    def construct(self, tokens):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe[:t]
        x = self.ln_f(self.blocks(x))
        return self.cast(self.head(x), ms.float32)  # float32 also under O2/O3


class LMLoss(nn.Cell):
    """Mean cross-entropy over all B*T positions: (B, T, V) logits, (B, T) int labels."""

    def __init__(self):
        super().__init__()
        self.ce = nn.CrossEntropyLoss()  # reduction="mean"
        self.cast = ops.Cast()

    def construct(self, logits, labels):
        return self.ce(self.cast(logits.reshape(-1, VOCAB), ms.float32), labels.reshape(-1))


def _split_windows(corpus: np.ndarray, p: dict, seed: int) -> tuple[int, np.ndarray, np.ndarray]:
    """(where the validation text starts, the training windows' starts, the validation windows' starts)."""
    seq_len = p["seq_len"]
    split = len(corpus) - int(len(corpus) * VAL_FRACTION)  # train text: [0, split), validation text: [split, end)
    n_train_starts = split - seq_len  # a window is seq_len + 1 bytes (tokens + the one extra label byte)
    n_val_starts = len(corpus) - split - seq_len
    if n_train_starts < p["train_samples"] or n_val_starts < 1:
        raise ValueError(
            f"tiny_gpt: parameter 'corpus_bytes' ({len(corpus)} bytes read) is too small for "
            f"train_samples={p['train_samples']} distinct windows of seq_len={seq_len}"
        )
    rng = np.random.default_rng(seed)
    # distinct window starts in the training text, in a fixed shuffled order (perftune does not shuffle)
    train_starts = rng.choice(n_train_starts, size=p["train_samples"], replace=False)
    # validation: evenly spaced windows over the validation text, the same for every seed
    val_starts = split + np.linspace(0, n_val_starts - 1, p["val_samples"]).round().astype(np.int64)
    return split, train_starts, val_starts


def _greedy(prompt: bytes, seq_len: int):
    """``generate(net, new_tokens)``: greedy continuation of ``prompt``."""

    def generate(net, new_tokens: int) -> list[int]:
        """Always a (1, seq_len) window, right-padded, argmax at the last real byte."""
        ids = list(prompt)
        out: list[int] = []
        for _ in range(int(new_tokens)):
            ctx = ids[-seq_len:]
            window = np.zeros((1, seq_len), np.int32)
            window[0, : len(ctx)] = ctx
            logits = net(ms.Tensor(window)).asnumpy()
            nxt = int(logits[0, len(ctx) - 1].argmax())
            ids.append(nxt)
            out.append(nxt)
        return out

    return generate


def build(params: dict, seed: int) -> Workload:
    p = check_params(params)
    d, n_layers, n_heads, seq_len = p["d_model"], p["n_layers"], p["n_heads"], p["seq_len"]
    _warm_eager()

    # ---- data -------------------------------------------------------------------------------------------------
    text = load_corpus(p["corpus_bytes"])
    corpus = np.frombuffer(text, dtype=np.uint8)
    split, train_starts, val_starts = _split_windows(corpus, p, seed)
    train_tokens, train_labels = _windows(corpus, train_starts.astype(np.int64), seq_len)
    val_tokens, val_labels = _windows(corpus, val_starts, seq_len)

    # ---- model ------------------------------------------------------------------------------------------------
    network = TinyGPT(d, n_layers, n_heads, seq_len)
    n_params = sum(int(np.prod(q.shape)) for q in network.trainable_params())
    n_matmul_params = n_params - VOCAB * d - seq_len * d  # embedding tables are lookups, not matmuls
    # Forward+backward FLOPs per sample (PaLM appendix B / Kaplan et al.): 6 FLOPs per matmul parameter per token
    # (2 forward, 4 backward), plus attention scores and weighted sum, 2*2*T*d forward per token per layer, x3 for
    # fwd+bwd = 12*L*T*d per token.  The full T*T score matrix is computed (the mask does not skip work).
    flops_per_sample = float(seq_len * (6 * n_matmul_params + 12 * n_layers * seq_len * d))

    # ---- sampling ---------------------------------------------------------------------------------------------
    val_text = text[split:]
    # the prompt starts at the first top-level ``def`` of the validation text (else at its first line)
    at = val_text.find(b"\ndef ")
    line_start = (at if at >= 0 else val_text.find(b"\n")) + 1
    prompt = val_text[line_start : line_start + seq_len // 2]

    generate = _greedy(prompt, seq_len)

    def decode(ids: list) -> str:
        return bytes(int(i) & 0xFF for i in ids).decode("utf-8", errors="replace")

    def make_optimizer(parameters):
        return nn.Adam(parameters, learning_rate=p["learning_rate"])

    return Workload(
        name="tiny_gpt",
        network=network,
        loss_fn=LMLoss(),
        make_optimizer=make_optimizer,
        train_columns={"tokens": train_tokens, "labels": train_labels},
        val_columns={"tokens": val_tokens, "labels": val_labels},
        label_column="labels",
        tokens_per_sample=seq_len,
        recompute_cell_names=[f"blocks.{i}" for i in range(n_layers)],
        flops_per_sample=flops_per_sample,
        generate=generate,
        decode=decode,
        extra={
            "prompt": prompt.decode("utf-8", errors="replace"),
            "params": p,
            "n_params": n_params,
            "corpus_bytes_read": len(corpus),
            "split": split,
            "train_starts": train_starts,
            "val_starts": val_starts,
        },
    )


def _warm_eager() -> None:
    """Under NumPy 2 the first eager MindSpore op can fail (SystemError) and leave the next one failing inside grad;
    run a throw-away op first, which may itself raise SystemError (see /work/shared/mindspore-notes.md)."""
    try:
        (ms.Tensor(np.ones(1, np.float32)) + 1).asnumpy()
    except SystemError:
        pass
