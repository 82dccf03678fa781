"""Workloads that misbehave on purpose, to check that perftune records them instead of crashing or hanging."""

from __future__ import annotations

import time

import numpy as np


def raising(params: dict, seed: int):
    raise RuntimeError("this workload is broken on purpose: " + str(params.get("why", "no reason")))


def hanging(params: dict, seed: int):
    time.sleep(3600)


def memory_hog(params: dict, seed: int):
    # far beyond what the machine has: NumPy raises MemoryError at once (Linux refuses the obvious overcommit)
    return np.ones((1 << 40,), dtype=np.float64)


def escaping_sleeper(params: dict, seed: int):
    """Starts a grandchild in a session of its own (out of the burst's process group), then hangs; with
    ``ignore_term`` the burst also ignores SIGTERM, so only perftune's SIGKILL ends it."""
    import signal
    import subprocess
    import sys

    if params.get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", params["marker"]],
                             start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    with open(params["started_file"], "w") as fh:  # the test knows the grandchild really ran
        fh.write(str(child.pid))
    time.sleep(3600)


def newer_trial_file(params: dict, seed: int):
    """Raises; an ``atexit`` hook of its own (the burst runs them after writing its failed trial.json) replaces the
    file with one from a newer perftune: a schema version this one does not know."""
    import atexit
    import json
    from pathlib import Path

    path = Path("trial.json").resolve()  # the burst runs in its trial folder

    def leave_a_newer_file() -> None:
        path.write_text(json.dumps({"trial_id": "x", "schema_version": 99}))

    atexit.register(leave_a_newer_file)
    raise RuntimeError("about to leave a trial.json from the future")


def _escapees(marker: str) -> None:
    """A ``setsid`` grandchild and a double-forked daemon (its parent exits at once: it is re-parented), both
    sleeping with ``marker`` on their command line."""
    import subprocess
    import sys

    sleeper = [sys.executable, "-c", "import time; time.sleep(300)", marker]
    subprocess.Popen(sleeper, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    middle = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,"
        " stderr=subprocess.DEVNULL)\n"
        "os._exit(0)\n"), *sleeper])
    middle.wait()


def escaping_trainer(params: dict, seed: int):
    """The tiny MLP, after starting a ``setsid`` grandchild and a double-forked daemon; ``stall``: "train" sleeps
    after that (the burst is busy), "profile" sleeps when the profiler starts its analysis (the burst parses its
    profile), none trains normally.  ``started_file`` gets the phase when it is reached."""
    from perftune.workloads import mlp

    own = {k: params.pop(k, None) for k in ("marker", "started_file", "stall")}
    _escapees(own["marker"])

    def reached(phase: str) -> None:
        with open(own["started_file"], "a") as fh:
            fh.write(phase + "\n")

    if own["stall"] == "profile":
        from perftune.profile.session import ProfilerSession

        def analyse_forever(self):
            reached("profile")
            time.sleep(300)

        ProfilerSession.stop_and_analyse = analyse_forever
    reached("train")
    if own["stall"] == "train":
        time.sleep(300)
    return mlp.build(params, seed)


def model_job(batch: int, callbacks: str, epochs: int, tail: str = "") -> str:
    """A user's own small job (``Model.train`` on a Dense classifier in graph mode) with a hand-added
    ``perftune.Callback``: ``callbacks`` is the Python list expression, ``tail`` lines run after training."""
    return f"""
import sys
import numpy as np
import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn
from mindspore.train import LossMonitor, Model
import perftune

ms.set_context(mode=ms.GRAPH_MODE)
x = np.random.default_rng(0).normal(size=(256, 8)).astype(np.float32)
y = (x[:, :1] > 0).astype(np.float32)
data = ds.NumpySlicesDataset((x, y), column_names=["x", "y"], shuffle=False).batch({batch})
net = nn.Dense(8, 1)
model = Model(net, nn.BCEWithLogitsLoss(), nn.SGD(net.trainable_params(), 0.1))
done = []
class Count(ms.train.Callback):
    def on_train_step_end(self, run_context):
        done.append(1)
model.train({epochs}, data, callbacks={callbacks})
{tail}
"""



def env_recording_mlp(params: dict, seed: int):
    """The built-in mlp, after writing the value of the environment variable ``params["env_var"]`` to the file
    ``params["record"]``: the own-knob tests see an environment knob arrive in a ``build()`` workload's process."""
    import os
    from pathlib import Path

    from perftune.workloads.mlp import build

    Path(params["record"]).write_text(os.environ.get(params["env_var"], ""))
    return build({k: v for k, v in params.items() if k not in ("env_var", "record")}, seed)


def returns_none(params: dict, seed: int):
    """A ``build()`` that forgot its ``return``."""
    print("built", params, seed)


def wrong_type(params: dict, seed: int):
    """A ``build()`` returning its parameters instead of a ``Workload``."""
    return {"network": None}
