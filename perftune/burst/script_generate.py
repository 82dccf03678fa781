"""The repetition check of a script workload: the plan's ``workload.generate`` (``FILE.py:function``) called with the
network the script trains, at the accuracy window's end, as a ``build()`` workload's ``generate`` is.

The network is the one the script passed to ``mindspore.train.Model``, else the first Cell its own loop put in
training mode or asked for gradients (``set_train``, ``set_grad``: ``nn.TrainOneStepCell`` asks its network).  The
function returns a greedy sample as token ids or as text (text is checked by its bytes).  Sampling is not timed; the
network's training mode is restored after it, so the steps after it run the graph they ran before.  A function that
fails leaves a warning note and the speed figures stand.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Any, Callable

from perftune.burst.failures import one_line
from perftune.io.records import Accuracy, Note
from perftune.workloads.base import repetition_rate


def load_generate(target: str) -> Callable[[Any], Any]:
    """The function ``target`` names (``/abs/file.py:name``), its file run as a module beside the script's."""
    where, _, name = target.rpartition(":")
    folder = str(Path(where).parent)
    sys.path.insert(0, folder)
    try:
        return runpy.run_path(where, run_name="perftune_generate")[name]
    finally:
        sys.path.remove(folder)


def sample_into(acc: Accuracy, target: str, network: Any, notes: list[Note]) -> None:
    """``acc.repetition_rate`` and ``acc.sample_text`` from ``target``'s sample of ``network``; a note if it cannot."""
    if network is None:
        notes.append(Note(kind="warning", text=("workload.generate: no network to sample: the script neither "
                                                "built a mindspore.train.Model nor called set_train or set_grad on "
                                                "a Cell")))
        return
    training = bool(getattr(network, "training", True))
    try:
        out = load_generate(target)(network)
    except Exception as exc:  # noqa: BLE001 - the user's function: its failure is a note, not a failed trial
        notes.append(Note(kind="warning", text=f"workload.generate failed: {one_line(exc)}"))
        return
    finally:
        if hasattr(network, "set_train"):
            network.set_train(training)
    if isinstance(out, str):
        acc.sample_text, ids = out, list(out.encode("utf-8"))
    else:
        ids = [int(i) for i in (out.tolist() if hasattr(out, "tolist") else out)]
    acc.repetition_rate = repetition_rate(ids)
    if not ids:
        notes.append(Note(kind="warning", text="workload.generate returned an empty sample"))
