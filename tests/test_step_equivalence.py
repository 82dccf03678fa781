"""perftune's training step against MindSpore's own (issue 14): one forward per step, the same losses, parameters and
BatchNorm moving statistics as ``nn.TrainOneStepCell`` / ``nn.TrainOneStepWithLossScaleCell`` / ``Model.train``.

Every network starts in eval mode, as mindcv's models do, and every run goes through a validation pass
(``set_train(False)`` then ``set_train(True)``) between its steps, as the burst does.  The forward count comes from a
Parameter incremented inside the network (it counts in graph mode too, where no Python runs per step).  Real
MindSpore, tiny shapes, 3 steps.
"""

from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import Parameter, Tensor, amp, nn, ops  # noqa: E402

from perftune.burst.amp_check import apply_amp, probe_inputs, scaler_read_back  # noqa: E402
from perftune.burst.train_step import NetWithLoss, build_train_step  # noqa: E402

STEPS_BEFORE_VAL, STEPS_AFTER_VAL = 2, 1
BATCH = 4
TOL = {"rtol": 1e-4, "atol": 1e-5}


class Counted(nn.Cell):
    """Counts forward passes in a Parameter (works in graph mode, where construct's Python runs only at compile)."""

    def __init__(self, net):
        super().__init__()
        self.net = net
        self.forwards = Parameter(Tensor(0, ms.int32), name="forwards", requires_grad=False)

    def construct(self, x):
        x = ops.depend(x, ops.assign_add(self.forwards, Tensor(1, ms.int32)))
        return self.net(x)


class BNNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, pad_mode="valid")
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Dense(4 * 6 * 6, 5)

    def construct(self, x):
        return self.fc(ops.flatten(ops.relu(self.bn(self.conv(x)))))


class MLP(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(3 * 8 * 8, 16)
        self.fc2 = nn.Dense(16, 5)

    def construct(self, x):
        return self.fc2(ops.relu(self.fc1(ops.flatten(x))))


class DropoutNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(3 * 8 * 8, 16)
        self.drop = nn.Dropout(p=0.5)
        self.fc2 = nn.Dense(16, 5)

    def construct(self, x):
        return self.fc2(self.drop(ops.relu(self.fc1(ops.flatten(x)))))


class TupleNet(nn.Cell):
    """Returns (logits, features), and its construct calls other methods: the shape of many real wrappers."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, pad_mode="valid")
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Dense(4 * 6 * 6, 5)

    def features(self, x):
        return ops.flatten(ops.relu(self.bn(self.conv(x))))

    def head(self, h):
        return self.fc(h)

    def construct(self, x):
        h = self.features(x)
        return self.head(h), h


class FirstOutput(nn.Cell):
    """How a user wraps a tuple-output network so that the loss sees the logits."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def construct(self, x):
        return self.net(x)[0]


class HalvesMean(nn.Cell):
    """The reference for grad_accum_steps=2: the mean of the two half-batch losses.  Its gradient is the mean of
    the two half-batch gradients, i.e. accumulation done by hand inside MindSpore's own TrainOneStepCell."""

    def __init__(self, net_with_loss):
        super().__init__(auto_prefix=False)
        self.net_with_loss = net_with_loss

    def construct(self, x, y):
        m = x.shape[0] // 2
        return (self.net_with_loss(x[:m], y[:m]) + self.net_with_loss(x[m:], y[m:])) / 2


class LossScaleCellOnCPU(nn.TrainOneStepWithLossScaleCell):
    """MindSpore's loss-scale step with one change: its overflow check has GPU and Ascend branches only (on CPU it
    selects NPUGetFloatStatusV2 or FloatStatus, neither of which has a CPU kernel), so it is MindSpore's public
    ``amp.all_finite`` here.  Everything else (scaling, unscaling, the scale update, the skipped update) is its own."""

    def get_overflow_status(self, status, compute_output):
        return ops.logical_not(amp.all_finite(compute_output))


def make_model(name: str):
    if name == "mindcv":
        import mindcv  # the `test` extra pins mindcv==0.3.0

        net = mindcv.create_model("resnet18", num_classes=5, pretrained=False)
    else:
        net = {"bn": BNNet, "mlp": MLP, "dropout": DropoutNet, "tuple": lambda: FirstOutput(TupleNet())}[name]()
    net.set_train(False)  # as mindcv builds its models: a step that forgets set_train(True) trains in eval mode
    return Counted(net)


def twin_models(name: str):
    a, b = make_model(name), make_model(name)
    for pa, pb in zip(a.get_parameters(), b.get_parameters()):
        assert pa.name == pb.name
        pb.set_data(Tensor(pa.asnumpy()))
    return a, b


def batches(name: str, n: int):
    rng = np.random.default_rng(0)
    side = 16 if name == "mindcv" else 8  # ResNet-18 at 16x16: its last stage still 1x1, a quarter of the 32x32 convolutions
    return [(Tensor(rng.standard_normal((BATCH, 3, side, side)).astype(np.float32)),
             Tensor(rng.integers(0, 5, (BATCH,)).astype(np.int32))) for _ in range(n)]


def loss_fn():
    return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")


def optimizer(net):
    return nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)


def reference_step(net, loss_scale: str, accum: int):
    plain = nn.WithLossCell(net, loss_fn())
    with_loss = HalvesMean(plain) if accum == 2 else plain
    opt = optimizer(net)
    if loss_scale == "none":
        step = nn.TrainOneStepCell(with_loss, opt)
    elif loss_scale == "static":
        step = LossScaleCellOnCPU(with_loss, opt, scale_sense=Tensor(1024.0, ms.float32))
    else:
        manager = nn.DynamicLossScaleUpdateCell(loss_scale_value=2.0**16, scale_factor=2, scale_window=50)
        step = LossScaleCellOnCPU(with_loss, opt, scale_sense=manager)
    step.set_train()  # as MindSpore's docs and Model.train do
    return step, plain


def run(step, with_loss, net, data):
    """Steps, a validation pass as the burst does it, more steps; returns the step losses and the validation loss."""
    losses = []
    for x, y in data[:STEPS_BEFORE_VAL]:
        out = step(x, y)
        losses.append(float((out[0] if isinstance(out, tuple) else out).asnumpy()))
    net.set_train(False)
    val = float(with_loss(*data[0]).asnumpy())
    net.set_train(True)
    for x, y in data[STEPS_BEFORE_VAL:]:
        out = step(x, y)
        losses.append(float((out[0] if isinstance(out, tuple) else out).asnumpy()))
    return losses, val


def state(net) -> dict:
    return {p.name: p.asnumpy().copy() for p in net.get_parameters()}  # asnumpy() may share the memory


@pytest.fixture(params=["graph", "pynative"])
def mode(request):
    from perftune.burst.context import first_eager_op

    before = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE if request.param == "graph" else ms.PYNATIVE_MODE)
    first_eager_op()
    yield request.param
    ms.set_context(mode=before)


def compare(name: str, form: str, mode: str, loss_scale: str, accum: int):
    ours, theirs = twin_models(name)
    data = batches(name, STEPS_BEFORE_VAL + STEPS_AFTER_VAL)
    initial = state(ours)
    with_loss = NetWithLoss(ours, loss_fn())
    step = build_train_step(form, with_loss, optimizer(ours), loss_scale, accum, mode == "graph", "O0")
    got_losses, got_val = run(step, with_loss, ours, data)
    ref_step, ref_with_loss = reference_step(theirs, loss_scale, accum)
    ref_losses, ref_val = run(ref_step, ref_with_loss, theirs, data)

    steps = STEPS_BEFORE_VAL + STEPS_AFTER_VAL
    got, ref = state(ours), state(theirs)
    # one forward per micro-batch per step, plus the one validation forward: not two per step
    assert int(got.pop("forwards")) == steps * accum + 1 == int(ref.pop("forwards"))
    np.testing.assert_allclose(got_losses, ref_losses, **TOL)
    assert got_val == pytest.approx(ref_val, rel=1e-4, abs=1e-5)
    for key in ref:
        np.testing.assert_allclose(got[key], ref[key], err_msg=key, **TOL)
    moving = [k for k in ref if "moving_mean" in k or "moving_variance" in k]
    # the BatchNorm statistics moved: the steps ran in training mode (from a network built in eval mode)
    assert all(not np.allclose(got[k], initial[k]) for k in moving)
    return step, moving


# (model, step form, loss scale, grad_accum_steps), each in graph and PyNative: every loss scale in both forms
CASES = [
    ("bn", "cell", "none", 1),
    ("bn", "function", "none", 1),
    ("bn", "cell", "static", 1),
    ("bn", "function", "dynamic", 1),
    # accumulation: a network without BatchNorm, whose batch statistics would differ between micro-batches and the
    # full batch by design
    ("mlp", "cell", "dynamic", 2),
    ("mlp", "function", "static", 2),
    ("tuple", "cell", "none", 1),
    ("tuple", "function", "static", 1),
]


@pytest.mark.parametrize("name,form,loss_scale,accum", CASES)
def test_step_matches_mindspore_reference(mode, name, form, loss_scale, accum):
    _, moving = compare(name, form, mode, loss_scale, accum)
    assert bool(moving) == (name in ("bn", "tuple"))


# the cell form in graph mode is TrainOneStepCell's own graph (checked on the small nets): one mindcv compile is enough
@pytest.mark.parametrize("mode,form", [("pynative", "cell"), ("pynative", "function"), ("graph", "function")],
                         indirect=["mode"])
def test_third_party_mindcv_resnet(mode, form):
    """mindcv 0.3.0 ResNet-18 at 16x16, batch 4: the model issue 14 found the double forward on."""
    _, moving = compare("mindcv", form, mode, "none", 1)
    assert len(moving) == 2 * 20  # ResNet-18's 20 BatchNorm layers


@pytest.mark.parametrize("form", ["cell", "function"])
def test_dropout_runs_in_training_mode(mode, form):
    """Dropout masks come from different random streams in the two steps, so only the count and the training-mode
    behaviour are comparable: one forward per step, and a step loss that differs from the eval-mode loss."""
    net = make_model("dropout")
    data = batches("dropout", 3)
    with_loss = NetWithLoss(net, loss_fn())
    eval_loss = float(with_loss(*data[0]).asnumpy())  # the network is still in eval mode, as built
    step = build_train_step(form, with_loss, optimizer(net), "none", 1, mode == "graph", "O0")
    losses, _ = run(step, with_loss, net, data)
    assert int(net.forwards.asnumpy()) == 1 + 3 + 1  # eval above, 3 steps, the validation pass
    assert abs(losses[0] - eval_loss) > 1e-4  # dropout was active in the step (same batch, same weights)


def test_model_train_matches_cell_step(mode):
    """``Model.train`` (MindSpore's high-level loop, not sink mode) against perftune's cell step."""
    import mindspore.dataset as ds
    from mindspore.train import Model

    ours, theirs = twin_models("bn")
    data = batches("bn", 3)
    with_loss = NetWithLoss(ours, loss_fn())
    step = build_train_step("cell", with_loss, optimizer(ours), "none", 1, mode == "graph", "O0")
    for x, y in data:
        step(x, y)
    # one row per batch: (3, 4, ...) and (3, 4) columns, no batch op (a 1-D label column fails under NumPy 2)
    source = ds.NumpySlicesDataset({"x": np.stack([x.asnumpy() for x, _ in data]),
                                    "y": np.stack([y.asnumpy() for _, y in data])}, shuffle=False)
    Model(theirs, loss_fn=loss_fn(), optimizer=optimizer(theirs)).train(1, source, dataset_sink_mode=False)
    got, ref = state(ours), state(theirs)
    assert int(got.pop("forwards")) == 3 == int(ref.pop("forwards"))
    for key in ref:
        np.testing.assert_allclose(got[key], ref[key], err_msg=key, **TOL)


def test_amp_o1_acts_on_a_tuple_output_wrapper(mode):
    """MindSpore's O1 rewrite misses layers called from other methods (issue 14): perftune applies O1 per layer then,
    and reads the effect back from a forward pass, not from the wrapper class."""
    rng = np.random.default_rng(1)
    columns = {"x": rng.standard_normal((8, 3, 8, 8)).astype(np.float32), "y": np.zeros((8, 1), np.int32)}
    inputs = probe_inputs(columns, "y")
    outcome = apply_amp(FirstOutput(TupleNet()), "O1", inputs)
    assert outcome.effect["method"].startswith("per-layer O1")
    assert outcome.effect["float16_layers"] == 2 and outcome.effect["changed"]
    assert 0 < outcome.effect["max_abs_output_change"] < 0.05
    assert any("O1 rewrite changed nothing" in n.text for n in outcome.notes)
    # a plain network: MindSpore's own O1 acts and perftune leaves it alone
    plain = apply_amp(MLP(), "O1", inputs)
    assert plain.effect["method"] == "auto_mixed_precision" and plain.effect["changed"] and not plain.notes


def test_amp_without_effect_says_so(mode):
    """A network with no white-listed layer: O1 changes nothing, and the note follows the burst's no-effect rule."""

    rng = np.random.default_rng(2)
    inputs = probe_inputs({"x": rng.standard_normal((4, 6)).astype(np.float32), "y": np.zeros((4, 1))}, "y")
    outcome = apply_amp(nn.Tanh(), "O1", inputs)
    assert not outcome.effect["changed"] and outcome.effect["max_abs_output_change"] == 0.0
    assert any(n.kind == "no_effect" and n.text.startswith("amp_level=O1 has no effect") for n in outcome.notes)


def test_loss_scaler_read_back():
    from perftune.burst.train_step import make_scaler

    assert scaler_read_back(make_scaler("none"), scaled=False) == {"loss_scaler": "none", "loss_scale_value": None}
    assert scaler_read_back(make_scaler("static"), scaled=True) == {"loss_scaler": "StaticLossScaler",
                                                                     "loss_scale_value": 1024.0}
    assert scaler_read_back(make_scaler("dynamic"), scaled=True) == {"loss_scaler": "DynamicLossScaler",
                                                                      "loss_scale_value": 65536.0}


@pytest.mark.parametrize("form,loss_scale", [("cell", "none"), ("function", "none"), ("cell", "dynamic"),
                                             ("function", "static")])
def test_the_gradient_norm_is_switched_at_run_time_in_one_graph(mode, form, loss_scale):
    """Issue 38: the accuracy window (norm on) and the timed steps (norm off) run one compiled step.  With the norm
    on it is the global norm of MindSpore's own gradient at those weights, off it is 0, and either way the step
    trains as MindSpore's reference step does."""
    from perftune.compat import compiled_graphs

    ours, theirs = twin_models("mlp")
    data = batches("mlp", 4)
    step = build_train_step(form, NetWithLoss(ours, loss_fn()), optimizer(ours), loss_scale, 1, mode == "graph", "O0")
    ref_step, ref_with_loss = reference_step(theirs, loss_scale, 1)
    ref_grad = ms.grad(ref_with_loss, None, ref_with_loss.trainable_params())
    compiled = []
    for i, (x, y) in enumerate(data):
        expected = np.sqrt(sum(float((g.asnumpy().astype(np.float64) ** 2).sum()) for g in ref_grad(x, y)))
        step.norm = i % 2 == 0
        before = compiled_graphs()
        loss, norm = step(x, y)
        got = float(norm.asnumpy())
        compiled.append(compiled_graphs() - before)
        ref_out = ref_step(x, y)
        ref_loss = ref_out[0] if isinstance(ref_out, tuple) else ref_out
        assert float(loss.asnumpy()) == pytest.approx(float(ref_loss.asnumpy()), rel=1e-4, abs=1e-5)
        assert got == (pytest.approx(expected, rel=1e-4) if step.norm else 0.0)
    got, ref = state(ours), state(theirs)
    assert int(got.pop("forwards")) == len(data) and int(ref.pop("forwards")) == 2 * len(data)  # ref_grad's too
    for key in ref:
        np.testing.assert_allclose(got[key], ref[key], err_msg=key, **TOL)
    # the first step compiles (in PyNative, MindSpore may build the cell's gradient graph), none after it
    assert compiled[1:] == [0] * (len(data) - 1) and compiled[0] == (1 if mode == "graph" else compiled[0])
