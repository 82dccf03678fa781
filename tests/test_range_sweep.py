"""A range searched end to end on real bursts (tiny MLP): the search's record in ``results.json``, the found value's
single judged against the baseline, the summary's line and the report's curve.  Which value is faster is the
machine's answer and is not asserted (the decisions are ``test_range_search.py``'s, on scripted measurements)."""

from __future__ import annotations

import pytest
from conftest import TINY_BURST, run_sweep_cli, write_plan

from perftune.io.sweep_records import SweepResult
from perftune.runner.cgroup import PREFIX, driver_tag


def test_a_range_knob_runs_end_to_end_and_writes_its_record_and_figure(tmp_path):
    plan = write_plan(tmp_path, name="ranged", variables={"kernel_threads": {"range": [1, 2]}},
                      decision={"baseline_runs": 2, "max_runs": 1, "search_steps": 1})
    out = tmp_path / "out"
    run = run_sweep_cli(plan, out)
    assert run.exit_code == 0, run.output
    result = SweepResult.model_validate_json((out / "results.json").read_text())
    assert result.status == "complete" and result.plan.ranges["kernel_threads"].values() == [1, 2]
    (record,) = result.searches
    assert record.knob == "kernel_threads" and record.start == 1 and record.start_rule == "middle"
    assert [(s.candidate, s.reference) for s in record.steps] == [(2, 1)]
    assert record.tried == [1, 2] and record.found in (1, 2) and record.stopped in ("peak", "edge", "budget")
    assert [p.value for p in record.curve] == [1, 2] and record.processes >= 3
    single = next(t for t in result.trials if t.kind == "single")
    assert single.changes == {"kernel_threads": record.found} and single.trial_id == record.found_trial_id
    assert single.vs_baseline is not None and single.vs_baseline.reference == "baseline"
    assert {t.kind for t in result.trials} >= {"baseline", "search", "single"}
    assert "search: kernel_threads searched over [1, 2] from 1" in run.output
    html = (out / "report.html").read_text()
    section = html.split('<section id="searches">')[1].split("</section>")[0]
    assert 'src="data:image/png;base64,' in section and "kernel_threads searched over [1, 2]" in section
    assert "### Searched knobs" in (out / "ablation.md").read_text()


WIDE_MLP = {"in_dim": 1024, "hidden": 2048, "layers": 2, "classes": 8, "train_samples": 8192, "val_samples": 128}
LIMIT_MB = 600


def test_until_fits_under_a_memory_limit_records_the_oom_trials_and_goes_on(tmp_path):
    """``burst.memory_limit_mb`` for real, and the fits search on it: measured here first (a wider MLP, graph mode,
    2 cores, cgroup v1 memory), the trial's cgroup is charged about 0.5 GB at batch 64 and past 0.6 GB at batch
    4096, so 600 MB fits the one and kills the other.  The search finds the largest power of two between that fits
    (which one is the machine's answer); the batch past the limit is recorded "oom" with the cgroup's evidence, the
    sweep goes on (the search measures after it), and no memory cgroup is left behind."""
    from perftune.runner import memcg

    if memcg.memory_parent()[0] is None:
        pytest.skip("no memory cgroup can be used here")
    plan = write_plan(tmp_path, name="fits", workload_params=WIDE_MLP,
                      burst={**TINY_BURST, "steps": 2, "profile_steps": 0, "memory_limit_mb": LIMIT_MB},
                      baseline={"batch_size": 1024, "mode": "graph", "prefetch_size": 2},
                      # from the baseline's 1024, not 64: 2 sizes to climb instead of 6 (the suite's time), 4096
                      # still past the limit
                      variables={"batch_size": {"range": [1024, 4096], "scale": "log2", "until": "fits"}},
                      accuracy={"samples": 4096, "seeds": 1, "rel_tolerance": 1000},
                      decision={"baseline_runs": 2, "max_runs": 1, "search_steps": 1})
    out = tmp_path / "out"
    run = run_sweep_cli(plan, out)
    assert run.exit_code == 0, run.output
    assert f"memory of each trial limited to {LIMIT_MB} MB by a cgroup" in run.output
    result = SweepResult.model_validate_json((out / "results.json").read_text())
    (record,) = result.searches
    assert result.status == "complete" and record.fits[-1].status == "oom"
    assert [f.status for f in record.fits[:-1]] == ["ok"] * (len(record.fits) - 1)
    assert record.largest_fit == record.fits[-1].value // 2 and record.start == record.largest_fit
    (oom,) = [t for t in result.trials if t.changes == {"batch_size": record.fits[-1].value}]
    assert oom.verdict == "oom" and oom.result.status == "oom" and not oom.result.retry_on_resume, oom.reason
    assert "out-of-memory killer struck" in oom.reason and f"burst.memory_limit_mb={LIMIT_MB}" in oom.reason
    assert "oom_kill 1 in memory." in oom.reason
    assert record.found is not None and record.found <= record.largest_fit
    assert f"largest {record.largest_fit}" in run.output
    baseline = next(t for t in result.trials if t.kind == "baseline")
    assert baseline.result.status == "ok" and f"memory limited to {LIMIT_MB} MB" in baseline.result.containment
    # the sweep went on: the search's comparisons and the found value's race measured after the oom, in order
    after = result.trials[result.trials.index(oom) + 1:]
    assert [t for t in after if t.kind == "repeat" and t.result.status == "ok"]
    # the found value raced against the baseline, its memory beside its speed; none where the search found the
    # baseline's own 1024 (the machine's answer: a busy run found it)
    for single in [t for t in result.trials if t.kind == "single" and t.changes == {"batch_size": record.found}]:
        assert "peak host memory x" in single.reason and f"burst.memory_limit_mb={LIMIT_MB}" in single.reason
    assert not [p.name for p in memcg.memory_parent()[0].iterdir()
                if p.name.startswith(f"{PREFIX}{driver_tag()}-")]  # every trial's memory cgroup removed
