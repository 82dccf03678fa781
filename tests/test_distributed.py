"""Distributed bursts under a real msrun (MindSpore CPU, 2 ranks): aggregation, communication splits, a rank that
dies, two "nodes" on loopback, and semi_auto_parallel refused on CPU.

Self-contained (no fixture of other files) and marked ``distributed``: ``pytest -m distributed`` runs only these,
``pytest -m 'not distributed'`` skips them.  Each msrun launch takes 10-30 s on 2 cores.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import psutil
import pytest

pytest.importorskip("mindspore")

from perftune.engine.plan_load import PlanError, parse_plan  # noqa: E402
from perftune.engine.specs import make_spec  # noqa: E402
from perftune.io.records import PHASES, TrialResult  # noqa: E402
from perftune.profile.layouts import load_profile  # noqa: E402
from perftune.runner import run_trial  # noqa: E402
from perftune.runner.msrun import cluster_of, free_port, msrun_command  # noqa: E402
from perftune.runner.process import processes_of  # noqa: E402

pytestmark = pytest.mark.distributed

#: tiny MLP (as conftest.TINY_MLP): 2 hidden layers + head = 3 Dense = 6 trainable parameters
MLP = {"in_dim": 64, "hidden": 128, "layers": 2, "classes": 8, "train_samples": 1024, "val_samples": 128}
N_PARAMS = 6
BURST = {"warmup_steps": 1, "steps": 8, "repeats": 2, "profile_steps": 2, "timeout_s": 120}


def _plan(**over):
    data = {"name": "dist", "workload": "mlp", "workload_params": dict(MLP), "burst": dict(BURST),
            "baseline": {"batch_size": 32, "prefetch_size": 2, "workers": 2}}
    data.update(over)
    return parse_plan(data)


def _leftovers(trial_dir: Path) -> list[str]:
    """Every live process whose command line mentions the trial folder (msrun, scheduler, ranks, their children)."""
    target = str(Path(trial_dir).resolve())
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(target in a for a in (p.info["cmdline"] or [])):
            out.append(f"{p.pid}: {' '.join(p.info['cmdline'])}")
    return out


@pytest.fixture(scope="module")
def dp(tmp_path_factory) -> tuple[TrialResult, Path]:
    """One 2-rank data-parallel mlp burst, shared by the tests that read it."""
    trial_dir = tmp_path_factory.mktemp("dp") / "trial"
    spec = make_spec(_plan(), {}, "workers=2")
    result = run_trial(spec, trial_dir)
    assert result.status == "ok", f"{result.reason}\n{result.log_tail}"
    return result, trial_dir


def test_data_parallel_burst_completes(dp):
    result, trial_dir = dp
    assert result.world_size == 2 and [r.rank for r in result.ranks] == [0, 1]
    assert result.applied["world_size"] == 2 and result.applied["batch_size"] == 16  # 32 split over 2 ranks
    assert result.applied["parallel_mode"] == "data_parallel" and result.applied["grad_reducer"] is True
    assert result.samples_per_step == 32
    # global throughput: global batch x steps / the slowest rank's window time, per window
    for w, window in enumerate(result.windows):
        slowest = max(r.windows[w].total_ms for r in result.ranks)
        assert window.total_ms == slowest
        assert window.samples_per_s == pytest.approx(window.steps * 32 / (slowest / 1e3))
    assert result.samples_per_s == pytest.approx(32 / result.step_ms_mean * 1e3, rel=1e-12)  # batch / mean step
    # straggler and spread
    medians = {r.rank: r.step_ms_median for r in result.ranks}
    assert result.straggler_rank == max(medians, key=medians.get)
    assert result.step_ms_median == medians[result.straggler_rank]
    assert result.rank_spread == pytest.approx((max(medians.values()) - min(medians.values())) / min(medians.values()))
    # each rank wrote its own result and profile; msrun logged each rank
    phases = []
    for r in (0, 1):
        own = TrialResult.model_validate_json((trial_dir / f"rank_{r}" / "trial.json").read_text())
        assert own.status == "ok" and own.applied["rank"] == r
        phases.append([s.phase for s in own.steps])
        assert list((trial_dir / f"rank_{r}" / "profile").glob("*_ascend_ms"))
        assert (trial_dir / "msrun_logs" / f"worker_{r}.log").is_file()
        assert result.ranks[r].result_dir == f"rank_{r}"
    # every step is a collective: the ranks ran the same phases step for step (the drain is its cap on each rank,
    # not until that rank's own queue ran dry, which had ranks wait for each other's steps until msrun timed out)
    assert phases[0] == phases[1] and "warmup" in phases[0]
    assert json.loads((trial_dir / "trial.json").read_text())["world_size"] == 2
    assert _leftovers(trial_dir) == [] and processes_of(trial_dir) == []


def test_data_parallel_keeps_the_maths_of_one_process(dp, tmp_path):
    """Each rank takes every other row of each global batch and the gradients are averaged: the same training."""
    result, _ = dp
    single = run_trial(make_spec(_plan(), {"workers": 1}, "workers=1"), tmp_path / "single")
    assert single.status == "ok", single.reason
    assert single.accuracy.samples_seen == result.accuracy.samples_seen
    assert result.accuracy.val_loss == pytest.approx(single.accuracy.val_loss, rel=1e-5)
    assert result.accuracy.train_loss == pytest.approx(single.accuracy.train_loss, rel=1e-5)
    assert result.accuracy.max_grad_norm == pytest.approx(single.accuracy.max_grad_norm, rel=1e-4)


def test_communication_is_allreduce_and_nonzero(dp):
    result, trial_dir = dp
    n = BURST["profile_steps"]
    for summary in result.ranks:
        assert summary.splits is not None and summary.splits.communication_ms > 0, summary.profile_error
        assert any(op.op_type == "AllReduce" and op.phase == "communication" for op in summary.top_ops)
        ops = load_profile(trial_dir / f"rank_{summary.rank}" / "profile").ops
        comm = ops[ops["phase"] == "communication"]
        allreduce = comm[comm["op_type"] == "AllReduce"]
        # one AllReduce per parameter per step (unfused), nothing else but the reducer's own scaling
        assert int(allreduce["count"].sum()) == N_PARAMS * n
        assert comm["full_name"].str.contains("DistributedGradReducer").all()
        assert allreduce["total_ms"].sum() > 0.5 * comm["total_ms"].sum()


def test_per_rank_splits_add_up_to_the_rank_step(dp):
    result, trial_dir = dp
    for summary in result.ranks:
        s = summary.splits
        assert sum(getattr(s, f"{p}_ms") for p in PHASES) == pytest.approx(s.step_ms, rel=1e-9)
        own = TrialResult.model_validate_json((trial_dir / f"rank_{summary.rank}" / "trial.json").read_text())
        timed = [st.step_ms for st in own.steps if st.phase == "timed"]
        assert s.step_ms == pytest.approx(float(np.mean(timed)), rel=1e-9)  # the rank's own (unprofiled) step
        assert summary.communication_share == pytest.approx(s.communication_ms / s.step_ms)
    mean = result.profile.splits  # the trial's splits: the mean over ranks, still adding up
    assert sum(getattr(mean, f"{p}_ms") for p in PHASES) == pytest.approx(mean.step_ms, rel=1e-9)
    assert mean.communication_ms == pytest.approx(np.mean([r.splits.communication_ms for r in result.ranks]))
    share = result.profile.communication_share
    assert share == pytest.approx(np.mean([r.communication_share for r in result.ranks]))
    assert result.profile.communication_flag == (share > 0.20)


def test_report_draws_each_rank_and_names_the_straggler(dp, tmp_path):
    """The real 2-rank trial as a one-trial sweep folder: the report's ranks section lists both ranks, marks the
    straggler, states the spread and the communication share, and draws the per-rank splits."""
    import re
    import shutil

    from perftune.io.store import write_json_atomic
    from perftune.io.sweep_records import SweepResult, SweepTrial
    from perftune.report import write_report

    result, trial_dir = dp
    out = tmp_path / "sweep"
    shutil.copytree(trial_dir, out / "trials" / result.trial_id)
    trial = SweepTrial(trial_id=result.trial_id, label="workers=2", kind="baseline", verdict="baseline",
                       result=result.model_copy(update={"steps": []}))
    sweep = SweepResult(plan=_plan(), status="complete", started_utc="2026-01-01T00:00:00+00:00", trials=[trial])
    write_json_atomic(out / "results.json", sweep.model_dump(mode="json"))
    html = write_report(out).read_text()
    ranks = html[html.index('<section id="ranks"'):]
    ranks = ranks[:ranks.index("</section>")]
    rows = re.findall(r"<tr class=\"[^\"]*\"><td>(\d+)( \(straggler\))?</td>", ranks)
    assert [int(r) for r, _ in rows] == [0, 1]
    assert [int(r) for r, mark in rows if mark] == [result.straggler_rank]
    assert f"straggler: rank {result.straggler_rank}; spread {result.rank_spread:.1%}" in ranks
    assert f"communication {result.profile.communication_share:.1%}" in ranks
    for summary in result.ranks:
        assert f"{summary.communication_share:.1%}" in ranks
    assert 'alt="Per-rank time splits"' in ranks


def _kill_rank_1(trial_dir, monkeypatch, by_signal: bool = False):
    """A two-rank trial whose rank 1 dies after 3 steps (fault injection): exits 9, or SIGKILLs itself."""
    monkeypatch.setenv("PERFTUNE_TEST_KILL_RANK", "1")
    monkeypatch.setenv("PERFTUNE_TEST_KILL_AFTER_STEPS", "3")
    if by_signal:
        monkeypatch.setenv("PERFTUNE_TEST_KILL_SIGNAL", "1")
    return run_trial(make_spec(_plan(), {}, "workers=2"), trial_dir)


def test_a_rank_killed_mid_burst_fails_the_trial_and_leaves_nothing(tmp_path, monkeypatch):
    trial_dir = tmp_path / "killed"
    result = _kill_rank_1(trial_dir, monkeypatch)
    assert result.status == "failed"
    assert "rank 1 died with exit code 9" in result.reason
    assert "fault injection" in result.log_tail and "rank 1 exits with code 9" in result.log_tail
    assert not (trial_dir / "rank_1" / "trial.json").exists()
    assert TrialResult.model_validate_json((trial_dir / "trial.json").read_text()).status == "failed"
    assert _leftovers(trial_dir) == []


def test_a_rank_killed_by_a_signal_is_named_and_retried_on_resume(tmp_path, monkeypatch):
    """A rank SIGKILLed by something other than perftune (a user, the OOM killer without evidence) fails the trial
    with the signal named, and marks it for a retry on resume, as a one-process burst is (issue 15)."""
    trial_dir = tmp_path / "signalled"
    result = _kill_rank_1(trial_dir, monkeypatch, by_signal=True)
    assert result.status == "failed"
    assert "rank 1 died (the burst was killed by SIGKILL, a signal perftune did not send" in result.reason
    assert result.retry_on_resume
    assert "rank 1 is killed by SIGKILL" in result.log_tail
    assert TrialResult.model_validate_json((trial_dir / "trial.json").read_text()).retry_on_resume
    assert _leftovers(trial_dir) == []


def test_two_nodes_on_loopback(tmp_path):
    """Two msrun launches of one local rank each (node_rank 0 and 1) meeting at one master on 127.0.0.1."""
    port = free_port("127.0.0.1")
    results: dict[int, TrialResult] = {}
    specs = {}

    def node(rank: int) -> None:
        plan = _plan(distributed={"nodes": 2, "node_rank": rank, "master_addr": "127.0.0.1", "master_port": port})
        specs[rank] = make_spec(plan, {}, "workers=2")
        results[rank] = run_trial(specs[rank], tmp_path / f"node{rank}")

    threads = [threading.Thread(target=node, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert specs[0].trial_id == specs[1].trial_id  # node_rank is not part of the trial's identity
    cmd = " ".join(msrun_command(cluster_of(specs[1]), port, tmp_path / "node1", 60))
    assert "--worker_num=2 --local_worker_num=1 --node_rank=1" in cmd
    for rank in (0, 1):
        r = results[rank]
        assert r.status == "ok", f"node {rank}: {r.reason}\n{r.log_tail}"
        assert [s.rank for s in r.ranks] == [0, 1]
        assert [s.result_dir for s in r.ranks] == [f"rank_{q}" if q == rank else None for q in (0, 1)]
        assert (tmp_path / f"node{rank}" / f"rank_{rank}" / "trial.json").is_file()
        assert not (tmp_path / f"node{rank}" / f"rank_{1 - rank}").exists()
        assert _leftovers(tmp_path / f"node{rank}") == []
    # both machines see every rank, so they agree on the figures the sweep decides with
    assert results[0].samples_per_s == results[1].samples_per_s
    assert results[0].accuracy.train_loss == results[1].accuracy.train_loss


def test_semi_auto_parallel_is_unsupported_on_cpu(tmp_path):
    result = run_trial(make_spec(_plan(), {"parallel_mode": "semi_auto_parallel"}, "semi"), tmp_path / "semi")
    assert result.status == "unsupported"
    assert "parallel_mode=semi_auto_parallel is not supported on CPU" in result.reason
    assert "Invalid communication backend: CPU for semi_auto_parallel/auto_parallel mode" in result.reason
    assert _leftovers(tmp_path / "semi") == []


def test_plan_distributed_section_is_validated():
    with pytest.raises(PlanError) as err:
        _plan(distributed={"nodes": 2, "node_rank": 2})
    text = str(err.value)
    assert "distributed.node_rank: 2 must be below nodes (2)" in text
    assert "distributed.master_port: required when nodes > 1" in text
    with pytest.raises(PlanError, match="batch_size 30 does not split evenly over 4 workers"):
        _plan(baseline={"batch_size": 30}, variables={"workers": [4]})
    with pytest.raises(PlanError, match=r"variables.workers\[0\]: 3 workers cannot be spread over distributed.nodes=2"):
        _plan(baseline={"batch_size": 36, "workers": 2}, variables={"workers": [3]},
              distributed={"nodes": 2, "node_rank": 0, "master_port": 29500})
    plan = _plan(distributed={"nodes": 2, "node_rank": 1, "master_addr": "10.0.0.1", "master_port": 29500})
    cmd = msrun_command(cluster_of(make_spec(plan, {}, "x")), 29500, Path("/t"), 300)
    assert cmd[1:6] == ["--worker_num=2", "--local_worker_num=1", "--node_rank=1", "--master_addr=10.0.0.1",
                        "--master_port=29500"]
    assert cmd[-4:] == ["python", "-m", "perftune.burst", "/t"]
