"""Trials as Ray tasks: each burst runs on a node of a Ray cluster and its folder comes back to the driver.

``RayExecutor`` is a ``TrialRunner`` (what ``engine.sweep`` calls for every trial), so the sweep's order, verdicts
and resume are the local ones.  A trial is one Ray task needing the custom resource ``perftune: 1``, which every
node offers once (``ray start --resources '{"perftune": 1}'``): trials never share a node.  The task runs the same
``run_trial`` as a local sweep in a temporary folder on its node, packs the folder (trial.json, spec.json, the log,
the profile files) and returns it; the driver unpacks it under ``trials/<id>/``, so the results folder has a local
sweep's layout.  The node is recorded in the trial (``TrialResult.node``).

The executor has one lane per node (``lanes``; lane ``j`` prefers node ``j``), so the sweep measures each round of
its races on all nodes at once (``perftune.engine.lanes``), each node running its own ``R C R ...`` sequence: every
node that measures a candidate also measures the reference beside it.  A trial sent outside the lanes (the
baseline's first process) goes to node ``replicate mod nodes``.  A trial whose node or
Ray worker dies under it is run again elsewhere, up to ``max_attempts``, then recorded as failed with the reason.
Ctrl-C cancels the running tasks (their bursts are stopped with them).  Ray is imported here only, and only when used.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

import psutil

from perftune.errors import UserError
from perftune.io.derived import failed_result
from perftune.io.files import SPEC_NAME, TRIAL_NAME, read_trial_if_present
from perftune.io.records import NodeRecord, TrialResult, TrialSpec
from perftune.io.store import write_json_atomic

RESOURCE = "perftune"  # the custom resource: one per node, one trial per node at a time
INSTALL_HINT = "pip install 'perftune[ray]'"
#: a trial waits this long for a node with the resource to come (back) before it is recorded as failed
NO_NODE_GRACE_S = 60.0
CANCEL_GRACE_S = 10.0  # after Ctrl-C: the burst gets this long to stop before its Ray worker is killed


def import_ray():
    """Ray, or one line saying how to install it (exit 2)."""
    try:
        import ray
    except ImportError:
        raise UserError(f"--executor ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


#: each task's trial folder on its node, ``<tmp>/perftune-trials/<Ray worker pid>-<random>``: a worker killed under
#: its task (Ctrl-C's cancel, a lost node) cannot remove its own, so the node's next task removes it
TRIALS_FOLDER = "perftune-trials"


def remove_orphans(root: Path) -> list[Path]:
    """Remove the trial folders under ``root`` whose worker process is gone; returns them.  A folder whose pid is
    alive (another worker's task running now, or a reused pid) is left alone."""
    removed = []
    for folder in sorted(root.glob("*-*")):
        pid = folder.name.split("-", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def run_on_node(spec_data: dict) -> dict:
    """The Ray task: run one trial in a temporary folder on this node, return the folder packed and the node."""
    import ray

    from perftune.runner import run_trial

    spec = TrialSpec.model_validate(spec_data)
    ctx = ray.get_runtime_context()
    node_id = ctx.get_node_id()
    # the driver's cache folder may not exist here: the node keeps its own (datasets written once per node)
    cache = Path(tempfile.gettempdir()) / "perftune-cache" / node_id[:12]
    spec = spec.model_copy(update={"cache_dir": str(cache)})
    root = Path(tempfile.gettempdir()) / TRIALS_FOLDER
    root.mkdir(parents=True, exist_ok=True)
    remove_orphans(root)
    with tempfile.TemporaryDirectory(prefix=f"{os.getpid()}-", dir=root) as tmp:
        trial_dir = Path(tmp) / spec.trial_id
        run_trial(spec, trial_dir)
        packed = io.BytesIO()
        with tarfile.open(fileobj=packed, mode="w:gz") as tar:
            tar.add(trial_dir, arcname=".")
    return {"archive": packed.getvalue(), "host": socket.gethostname(), "node_id": node_id,
            "ip": ray.util.get_node_ip_address()}


def unpack(archive: bytes, trial_dir: Path) -> None:
    """Replace ``trial_dir`` with the packed folder (written beside it, then renamed into place)."""
    trial_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{trial_dir.name}-", dir=trial_dir.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            tar.extractall(staging, filter="data")
        shutil.rmtree(trial_dir, ignore_errors=True)
        staging.rename(trial_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class RayExecutor:
    """Runs each trial as a Ray task on a node with a free ``perftune`` resource; call ``close()`` when done."""

    def __init__(self, address: Optional[str] = None, max_attempts: int = 3,
                 announce: Optional[Callable[[str], None]] = None):
        self.ray = import_ray()
        self.address = address
        self.max_attempts = max_attempts
        self.announce = announce  # told "<label> on <host> | ..." as trials are sent (the progress bar's description)
        self.started_ray = False
        self.remote = None
        self.lanes = 1  # one per node offering the resource, counted at connect()
        self.stopping = threading.Event()  # Ctrl-C: every lane's running task is cancelled, no new one is sent
        self.running: dict[Optional[int], str] = {}  # lane -> what it runs where, for the progress description
        self.guard = threading.Lock()

    def connect(self) -> None:
        ray = self.ray
        if not ray.is_initialized():
            where = self.address or "auto"
            try:
                ray.init(address=where, log_to_driver=False, logging_level="ERROR", configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                hint = "" if self.address else " (start one with: ray start --head --resources '{\"perftune\": 1}')"
                raise UserError(f"--executor ray: cannot reach a Ray cluster at {where}{hint}: {first}") from None
            self.started_ray = True
        self.lanes = len(self.nodes())
        if not self.lanes:
            raise UserError(f"--executor ray: no node of the Ray cluster offers the resource {RESOURCE!r}: start "
                            f"each node with --resources '{{\"{RESOURCE}\": 1}}'")
        self.remote = ray.remote(run_on_node)

    def nodes(self) -> list[str]:
        """Ids of the alive nodes that can run a trial, in a stable order."""
        return sorted(self.hosts())

    def hosts(self) -> dict[str, str]:
        """Node id -> host name of the alive nodes that can run a trial."""
        return {n["NodeID"]: n.get("NodeManagerHostname") or n.get("NodeManagerAddress") or n["NodeID"][:8]
                for n in self.ray.nodes() if n.get("Alive") and n["Resources"].get(RESOURCE, 0) >= 1}

    def lane_node(self, lane: int) -> Optional[str]:
        """The node lane ``lane`` prefers (as ``ProcessRun.node`` names it), or None without a node."""
        nodes = self.nodes()
        return nodes[lane % len(nodes)] if nodes else None

    def stop(self) -> None:
        """Ctrl-C on the driver: the lanes cancel their tasks and send no more."""
        self.stopping.set()

    def close(self) -> None:
        if self.started_ray and self.ray.is_initialized():
            self.ray.shutdown()
        self.started_ray = False

    def _options(self, spec: TrialSpec, attempt: int, lane: Optional[int]) -> dict[str, Any]:
        """One ``perftune`` resource, retries are ours, and lane ``j`` prefers node ``j`` (outside the lanes: run ``r``
        prefers node ``r mod nodes``; soft: another node if that one is gone), so each node measures the reference
        beside its candidates and is a block with both sides (``perftune.engine.blocked``)."""
        options: dict[str, Any] = {"num_cpus": 0, "resources": {RESOURCE: 1}, "max_retries": 0}
        nodes = self.nodes()
        if len(nodes) < 2:
            return options
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        target = nodes[((spec.replicate if lane is None else lane) + attempt) % len(nodes)]
        return {**options, "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=target, soft=True)}

    def __call__(self, spec: TrialSpec, trial_dir: Path, lane: Optional[int] = None) -> TrialResult:
        if self.remote is None:
            self.connect()
        trial_dir = Path(trial_dir)
        lost: list[str] = []
        try:
            for attempt in range(self.max_attempts):
                outcome = self._attempt(spec, attempt, lane)
                if isinstance(outcome, dict):
                    return self._land(spec, trial_dir, outcome, lost)
                lost.append(outcome)
        finally:
            self._show(lane, None)
        result = failed_result(spec, "failed", f"lost {len(lost)} time(s) with its node or Ray worker: {lost[-1]}",
                               node=NodeRecord(host="?", attempts=len(lost), lost=lost))
        trial_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(trial_dir / SPEC_NAME, spec.model_dump(mode="json"))
        write_json_atomic(trial_dir / TRIAL_NAME, result.model_dump(mode="json"))
        return result

    def _show(self, lane: Optional[int], text: Optional[str]) -> None:
        """What each lane runs where, joined, as the progress bar's description (trials running per node)."""
        with self.guard:
            if text is None:
                self.running.pop(lane, None)
            else:
                self.running[lane] = text
            shown = " | ".join(self.running[k] for k in sorted(self.running, key=lambda k: -1 if k is None else k))
        if self.announce is not None and shown:
            self.announce(shown)

    def _attempt(self, spec: TrialSpec, attempt: int, lane: Optional[int] = None) -> dict | str:
        """One run of the task: its packed result, or one line saying why it was lost."""
        ray = self.ray
        if self.stopping.is_set():
            raise KeyboardInterrupt  # Ctrl-C reached the driver: no lane sends another trial
        options = self._options(spec, attempt, lane)
        target = getattr(options.get("scheduling_strategy"), "node_id", None)
        where = f"{self.hosts().get(target, '?')} ({target[:8]})" if target else "a free node"
        run = f" (run {spec.replicate + 1})" if spec.replicate else ""
        self._show(lane, f"{spec.label}{run} on {where}" + (f", attempt {attempt + 1}" if attempt else ""))
        ref = self.remote.options(**options).remote(spec.model_dump(mode="json"))
        no_node_since: Optional[float] = None
        try:
            while True:
                ready, _ = ray.wait([ref], timeout=1.0)
                if ready:
                    break
                if self.stopping.is_set():  # Ctrl-C, taken by the main thread while this lane waited
                    raise KeyboardInterrupt
                if self.nodes():
                    no_node_since = None
                elif no_node_since is None:
                    no_node_since = time.monotonic()
                elif time.monotonic() - no_node_since > NO_NODE_GRACE_S:
                    ray.cancel(ref, force=True)
                    return f"no node with the resource {RESOURCE!r} was alive for {NO_NODE_GRACE_S:g} s"
            return ray.get(ref)
        except KeyboardInterrupt:
            self._cancel(ref)
            raise
        except ray.exceptions.RayTaskError as exc:  # perftune itself raised on the node: a bug, not a lost node
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            raise RuntimeError(f"the trial {spec.trial_id} raised on its Ray node: {cause!r}") from exc
        except ray.exceptions.RayError as exc:  # node died, worker crashed, object lost: run it again elsewhere
            text = str(exc).strip().splitlines()
            return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]

    def _cancel(self, ref) -> None:
        """Ctrl-C: ask the task to stop (its burst's process group is killed), then kill its worker if it lingers."""
        ray = self.ray
        try:
            ray.cancel(ref, force=False)
            ready, _ = ray.wait([ref], timeout=CANCEL_GRACE_S)
            if not ready:
                ray.cancel(ref, force=True)
        except Exception:  # noqa: BLE001 - best effort while the driver stops; the node's raylet cleans up
            pass

    def _land(self, spec: TrialSpec, trial_dir: Path, outcome: dict, lost: list[str]) -> TrialResult:
        """Unpack the trial folder on the driver and record the node in its ``trial.json``."""
        unpack(outcome["archive"], trial_dir)
        result = read_trial_if_present(trial_dir / TRIAL_NAME)  # upgraded if the node runs an older perftune
        if result is None:
            raise RuntimeError(f"the trial {spec.trial_id} came back from its Ray node without a {TRIAL_NAME}")
        result.node = NodeRecord(host=outcome["host"], node_id=outcome["node_id"], ip=outcome["ip"],
                                 attempts=len(lost) + 1, lost=lost)
        write_json_atomic(trial_dir / TRIAL_NAME, result.model_dump(mode="json"))
        write_json_atomic(trial_dir / SPEC_NAME, spec.model_dump(mode="json"))  # the driver's spec (its cache_dir)
        return result

