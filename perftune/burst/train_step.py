"""The two ways of writing a training step that the ``train_step`` knob compares.

Both return ``(loss, grad_norm)`` and implement the same maths: optional gradient accumulation over equal
micro-batches of the batch, loss scaling (none / static / dynamic, skipping the update on overflow), and the global
gradient norm for the accuracy gate, switched on and off at run time (``TrainStep.norm``): a tensor input of the one
compiled graph, so the accuracy window and the timed steps run the same graph (two graphs would cost every
process a second compile).  The ``cell`` form is a ``nn.Cell`` compiled as a whole (the ``TrainOneStepCell``
style); the ``function`` form is an ``ms.jit`` function around ``value_and_grad`` and the optimizer.  On CPU the
two are 2-4x apart (see ``../shared/mindspore-notes.md``), which is why it is a knob.
"""

from __future__ import annotations

import mindspore as ms
from mindspore import amp, nn, ops

STATIC_LOSS_SCALE = 1024.0


class NetWithLoss(nn.Cell):
    """``loss_fn(network(*inputs), label)`` with the label as the last column."""

    def __init__(self, network, loss_fn):
        super().__init__(auto_prefix=False)
        self.network = network
        self.loss_fn = loss_fn

    def construct(self, *batch):
        return self.loss_fn(self.network(*batch[:-1]), batch[-1])


def make_scaler(loss_scale: str):
    if loss_scale == "dynamic":
        return amp.DynamicLossScaler(scale_value=2.0**16, scale_factor=2, scale_window=50)
    if loss_scale == "static":
        return amp.StaticLossScaler(STATIC_LOSS_SCALE)
    return amp.StaticLossScaler(1.0)


def _is_scaled(scaler) -> bool:
    """False for loss_scale=none (a static scale of 1): the step then leaves the scaler out entirely."""
    return not (isinstance(scaler, amp.StaticLossScaler) and float(scaler.scale_value.asnumpy()) == 1.0)


def _global_norm(grads):
    return ops.sqrt(ops.addn([ops.reduce_sum(ops.square(g.astype(ms.float32))) for g in grads]))


class ScaledLoss(nn.Cell):
    """``(loss * scale, loss)``: the first output is differentiated, the second rides along as the step's loss."""

    def __init__(self, net_with_loss, scaler, scaled: bool):
        super().__init__(auto_prefix=False)
        self.net_with_loss = net_with_loss
        self.scaler = scaler
        self.scaled = scaled

    def construct(self, batch):  # one tuple: graph mode's value_and_grad refuses a Cell with *args here
        loss = self.net_with_loss(*batch)
        if self.scaled:
            return self.scaler.scale(loss), loss
        return loss, loss


class CellTrainStep(nn.Cell):
    """The whole step in one compiled Cell; ``construct(norm_on, *batch)``."""

    def __init__(self, net_with_loss, optimizer, scaler, accum_steps: int, grad_reducer=None, scaled: bool = True):
        super().__init__(auto_prefix=False)
        # loss_scale=none: a plain step, without the scale, the finiteness check and the conditional update (on
        # small CPU steps they cost up to a third of the step)
        self.scaled = scaled
        self.net_with_loss = net_with_loss
        # as nn.TrainOneStepCell does: record the forward for the gradient, so that in PyNative the GradOperation
        # below reuses it instead of running the forward a second time (which also updated BatchNorm's moving
        # statistics twice per step); in graph mode the compiler merges the two forwards (without accumulation)
        self.net_with_loss.set_grad()
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.scaler = scaler
        self.accum_steps = accum_steps
        self.reduce_grads = grad_reducer is not None
        self.grad_reducer = grad_reducer
        self.grad = ops.GradOperation(get_by_list=True, sens_param=True)
        self.scaled_loss = ScaledLoss(net_with_loss, scaler, scaled)
        self.hyper_map = ops.HyperMap()

    def micro_step(self, *part):
        """One forward and its gradient.  Without accumulation, as ``nn.TrainOneStepCell`` writes it.  With it, in
        graph mode the compiler does not merge that forward with the gradient's own forward inside the unrolled
        loop (a forward counter fired twice per micro-batch, so BatchNorm statistics would move twice), so the
        loss comes from the gradient call itself, as an auxiliary output."""
        if self.accum_steps == 1:
            part_loss = self.net_with_loss(*part)
            sens = ops.ones_like(part_loss)
            if self.scaled:
                sens = sens * self.scaler.scale_value.astype(part_loss.dtype)
            return part_loss, self.grad(self.net_with_loss, self.weights)(*part, sens)
        (_, part_loss), part_grads = ops.value_and_grad(self.scaled_loss, None, self.weights, has_aux=True)(part)
        return part_loss, part_grads

    def construct(self, norm_on, *batch):
        micro = batch[0].shape[0] // self.accum_steps
        loss = None
        grads = None
        for i in range(self.accum_steps):
            part = ()
            for column in batch:
                part = part + (column[i * micro:(i + 1) * micro],)
            part_loss, part_grads = self.micro_step(*part)
            if grads is None:
                grads = part_grads
                loss = part_loss
            else:
                grads = self.hyper_map(ops.add, grads, part_grads)
                loss = loss + part_loss
        if self.accum_steps > 1:
            loss = loss / self.accum_steps
            grads = self.hyper_map(ops.partial(ops.mul, 1.0 / self.accum_steps), grads)
        if self.reduce_grads:  # data parallel: AllReduce (and average) over the ranks
            grads = self.grad_reducer(grads)
        grad_norm = ops.zeros((), ms.float32)
        if self.scaled:
            grads = self.scaler.unscale(grads)
            finite = amp.all_finite(grads)
            self.scaler.adjust(finite)
            if norm_on:
                grad_norm = _global_norm(grads)
            if finite:
                self.optimizer(grads)
        else:
            if norm_on:
                grad_norm = _global_norm(grads)
            self.optimizer(grads)
        return loss, grad_norm


def function_train_step(net_with_loss, optimizer, scaler, accum_steps: int, graph: bool, jit_level: str,
                        grad_reducer=None):
    """The same step as a function ``step(norm_on, *batch)``; compiled with ``ms.jit`` in graph mode, eager in
    PyNative."""
    weights = optimizer.parameters
    scaled = _is_scaled(scaler)

    def scaled_loss(*batch):
        loss = net_with_loss(*batch)
        return (scaler.scale(loss) if scaled else loss), loss

    grad_fn = ms.value_and_grad(scaled_loss, None, weights, has_aux=True)

    def step(norm_on, *batch):
        micro = batch[0].shape[0] // accum_steps
        loss = None
        grads = None
        for i in range(accum_steps):
            part = tuple(column[i * micro:(i + 1) * micro] for column in batch)
            (_, part_loss), part_grads = grad_fn(*part)
            if grads is None:
                grads, loss = part_grads, part_loss
            else:
                grads = tuple(a + b for a, b in zip(grads, part_grads))
                loss = loss + part_loss
        if accum_steps > 1:
            loss = loss / accum_steps
            grads = tuple(g / accum_steps for g in grads)
        if grad_reducer is not None:
            grads = grad_reducer(grads)
        grad_norm = ops.zeros((), ms.float32)
        if scaled:
            grads = scaler.unscale(grads)
            finite = amp.all_finite(grads)
            scaler.adjust(finite)
            if norm_on:
                grad_norm = _global_norm(grads)
            if finite:
                optimizer(grads)
        else:
            if norm_on:
                grad_norm = _global_norm(grads)
            optimizer(grads)
        return loss, grad_norm

    return ms.jit(step, jit_level=jit_level) if graph else step


class TrainStep:
    """The step every phase of a burst calls: ``step(*batch) -> (loss, grad_norm)``, one graph whatever ``norm``.

    ``norm`` (settable between calls) switches the global gradient norm on: on CPU it costs 1.5-2 ms of a 7-9 ms MLP
    step, so the burst asks for it in the accuracy window only.  In graph mode the switch is a boolean tensor input
    (a Python bool would be a compile-time constant: one graph per value); in PyNative a Python bool (a tensor's
    truth value would read it back to the host every step).
    """

    def __init__(self, inner, form: str, scaler, graph: bool, norm: bool = True):
        self.inner = inner  # the compiled Cell or the (ms.jit) function, for read-back
        self.form = form
        self.scaler = scaler  # for the burst's read-back of what was applied
        self.norm = norm
        self.jit_config_dict = getattr(inner, "jit_config_dict", None)
        self.flags = (ms.Tensor(False, ms.bool_), ms.Tensor(True, ms.bool_)) if graph else (False, True)

    def __call__(self, *batch):
        return self.inner(self.flags[bool(self.norm)], *batch)


def make_grad_reducer(optimizer, mean: bool, degree: int):
    """Data parallel: ``nn.DistributedGradReducer`` over the world group (call after ``communication.init()``)."""
    from mindspore.communication.management import GlobalComm

    return nn.DistributedGradReducer(optimizer.parameters, mean=mean, degree=degree,
                                     group=GlobalComm.WORLD_COMM_GROUP)


def build_train_step(form: str, net_with_loss, optimizer, loss_scale: str, accum_steps: int, graph: bool,
                     jit_level: str, grad_reducer=None, with_norm: bool = True) -> TrainStep:
    """``grad_reducer`` (data parallel, see :func:`make_grad_reducer`) reduces the gradients before the update.

    ``with_norm``: whether the step starts with the gradient norm on (``TrainStep.norm``, switched per call).
    """
    scaler = make_scaler(loss_scale)
    # training mode before anything trains, in both forms: models such as mindcv's are built with training=False,
    # and BatchNorm/Dropout in eval mode would train (and be judged as) a different network from the timed one
    net_with_loss.set_train(True)
    if form == "function":
        inner = function_train_step(net_with_loss, optimizer, scaler, accum_steps, graph, jit_level, grad_reducer)
    else:
        inner = CellTrainStep(net_with_loss, optimizer, scaler, accum_steps, grad_reducer, scaled=_is_scaled(scaler))
        inner.set_train()
        if graph:
            inner.set_jit_config(ms.JitConfig(jit_level=jit_level))
    return TrainStep(inner, form, scaler, graph, with_norm)
