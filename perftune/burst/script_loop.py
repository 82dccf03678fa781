"""A script's own training loop, measured without edits: ``for batch in dataset.create_tuple_iterator(): loss =
train_step(*batch)`` (MindSpore's functional style) is found by the iterators the script creates.

Inside a script burst, ``Dataset.create_tuple_iterator`` / ``create_dict_iterator`` (and ``iter(dataset)``, which
calls the first) hand the script a ``LoopIterator``: for the training dataset's iterators, each batch taken is a
step's begin and the previous step ends when the loop asks for the next batch (before it is fetched), driving the
``Meter`` through ``start`` / ``begin`` / ``end`` exactly as ``perftune.steps`` does.

Which dataset trains: the first one from which the script takes a batch outside ``Model.train``/``fit``/``eval``
(those have perftune's callback), unless the loop looks like a validation: a ``Cell.set_train(False)`` was the
script's last ``set_train`` call, or the function iterating is named like an evaluation (``eval``, ``valid``,
``test``, ``infer``, ``predict``).  Later iterators of that dataset are its next epochs; other datasets pass through.

The step's loss: the value of a local variable named ``loss`` (else the first one whose name contains ``loss``) in
the function that iterates (or up to two callers above, e.g. through a progress bar), a tensor or number or a tuple
that starts with one, and only when the step assigned it afresh (a new object since the last step).  It cannot be
found when the loss lives elsewhere (an attribute, a list, a callback) or under another name: then the steps are
timed and their loss is None, and the accuracy gate says it cannot judge.  ``perftune.steps`` / ``perftune.loss``
say it explicitly and win where present.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from perftune.burst import callback
from perftune.burst.failures import KnobRefused
from perftune.burst.meter import BurstDone, Meter

#: names of a function that evaluates rather than trains
EVAL_WORDS = ("eval", "valid", "test", "infer", "predict")
#: callers above the iterating function searched for the loss variable
LOSS_FRAMES = 3


def loss_like(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return bool(value) and loss_like(value[0])
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return True
    return hasattr(value, "dtype") and getattr(value, "size", None) == 1  # a scalar tensor or NumPy value


def find_loss(frame) -> Any:
    """The loop's ``loss`` variable (see the module docstring), or None."""
    for _ in range(LOSS_FRAMES):
        if frame is None:
            return None
        names = frame.f_code.co_varnames + frame.f_code.co_cellvars
        local = frame.f_locals
        order = (["loss"] if "loss" in local else []) + [n for n in names if "loss" in n.lower() and n != "loss"]
        for name in order:
            value = local.get(name)
            if value is not None and not callable(value) and loss_like(value):
                return value[0] if isinstance(value, (tuple, list)) else value
        frame = frame.f_back
    return None


class LoopState:
    """What the burst knows of the script's loops: the training dataset once chosen, the script's last
    ``set_train`` and how deep it is inside ``Model`` calls."""

    def __init__(self, meter: Meter):
        self.meter = meter
        self.training: Optional[int] = None  # id() of the training dataset
        self.eval_mode = False
        self.in_model = 0
        self.steps = 0

    def trains(self, dataset: Any, frame) -> bool:
        """Whether an iterator of ``dataset`` whose first batch is taken now (by ``frame``) is the training one."""
        if self.in_model or callback.explicit_loop():
            return False
        if self.training is not None:
            return id(dataset) == self.training
        name = frame.f_code.co_name.lower() if frame is not None else ""
        if self.eval_mode or any(word in name for word in EVAL_WORDS):
            return False
        self.training = id(dataset)
        return True


class LoopIterator:
    """A dataset iterator that times the steps of the loop over it (when its dataset trains); every other call goes
    to MindSpore's iterator."""

    def __init__(self, inner: Any, dataset: Any, state: LoopState):
        self.inner = inner
        self.dataset = dataset
        self.state = state
        self.decided: Optional[bool] = None
        self.previous: Any = None
        self.last_loss: Any = None

    def __iter__(self) -> LoopIterator:
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["inner"], name)

    def __next__(self) -> Any:
        frame = sys._getframe(1)
        if self.decided is None:
            self.decided = self.state.trains(self.dataset, frame)
        if not self.decided or callback.explicit_loop():
            return next(self.inner)
        meter = self.state.meter
        if callback.loop_refusal():
            raise KnobRefused(callback.loop_refusal())
        if self.previous is None:
            meter.start()
        # the previous step ends when the loop asks for the next batch, before it is fetched (its loss read back
        # then: an @ms.jit step returns before its work is done), so the fetch is the next step's wait for data
        self.end_step(frame)
        batch = next(self.inner)
        meter.begin()
        callback.observe_batch(batch)
        self.previous = batch
        return batch

    def end_step(self, frame) -> None:
        if self.previous is None:
            return
        loss = find_loss(frame)
        fresh = loss if loss is not None and loss is not self.last_loss else None
        self.last_loss = loss if loss is not None else self.last_loss
        samples = callback.batch_samples(self.previous)
        self.previous = None
        self.state.steps += 1
        if self.state.meter.end(fresh, samples):
            raise BurstDone()


def wrap_iterator_factory(original, state: LoopState):
    """``Dataset.create_tuple_iterator`` / ``create_dict_iterator`` handing out ``LoopIterator``s."""

    def create(dataset, *args, **kwargs):
        inner = original(dataset, *args, **kwargs)
        if state.in_model or callback.explicit_loop():  # Model's own iteration: MindSpore's iterator as it is
            return inner
        return LoopIterator(inner, dataset, state)

    create.__name__ = original.__name__
    create.__doc__ = original.__doc__
    return create
