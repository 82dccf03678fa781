"""Schema versions: results written by an older perftune load through the upgrade steps; newer files are refused in
one line; a trial.json that cannot be read is set aside (kept) and measured again on a resume, said in results.json;
one of a newer perftune stops the resume.  No bursts run here: the resumed sweeps get a runner that fails the test
if called (or that returns a fixture's result)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import REPO

from perftune.engine.sweep import Sweep
from perftune.errors import UserError
from perftune.io.files import read_sweep, read_trial
from perftune.io.records import RESULTS_SCHEMA_VERSION, TRIAL_SCHEMA_VERSION, Note
from perftune.io.schema import note_from_text

# upgrades of older files go through pydantic and the JSON readers: cheap, so checked on the oldest set too
pytestmark = pytest.mark.smoke

V1 = REPO / "tests" / "data" / "results_v1"
SINK_NOTE = "dataset_sink_mode=true has no effect on CPU: MindSpore accepts it and ignores it"


def no_bursts(spec, trial_dir):
    raise AssertionError(f"the resumed sweep ran trial {spec.trial_id} instead of reusing it")


@pytest.fixture
def v1_copy(tmp_path) -> Path:
    out = tmp_path / "v1"
    shutil.copytree(V1, out)
    return out


def test_the_fixture_is_version_1():
    raw = json.loads((V1 / "results.json").read_text())
    assert raw["schema_version"] == 1 and RESULTS_SCHEMA_VERSION == 6 and TRIAL_SCHEMA_VERSION == 4
    assert any(SINK_NOTE in t["result"]["notes"] for t in raw["trials"])


def test_version_1_results_load_through_the_upgrade():
    sweep = read_sweep(V1)
    assert sweep.schema_version == RESULTS_SCHEMA_VERSION and sweep.status == "complete"
    assert sweep.plan.name == "v1-fixture" and sweep.plan.burst.steps == 25  # typed, not a dict
    by_label = {t.label: t for t in sweep.trials}
    sink = by_label["+dataset_sink_mode=true"]
    assert sink.verdict == "no effect" and sink.reason == SINK_NOTE
    assert sink.result.schema_version == TRIAL_SCHEMA_VERSION
    assert sink.result.notes == [Note(kind="no_effect", knob="dataset_sink_mode", text=SINK_NOTE)]
    assert by_label["baseline"].result.notes == []
    for t in sweep.trials:
        full = read_trial(V1 / "trials" / t.trial_id)
        assert full.schema_version == TRIAL_SCHEMA_VERSION and full.notes == t.result.notes and full.steps


def test_version_1_results_feed_the_readers_downstream(v1_copy):
    import perftune
    from perftune.compare.run import run_compare
    from perftune.report import write_report

    frames = perftune.load_results(v1_copy)
    assert set(frames.trials["verdict"]) == {"baseline", "no effect"}
    report = run_compare(v1_copy, V1, metric="throughput")
    assert report.exit_code == 0 and len(report.configurations) == 2
    assert write_report(v1_copy).read_text().count("dataset_sink_mode") >= 1


def test_a_resumed_version_1_sweep_reuses_its_trials(v1_copy):
    """The trial ids do not depend on the file format: a sweep folder of version 1 resumes without re-running.

    The sequential rule measures the baseline after the candidate too (``R C R``): that one process is all it runs,
    a repeat of the baseline (here a copy of the first one's result under its own id)."""
    old = read_sweep(v1_copy)
    first = read_trial(v1_copy / "trials" / next(t.trial_id for t in old.trials if t.kind == "baseline"))
    ran = []

    def only_the_new_baseline_repeat(spec, trial_dir):
        assert spec.label == "baseline" and spec.replicate == 1, f"ran {spec.label} run {spec.replicate + 1}"
        ran.append(spec.trial_id)
        return first.model_copy(update={"trial_id": spec.trial_id})

    plan = old.plan

    result = Sweep(plan, v1_copy, only_the_new_baseline_repeat).run()
    assert [t.reused for t in result.trials] == [True, True, False] and len(ran) == 1
    assert [t.verdict for t in result.trials] == ["baseline", "no effect", "baseline"]
    assert json.loads((v1_copy / "results.json").read_text())["schema_version"] == RESULTS_SCHEMA_VERSION


@pytest.mark.parametrize("damage, why", [
    (lambda text: text[: len(text) // 2], "corrupted or truncated JSON"),
    (lambda text: text.replace('"status": "ok"', '"status": "fine"', 1), "does not match its schema"),
    (lambda text: text.replace('"total_ms": ', '"total_ms": NaN, "x": ', 1), "holds the number NaN"),
])
def test_an_unreadable_trial_is_set_aside_kept_and_measured_again_on_resume(v1_copy, damage, why):
    """Issue 35: a damaged trial.json is moved aside inside its folder (kept, named in results.json), the trial is
    measured again; nothing the user wrote is deleted."""
    plan = read_sweep(v1_copy).plan
    bad = next((v1_copy / "trials").iterdir()) / "trial.json"
    damaged = damage(bad.read_text())
    bad.write_text(damaged)
    ran = []

    def measure_the_damaged_one(spec, trial_dir):  # and the baseline's new repeat (as in the test above)
        ran.append(spec.trial_id)
        source = V1 / "trials" / (spec.trial_id if trial_dir == bad.parent else first)
        return read_trial(source).model_copy(update={"trial_id": spec.trial_id})

    first = next(t.trial_id for t in read_sweep(V1).trials if t.kind == "baseline")
    result = Sweep(plan, v1_copy, measure_the_damaged_one).run()
    assert bad.parent.name in ran and len(ran) == 2
    kept = bad.parent / "trial.set-aside-1.json"
    assert kept.read_text() == damaged
    assert len(result.integrity) == 1 and why in result.integrity[0] and "trial.set-aside-1.json" in \
        result.integrity[0]
    assert json.loads((v1_copy / "results.json").read_text())["integrity"] == result.integrity


def test_a_trial_of_a_newer_perftune_stops_the_resume_in_one_line(v1_copy):
    plan = read_sweep(v1_copy).plan
    bad = next((v1_copy / "trials").iterdir()) / "trial.json"
    bad.write_text(bad.read_text().replace('"schema_version": 1', '"schema_version": 7', 1))
    with pytest.raises(UserError) as err:
        Sweep(plan, v1_copy, no_bursts).run()
    message = str(err.value)
    assert str(bad) in message and "schema version 7 is newer" in message and "\n" not in message
    assert not (bad.parent / "trial.set-aside-1.json").exists()


def test_files_newer_than_this_perftune_are_refused_in_one_line(v1_copy, tmp_path):
    from perftune.cli import main
    from perftune.compat import cli_runner

    data = json.loads((v1_copy / "results.json").read_text())
    data["schema_version"] = RESULTS_SCHEMA_VERSION + 1
    (v1_copy / "results.json").write_text(json.dumps(data))
    result = cli_runner().invoke(main, ["report", str(v1_copy)])
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0 and result.stdout == ""
    newer = RESULTS_SCHEMA_VERSION + 1
    assert f"results schema version {newer} is newer than this perftune reads ({RESULTS_SCHEMA_VERSION})" in result.stderr


@pytest.mark.parametrize("text, kind, knob", [
    (SINK_NOTE, "no_effect", "dataset_sink_mode"),
    ("jit_level=O1 has no effect in pynative mode (nothing is compiled)", "no_effect", "jit_level"),
    ("kernel_threads=4 sets CPU kernel threads only; no effect on GPU kernels", "info", "kernel_threads"),
    ("2 of 4 ranks reported", "info", None),
])
def test_upgrade_to_2_infers_kind_and_knob_from_a_string_note(text, kind, knob):
    assert note_from_text(text) == {"kind": kind, "knob": knob, "text": text}


def test_version_3_reasons_are_lifted_once_and_rendered_in_the_one_convention():
    """Results schema 4 stores reasons as data; a version-3 reason (``x0.574 [0.441, 0.731]`` in its prose) has its
    ratios lifted out by the upgrade, at the full precision of the comparison it was written from."""
    from perftune.words.format import speed_text
    from perftune.words.reasons import reason_text

    sample = REPO / "tests" / "data" / "results_v3"  # the quickstart sample as written before schema 4
    raw = json.loads((sample / "results.json").read_text())
    assert raw["schema_version"] == 3
    sweep = read_sweep(sample)
    lifted = [t for t in sweep.trials if t.why is not None and t.why.legacy]
    assert lifted and all(t.why.legacy for t in lifted)
    for t in lifted:
        text = reason_text(t)
        assert "x0." not in text  # every ratio in the one convention
        c = t.vs_previous if t.kind == "stack" else t.vs_baseline
        if c is not None and t.kind == "single":  # its own comparison, with the interval the table shows
            assert speed_text(c.ratio, c.ci_low, c.ci_high) in text, text
        old = next(x for x in raw["trials"] if x["trial_id"] == t.trial_id and x["reason"] == t.reason)
        words = [p.text for p in t.why.legacy if p.ratio is None]
        assert all(w in old["reason"] for w in words)  # the words are the old ones


@pytest.mark.parametrize("folder", ["tests/data/results_v1", "tests/data/results_v3", "tests/data/results_v5"])
def test_version_5_prose_rules_are_kept_whole_as_legacy_text(folder):
    """Results schema 6 stores the order rule, the multiplicity rule and the window's sizing as data; an older file's
    prose is kept as written and printed as it was."""
    from perftune.words.rules import multiplicity_text, order_rule_text, sizing_text

    raw = json.loads((REPO / folder / "results.json").read_text())
    sweep = read_sweep(REPO / folder)
    assert order_rule_text(sweep.order_rule) == raw.get("order_rule", "")
    assert multiplicity_text(sweep.multiplicity) == (raw.get("multiplicity") or "")
    cal = raw.get("accuracy_calibration")
    assert sizing_text(sweep.accuracy_calibration.sizing if sweep.accuracy_calibration else None) == \
        ((cal or {}).get("sizing") or "")


def test_the_rules_as_data_say_what_the_prose_said():
    """The words of ``perftune.words.rules`` are those the engine wrote as prose before schema 6 (the quickstart
    sample's, kept in ``tests/data/results_v5``)."""
    from perftune.io.sweep_records import Multiplicity, OrderRule, WindowSizing
    from perftune.words.rules import multiplicity_text, order_rule_text, sizing_text

    raw = json.loads((REPO / "tests" / "data" / "results_v5" / "results.json").read_text())
    share = raw["order_rule"].split("waits for data ")[1].split("%")[0]
    rule = OrderRule(data_share=int(share) / 100, threshold=0.25, first="compute")
    assert order_rule_text(rule) == raw["order_rule"]
    n = int(raw["multiplicity"].split("the ")[1].split(" ")[0])
    assert multiplicity_text(Multiplicity(comparisons=n, false_discovery_rate=0.05, looks=4)) == raw["multiplicity"]
    sized = raw["accuracy_calibration"]["sizing"]
    fell = int(sized.split("fell ")[1].split("%")[0]) / 100
    assert sizing_text(WindowSizing(how="loss_fell", samples=int(sized.split(" ")[0]), loss_fall=fell,
                                    fall_factor=3.0, tolerance=0.05)) == sized, sized
