"""perftune.profile on real profiler output (tests/data/profiles/, see make_profiles.py there) and bad folders.

Everything but the last test parses committed fixtures (no MindSpore import, well under a second); the last one
profiles three real steps in a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perftune.errors import ProfileError, UserError
from perftune.io.records import PHASES, Splits, TopOp
from perftune.profile.columns import OP_COLUMNS
from perftune.profile.layouts import ProfileData, load_all_ranks, load_profile
from perftune.profile.op_phase import classify_phase
from perftune.profile.splits import compute_splits, top_ops

PROFILES = Path(__file__).resolve().parent / "data" / "profiles"
REAL = ["mlp_graph", "mlp_pynative", "dp2_allreduce"]
ALL = REAL + ["ascend_layout"]
REPO = Path(__file__).resolve().parents[1]


def expected(scenario: str) -> dict:
    return json.loads((PROFILES / scenario / "expected.json").read_text())


def profiles(scenario: str) -> list[ProfileData]:
    return load_all_ranks(PROFILES / scenario)


def splits_of(scenario: str) -> list[tuple[ProfileData, dict, Splits]]:
    exp = expected(scenario)
    out = []
    for prof in profiles(scenario):
        timing = exp["ranks"][str(prof.rank)] if "ranks" in exp else exp
        out.append((prof, timing, compute_splits(prof, exp["profiled_steps"], timing["step_ms"], timing["data_wait_ms"])))
    return out


def phase_of(prof: ProfileData, pattern: str) -> set[str]:
    rows = prof.ops[prof.ops["full_name"].str.contains(pattern, regex=True)]
    assert not rows.empty, f"no op matches {pattern!r} in {prof.root}"
    return set(rows["phase"])


# ---- phase rules --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, op_type, phase",
    [
        ("Default/net_with_loss-NetWithLoss/network-MLP/fc1-Dense/MatMul-op0", "MatMul", "forward"),
        ("Gradients/Default/net_with_loss-NetWithLoss/network-MLP/fc2-Dense/Grad_MatMul/MatMul-op1", "MatMul", "backward"),
        ("recompute_Default/network-WithLossCell/_backbone-Net/blocks-SequentialCell/0-Block/MatMul-op3", "MatMul", "backward"),
        ("Default/optimizer-Adam/Adam-op0", "Adam", "optimizer"),
        ("Default/optimizer-Adam/Assign-op1", "Assign", "optimizer"),
        ("Default/optimizer-Adam/AssignAdd-op0", "AssignAdd", "optimizer"),
        ("Default/opt-Momentum/ApplyMomentum-op0", "ApplyMomentum", "optimizer"),
        ("Default/Adam-op0", "Adam", "optimizer"),  # function form: no optimizer scope, the kernel says it
        ("Default/grad_reducer-DistributedGradReducer/AllReduce-op1", "AllReduce", "communication"),
        ("Default/grad_reducer-DistributedGradReducer/Mul-op2", "Mul", "communication"),
        ("Default/network-Net/AllGather-op0", "AllGather", "communication"),
        ("hcom_allReduce__428_0_1", "hcom_allReduce_", "communication"),
        ("Default/HcomAllReduce-op0", "HcomAllReduce", "communication"),
        ("Default/network-Net/ReduceScatter-op0", "ReduceScatter", "communication"),
        ("Default/network-Net/BroadcastTo-op0", "BroadcastTo", "forward"),  # a compute op, not a collective
        ("ReluGrad", "ReluGrad", "backward"),  # PyNative: no scope, the kernel type says it
        ("GatherDGradV2", "GatherDGradV2", "backward"),
        ("MatMul", "MatMul", "forward"),
    ],
)
def test_classify_phase(name, op_type, phase):
    assert classify_phase(name, op_type) == phase


@pytest.mark.smoke
def test_mlp_graph_phases_of_known_ops():
    (prof,) = profiles("mlp_graph")
    assert prof.layout == "cpu" and prof.rank == 0
    assert list(prof.ops.columns) == OP_COLUMNS
    assert phase_of(prof, r"^Default/net_with_loss-NetWithLoss/network-MLP/fc1-Dense/MatMul") == {"forward"}
    assert phase_of(prof, r"^Gradients/.*/Grad_MatMul/MatMul") == {"backward"}
    assert phase_of(prof, r"^Default/optimizer-Adam/Adam-op") == {"optimizer"}
    assert phase_of(prof, r"^Default/optimizer-Adam/Assign") == {"optimizer"}
    # the step cell's gradient norm (Default/Square-opN, outside network and optimizer) runs after backward began
    assert phase_of(prof, r"^Default/(?:Square|ReduceSum|Sqrt|AddN)-op") == {"optimizer"}
    assert set(prof.ops.loc[prof.ops["full_name"].str.startswith("Default/Square"), "phase_rule"]) == {"timeline"}
    assert "communication" not in set(prof.ops["phase"])
    steps = expected("mlp_graph")["profiled_steps"]
    assert prof.launch_steps == steps
    # every op of a graph runs once per step
    assert (prof.ops.groupby("full_name")["count"].sum() % steps == 0).all()
    assert prof.peak_allocated_bytes and prof.peak_allocated_bytes > 1_000_000  # MLP weights + Adam state
    assert prof.trace_file is not None and prof.trace_file.name == "trace_view.json"


@pytest.mark.smoke
def test_mlp_pynative_unscoped_ops_placed_by_time():
    (prof,) = profiles("mlp_pynative")
    steps = expected("mlp_pynative")["profiled_steps"]
    mm = prof.ops[prof.ops["full_name"] == "MatMul"].set_index("phase")
    # PyNative runs the 3-layer forward twice per step (the loss, then again inside GradOperation) and 5 MatMuls
    # in backward (3 weight gradients, 2 input gradients): bare "MatMul" is split by when each launch ran
    assert mm.loc["forward", "count"] == 6 * steps
    assert mm.loc["backward", "count"] == 5 * steps
    assert set(mm["phase_rule"]) == {"timeline"}
    assert phase_of(prof, r"^ReluGrad$") == {"backward"}
    assert phase_of(prof, r"^Default/Adam-op") == {"optimizer"}
    assert phase_of(prof, r"^ReLU$") == {"forward"}


@pytest.mark.smoke
def test_dp2_allreduce_on_both_ranks():
    profs = profiles("dp2_allreduce")
    assert [p.rank for p in profs] == [0, 1]
    assert profs[0].root != profs[1].root
    steps = expected("dp2_allreduce")["profiled_steps"]
    for prof in profs:
        ar = prof.ops[prof.ops["op_type"] == "AllReduce"]
        assert len(ar) == 6, "one AllReduce per parameter (3 Dense layers x weight, bias), unfused"
        assert set(ar["phase"]) == {"communication"}
        assert (ar["count"] == steps).all()
        assert phase_of(prof, r"^Default/grad_reducer-DistributedGradReducer/Mul") == {"communication"}
        assert phase_of(prof, r"^Gradients/.*/Grad_MatMul/MatMul") == {"backward"}
        assert phase_of(prof, r"^Default/optimizer-Adam/Adam") == {"optimizer"}


def test_dp2_rank_selection():
    with pytest.raises(ProfileError, match=r"ranks \[0, 1\].*rank="):
        load_profile(PROFILES / "dp2_allreduce")
    one = load_profile(PROFILES / "dp2_allreduce", rank=1)
    assert one.rank == 1 and "_1.csv" not in str(one.root)
    with pytest.raises(ProfileError, match="rank 5"):
        load_profile(PROFILES / "dp2_allreduce", rank=5)
    # the *_ascend_ms folder itself works too
    assert load_profile(one.root).rank == 1


@pytest.mark.smoke
def test_ascend_layout_parses_to_the_same_shape():
    (prof,) = profiles("ascend_layout")
    assert prof.layout == "ascend" and prof.rank == 0
    assert list(prof.ops.columns) == OP_COLUMNS
    assert phase_of(prof, r"^hcom_allReduce") == {"communication"}
    assert phase_of(prof, r"^Gradients/") == {"backward"}
    assert phase_of(prof, r"^Default/optimizer-Adam/") == {"optimizer"}
    assert phase_of(prof, r"^Default/network-WithLossCell/_backbone-MLP/fc1-Dense/MatMul") == {"forward"}
    # BOM stripped: the first column of both CSVs was read under its name
    assert "device_id" in prof.step_trace.columns and "computing_us" in prof.step_trace.columns
    assert len(prof.step_trace) == expected("ascend_layout")["profiled_steps"]
    assert prof.peak_allocated_bytes is None


@pytest.mark.smoke
def test_ascend_splits_use_step_trace():
    ((prof, timing, sp),) = splits_of("ascend_layout")
    exp = expected("ascend_layout")
    assert "step_trace_time.csv" in sp.step_source
    assert sp.communication_ms == pytest.approx(exp["device_communication_not_overlapped_us"] / 1000)
    assert sp.forward_ms + sp.backward_ms + sp.optimizer_ms == pytest.approx(exp["device_computing_us"] / 1000)
    assert sp.forward_ms == pytest.approx(0.200) and sp.backward_ms == pytest.approx(0.235)
    assert sp.optimizer_ms == pytest.approx(0.038)


# ---- splits add up --------------------------------------------------------------------------------------------------


@pytest.mark.smoke
@pytest.mark.parametrize("scenario", ALL)
def test_splits_add_up_to_the_measured_step(scenario):
    for _prof, timing, sp in splits_of(scenario):
        total = sum(getattr(sp, f"{p}_ms") for p in PHASES)
        assert total == pytest.approx(timing["step_ms"], rel=1e-9), "exact by construction"
        assert abs(total - timing["step_ms"]) <= 0.05 * timing["step_ms"]
        assert sp.step_ms == timing["step_ms"] and sp.data_ms == timing["data_wait_ms"]
        assert all(getattr(sp, f"{p}_ms") >= 0 for p in PHASES)
        assert 0 <= sp.explained_share <= 1
        assert sp.explained_share == pytest.approx(1 - sp.other_ms / sp.step_ms)
        assert sum(sp.shares.values()) == pytest.approx(1.0)
        # the op time is really there: ops explain a fair part of a compiled step
        if scenario != "mlp_pynative":
            assert sp.forward_ms > 0 and sp.backward_ms > 0 and sp.optimizer_ms > 0
        if scenario in ("dp2_allreduce", "ascend_layout"):
            assert sp.communication_ms > 0
        else:
            assert sp.communication_ms == 0


def test_phase_totals_match_the_op_table():
    """Placing launches by time moves time between phases but never loses or invents any."""
    for scenario in REAL:
        for prof in profiles(scenario):
            import pandas as pd

            csv = next((prof.root / "FRAMEWORK").glob("cpu_op_detail_info_*.csv"))
            raw = pd.read_csv(csv)
            assert prof.ops["total_ms"].sum() == pytest.approx(raw["op_total_time(ms)"].sum(), rel=1e-6)
            assert prof.ops["count"].sum() == raw["op_occurrences"].sum()


def test_overlapping_ops_are_scaled_to_fit():
    """Op time above the step (collectives that include waiting for the peer) is scaled down, never negative."""
    prof = profiles("dp2_allreduce")[0]
    steps = expected("dp2_allreduce")["profiled_steps"]
    op_ms = sum(prof.phase_totals_ms().values()) / steps
    step_ms, data_ms = op_ms * 0.5, op_ms * 0.1
    sp = compute_splits(prof, steps, step_ms, data_ms)
    assert sp.other_ms == 0 and sp.explained_share == 1
    assert sum(getattr(sp, f"{p}_ms") for p in PHASES) == pytest.approx(step_ms, rel=1e-12)
    (w,) = [w for w in sp.warnings if w.kind == "ops_exceed_step"]
    assert w.figures["budget_ms"] / w.figures["op_ms"] == pytest.approx(0.4)
    assert sp.step_source == "burst"
    unscaled = compute_splits(prof, steps, op_ms * 2, 0.0)
    assert sp.communication_ms / sp.backward_ms == pytest.approx(unscaled.communication_ms / unscaled.backward_ms)


def test_compute_splits_refuses_inconsistent_timing():
    prof = profiles("mlp_graph")[0]
    with pytest.raises(ValueError, match="data_wait_ms"):
        compute_splits(prof, 8, 1.0, 2.0)
    with pytest.raises(ValueError, match="profiled_steps"):
        compute_splits(prof, 0, 1.0, 0.0)


@pytest.mark.parametrize("scenario", ALL)
def test_top_ops(scenario):
    for prof in profiles(scenario):
        top = top_ops(prof)
        assert 0 < len(top) <= 10 and all(isinstance(t, TopOp) for t in top)
        times = [t.total_ms for t in top]
        assert times == sorted(times, reverse=True)
        total = prof.ops["total_ms"].sum()
        for t in top:
            assert t.share == pytest.approx(t.total_ms / total)
            assert t.mean_ms == pytest.approx(t.total_ms / t.count)
            assert t.phase in ("forward", "backward", "optimizer", "communication")
        assert top[0].total_ms == prof.ops["total_ms"].max()
    assert len(top_ops(prof, 3)) == 3


# ---- bad input ----------------------------------------------------------------------------------------------------


def _copy_root(scenario: str, tmp_path: Path) -> Path:
    (prof,) = profiles(scenario)[:1]
    dest = tmp_path / "profile" / prof.root.name
    shutil.copytree(prof.root, dest)
    return dest


def test_empty_folder(tmp_path):
    with pytest.raises(ProfileError, match=rf"{tmp_path}.*no \*_ascend_ms folder") as e:
        load_profile(tmp_path)
    assert isinstance(e.value, UserError)


def test_missing_folder(tmp_path):
    with pytest.raises(ProfileError, match="no such folder"):
        load_profile(tmp_path / "nope")


def test_not_profiler_output(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ProfileError, match=rf"{tmp_path}: no \*_ascend_ms folder"):
        load_profile(tmp_path)


def test_unknown_layout(tmp_path):
    root = tmp_path / "host_1_2_ascend_ms"
    (root / "FRAMEWORK").mkdir(parents=True)
    (root / "FRAMEWORK" / "something_else.csv").write_text("x\n1\n")
    with pytest.raises(ProfileError, match=r"cpu_op_detail_info_0\.csv: not found.*kernel_details\.csv"):
        load_profile(tmp_path)


def test_truncated_csv(tmp_path):
    root = _copy_root("mlp_graph", tmp_path)
    csv = root / "FRAMEWORK" / "cpu_op_detail_info_0.csv"
    data = csv.read_bytes()
    csv.write_bytes(data[: len(data) // 2])  # cut mid-row
    with pytest.raises(ProfileError, match=r"cpu_op_detail_info_0\.csv: truncated"):
        load_profile(root)


def test_csv_with_a_short_row(tmp_path):
    root = _copy_root("mlp_graph", tmp_path)
    csv = root / "FRAMEWORK" / "cpu_op_detail_info_0.csv"
    lines = csv.read_text().splitlines()
    lines[3] = ",".join(lines[3].split(",")[:5])  # a row missing its times
    csv.write_text("\n".join(lines) + "\n")
    with pytest.raises(ProfileError, match=r"cpu_op_detail_info_0\.csv: row 4 .*op_total_time\(ms\)"):
        load_profile(root)


def test_csv_with_wrong_header(tmp_path):
    root = _copy_root("mlp_graph", tmp_path)
    csv = root / "FRAMEWORK" / "cpu_op_detail_info_0.csv"
    csv.write_text("op_type,name,time\nMatMul,x,1\n")
    with pytest.raises(ProfileError, match=r"cpu_op_detail_info_0\.csv: missing column\(s\) op_name, full_op_name.*expected op_type"):
        load_profile(root)


def test_truncated_timestamps(tmp_path):
    root = _copy_root("mlp_graph", tmp_path)
    ts = root / "FRAMEWORK" / "cpu_op_execute_timestamp_0.txt"
    lines = ts.read_text().splitlines(keepends=True)
    ts.write_text("".join(lines[: len(lines) // 2]))  # whole lines lost: the op table no longer matches
    with pytest.raises(ProfileError, match=r"cpu_op_execute_timestamp_0\.txt: 0 launches of .* counts \d+"):
        load_profile(root)
    ts.write_text("".join(lines)[:-7])  # cut mid-record
    with pytest.raises(ProfileError, match=r"cpu_op_execute_timestamp_0\.txt"):
        load_profile(root)


def test_memory_peak_only_within_the_profiled_window(tmp_path):
    """A second profiler session in one process writes a memory record from the first session's start on."""
    root = _copy_root("mlp_graph", tmp_path)
    mem = root / "FRAMEWORK" / "cpu_ms_memory_record_0.txt"
    header, first, *rest = mem.read_text().splitlines()
    earlier = int(first.split(",")[0]) - 10**9  # one second before this session's first record
    mem.write_text("\n".join([header, f"{earlier},999999999999,1073741824,999999999999", first, *rest]) + "\n")
    assert load_profile(root).peak_allocated_bytes == profiles("mlp_graph")[0].peak_allocated_bytes


def test_db_only_export(tmp_path):
    root = tmp_path / "host_1_20260101_ascend_ms"
    (root / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (root / "ASCEND_PROFILER_OUTPUT" / "ascend_mindspore_profiler_0.db").write_bytes(b"SQLite format 3\0")
    (root / "profiler_info_0.json").write_text("{}")
    with pytest.raises(ProfileError, match=r"ascend_mindspore_profiler_0\.db: only a database export.*Text"):
        load_profile(tmp_path)


def test_partial_ascend_output(tmp_path):
    src = profiles("ascend_layout")[0].root
    root = tmp_path / src.name
    shutil.copytree(src, root)
    (root / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").unlink()
    with pytest.raises(ProfileError, match=r"ASCEND_PROFILER_OUTPUT: partial .*missing kernel_details\.csv"):
        load_profile(root)


def test_truncated_step_trace(tmp_path):
    src = profiles("ascend_layout")[0].root
    root = tmp_path / src.name
    shutil.copytree(src, root)
    st = root / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    st.write_bytes(st.read_bytes()[:-9])
    with pytest.raises(ProfileError, match=r"step_trace_time\.csv: truncated"):
        load_profile(root)


# ---- a real profiler session -------------------------------------------------------------------------------------

SESSION_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import mindspore as ms
    from mindspore import nn, ops
    from perftune.profile.session import ProfilerSession

    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)

    class NetWithLoss(nn.Cell):
        def __init__(self, network, loss):
            super().__init__(auto_prefix=False)
            self.network, self.loss = network, loss
        def construct(self, x, y):
            return self.loss(self.network(x), y)

    class TrainStep(nn.Cell):
        def __init__(self, net_with_loss, optimizer):
            super().__init__(auto_prefix=False)
            self.net_with_loss, self.optimizer, self.weights = net_with_loss, optimizer, optimizer.parameters
            self.grad = ops.GradOperation(get_by_list=True, sens_param=True)
        def construct(self, x, y):
            loss = self.net_with_loss(x, y)
            grads = self.grad(self.net_with_loss, self.weights)(x, y, ops.ones_like(loss))
            self.optimizer(grads)
            return loss

    net = nn.Dense(16, 4)
    step = TrainStep(NetWithLoss(net, nn.MSELoss()), nn.Adam(net.trainable_params(), 1e-3))
    x = ms.Tensor(np.ones((8, 16), np.float32)); y = ms.Tensor(np.zeros((8, 4), np.float32))
    step(x, y).asnumpy()
    session = ProfilerSession(sys.argv[1])
    session.start()
    times = []
    for _ in range(3):
        t = time.perf_counter(); step(x, y).asnumpy(); times.append((time.perf_counter() - t) * 1e3)
    analyse_s = session.stop_and_analyse()
    print(json.dumps({"analyse_s": analyse_s, "step_ms": sum(times) / 3, "root": session.root.name}))
    """
)


@pytest.mark.slow
@pytest.mark.smoke
def test_profiler_session_end_to_end(tmp_path):
    pytest.importorskip("mindspore")
    out = tmp_path / "profile"
    script = tmp_path / "session.py"  # GRAPH mode parses the Cells' source: `python -c` cannot compile them
    script.write_text(SESSION_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), str(out)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,  # MindSpore dumps rank_0/ there on a failure
        env={**os.environ, "GLOG_v": "3", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert 0 < info["analyse_s"] < 60
    prof = load_profile(out)
    assert prof.root.name == info["root"] and prof.layout == "cpu"
    assert phase_of(prof, r"^Default/optimizer-Adam/Adam") == {"optimizer"}
    assert phase_of(prof, r"^Gradients/") == {"backward"}
    assert (prof.ops.loc[prof.ops["full_name"].str.contains("Adam-op"), "count"] == 3).all()
    assert prof.peak_allocated_bytes and prof.peak_allocated_bytes > 0
    sp = compute_splits(prof, 3, info["step_ms"], 0.0)
    assert sum(getattr(sp, f"{p}_ms") for p in PHASES) == pytest.approx(info["step_ms"])


def test_two_runs_in_one_folder(tmp_path):
    root = _copy_root("mlp_graph", tmp_path)
    shutil.copytree(root, root.parent / root.name.replace("_2026", "_2027"))
    with pytest.raises(ProfileError, match="two profiler folders for rank 0.*keep one run"):
        load_profile(root.parent)
    with pytest.raises(ProfileError, match="two profiler folders for rank 0"):
        load_profile(root.parent, rank=0)
