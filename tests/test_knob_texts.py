"""``perftune knobs`` says what a knob does in each mode, and the burst does that (issue 28 item 6): the function step
is wrapped in ms.jit in graph mode only and runs eagerly in PyNative; compile settings say they do nothing there."""

from __future__ import annotations

import pytest

from perftune.cli import main
from perftune.compat import cli_runner
from perftune.knobs import KNOBS


def test_the_knob_texts_say_what_each_mode_does():
    step = KNOBS["train_step"].help
    assert "in graph mode" in step and "ms.jit" in step and "in pynative mode both run eagerly" in step
    assert "an ms.jit function" not in step  # the old text, wrong for PyNative
    for name in ("jit_level", "graph_kernel"):
        assert "no effect in pynative mode" in KNOBS[name].help, name
    out = cli_runner().invoke(main, ["knobs"])
    assert out.exit_code == 0 and "in pynative mode both run eagerly" in out.output


@pytest.mark.parametrize("graph", [True, False], ids=["graph", "pynative"])
def test_the_function_step_is_jit_wrapped_in_graph_mode_only(graph):
    """What the text promises, on the step the burst builds (``read_back`` tells them apart the same way)."""
    from mindspore import nn

    from perftune.burst.train_step import NetWithLoss, build_train_step

    net = nn.Dense(4, 2)
    optimizer = nn.SGD(net.trainable_params(), 0.1)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    step = build_train_step("function", NetWithLoss(net, loss), optimizer, "none", 1, graph, "O0")
    assert callable(getattr(step.inner, "__wrapped__", None)) is graph  # ms.jit wraps the function; eager is the function
