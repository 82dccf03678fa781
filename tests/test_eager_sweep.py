"""The sweep on a real compute-bound, eager baseline: an AMP change measured and decided in fresh processes, a knob
the CPU cannot run recorded.  No paired processes: whether the first processes decide is the machine's answer (alone
they did, x2 slower; beside the suite's other worker they did not, and paired processes with their A/A check made
the sweep 8 processes and 78 s instead of 4 and 21 s); paired processes of two models run for real in
``test_paired.py`` and are decided and checked A/A on scripted sweeps there. A knob that does
nothing on CPU is named by the burst (``test_burst.py``) and turned into its verdict on scripted measurements
(``test_sweep_logic.py``). The larger batch the accuracy gate refuses is ``test_batch_accuracy.py``."""

from __future__ import annotations

import pytest
from conftest import run_sweep_cli, write_plan
from test_sweep import SINGLE_VERDICTS, assert_consistent, by_label

from perftune.io.sweep_records import SweepResult


@pytest.fixture(scope="module")
def eager_sweep(tmp_path_factory):
    """A compute-bound, eager (PyNative) baseline: graph kernel fusion cannot run on CPU.  Which of two
    configurations is faster is the machine's answer and is not asserted here."""
    folder = tmp_path_factory.mktemp("eager_sweep")
    plan = write_plan(folder, name="eager", baseline={"batch_size": 32, "mode": "pynative", "prefetch_size": 2},
                      variables={"amp_level": ["O1"], "graph_kernel": ["on"]},
                      accuracy={"metric": "val_loss", "rel_tolerance": 0.005, "samples": 1024, "seeds": 1,
                                "verify_multiple": 0},
                      decision={"baseline_runs": 2, "max_runs": 2, "paired": False})
    out = folder / "out"
    run = run_sweep_cli(plan, out)
    assert run.exit_code == 0, run.output
    return SweepResult.model_validate_json((out / "results.json").read_text()), run.output, out


def test_amp_trial_is_measured_and_decided(eager_sweep):
    amp = by_label(eager_sweep[0])["+amp_level=O1"]
    assert amp.result.status == "ok" and amp.result.windows and amp.result.knobs["amp_level"] == "O1"
    assert amp.verdict in SINGLE_VERDICTS and amp.vs_baseline is not None, amp.reason


def test_a_trial_that_cannot_run_is_recorded_and_the_sweep_completes(eager_sweep):
    result, output, out = eager_sweep
    fusion = by_label(result)["+graph_kernel=on"]
    assert fusion.verdict == "unsupported"
    assert "graph_kernel=on is not supported on CPU: MindSpore says" in fusion.reason
    assert result.status == "complete"
    assert "best:" in output
    assert_consistent(result, out)
