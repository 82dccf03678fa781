"""Distributed bursts: ``workers >= 2`` runs one burst rank per worker under ``msrun`` and aggregates the ranks.

``perftune.runner.run_trial`` calls :func:`run_distributed` for such trials.  On this node it starts::

    msrun --worker_num=W --local_worker_num=W/nodes --node_rank=N --master_addr=A --master_port=P
          --log_dir=TRIAL/msrun_logs --join=True --cluster_time_out=T python -m perftune.burst TRIAL

(msrun takes a script path or a binary named ``python``; ``python -m`` is passed as the binary and its arguments,
and ``python`` resolves to this virtualenv: ``process.burst_env`` puts its bin first in PATH).  msrun runs the same
command as its scheduler (``MS_ROLE=MS_SCHED``, node 0 only) and once per local rank (``MS_ROLE=MS_WORKER``,
``RANK_ID``); each rank writes ``TRIAL/rank_<r>/trial.json`` and its profile under ``TRIAL/rank_<r>/profile``, and
msrun logs ``TRIAL/msrun_logs/worker_<r>.log`` and ``scheduler.log``.  The ranks exchange their summaries at the
end of the burst (one collective), so every node sees every rank.

Process hygiene: msrun runs in a session of its own (as the one-process burst does), but msrun puts every rank in
yet another session (``setsid``), out of reach of a process-group kill.  So the ranks set ``PR_SET_PDEATHSIG``
themselves (they die with msrun), and this launcher watches the ranks with psutil: when every local rank has
written its result, when one writes a failure, when one dies without a result, or at the time-out, it SIGKILLs
msrun's process tree, every rank's process group and any process left whose command line names the trial folder.
(msrun alone would wait for its scheduler, which notices a dead rank only after its heartbeat time-out.)

Aggregation (the trial's ``trial.json``, ``ranks.py``): throughput is *global batch x steps / the slowest rank's window
time* per timed window (data parallel steps are synchronous, so the slowest rank sets the pace); step times are the
slowest rank's (``straggler_rank``); ``rank_spread`` = (slowest - fastest) / fastest median step; per-rank splits
and top ops are in ``ranks``; ``profile.splits`` is the mean of the ranks' splits (it still adds up);
``ProfileSummary.communication_share`` is the mean over ranks of communication / step, flagged above 20 %.

Fault injection for tests: ``PERFTUNE_TEST_KILL_RANK=r`` and ``PERFTUNE_TEST_KILL_AFTER_STEPS=n`` in the
environment make rank ``r`` exit with code 9 before its step ``n + 1`` (see ``perftune.burst.collectives``).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import psutil

from perftune.errors import UserError
from perftune.io.derived import failed_result
from perftune.io.files import (
    LOG_NAME,
    MSRUN_LOG_DIR,
    NODE_RANK_ENV,
    TRIAL_NAME,
    rank_dir_name,
    rank_log_name,
    read_trial_if_present,
)
from perftune.io.records import TrialResult, TrialSpec
from perftune.io.store import write_json_atomic
from perftune.runner.process import (
    BURST_MODULE,
    alive,
    burst_env,
    child_setup,
    classify_exit,
    kill_all,
    kill_group,
    killed_from_outside,
    log_tail,
    process_tree,
    processes_of,
)
from perftune.runner.ranks import aggregate
from perftune.runner.reaper import TrialProcesses

POLL_S = 0.2
PORT_ATTEMPTS = 3  # a port picked free can be taken before msrun's scheduler binds it: pick another and retry
EXIT_CODE_WAIT_S = 2.5  # msrun polls its ranks once a second; give it time to log a dead rank's exit code


@dataclass(frozen=True)
class Cluster:
    """Where this trial's ranks run: ``workers`` ranks in total over ``nodes`` machines, this one ``node_rank``."""

    workers: int
    nodes: int
    node_rank: int
    master_addr: str
    master_port: Optional[int]  # None: pick a free one per trial (one node only)

    @property
    def local_workers(self) -> int:
        return self.workers // self.nodes

    @property
    def local_ranks(self) -> list[int]:
        first = self.node_rank * self.local_workers
        return list(range(first, first + self.local_workers))

    @property
    def runs_scheduler(self) -> bool:
        return self.node_rank == 0


def cluster_of(spec: TrialSpec) -> Cluster:
    dist = spec.distributed
    workers = int(spec.knobs["workers"])
    nodes = dist.nodes if dist else 1
    node_rank = dist.node_rank if dist else 0
    master_addr = dist.master_addr if dist else "127.0.0.1"
    master_port = dist.master_port if dist else None
    env = os.environ.get(NODE_RANK_ENV, "").strip()
    if env:
        if not env.isdigit():
            raise UserError(f"{NODE_RANK_ENV}={env!r}: expected a node number from 0 to {nodes - 1}")
        node_rank = int(env)
    if node_rank >= nodes:
        raise UserError(f"node_rank {node_rank} is not below distributed.nodes={nodes}")
    if workers % nodes or workers < nodes:
        raise UserError(f"workers={workers} cannot be spread over {nodes} nodes (use a multiple of {nodes})")
    if nodes > 1 and master_port is None:
        raise UserError("distributed.master_port is required when nodes > 1")
    return Cluster(workers, nodes, node_rank, master_addr, master_port)


def free_port(addr: str) -> int:
    """A TCP port nobody listens on now (the kernel's pick, so two sweeps on one host do not pick the same)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((addr, 0))
        except OSError:  # a host name or an address of another interface: any local address will do
            s.bind(("", 0))
        return int(s.getsockname()[1])


def msrun_command(cluster: Cluster, port: int, trial_dir: Path, timeout_s: float) -> list[str]:
    msrun = Path(sys.executable).parent / "msrun"
    head = [str(msrun)] if msrun.is_file() else [sys.executable, "-m", "mindspore.parallel.cluster.run"]
    return head + [
        f"--worker_num={cluster.workers}",
        f"--local_worker_num={cluster.local_workers}",
        f"--node_rank={cluster.node_rank}",
        f"--master_addr={cluster.master_addr}",
        f"--master_port={port}",
        f"--log_dir={trial_dir / MSRUN_LOG_DIR}",
        "--join=True",
        f"--cluster_time_out={max(30, int(timeout_s))}",
        "--tail_worker_log=-2",  # no `tail -f` copies of the rank logs in msrun's own output
        "python", "-m", BURST_MODULE, str(trial_dir),
    ]


# ---------------------------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class _Outcome:
    kind: str  # done | rank_failed | rank_died | scheduler_died | msrun_exited | timeout
    rank: Optional[int] = None
    port_in_use: bool = False
    exit_code: Optional[int] = None  # of the dead rank (rank_died) or of msrun (msrun_exited), where known
    dead: tuple[int, ...] = ()  # rank_died: every rank found dead without a result in the same look
    oom_kills: Optional[int] = None  # the cgroup's out-of-memory kills during this attempt (None: not readable)
    containment: str = ""  # what held the trial's processes (reaper.TrialProcesses.containment)
    limit: str = ""  # burst.memory_limit_mb: what the node's memory cgroup of the trial recorded (all ranks together)


def run_distributed(spec: TrialSpec, trial_dir: Path, timeout_s: float) -> TrialResult:
    """Run one trial's ranks under msrun on this node; the result is also written to ``trial_dir/trial.json``."""
    trial_dir = Path(trial_dir).resolve()
    cluster = cluster_of(spec)
    started = time.perf_counter()
    result: Optional[TrialResult] = None
    for attempt in range(PORT_ATTEMPTS):
        pick = cluster.master_port is None
        port = free_port(cluster.master_addr) if pick else int(cluster.master_port)
        _clean(trial_dir, cluster)
        outcome, local = _run_once(spec, trial_dir, cluster, port, timeout_s - (time.perf_counter() - started))
        if outcome.port_in_use and pick and attempt + 1 < PORT_ATTEMPTS:
            continue
        result = _result_of(spec, trial_dir, cluster, port, outcome, local, timeout_s)
        result.containment = outcome.containment
        break
    assert result is not None
    result.wall_s = time.perf_counter() - started
    write_json_atomic(trial_dir / TRIAL_NAME, result.model_dump(mode="json"))
    return result


def _clean(trial_dir: Path, cluster: Cluster) -> None:
    """Results (and profiles) of an earlier attempt must not be taken for this one's."""
    for r in cluster.local_ranks:
        shutil.rmtree(trial_dir / rank_dir_name(r), ignore_errors=True)
    logs = trial_dir / MSRUN_LOG_DIR
    if logs.is_dir():
        for f in logs.glob("*.log"):
            f.unlink(missing_ok=True)


def _run_once(spec: TrialSpec, trial_dir: Path, cluster: Cluster, port: int,
              timeout_s: float) -> tuple[_Outcome, dict[int, TrialResult]]:
    leftovers = TrialProcesses(spec.burst.memory_limit_mb)  # escaped ranks are re-parented to us, killed at the end
    env = leftovers.env(burst_env(spec.env))
    env[NODE_RANK_ENV] = str(cluster.node_rank)
    # on one host every msrun thinks it is the master and starts a scheduler: only node 0's may serve
    env["PERFTUNE_SCHEDULER"] = "1" if cluster.runs_scheduler else "0"
    cmd = msrun_command(cluster, port, trial_dir, timeout_s)
    deadline = time.perf_counter() + max(timeout_s, 1.0)
    ooms_before = leftovers.oom_count()
    with open(trial_dir / LOG_NAME, "ab") as log:
        log.write(f"$ {' '.join(cmd)}\n".encode())
        log.flush()
        with leftovers.launching():
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True, preexec_fn=child_setup(leftovers), cwd=str(trial_dir))
            leftovers.started(proc.pid)
        watch = _Watch(proc, trial_dir, cluster)
        try:
            outcome = watch.wait(deadline)
            if outcome.kind == "rank_died":
                # several ranks may be found dead in one look (msrun stops the others when one dies): name the one
                # whose exit msrun logged, the one that died on its own, not a rank msrun stopped after it
                codes = watch.exit_codes(outcome.dead or (outcome.rank,))
                outcome.rank = next((r for r, c in codes.items() if c is not None), outcome.rank)
                outcome.exit_code = codes.get(outcome.rank)
                ooms_after = leftovers.oom_count()
                if ooms_before is not None and ooms_after is not None:
                    outcome.oom_kills = ooms_after - ooms_before
            elif outcome.kind == "msrun_exited":
                outcome.exit_code = proc.returncode
        finally:  # also on Ctrl-C: nothing of this trial may outlive it
            watch.stop()
            leftovers.kill_leftovers()  # the trial's cgroup: every rank's setsid'd children and daemons at once
    outcome.containment, outcome.limit = leftovers.containment, leftovers.memory_evidence
    return outcome, watch.results


class _Watch:
    """msrun, its scheduler and this node's ranks, seen through psutil and the ranks' result files."""

    def __init__(self, proc: subprocess.Popen, trial_dir: Path, cluster: Cluster):
        self.proc, self.dir, self.cluster = proc, trial_dir, cluster
        self.ranks: dict[int, psutil.Process] = {}
        self.scheduler: Optional[psutil.Process] = None
        self.results: dict[int, TrialResult] = {}

    def _discover(self) -> None:
        try:
            children = psutil.Process(self.proc.pid).children()
        except psutil.Error:
            return
        known = set(self.ranks.values()) | ({self.scheduler} if self.scheduler else set())
        for child in children:
            if child in known:
                continue
            try:
                env = child.environ()  # before exec this is still msrun's environment: look again next time
            except psutil.Error:
                continue
            role = env.get("MS_ROLE")
            if role == "MS_WORKER" and env.get("RANK_ID", "").isdigit():
                self.ranks[int(env["RANK_ID"])] = child
            elif role == "MS_SCHED":
                self.scheduler = child

    def _read(self) -> None:
        for r in self.cluster.local_ranks:
            if r not in self.results:
                try:
                    res = read_trial_if_present(self.dir / rank_dir_name(r) / TRIAL_NAME)
                except UserError:  # ranks write atomically: unreadable means broken, and counts as no result
                    res = None
                if res is not None:
                    self.results[r] = res

    def wait(self, deadline: float) -> _Outcome:
        while True:
            self._read()
            failed = sorted(r for r, res in self.results.items() if res.status != "ok")
            if failed:
                return _Outcome("rank_failed", failed[0])
            if len(self.results) == len(self.cluster.local_ranks):
                return _Outcome("done")
            self._discover()
            dead = [r for r, p in sorted(self.ranks.items()) if r not in self.results and not alive(p)]
            if dead:
                self._read()  # written just before it left?
                dead = [r for r in dead if r not in self.results]
                if dead:
                    return _Outcome("rank_died", dead[0], dead=tuple(dead))
            if self.scheduler is not None and not alive(self.scheduler) and self.cluster.runs_scheduler:
                self._read()
                if len(self.results) < len(self.cluster.local_ranks):
                    return _Outcome("scheduler_died", port_in_use=self._port_in_use())
            if self.proc.poll() is not None:
                self._read()
                if len(self.results) == len(self.cluster.local_ranks):
                    continue
                return _Outcome("msrun_exited", port_in_use=self._port_in_use())
            if time.perf_counter() > deadline:
                return _Outcome("timeout")
            time.sleep(POLL_S)

    def _port_in_use(self) -> bool:
        text = _read_text(self.dir / MSRUN_LOG_DIR / "scheduler.log")
        return "Address already in use" in text and "Failed to call bind" in text

    def exit_codes(self, ranks: tuple[int, ...]) -> dict[int, Optional[int]]:
        """Dead ranks' exit codes, from msrun's log (msrun is their parent; this process cannot wait for them),
        waiting a little for the first one to be logged; None where msrun logged none."""
        patterns = {r: re.compile(rf"Worker process {self.ranks[r].pid} exit with exception\. Error code: (-?\d+)")
                    for r in ranks if r in self.ranks}
        end = time.perf_counter() + EXIT_CODE_WAIT_S
        while True:
            text = _read_text(self.dir / LOG_NAME)
            codes = {r: (int(m.group(1)) if (m := pat.search(text)) else None) for r, pat in patterns.items()}
            if any(c is not None for c in codes.values()) or time.perf_counter() > end or self.proc.poll() is not None:
                return {r: codes.get(r) for r in ranks}
            time.sleep(POLL_S)

    def stop(self) -> None:
        """SIGKILL msrun, its scheduler, every rank (each in a process group of its own) and their children."""
        for _ in range(3):
            victims = set(process_tree(self.proc.pid)) | set(processes_of(self.dir))
            for p in list(self.ranks.values()) + ([self.scheduler] if self.scheduler else []):
                victims.add(p)
                victims.update(process_tree(p.pid))
            kill_all(victims)
            kill_group(self.proc)  # msrun's own group (the scheduler is in it); reaps msrun
            psutil.wait_procs([p for p in victims if alive(p)], timeout=5)
            if not processes_of(self.dir):
                return


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------------------------


def _result_of(spec: TrialSpec, trial_dir: Path, cluster: Cluster, port: int, outcome: _Outcome,
               local: dict[int, TrialResult], timeout_s: float) -> TrialResult:
    if outcome.kind == "done":
        return aggregate(spec, local, cluster.workers, cluster.nodes)

    def bare(status: str, reason: str, tail: str) -> TrialResult:
        return failed_result(spec, status, reason, log_tail=tail or None, world_size=cluster.workers)

    def rank_log(r: int) -> Path:
        return trial_dir / rank_log_name(r)

    if outcome.kind == "rank_failed":
        r = outcome.rank
        res = local[r].model_copy(deep=True)
        res.reason = f"rank {r}: {res.reason}"
        res.log_tail = res.log_tail or log_tail(rank_log(r))
        res.world_size = cluster.workers
        return res
    if outcome.kind == "rank_died":
        r = outcome.rank
        code = outcome.exit_code
        retry = False
        if code is None:
            how = "with an unknown exit code"
            status = "failed"
        else:
            status, why = classify_exit(code, rank_log(r), outcome.oom_kills, outcome.limit)
            # killed by a signal perftune did not send (a user's kill, the OOM killer without evidence): not a
            # property of the configuration, so a resume measures it again, as for a one-process burst
            retry = killed_from_outside(code, status)
            how = f"({why})" if status == "oom" or retry else f"with exit code {code}"
        result = bare(status, f"rank {r} died {how} before writing its result; the other ranks were stopped",
                      log_tail(rank_log(r)))
        result.retry_on_resume = retry
        return result
    if outcome.kind == "timeout":
        waiting = [r for r in cluster.local_ranks if r not in local]
        tails = "\n".join(f"-- rank {r} ({rank_log_name(r)}):\n{log_tail(rank_log(r), lines=8)}"
                          for r in waiting)
        return bare("timeout", f"the distributed burst ran past timeout_s={timeout_s:g} s and was stopped (ranks "
                               f"without a result: {waiting})", tails[-4000:])
    sched = trial_dir / MSRUN_LOG_DIR / "scheduler.log"
    errors = [ln for ln in _read_text(sched).splitlines() if "[ERROR]" in ln or "Error:" in ln]
    where = f"msrun's scheduler on {cluster.master_addr}:{port}"
    if outcome.port_in_use:
        why = f"{where} could not bind its port (Address already in use)"
    elif outcome.kind == "scheduler_died":
        why = f"{where} exited before every rank wrote its result"
    else:
        why = f"msrun exited with code {outcome.exit_code} before every rank wrote its result"
    tail = "\n".join(errors[-10:]) or log_tail(trial_dir / LOG_NAME)
    return bare("failed", why, tail)
