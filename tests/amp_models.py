"""Two small real models on which an AMP level fails as it does on mindformers' LLaMA (``test_user_messages``).

``DecoratedNet``: a layer whose ``__init__`` carries a decorator its own file defines (mindformers' ``Linear`` and its
``_args_type_validator_check``): O1's rewrite keeps only the file's imports, so the name is missing (``NameError``).
``OwnPrecisionAttention``: attention with its own ``compute_dtype`` and a float32 softmax: O2/O3 make its dense layers
float16 while it casts the probabilities back to its own dtype, so BatchMatMul meets mixed inputs (graph mode).
Not a test module."""

from __future__ import annotations

import functools

import mindspore as ms
import numpy as np
from mindspore import nn, ops


def _args_type_validator_check(**types):
    """A checking decorator defined in the model's own file, as mindformers' layers have."""
    def deco(f):
        @functools.wraps(f)
        def checked(*args, **kwargs):
            return f(*args, **kwargs)
        return checked
    return deco


class Linear(nn.Cell):
    @_args_type_validator_check(in_channels=int)
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.weight = ms.Parameter(ms.Tensor(np.random.default_rng(0).normal(size=(in_channels, out_channels))
                                             .astype(np.float32)))

    def construct(self, x):
        return ops.relu(ops.matmul(x, self.weight))


class DecoratedNet(nn.Cell):
    def __init__(self, width: int = 8):
        super().__init__()
        self.hidden = Linear(width, width)
        self.out = nn.Dense(width, 4)

    def construct(self, x):
        return self.out(self.hidden(x))


class OwnPrecisionAttention(nn.Cell):
    def __init__(self, width: int = 8, compute_dtype=ms.float32):
        super().__init__()
        self.compute_dtype = compute_dtype
        self.q, self.k, self.v = nn.Dense(width, width), nn.Dense(width, width), nn.Dense(width, width)
        self.bmm = ops.BatchMatMul()
        self.bmm_t = ops.BatchMatMul(transpose_b=True)

    def construct(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        probs = ops.softmax(ops.cast(self.bmm_t(q, k), ms.float32), -1)  # the model's own float32 softmax
        return self.bmm(ops.cast(probs, self.compute_dtype), v)
