"""When a training step has ended: when its work has, not when its call returned.

A ``@ms.jit`` function step returns as soon as its graph is dispatched (0.6 ms of a 413 ms step on CPU, tiny_gpt),
and on GPU and Ascend every step, Cell or function, does; a ``TrainOneStepCell`` call blocks on CPU.  So every step
is completed before its end is timed: its loss is read back (``asnumpy`` waits for the computation that made it)
and, off CPU, the device's streams are synchronised (``mindspore.runtime.synchronize``, where the optimizer's
updates may still run after the loss is ready).  This is what a plain loop synchronised every step measures, and
what ``Model.train`` does when a ``LossMonitor`` reads each step's loss: the reference perftune's timing is checked
against (``experiments/benchmarks/step_fidelity.py``).

Why every step, timed windows included: one read-back per window let the host run a whole window ahead of the
device.  On CPU that measured 551 ms a step against 413 ms synchronised (the dispatching thread competes with the
kernels for 2 cores); a read-back every step matched the synchronised loop for both step forms.  On a device the
same per-step completion costs the host's launch of the next step (well under a millisecond for a compiled graph),
which every loop that logs its loss per step pays too.
"""

from __future__ import annotations

from typing import Any, Optional

from perftune.burst.results import figure, loss_value


def complete(loss: Any, device: str) -> Optional[float]:
    """Wait for the step that produced ``loss`` to end; its loss as a float (None where NaN/Inf or not a number)."""
    value = loss_value(loss)
    if device != "CPU":
        synchronize()
    return value


def read_norm(grad_norm: Any) -> Optional[float]:
    """The accuracy step's gradient norm (None where NaN/Inf); reading it back waits for it too."""
    return figure(grad_norm)[1] if grad_norm is not None else None


def synchronize() -> None:
    """Every stream of the device (GPU/Ascend); MindSpore versions without ``runtime.synchronize`` rely on the
    read-back alone."""
    import mindspore as ms

    sync = getattr(getattr(ms, "runtime", None), "synchronize", None)
    if sync is not None:
        sync()
