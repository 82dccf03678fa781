"""``workload.generate`` for ``tests/lm_model_train.py``: a greedy continuation of a fixed prompt by the network the
script trains (``CausalLM``: its ``model`` is tiny_gpt's ``TinyGPT``, whose window is at most its ``seq_len``)."""

import mindspore as ms
import numpy as np


def generate(network, new_tokens: int = 32):
    model = network.model
    model.set_train(False)
    ids = list(b"the quick brown fox ")
    window = model.wpe.shape[0]
    for _ in range(new_tokens):
        logits = model(ms.Tensor(np.array([ids[-window:]], dtype=np.int32)))
        ids.append(int(logits.asnumpy()[0, -1].argmax()))
    return bytes(ids[-new_tokens:]).decode("latin-1")
