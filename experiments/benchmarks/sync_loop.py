"""The reference for ``step_fidelity.py``: a plain training loop, no perftune harness, around the same step and
input pipeline a perftune burst builds (``perftune.burst.train_step.build_train_step`` without the gradient norm,
``perftune.burst.data.build_dataset``), run as a child process (``children.py sync_loop JSON``).

After as many untimed steps as the burst runs before its windows, it times windows of ``steps`` steps under each
read-back policy in ``policies``, rotated window by window so drift hits them alike:

* ``0``: the loss read back after every step (``loss.asnumpy()``): a loop synchronised every step, the reference;
* ``k`` > 0: the loss of step i - k read back after step i is dispatched (the host at most k steps ahead);
* ``window``: one read-back at the window's end (the host runs ahead as far as the backend lets it).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path


def child_sync_loop(args: dict) -> dict:
    import mindspore as ms
    import mindspore.dataset as ds
    import numpy as np

    from perftune.burst.context import first_eager_op
    from perftune.burst.data import build_dataset
    from perftune.burst.train_step import NetWithLoss, build_train_step
    from perftune.workloads import resolve

    k = args["knobs"]
    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE if k["mode"] == "graph" else ms.PYNATIVE_MODE)
    first_eager_op()
    seed = int(args.get("seed", 0))
    ms.set_seed(seed)
    np.random.seed(seed)
    ds.config.set_seed(seed)
    ds.config.set_prefetch_size(int(k["prefetch_size"]))
    workload = resolve(args["workload"])(dict(args.get("workload_params") or {}), seed)
    optimizer = workload.make_optimizer(workload.network.trainable_params())
    step = build_train_step(k["train_step"], NetWithLoss(workload.network, workload.loss_fn), optimizer,
                            k["loss_scale"], int(k["grad_accum_steps"]), k["mode"] == "graph", k["jit_level"],
                            with_norm=False)
    dataset = build_dataset(workload, k, "train", Path(tempfile.mkdtemp(prefix="sync_loop_")))
    iterator = dataset.create_tuple_iterator(num_epochs=1, do_copy=False)
    batch_size = int(k["batch_size"])

    def window(n: int, lag) -> float:
        """Samples/s of ``n`` steps under one read-back policy (the window ends when every step's loss is back)."""
        started, pending = time.perf_counter(), []
        for _ in range(n):
            pending.append(step(*next(iterator))[0])
            if lag != "window" and len(pending) > int(lag):
                pending.pop(0).asnumpy()
        for loss in pending:
            loss.asnumpy()
        return n * batch_size / (time.perf_counter() - started)

    window(1, 0)  # the compile
    window(int(args["untimed_steps"]), 0)
    policies = [str(p) for p in args["policies"]]
    rates: dict[str, list[float]] = {p: [] for p in policies}
    for i in range(int(args["rounds"])):
        for p in policies[i % len(policies):] + policies[:i % len(policies)]:
            rates[p].append(window(int(args["steps"]), p))
    return {"samples_per_s": {p: float(np.median(v)) for p, v in rates.items()}, "windows": rates}
