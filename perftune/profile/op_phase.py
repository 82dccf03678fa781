"""The phase of each op from what it is: forward, backward, optimizer or communication.

:func:`phase_rule` decides from an op's scope and type alone (``ops.phase_rule`` says which rule decided):

``scope`` / ``op_type``
    collectives are communication (and so are the other ops of a ``DistributedGradReducer``, the mean's scaling);
    ``Gradients/...`` and ``recompute_...`` scopes are backward; an optimizer cell's scope (``optimizer-Adam``) or
    an update kernel (Adam, ApplyMomentum, ...) is optimizer; a gradient kernel is backward in every mode and route
    (:func:`is_gradient_type`: ``*Grad`` / ``*Backward`` kernels such as ReluGrad, MaxPoolGradWithArgmax,
    BatchNormGradExt, EmbeddingDenseBackward, and the convolution backprops ``Conv2DBackpropInput`` /
    ``Conv2DBackpropFilter``, which PyNative names ``Default/Conv2DBackpropInput-op9`` with no ``Gradients/`` scope);
    other ops inside a cell scope (``Default/net_with_loss-NetWithLoss/...``) are forward.  A backprop kernel inside a
    forward cell scope is a transposed convolution's forward (``Conv2dTranspose`` runs ``Conv2DBackpropInput``).
``step_cell`` / ``unscoped``
    ``Default/<op>`` (an op of the training-step cell itself, or any op in PyNative) and ops with no scope at all
    (bare ``MatMul``, ``Expand/...``): nothing in the name says the phase.  Where launches are timestamped
    (CPU), :mod:`perftune.profile.attribution` places each launch by where it runs in its step (rule ``timeline``);
    elsewhere they stay forward with rule ``default``.  Either way :func:`perftune.profile.splits.compute_splits`
    records the share of the step whose phase came from such placement (``Splits.by_time_share``).
"""

from __future__ import annotations

import re

#: phases an op can have; ``data`` and ``other`` come from the burst's timing, not from ops
OP_PHASES = ("forward", "backward", "optimizer", "communication")


COMPUTE_PHASES = ("forward", "backward", "optimizer")


#: collective kernels, compared after lower-casing and dropping an ``hcom``/``nccl`` prefix and underscores
#: (so ``HcomAllReduce`` and Ascend's ``hcom_allReduce_`` match; ``BroadcastTo``, ``Gather`` (an embedding lookup)
#: and ``ScatterNd``, compute ops, do not)
COLLECTIVES = frozenset(
    {
        "allreduce", "allgather", "allgatherv", "reducescatter", "reducescatterv", "broadcast", "alltoall",
        "alltoallv", "alltoallvc", "alltoallall", "send", "receive", "recv", "sendrecv", "batchsendrecv", "reduce",
        "barrier", "collectivegather", "collectivescatter", "neighborexchange", "neighborexchangev2",
        "matmulallreduce", "allgathermatmul", "matmulreducescatter",
    }
)


#: update kernels of MindSpore's optimizers
OPTIMIZER_OP_TYPES = frozenset(
    {
        "Adam", "AdamW", "AdamWeightDecay", "FusedAdam", "FusedAdamWeightDecay", "FusedSparseAdam",
        "FusedSparseLazyAdam", "FusedCastAdamWeightDecay", "AdamApplyOne", "AdamApplyOneWithDecay",
        "AdamApplyOneAssign", "AdamApplyOneWithDecayAssign", "LambApplyOptimizerAssign", "LambApplyWeightAssign",
        "LambUpdateWithLR", "LambNextMV", "LarsUpdate", "LARSUpdate", "SGD", "ApplyAdaMax", "ApplyAdam",
        "ApplyAdamWithAmsgrad", "ApplyAdamWithAmsgradV2", "ApplyMomentum", "ApplyKerasMomentum",
        "ApplyGradientDescent", "ApplyProximalGradientDescent", "ApplyAdagrad", "ApplyAdagradV2", "ApplyAdagradDA",
        "ApplyAdadelta", "ApplyRMSProp", "ApplyCenteredRMSProp", "ApplyFtrl", "ApplyProximalAdagrad",
        "ApplyPowerSign", "ApplyAddSign", "SparseApplyAdam", "SparseApplyFtrl", "SparseApplyFtrlV2",
        "SparseApplyAdagrad", "SparseApplyAdagradV2", "SparseApplyProximalAdagrad", "SparseApplyRMSProp",
        "SparseApplyCenteredRMSProp", "SparseApplyMomentum", "SparseApplyAdadelta",
    }
)


#: optimizer cells; a scope segment ``<attribute>-<Class>`` with one of these classes (or attribute ``optimizer``)
OPTIMIZER_CELLS = frozenset(
    {
        "Optimizer", "Adam", "AdamW", "AdamWeightDecay", "AdamOffload", "LazyAdam", "Momentum", "SGD", "Lamb", "LARS",
        "Adagrad", "Adadelta", "AdaMax", "AdaFactor", "ASGD", "RMSProp", "FTRL", "ProximalAdagrad", "Rprop",
        "ThorGpu", "ThorAscend",
    }
)


#: gradient reducers of data parallelism: their non-collective ops (the mean's scaling) count as communication
GRAD_REDUCER_CELLS = frozenset({"DistributedGradReducer", "PipelineGradReducer"})


#: gradient kernels by type: ReluGrad, BiasAddGrad, GatherDGradV2, MaxPoolGradGrad, MaxPoolGradWithArgmaxV2,
#: BatchNormGradExt, LayerNormGradV3, ConvolutionGrad, EmbeddingDenseBackward, SoftmaxBackward
_GRAD_KERNEL = re.compile(r"(Grad|Backward)(WithArgmax|WithIndices)?(Ext|V\d+)?(Grad)?$")
#: convolution gradients (Conv2DBackpropInput/Filter, Conv3DBackpropFilterV2, DepthwiseConv2dNativeBackpropInput):
#: also the kernel of a transposed convolution's forward, so a forward cell scope wins over them
_BACKPROP_KERNEL = re.compile(r"Backprop(Input|Filter)(V\d+)?$")


_CELL_SEGMENT = re.compile(r"^(?P<attr>[^-/]+)-(?P<cls>[A-Za-z_][A-Za-z0-9_]*)$")  # fc1-Dense, optimizer-Adam


def _collective_key(op_type: str) -> str:
    key = op_type.lower().replace("_", "")
    for prefix in ("hcom", "nccl", "hccl", "lccl", "dist"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    return key


def _is_collective(op_type: str) -> bool:
    return _collective_key(op_type) in COLLECTIVES


def _segments(full_op_name: str) -> list[str]:
    return [s for s in full_op_name.split("/") if s]


def _in_optimizer_scope(segments: list[str]) -> bool:
    for seg in segments[:-1]:
        m = _CELL_SEGMENT.match(seg)
        if m and (m["attr"].startswith("optimizer") or m["cls"] in OPTIMIZER_CELLS):
            return True
    return False


def _is_backward_scope(segments: list[str]) -> bool:
    return bool(segments) and (
        segments[0] == "Gradients" or any(seg.startswith("recompute_") for seg in segments[:-1])
    )


def _in_grad_reducer_scope(segments: list[str]) -> bool:
    for seg in segments[:-1]:
        m = _CELL_SEGMENT.match(seg)
        if m and (m["cls"] in GRAD_REDUCER_CELLS or m["attr"] == "grad_reducer"):
            return True
    return False


def is_gradient_type(op_type: str) -> bool:
    """Whether an op type is a gradient kernel wherever it runs (``ReluGrad``, ``Conv2DBackpropFilter``, ...).

    >>> [is_gradient_type(t) for t in ("Conv2DBackpropInput", "MaxPoolGradWithArgmaxV2", "Conv2D", "Grad")]
    [True, True, False, True]
    """
    return bool(_GRAD_KERNEL.search(op_type) or _BACKPROP_KERNEL.search(op_type))


def phase_rule(full_op_name: str, op_type: str) -> tuple[str, str]:
    """(phase, rule) from the name alone.

    rule: ``op_type`` or ``scope`` (decided), ``step_cell`` (``Default/<op>``: an op of the training-step cell
    itself, outside any sub-cell) or ``unscoped`` (no scope at all, or ``Expand/...``); the last two are forward
    by name and placed by time where launches are timestamped.
    """
    segments = _segments(full_op_name)
    if _is_collective(op_type):
        return "communication", "op_type"
    if _is_backward_scope(segments):
        return "backward", "scope"
    if _in_grad_reducer_scope(segments):  # the mean's scaling around the AllReduce: part of gradient sync
        return "communication", "scope"
    if _in_optimizer_scope(segments):
        return "optimizer", "scope"
    if op_type in OPTIMIZER_OP_TYPES:
        return "optimizer", "op_type"
    if _GRAD_KERNEL.search(op_type):
        return "backward", "op_type"
    # a cell scope between the root and the op (``Default/net_with_loss-NetWithLoss/.../MatMul-op0``) is forward
    if len(segments) >= 3 and segments[0] == "Default" and any(_CELL_SEGMENT.match(s) for s in segments[1:-1]):
        return "forward", "scope"
    if _BACKPROP_KERNEL.search(op_type):
        return "backward", "op_type"
    if len(segments) == 2 and segments[0] == "Default":
        return "forward", "step_cell"
    return "forward", "unscoped"


def classify_phase(full_op_name: str, op_type: str) -> str:
    """The phase of an op from its scope and type: ``forward``, ``backward``, ``optimizer`` or ``communication``.

    >>> classify_phase("Gradients/Default/net_with_loss-NetWithLoss/network-MLP/fc2-Dense/Grad_MatMul/MatMul-op1",
    ...                "MatMul")
    'backward'
    >>> classify_phase("Default/optimizer-Adam/Assign-op1", "Assign")
    'optimizer'

    Ops without a cell scope (bare ``MatMul`` in PyNative, ``Default/Square-op0``, ``Expand/...``) are forward
    here; ``load_profile`` places their launches by time where the profile has per-launch timestamps.
    """
    return phase_rule(full_op_name, op_type)[0]
