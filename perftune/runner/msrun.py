"""Distributed bursts: ``workers >= 2`` runs one burst rank per worker under ``msrun`` and aggregates the ranks.

``launch.run_trial`` calls :func:`run_distributed` for such trials.  On this node it starts::

    msrun --worker_num=W --local_worker_num=W/nodes --node_rank=N --master_addr=A --master_port=P
          --log_dir=TRIAL/msrun_logs --join=True --cluster_time_out=T python -m perftune.burst TRIAL

(msrun takes a script path or a binary named ``python``; ``python -m`` is passed as the binary and its arguments,
and ``python`` resolves to this virtualenv: ``launch.burst_env`` puts its bin first in PATH).  msrun runs the same
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

Aggregation (the trial's ``trial.json``): throughput is *global batch x steps / the slowest rank's window time*
per timed window (data parallel steps are synchronous, so the slowest rank sets the pace); step times are the
slowest rank's (``straggler_rank``); ``rank_spread`` = (slowest - fastest) / fastest median step; per-rank splits
and top ops are in ``ranks``; ``profile.splits`` is the mean of the ranks' splits (it still adds up);
``profile.communication_share`` is the mean over ranks of communication / step, flagged above 20 %.

Fault injection for tests: ``PERFTUNE_TEST_KILL_RANK=r`` and ``PERFTUNE_TEST_KILL_AFTER_STEPS=n`` in the
environment make rank ``r`` exit with code 9 before its step ``n + 1`` (see ``Burst.init_distributed``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import psutil

from perftune.burst import MSRUN_LOG_DIR
from perftune.errors import UserError
from perftune.launch import LOG_NAME, _classify_exit, _die_with_parent, read_result, burst_env, kill_group, log_tail
from perftune.records import (
    COMMUNICATION_FLAG_SHARE,
    RankSummary,
    Splits,
    TrialResult,
    TrialSpec,
    WindowStats,
)
from perftune.store import write_json_atomic

POLL_S = 0.2
PORT_ATTEMPTS = 3  # a port picked free can be taken before msrun's scheduler binds it: pick another and retry
EXIT_CODE_WAIT_S = 2.5  # msrun polls its ranks once a second; give it time to log a dead rank's exit code
NODE_RANK_ENV = "PERFTUNE_NODE_RANK"  # overrides the plan's distributed.node_rank (the same plan on every machine)


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
    dist = spec.distributed or {}
    workers = int(spec.knobs["workers"])
    nodes = int(dist.get("nodes", 1))
    node_rank = int(dist.get("node_rank", 0))
    env = os.environ.get(NODE_RANK_ENV, "").strip()
    if env:
        if not env.isdigit():
            raise UserError(f"{NODE_RANK_ENV}={env!r}: expected a node number from 0 to {nodes - 1}")
        node_rank = int(env)
    if node_rank >= nodes:
        raise UserError(f"node_rank {node_rank} is not below distributed.nodes={nodes}")
    if workers % nodes or workers < nodes:
        raise UserError(f"workers={workers} cannot be spread over {nodes} nodes (use a multiple of {nodes})")
    if nodes > 1 and dist.get("master_port") is None:
        raise UserError("distributed.master_port is required when nodes > 1")
    return Cluster(workers, nodes, node_rank, str(dist.get("master_addr") or "127.0.0.1"), dist.get("master_port"))


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
        "python", "-m", "perftune.burst", str(trial_dir),
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
        break
    assert result is not None
    result.wall_s = time.perf_counter() - started
    write_json_atomic(trial_dir / "trial.json", result.model_dump(mode="json"))
    return result


def _clean(trial_dir: Path, cluster: Cluster) -> None:
    """Results (and profiles) of an earlier attempt must not be taken for this one's."""
    for r in cluster.local_ranks:
        shutil.rmtree(trial_dir / f"rank_{r}", ignore_errors=True)
    logs = trial_dir / MSRUN_LOG_DIR
    if logs.is_dir():
        for f in logs.glob("*.log"):
            f.unlink(missing_ok=True)


def _run_once(spec: TrialSpec, trial_dir: Path, cluster: Cluster, port: int,
              timeout_s: float) -> tuple[_Outcome, dict[int, TrialResult]]:
    env = burst_env()
    env[NODE_RANK_ENV] = str(cluster.node_rank)
    # on one host every msrun thinks it is the master and starts a scheduler: only node 0's may serve
    env["PERFTUNE_SCHEDULER"] = "1" if cluster.runs_scheduler else "0"
    cmd = msrun_command(cluster, port, trial_dir, timeout_s)
    deadline = time.perf_counter() + max(timeout_s, 1.0)
    with open(trial_dir / LOG_NAME, "ab") as log:
        log.write(f"$ {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, preexec_fn=_die_with_parent, cwd=str(trial_dir))
        watch = _Watch(proc, trial_dir, cluster)
        try:
            outcome = watch.wait(deadline)
            if outcome.kind == "rank_died":
                outcome.exit_code = watch.exit_code(outcome.rank)
            elif outcome.kind == "msrun_exited":
                outcome.exit_code = proc.returncode
        finally:  # also on Ctrl-C: nothing of this trial may outlive it
            watch.stop()
    return outcome, watch.results


class _Watch:
    """msrun, its scheduler and this node's ranks, seen through psutil and the ranks' result files."""

    def __init__(self, proc: subprocess.Popen, trial_dir: Path, cluster: Cluster):
        self.proc = proc
        self.dir = trial_dir
        self.cluster = cluster
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
                res = read_result(self.dir / f"rank_{r}" / "trial.json")
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
            for r, p in sorted(self.ranks.items()):
                if r not in self.results and not _alive(p):
                    self._read()  # written just before it left?
                    if r not in self.results:
                        return _Outcome("rank_died", r)
            if self.scheduler is not None and not _alive(self.scheduler) and self.cluster.runs_scheduler:
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

    def exit_code(self, rank: int) -> Optional[int]:
        """A dead rank's exit code, from msrun's log (msrun is its parent; this process cannot wait for it)."""
        p = self.ranks.get(rank)
        if p is None:
            return None
        pattern = re.compile(rf"Worker process {p.pid} exit with exception\. Error code: (-?\d+)")
        end = time.perf_counter() + EXIT_CODE_WAIT_S
        while True:
            m = pattern.search(_read_text(self.dir / LOG_NAME))
            if m:
                return int(m.group(1))
            if time.perf_counter() > end or self.proc.poll() is not None:
                return None
            time.sleep(POLL_S)

    def stop(self) -> None:
        """SIGKILL msrun, its scheduler, every rank (each in a process group of its own) and their children."""
        for _ in range(3):
            victims = set(_tree(self.proc.pid)) | set(processes_of(self.dir))
            for p in list(self.ranks.values()) + ([self.scheduler] if self.scheduler else []):
                victims.add(p)
                victims.update(_tree(p.pid))
            _kill(victims)
            kill_group(self.proc)  # msrun's own group (the scheduler is in it); reaps msrun
            psutil.wait_procs([p for p in victims if _alive(p)], timeout=5)
            if not processes_of(self.dir):
                return


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _tree(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _kill(victims: set) -> None:
    own = os.getpgrp()
    groups = set()
    for p in victims:
        try:
            groups.add(os.getpgid(p.pid))
        except OSError:
            pass
    for pgid in groups - {own}:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    for p in victims:  # anything in our own group (never expected) or that escaped its group
        try:
            p.kill()
        except psutil.Error:
            pass


def processes_of(trial_dir: Path) -> list[psutil.Process]:
    """Live processes of this trial: ``perftune.burst`` ranks/schedulers and msrun, named by the trial folder."""
    target = str(Path(trial_dir).resolve())
    me = psutil.Process()
    skip = {me.pid} | {p.pid for p in me.parents()}
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info.get("cmdline") or []
        if p.pid in skip or target not in cmd:
            continue
        if any(a == "perftune.burst" or a.endswith("perftune/burst.py") for a in cmd) and _alive(p):
            out.append(p)
    return out


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
        return aggregate(spec, local, cluster)

    def bare(status: str, reason: str, tail: str) -> TrialResult:
        return TrialResult(trial_id=spec.trial_id, status=status, reason=reason, log_tail=tail or None,
                           workload=spec.workload, device=spec.device, knobs=spec.knobs, burst=spec.burst,
                           world_size=cluster.workers)

    def rank_log(r: int) -> Path:
        return trial_dir / MSRUN_LOG_DIR / f"worker_{r}.log"

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
        if code is None:
            how = "with an unknown exit code"
            status = "failed"
        else:
            status, how = _classify_exit(code, rank_log(r))
            how = f"({how})" if status == "oom" else f"with exit code {code}"
        return bare(status, f"rank {r} died {how} before writing its result; the other ranks were stopped",
                    log_tail(rank_log(r)))
    if outcome.kind == "timeout":
        waiting = [r for r in cluster.local_ranks if r not in local]
        tails = "\n".join(f"-- rank {r} ({MSRUN_LOG_DIR}/worker_{r}.log):\n{log_tail(rank_log(r), lines=8)}"
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


def aggregate(spec: TrialSpec, local: dict[int, TrialResult], cluster: Cluster) -> TrialResult:
    """The trial's result from this node's rank results (each holds every rank's summary, exchanged at the end)."""
    base_rank = min(local)
    base = local[base_rank].model_copy(deep=True)
    ranks = sorted(base.ranks, key=lambda s: s.rank) if base.ranks else []
    if not ranks:
        from perftune.burst import rank_summary

        ranks = [rank_summary(res, r, Path(f"rank_{r}")) for r, res in sorted(local.items())]
        base.notes.append("the ranks did not exchange their summaries: figures cover this node's ranks only")
    for s in ranks:  # folders and logs of other machines' ranks are not here
        if s.rank not in local:
            s.result_dir, s.log_file = None, None
    if len(ranks) != cluster.workers:
        base.notes.append(f"{len(ranks)} of {cluster.workers} ranks reported")
    base.ranks = ranks
    base.world_size = cluster.workers
    batch = int(spec.knobs["batch_size"])
    base.samples_per_step = batch

    # throughput: per window, the global batch over the slowest rank's time
    n_windows = min(len(s.windows) for s in ranks)
    windows = []
    for w in range(n_windows):
        slowest = max(s.windows[w].total_ms for s in ranks)
        steps = ranks[0].windows[w].steps
        windows.append(WindowStats(steps=steps, total_ms=slowest,
                                   median_step_ms=max(s.windows[w].median_step_ms for s in ranks),
                                   samples_per_s=steps * batch / (slowest / 1e3)))
    base.windows = windows
    if windows:
        base.samples_per_s = float(np.median([w.samples_per_s for w in windows]))
        if base.tokens_per_sample:
            base.tokens_per_s = base.samples_per_s * base.tokens_per_sample
    timed = [s for s in ranks if s.step_ms_median is not None]
    if timed:
        slow = max(timed, key=lambda s: s.step_ms_median)
        fast = min(timed, key=lambda s: s.step_ms_median)
        base.straggler_rank = slow.rank
        base.rank_spread = (slow.step_ms_median - fast.step_ms_median) / fast.step_ms_median
        base.step_ms_median, base.step_ms_p10, base.step_ms_p90 = slow.step_ms_median, slow.step_ms_p10, slow.step_ms_p90
        base.data_wait_ms_median = slow.data_wait_ms_median
    compiles = [s.compile_ms for s in ranks if s.compile_ms is not None]
    base.compile_ms = max(compiles) if compiles else base.compile_ms

    # accuracy: each rank saw its share of every global batch; the global training loss is the mean over ranks
    if base.accuracy is not None:
        acc = base.accuracy
        if all(s.train_loss is not None for s in ranks):
            acc.train_loss = float(np.mean([s.train_loss for s in ranks]))
        acc.nonfinite = acc.nonfinite or any(s.nonfinite for s in ranks)
        curves = [s.loss_curve for s in ranks]
        if curves and all(len(c) == len(curves[0]) and c for c in curves):
            acc.loss_curve = [(curves[0][i][0], float(np.mean([c[i][1] for c in curves])))
                              for i in range(len(curves[0]))]

    peaks = [s.host_rss_peak_bytes for s in ranks if s.host_rss_peak_bytes]
    base.memory.host_rss_peak_bytes = max(peaks) if peaks else base.memory.host_rss_peak_bytes
    allocs = [s.allocator_peak_bytes for s in ranks if s.allocator_peak_bytes]
    base.memory.allocator_peak_bytes = max(allocs) if allocs else base.memory.allocator_peak_bytes

    p = base.profile
    if p is not None:
        prefix = f"rank_{base_rank}"
        if p.profile_dir:
            p.profile_dir = f"{prefix}/{p.profile_dir}"
        if p.trace_file:
            p.trace_file = f"{prefix}/{p.trace_file}"
        splits = [s.splits for s in ranks if s.splits is not None]
        if splits and len(splits) == len(ranks):
            p.splits = mean_splits(splits)
        shares = [s.communication_share for s in ranks if s.communication_share is not None]
        if shares:
            p.communication_share = float(np.mean(shares))
            p.communication_flag = p.communication_share > COMMUNICATION_FLAG_SHARE
            if p.communication_flag:
                base.notes.append(f"communication is {p.communication_share:.0%} of the step (mean over ranks), above "
                                  f"{COMMUNICATION_FLAG_SHARE:.0%}")
    base.notes.append(
        f"{cluster.workers} ranks under msrun on {cluster.nodes} node(s): samples/s = global batch {batch} x steps / "
        f"the slowest rank's window time; step times are the slowest rank's (rank {base.straggler_rank}); "
        f"per-rank figures in ranks[]"
    )
    return base


def mean_splits(splits: list[Splits]) -> Splits:
    """The element-wise mean of the ranks' splits: each rank's add up to its step, so the mean's add up too."""
    fields = ("step_ms", "data_ms", "forward_ms", "backward_ms", "optimizer_ms", "communication_ms", "other_ms",
              "explained_share")
    mean = {f: float(np.mean([getattr(s, f) for s in splits])) for f in fields}
    source = f"mean over {len(splits)} ranks of each rank's splits (per rank: ranks[].splits); rank 0: " \
             f"{splits[0].step_source}"
    return Splits(**mean, step_source=source)
