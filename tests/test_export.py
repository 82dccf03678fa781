"""``perftune export``: TensorBoard event files read back with TensorBoard's own reader, and the step CSV.

The sweeps are real: the session's ``quick_sweep`` (current schema) and the version-1 sweep in tests/data (older
files go through the schema upgrade).  Each trial's scalars are checked step for step against its trial.json.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import REPO

from perftune.cli import main
from perftune.report import export as ex
from perftune.report.load import load_folder

V1 = REPO / "tests" / "data" / "results_v1"


def read_run(run_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def check_tensorboard(sweep_dir: Path, tb: Path) -> int:
    """Every trial with steps is one run whose scalars match its trial.json; returns the number of runs."""
    folder = load_folder(sweep_dir)
    names = ex.unique_run_names(folder.trials)
    runs = 0
    for t in folder.trials:
        full = folder.full(t.trial_id)
        if full is None or not full.steps:
            assert not (tb / names[t.trial_id]).exists()
            continue
        runs += 1
        acc = read_run(tb / names[t.trial_id])
        tags = set(acc.Tags()["scalars"])

        def series(tag):  # called in this iteration only
            return [(e.step, e.value) for e in acc.Scalars(tag)] if tag in tags else []  # noqa: B023

        losses = [(s.samples_seen, s.loss) for s in full.steps if s.loss is not None]
        assert [x for x, _ in series(ex.TAG_LOSS)] == [x for x, _ in losses], t.label
        assert [v for _, v in series(ex.TAG_LOSS)] == pytest.approx([v for _, v in losses], rel=1e-6)
        assert len(series(ex.TAG_LR)) == sum(s.learning_rate is not None for s in full.steps)
        assert len(series(ex.TAG_GRAD_NORM)) == sum(s.grad_norm is not None for s in full.steps)
        timed = [s for s in full.steps if s.phase == "timed"]
        assert len(timed) == sum(w.steps for w in full.windows)
        assert [x for x, _ in series(ex.TAG_STEP_MS)] == [s.samples_seen for s in timed]
        assert [v for _, v in series(ex.TAG_STEP_MS)] == pytest.approx([s.step_ms for s in timed], rel=1e-6)
        assert [v for _, v in series(ex.TAG_DATA_WAIT_MS)] == pytest.approx([s.data_wait_ms for s in timed],
                                                                            rel=1e-5, abs=1e-6)
        assert len(series(ex.TAG_STEP_THROUGHPUT)) == len(timed)
        assert [v for _, v in series(ex.TAG_WINDOW_THROUGHPUT)] == pytest.approx(
            [w.samples_per_s for w in full.windows], rel=1e-6)
        assert [v for _, v in series(ex.TAG_COMPILE_MS)] == pytest.approx([full.compile_ms], rel=1e-6)
    return runs


def export(sweep_dir: Path, *args: str):
    return CliRunner().invoke(main, ["export", str(sweep_dir), *args], catch_exceptions=False)


def test_export_a_real_sweep_to_tensorboard_and_csv(quick_sweep, tmp_path):
    tb, csv = tmp_path / "tb", tmp_path / "steps.csv"
    result = export(quick_sweep, "--tensorboard", str(tb), "--csv", str(csv))
    assert result.exit_code == 0, result.output
    folder = load_folder(quick_sweep)
    assert len(folder.trials) >= 5  # three baseline runs and the two single changes at least
    runs = check_tensorboard(quick_sweep, tb)
    assert runs == len(folder.trials) and sorted(p.name for p in tb.iterdir() if p.name != ex.MANIFEST) == sorted(
        ex.unique_run_names(folder.trials).values())
    assert {"baseline", "baseline_run2", "+mode=pynative", "+num_parallel_workers=2"} <= {p.name for p in tb.iterdir()}
    # a candidate's repeats are runs of it, named as the tables name them (they used to collide with it)
    repeats = [t for t in folder.trials if t.kind == "repeat"]
    assert {f"{t.label}_run{t.replicate + 1}" for t in repeats} <= {p.name for p in tb.iterdir()}
    # a second export replaces the runs instead of doubling every curve
    assert export(quick_sweep, "--tensorboard", str(tb)).exit_code == 0
    assert check_tensorboard(quick_sweep, tb) == runs

    df = pd.read_csv(csv)
    for t in folder.trials:
        full = folder.full(t.trial_id)
        rows = df[df.trial_id == t.trial_id]
        assert len(rows) == len(full.steps)
        assert list(rows.phase) == [s.phase for s in full.steps]
        assert list(rows.samples_seen) == [s.samples_seen for s in full.steps]
        assert rows["knob.mode"].iloc[0] == full.knobs["mode"]
    assert f"{csv}: {len(df)} step row(s)" in result.output


def test_export_an_older_sweep_through_the_schema_upgrade(tmp_path):
    tb = tmp_path / "tb"
    result = export(V1, "--tensorboard", str(tb))
    assert result.exit_code == 0, result.output
    assert check_tensorboard(V1, tb) == 2
    trial = read_run(tb / "baseline").Tensors("trial/text_summary")
    assert trial, "the trial's label, verdict and knobs go along as text"


def test_export_refuses_bad_input_in_one_line(tmp_path):
    result = export(V1)
    assert result.exit_code == 2 and "nothing to do" in result.output
    result = export(tmp_path / "missing", "--csv", str(tmp_path / "x.csv"))
    assert result.exit_code == 2 and "no such folder" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_run_names_are_sanitised_and_unique():
    folder = load_folder(V1)
    base = folder.trials[0]
    odd = base.model_copy(update={"label": "+mode=graph +num/workers=2", "trial_id": "abc"})
    twin = base.model_copy(update={"label": "+mode=graph +num/workers=2", "trial_id": "def"})
    assert ex.run_name(odd) == "+mode=graph_+num_workers=2"
    assert ex.unique_run_names([odd, twin]) == {"abc": "+mode=graph_+num_workers=2_abc",
                                                "def": "+mode=graph_+num_workers=2_def"}
