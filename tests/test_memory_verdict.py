"""Memory in a verdict: a change's peak memory against its reference's, with its interval over the processes
(``perftune.engine.memory``), in the reason's words and the tables; and the memory limit's refusal and evidence,
on scripted measurements and stand-in cgroup readings (the real limit: ``test_memory_limit.py``)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from scripted_sweeps import Script, make_sweep

from perftune.engine.memory import memory_comparison
from perftune.errors import UserError
from perftune.io.plan import BurstSettings
from perftune.io.records import Memory, TrialResult
from perftune.io.sweep_records import MemoryComparison, SweepTrial
from perftune.report.tables import singles_table, to_markdown
from perftune.runner import memcg
from perftune.runner.process import classify_exit
from perftune.words.memory_words import memory_text

MB = 2**20


def trial(key: str, replicate: int, peak_mb: float, status: str = "ok") -> SweepTrial:
    result = TrialResult(trial_id=f"{key}{replicate}", status=status, workload="mlp", device="CPU", knobs={},
                         burst=BurstSettings(), memory=Memory(host_rss_peak_bytes=int(peak_mb * MB)))
    return SweepTrial(trial_id=result.trial_id, label=key, kind="single", verdict="measured", result=result,
                      replicate=replicate)


def processes(peaks: dict[str, list[float]]) -> dict[str, list[SweepTrial]]:
    return {key: [trial(key, i, mb) for i, mb in enumerate(values)] for key, values in peaks.items()}


def test_the_ratio_and_its_interval_over_the_processes():
    of = processes({"base": [1000, 1012, 994, 1004], "cand": [700, 706, 698]})
    m = memory_comparison(of, "cand", "base", 0.95)
    assert m is not None and m.measure == "host_rss" and (m.processes, m.reference_processes) == (3, 4)
    assert m.ratio == pytest.approx(0.70, abs=0.005)
    assert m.ci_low < m.ratio < m.ci_high < 1.0 and m.ci_high - m.ci_low < 0.05
    assert m.limit_mb is None and m.frees_mb is None
    # more spread between processes, a wider interval (the noise is pooled over the sweep's configurations)
    wide = memory_comparison(processes({"base": [1000, 1150, 900, 1080], "cand": [700, 780, 640]}), "cand", "base",
                             0.95)
    assert wide.ci_high - wide.ci_low > 2 * (m.ci_high - m.ci_low)


def test_one_process_each_still_gets_an_interval_from_the_prior():
    m = memory_comparison(processes({"base": [1000], "cand": [1000]}), "cand", "base", 0.95)
    assert m.ratio == pytest.approx(1.0) and m.ci_low < 1.0 < m.ci_high


def test_no_peak_no_comparison():
    of = processes({"base": [1000, 1000], "cand": [700]})
    of["cand"][0].result.status = "oom"
    assert memory_comparison(of, "cand", "base", 0.95) is None


def test_under_a_limit_it_says_what_the_change_frees():
    of = processes({"base": [1000, 1010, 990], "cand": [700, 705, 702]})
    m = memory_comparison(of, "cand", "base", 0.95, limit_mb=1200)
    assert m.frees_mb == pytest.approx(m.reference_mb - m.candidate_mb) and 290 < m.frees_mb < 310
    text = memory_text(m)
    assert text.startswith("peak host memory x0.70 (0.")
    assert "frees 29" in text and "MB against the memory limit" in text and "burst.memory_limit_mb=1200" in text
    more = memory_comparison(processes({"base": [700, 702], "cand": [1000, 1004]}), "cand", "base", 0.95, 1200)
    assert "takes 3" in memory_text(more) and "more of the memory limit" in memory_text(more)
    same = memory_comparison(processes({"base": [1000, 1001], "cand": [1000.5]}), "cand", "base", 0.95, 1200)
    assert "frees no measurable memory" in memory_text(same)


def test_the_words_without_a_limit():
    m = MemoryComparison(measure="device", ratio=0.7, ci_low=0.66, ci_high=0.74, processes=2, reference_processes=3,
                         candidate_mb=12.9, reference_mb=18.3)
    assert memory_text(m) == "peak device memory x0.70 (0.66-0.74)"


def test_the_sweep_puts_memory_beside_the_speed(tmp_path):
    scripts = {"baseline": Script(memory_bytes=1000 * MB), "+batch_size=64": Script(factor=1.6, memory_bytes=700 * MB)}
    sweep, _ = make_sweep(tmp_path, {"batch_size": [64]}, scripts, retry_on_stack=False)
    result = sweep.run()
    single = next(t for t in result.trials if t.kind == "single")
    assert single.vs_baseline.memory.ratio == pytest.approx(0.7, abs=1e-6)
    assert "; peak host memory x0.70 (0." in single.reason  # in the reason, after the speed
    table = singles_table(result)
    row = table[table["configuration"] == "+batch_size=64"].iloc[0]
    assert row["memory_vs_reference"].startswith("x0.70 (0.") and row["memory_vs_reference"].endswith("host_rss")
    assert "peak mem vs reference [95% CI]" in to_markdown(table, result.plan.accuracy.metric)


def test_an_oom_kill_counted_in_the_trial_s_memory_cgroup_is_oom_with_the_evidence(tmp_path):
    log = tmp_path / "burst.log"
    log.write_text("step 3\n")
    evidence = "burst.memory_limit_mb=600 (charged up to 600 MB, oom_kill 1 in memory.oom_control of /x)"
    status, reason = classify_exit(-9, log, 1, evidence)
    assert status == "oom" and "SIGKILL" in reason and evidence in reason
    # a dataset worker killed past the limit, the burst failing of it: still the trial's own out-of-memory
    assert classify_exit(1, log, 1, evidence)[0] == "oom"
    # no kill counted: a SIGKILL from someone else, measured again on a resume
    assert classify_exit(-9, log, 0, evidence)[0] == "failed"


def test_no_memory_controller_refuses_the_plan_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(memcg, "memory_parent", lambda: (None, 0, "no memory cgroup can be used here: test"))
    with pytest.raises(UserError) as caught:
        memcg.memory_probe(600)
    assert "\n" not in str(caught.value) and "refuses to run trials it cannot limit" in str(caught.value)
    with pytest.raises(UserError, match="burst.memory_limit_mb: no memory cgroup"):
        memcg.MemoryCgroup.open("x", 600, None)
    from conftest import write_plan

    from perftune.cli import main

    plan = write_plan(tmp_path, burst={"steps": 2, "memory_limit_mb": 600})
    out = CliRunner().invoke(main, ["sweep", str(plan), "--out", str(tmp_path / "out"), "--no-progress"])
    assert out.exit_code == 2, out.output
    assert "burst.memory_limit_mb: no memory cgroup can be used here: test" in out.output
    assert not (tmp_path / "out" / "runs").exists()  # nothing ran


def test_the_limit_is_a_plan_field(tmp_path):
    assert BurstSettings(memory_limit_mb=600).memory_limit_mb == 600
    with pytest.raises(ValueError):
        BurstSettings(memory_limit_mb=0)
    assert "memory_limit_mb" not in BurstSettings().model_dump(exclude_none=True)  # trial ids unchanged without it
