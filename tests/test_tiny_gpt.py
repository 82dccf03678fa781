"""tiny_gpt workload: real stdlib corpus, deterministic split and columns, a working network (real MindSpore, CPU)."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import nn  # noqa: E402

from perftune.workloads import resolve  # noqa: E402
from perftune.workloads.tiny_gpt import DEFAULTS, build, load_corpus  # noqa: E402

SMALL = {"d_model": 64, "n_layers": 1, "n_heads": 4, "seq_len": 16, "train_samples": 64, "val_samples": 16,
         "corpus_bytes": 50_000}


@pytest.fixture(autouse=True)
def _cpu():
    if ms.get_context("device_target") != "CPU":
        ms.set_device("CPU")
    else:
        try:
            ms.set_device("CPU")
        except RuntimeError:  # an earlier in-process test (test_step_equivalence.py) already ran CPU kernels
            pass
    yield


def _small(seed=0, **over):
    ms.set_seed(seed)
    return build({**SMALL, **over}, seed)


def test_registry_points_at_build():
    assert resolve("tiny_gpt") is build


def test_corpus_is_real_stdlib_source_and_deterministic():
    a, b = load_corpus(30_000), load_corpus(30_000)
    assert a == b and len(a) == 30_000
    root = Path(sysconfig.get_paths()["stdlib"])
    assert any(a.startswith(f.read_bytes()[:1000]) for f in sorted(root.glob("*.py"))[:3])  # e.g. __future__.py
    assert b"import " in a and b"def " in a


def test_two_builds_same_seed_give_same_data_other_seed_other_order():
    w1, w2, w3 = _small(0), _small(0), _small(1)
    for col in ("tokens", "labels"):
        np.testing.assert_array_equal(w1.train_columns[col], w2.train_columns[col])
        np.testing.assert_array_equal(w1.val_columns[col], w3.val_columns[col])  # validation is seed-independent
    assert not np.array_equal(w1.train_columns["tokens"], w3.train_columns["tokens"])


def test_train_and_validation_windows_do_not_overlap_and_come_from_the_corpus():
    w = _small(0)
    t, split = SMALL["seq_len"], w.extra["split"]
    corpus = np.frombuffer(load_corpus(SMALL["corpus_bytes"]), np.uint8)
    train_starts, val_starts = w.extra["train_starts"], w.extra["val_starts"]
    assert len(set(train_starts.tolist())) == len(train_starts)  # distinct windows
    assert (train_starts + t + 1 <= split).all()  # the whole window, label byte included, is training text
    assert (val_starts >= split).all() and (val_starts + t + 1 <= len(corpus)).all()
    for i in (0, 7, len(train_starts) - 1):
        s = train_starts[i]
        np.testing.assert_array_equal(w.train_columns["tokens"][i], corpus[s : s + t])
    s = val_starts[3]
    np.testing.assert_array_equal(w.val_columns["labels"][3], corpus[s + 1 : s + t + 1])


def test_columns_shapes_dtypes_and_shifted_labels():
    w = _small(0)
    w.check()
    assert list(w.train_columns) == ["tokens", "labels"] and w.label_column == "labels"
    assert w.input_columns == ["tokens"]
    for cols, n in ((w.train_columns, SMALL["train_samples"]), (w.val_columns, SMALL["val_samples"])):
        for name in ("tokens", "labels"):
            assert cols[name].dtype == np.int32 and cols[name].shape == (n, SMALL["seq_len"])
        np.testing.assert_array_equal(cols["labels"][:, :-1], cols["tokens"][:, 1:])
    assert w.tokens_per_sample == SMALL["seq_len"]
    assert w.recompute_cell_names == [f"blocks.{i}" for i in range(SMALL["n_layers"])]
    assert w.flops_per_sample > 6 * (w.extra["n_params"] - 256 * 64 - 16 * 64) * SMALL["seq_len"]


def test_default_parameter_count_is_1_to_5_million():
    ms.set_seed(0)
    w = build({}, 0)
    n = sum(int(np.prod(p.shape)) for p in w.network.trainable_params())
    assert n == w.extra["n_params"]
    assert 1_000_000 <= n <= 5_000_000
    assert w.extra["params"] == DEFAULTS
    assert w.train_columns["tokens"].shape == (DEFAULTS["train_samples"], DEFAULTS["seq_len"])


def test_network_is_causal_and_returns_float32_logits():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    w = _small(0)
    x = w.val_columns["tokens"][:2].copy()
    a = w.network(ms.Tensor(x)).asnumpy()
    x[:, 10:] = (x[:, 10:] + 1) % 256  # change the future: positions < 10 must not see it
    b = w.network(ms.Tensor(x)).asnumpy()
    assert a.shape == (2, SMALL["seq_len"], 256) and a.dtype == np.float32
    np.testing.assert_allclose(a[:, :10], b[:, :10], rtol=1e-5, atol=1e-5)
    assert not np.allclose(a[:, 10:], b[:, 10:])


@pytest.mark.slow
def test_adam_steps_in_graph_mode_lower_the_training_loss():
    ms.set_context(mode=ms.GRAPH_MODE)
    w = _small(0)
    step = nn.TrainOneStepCell(nn.WithLossCell(w.network, w.loss_fn), w.make_optimizer(w.network.trainable_params()))
    x, y = (ms.Tensor(w.train_columns[c][:16]) for c in ("tokens", "labels"))
    losses = [float(step(x, y).asnumpy()) for _ in range(8)]
    assert abs(losses[0] - np.log(256)) < 0.5  # starts near uniform over bytes
    assert losses[-1] < losses[0] - 0.3, losses


def test_generate_and_decode():
    ms.set_context(mode=ms.GRAPH_MODE)
    w = _small(0)
    ids = w.generate(w.network, 5)
    assert len(ids) == 5 and all(isinstance(i, int) and 0 <= i < 256 for i in ids)
    assert isinstance(w.decode(ids), str)
    assert w.decode(list(b"def f(x):\xff")) == "def f(x):\ufffd"
    prompt = w.extra["prompt"]
    assert isinstance(prompt, str) and prompt and prompt.encode() in load_corpus(SMALL["corpus_bytes"])[w.extra["split"]:]


@pytest.mark.parametrize(
    "params, key",
    [
        ({"bogus": 1}, "bogus"),
        ({"d_model": "64"}, "d_model"),
        ({"n_layers": 1.5}, "n_layers"),
        ({"seq_len": True}, "seq_len"),
        ({"learning_rate": "fast"}, "learning_rate"),
        ({"train_samples": 0}, "train_samples"),
        ({"d_model": 66, "n_heads": 4}, "d_model"),
    ],
)
def test_bad_params_raise_value_error_naming_the_key(params, key):
    with pytest.raises(ValueError, match=key):
        build(params, 0)


def test_unknown_key_message_lists_allowed_keys():
    with pytest.raises(ValueError, match="allowed: .*d_model"):
        build({"dmodel": 64}, 0)
