"""Distributed bursts (``workers >= 2``, one process per rank under msrun): the parallel context, and every rank's
summary to every rank with one collective, so each node's trial.json describes all ranks.

Fault injection for tests: ``PERFTUNE_TEST_KILL_RANK=r`` and ``PERFTUNE_TEST_KILL_AFTER_STEPS=n`` make rank ``r``
``os._exit(9)`` before its step ``n + 1`` (tests/test_distributed.py checks the launcher's clean-up with it).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from perftune import knobs as knob_registry
from perftune.burst.failures import one_line
from perftune.io.derived import rank_summary
from perftune.io.files import NODE_RANK_ENV, rank_log_name
from perftune.io.records import Note, RankSummary, TrialResult


@dataclass
class RankContext:
    """This process's place in the job, after ``communication.init()``."""

    rank: int
    world: int
    notes: list[Note] = field(default_factory=list)
    kill_after: Optional[int] = None  # test-only fault injection: exit before this many steps are done


def init_distributed(k: dict) -> RankContext:
    """``communication.init()`` and the parallel context.  Called after the device is set."""
    import mindspore as ms
    from mindspore.communication import get_group_size, get_rank, init

    init()
    rank, world = int(get_rank()), int(get_group_size())
    env_rank = os.environ.get("RANK_ID", "")
    if env_rank.isdigit() and int(env_rank) != rank:
        raise RuntimeError(f"msrun exported RANK_ID={env_rank} but communication.init() gave rank {rank}")
    if world != int(k["workers"]):
        raise RuntimeError(f"msrun started {world} ranks, the trial asks for workers={k['workers']}")
    context = {"parallel_mode": k["parallel_mode"], "gradients_mean": bool(k["gradients_mean"])}
    out = RankContext(rank, world)
    if k["parallel_mode"] == "auto_parallel":
        context["search_mode"] = k["search_mode"]
    elif k["search_mode"] != knob_registry.KNOBS["search_mode"].default:
        out.notes.append(Note(kind="no_effect", knob="search_mode",
                              text=f"search_mode={k['search_mode']} has no effect with parallel_mode="
                                   f"{k['parallel_mode']} (only auto_parallel searches strategies)"))
    ms.set_auto_parallel_context(**context)
    kill_rank = os.environ.get("PERFTUNE_TEST_KILL_RANK")
    if kill_rank is not None and kill_rank.strip() == str(rank):
        out.kill_after = int(os.environ.get("PERFTUNE_TEST_KILL_AFTER_STEPS", "0"))
    return out


def own_summary(result: TrialResult, rank: int, rank_dir: Path) -> RankSummary:
    """This rank's summary, with where it ran (host, node, pid) and where its files are."""
    return rank_summary(result, rank, rank_dir.name, rank_log_name(rank), host=socket.gethostname(),
                        node_rank=_env_int(NODE_RANK_ENV), pid=os.getpid())


def all_gather_bytes(payload: bytes, rank: int, world: int) -> list[bytes]:
    """Each rank's ``payload`` to every rank, with AllReduce only: float32 rows, one byte per element (exact; the
    CPU AllReduce kernel takes float32, not int32)."""
    import mindspore as ms
    from mindspore import ops
    from mindspore.communication.management import GlobalComm

    reduce = ops.AllReduce(ops.ReduceOp.SUM, GlobalComm.WORLD_COMM_GROUP)
    lengths = np.zeros((world,), np.float32)
    lengths[rank] = len(payload)  # exact below 2**24 bytes
    lengths = reduce(ms.Tensor(lengths)).asnumpy().astype(np.int64)
    rows = np.zeros((world, int(lengths.max())), np.float32)
    rows[rank, :len(payload)] = np.frombuffer(payload, np.uint8)
    rows = reduce(ms.Tensor(rows)).asnumpy()
    return [rows[r, :int(lengths[r])].astype(np.uint8).tobytes() for r in range(world)]


def agree_max(value: int, rank: int, world: int) -> int:
    """The largest of the ranks' ``value`` (a phase decision that every rank must take alike: one collective)."""
    return max(int(p.decode()) for p in all_gather_bytes(str(int(value)).encode(), rank, world))


def _env_int(name: str) -> Optional[int]:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def fault_injection(kill_after: Optional[int], steps_done: int, rank: int) -> None:
    """Test-only: a rank that dies after ``kill_after`` steps (see ``init_distributed``)."""
    if kill_after is None or steps_done < kill_after:
        return
    if os.environ.get("PERFTUNE_TEST_KILL_SIGNAL") == "1":  # as the OOM killer or a user's kill -9 would
        print(f"perftune: fault injection (PERFTUNE_TEST_KILL_RANK): rank {rank} is killed by SIGKILL "
              f"after {steps_done} steps", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    print(f"perftune: fault injection (PERFTUNE_TEST_KILL_RANK): rank {rank} exits with code 9 after "
          f"{steps_done} steps", file=sys.stderr, flush=True)
    os._exit(9)


def exchange_ranks(result: TrialResult, rank: int, world: int, trial_dir: Path) -> None:
    """Every rank's summary to every rank (one collective), so each node's trial.json describes all ranks."""
    mine = own_summary(result, rank, trial_dir)
    result.world_size = world
    try:
        payloads = all_gather_bytes(mine.model_dump_json().encode(), rank, world)
        result.ranks = [RankSummary.model_validate_json(p) for p in payloads]
    except Exception as exc:  # noqa: BLE001 - the local figures still stand; the launcher says what is missing
        result.notes.append(Note(kind="warning", text=f"rank {rank}: could not exchange the rank "
                                                      f"summaries ({one_line(exc)})"))
        result.ranks = [mine]
