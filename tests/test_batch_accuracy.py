"""The accuracy gate on a real sweep: a larger batch refused at equal samples seen, judged against the spread of the
baseline's own seeds.  A graph-mode baseline: the gate reads losses, not the mode, and its five processes ran 17 s
here against 24 s eager (``pytest -n 0`` of this module, idle); the eager baseline's accuracy is judged in
``test_eager_sweep.py`` and, refusing this same kind of batch, in README command 1's quickstart."""

from __future__ import annotations

import pytest
from conftest import run_sweep_cli, write_plan
from test_sweep import assert_consistent, by_label

from perftune.io.sweep_records import SweepResult


@pytest.fixture(scope="module")
def batch_sweep(tmp_path_factory):
    """A baseline and a 4x batch, which sees 4x fewer updates at equal samples seen: its validation loss is worse,
    whatever its speed."""
    folder = tmp_path_factory.mktemp("batch_accuracy")
    plan = write_plan(folder, name="batch_accuracy", baseline={"batch_size": 32, "mode": "graph", "prefetch_size": 2},
                      variables={"batch_size": [128]},
                      # a fixed window, three seeds to calibrate the gate, no stack check: the sizing probes and the
                      # stack check are tested on scripted runs (test_accuracy_gate, test_stack_check)
                      accuracy={"metric": "val_loss", "rel_tolerance": 0.005, "samples": 1024, "seeds": 3,
                                "verify_multiple": 0})
    out = folder / "out"
    run = run_sweep_cli(plan, out)
    assert run.exit_code == 0, run.output
    return SweepResult.model_validate_json((out / "results.json").read_text()), out


def test_change_that_breaks_accuracy_is_never_kept(batch_sweep):
    result, out = batch_sweep
    big = by_label(result)["+batch_size=128"]
    # the gate's answer does not depend on timing: worse val_loss at equal samples seen, named in the reason
    assert big.accuracy_changes["val_loss"] > 0.005
    assert big.verdict == "accuracy rejected", big.reason  # whatever its speed: never hidden behind it
    assert "seed spreads worse" in big.reason  # judged against the baseline's seeds: val_loss or a curve point
    assert big.result.accuracy.samples_seen == result.trials[0].result.accuracy.samples_seen
    assert result.status == "complete"
    assert_consistent(result, out)
