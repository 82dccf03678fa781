"""Messages and limits a user can act on: each one line (exit 2 for bad input), naming the field and what to do.

Plans are validated for real (``perftune validate``); the summary and tables are rendered from scripted sweeps
(``scripted_sweeps``) and from the committed real sample ``reports/sample``."""

from __future__ import annotations

import copy
import multiprocessing
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from scripted_sweeps import FIXED_WINDOW, Script, ScriptedRunner, make_sweep

from perftune.burst.failures import classify_failure, one_line, script_failure
from perftune.cli import main
from perftune.compare.match import side_warnings
from perftune.compare.sides import load_side
from perftune.compat import cli_runner
from perftune.engine.plan_load import PlanError, parse_plan, parse_set_options
from perftune.engine.sweep import Sweep
from perftune.io.plan import Plan, ScriptWorkload
from perftune.io.records import Environment, TrialSpec
from perftune.report.load import load_folder
from perftune.report.notes import edge_notes
from perftune.report.summary import quoted_text, sweep_summary
from perftune.report.tables import ablation_table, markdown_report, singles_table, to_markdown

CORES = multiprocessing.cpu_count()
SAMPLE = REPO / "reports" / "sample"


def validate(tmp_path: Path, plan: dict):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return cli_runner().invoke(main, ["validate", str(path)], catch_exceptions=False)


def problem_lines(result) -> list[str]:
    """The problem lines of a refused plan (under its one header line)."""
    return [ln.strip() for ln in result.output.splitlines() if ln.startswith("  ")]


# -- a knob value this machine cannot take ---------------------------------------------------------------------------

def test_validate_refuses_more_dataset_workers_than_cores(tmp_path):
    plan = {"name": "w", "workload": "mlp", "variables": {"num_parallel_workers": [2, CORES + 1]}}
    result = validate(tmp_path, plan)
    assert result.exit_code == 2
    assert problem_lines(result) == [
        f"variables.num_parallel_workers[1]: {CORES + 1} is more than this machine's {CORES} cores (MindSpore "
        f"refuses more dataset workers than cores in every trial; allowed: 1 to {CORES})"]


def test_the_baseline_and_set_are_held_to_the_cores_too(tmp_path):
    with pytest.raises(PlanError) as err:
        parse_plan({"name": "w", "workload": "mlp", "baseline": {"num_parallel_workers": CORES + 2}})
    assert err.value.problems == [f"baseline.num_parallel_workers: {CORES + 2} is more than this machine's {CORES} "
                                  f"cores (MindSpore refuses more dataset workers than cores in every trial; "
                                  f"allowed: 1 to {CORES})"]
    with pytest.raises(PlanError) as err:
        parse_set_options([f"num_parallel_workers={CORES + 1}"])
    assert err.value.problems[0].startswith(f"--set num_parallel_workers: {CORES + 1} is more than this machine's")
    assert parse_set_options([f"num_parallel_workers={CORES}"]) == {"num_parallel_workers": CORES}


def test_a_value_the_registry_refuses_is_said_once(tmp_path):
    result = validate(tmp_path, {"name": "w", "workload": "mlp", "variables": {"num_parallel_workers": [1000]}})
    assert result.exit_code == 2 and len(problem_lines(result)) == 1 and "cores" not in result.output


def test_a_ray_cluster_is_not_held_to_this_machines_cores():
    plan = parse_plan({"name": "w", "workload": "mlp", "executor": "ray",
                       "variables": {"num_parallel_workers": [CORES + 1]}})
    assert plan.variables["num_parallel_workers"] == [CORES + 1]


# -- a script workload's plan: the form given, not pydantic's union ---------------------------------------------------

def test_an_unknown_field_of_a_script_workload_is_one_line_without_a_path(tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    result = validate(tmp_path, {"name": "s", "workload": {"script": "train.py", "colour": "blue"}})
    assert result.exit_code == 2
    assert problem_lines(result) == ["workload.colour: unknown field"]
    assert str(tmp_path) not in "\n".join(problem_lines(result)) and "valid string" not in result.output


def test_workload_params_with_a_script_points_to_args(tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    result = validate(tmp_path, {"name": "s", "workload": {"script": "train.py"}, "workload_params": {"lr": 0.1}})
    assert result.exit_code == 2
    [line] = problem_lines(result)
    assert line.startswith("workload_params: ") and "workload.args" in line


# -- a failed script's reason ---------------------------------------------------------------------------------------

def test_a_failed_scripts_reason_carries_the_exceptions_own_message(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("def step():\n    raise RuntimeError('- Kernel select failed:\\n---\\nUnsupported op "
                      "[NPUGetFloatStatusV2]\\nmore detail')\n")
    spec = TrialSpec(trial_id="t", label="x", workload="script:train.py", knobs={}, device="CPU", burst={}, accuracy_samples=8,
                     script=ScriptWorkload(script=str(script)))
    namespace: dict = {}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    try:
        namespace["step"]()
    except RuntimeError as exc:
        status, reason = script_failure(exc, spec, 3)
    assert status == "failed"
    assert reason.startswith("the script raised RuntimeError: Kernel select failed: Unsupported op "
                             "[NPUGetFloatStatusV2] after 3 step(s), at train.py:2")
    assert one_line(ValueError("first\nsecond")) == "ValueError: first"


# -- tables and summary ---------------------------------------------------------------------------------------------

def test_ablation_md_of_the_real_sample_has_no_html_entities():
    text = markdown_report(load_folder(SAMPLE).result)
    for entity in ("&lt;", "&gt;", "&amp;"):
        assert entity not in text, [ln for ln in text.splitlines() if entity in ln]
    assert "waits for data" in text and "cannot gain" in text  # the order rule and the ceilings, in words


def test_the_summary_quotes_the_processes_the_verdicts_used(tmp_path):
    # the baseline's first process is contended (other processes used the cores): measured again, "not used"
    scripts = {"baseline": Script(factor=[0.5, 1.0, 1.0, 1.0], contended=(0,)), "+jit_level=O1": Script(1.2)}
    sweep, _ = make_sweep(tmp_path, {"jit_level": ["O1"]}, scripts, baseline_runs=3)
    result = sweep.run()
    excluded = [t for t in result.trials if t.excluded]
    assert excluded and excluded[0].label == "baseline"
    text = quoted_text(result, "baseline")
    assert text.startswith("1") and "(median of the" in text  # ~100 samples/s, not the contended 50
    assert not text.startswith("5")


# -- perftune compare ---------------------------------------------------------------------------------------------

def test_compare_does_not_warn_over_the_repeat_counts_perftune_chose():
    old = load_side(SAMPLE, "OLD")
    chosen = [e for e in old.entries if e.chosen_windows]
    assert {e.result.burst.repeats for e in chosen} - {old.entries[0].result.burst.repeats}  # the sample chose some
    new = copy.deepcopy(old)
    new.name, new.entries = "NEW", [e for e in new.entries if not e.chosen_windows]  # first processes only
    assert not [w for w in side_warnings(old, new, []) if "burst settings" in w]
    steps = copy.deepcopy(new)  # a burst setting the plan chose is still said
    for e in steps.entries:
        e.result = e.result.model_copy(update={"burst": e.result.burst.model_copy(update={"steps": 99})})
    assert [w for w in side_warnings(old, steps, []) if w.startswith("burst settings differ: steps")]


def test_compare_says_when_the_two_sides_models_differ():
    old = load_side(SAMPLE, "OLD")
    new = copy.deepcopy(old)
    new.name = "NEW"
    for e in new.entries:
        e.result = e.result.model_copy(update={"parameter_count": 2 * e.result.parameter_count})
    n = old.entries[0].result.parameter_count
    assert f"models differ: OLD {n:,} parameters, NEW {2 * n:,}: the same knobs are compared, but not the same " \
           "model" in side_warnings(old, new, [])
    assert not [w for w in side_warnings(old, copy.deepcopy(old), []) if w.startswith("models differ")]


# -- an AMP level that fails on a third-party model -----------------------------------------------------------------

def amp_failure(model: str, level: str, mode: int) -> tuple[str, str]:
    """The status and reason a burst gives when ``level`` fails on the real model ``model`` of ``amp_models``."""
    import amp_models
    import mindspore as ms
    import numpy as np
    from mindspore import amp

    ms.set_context(mode=mode)
    spec = TrialSpec(trial_id="t", label=f"+amp_level={level}", workload="amp_models", device="CPU", burst={},
                     accuracy_samples=8, knobs={"amp_level": level})
    network = getattr(amp_models, model)()
    x = ms.Tensor(np.ones((2, 4, 8) if model == "OwnPrecisionAttention" else (2, 8), np.float32))
    network(x)  # O0 runs
    with pytest.raises(Exception) as err:
        amp.auto_mixed_precision(network, level)(x)
    return classify_failure(err.value, spec)


@pytest.mark.slow
def test_amp_o1_on_a_model_whose_class_source_cannot_be_re_parsed_says_why_and_what_instead():
    import mindspore as ms
    status, reason = amp_failure("DecoratedNet", "O1", ms.PYNATIVE_MODE)
    assert status == "unsupported"
    assert reason.startswith("amp_level=O1 cannot rewrite this model: O1 re-parses each cell class's source")
    assert "NameError: name '_args_type_validator_check' is not defined" in reason
    assert "knob_params" in reason and "knob_config" in reason and "compute_dtype" in reason


@pytest.mark.slow
@pytest.mark.parametrize("level", ["O2", "O3"])
def test_amp_o2_o3_on_a_model_with_its_own_precision_says_why_and_what_instead(level):
    import mindspore as ms
    status, reason = amp_failure("OwnPrecisionAttention", level, ms.GRAPH_MODE)
    assert status == "unsupported"
    assert reason.startswith(f"amp_level={level} collides with the model's own precision casts")
    assert "BatchMatMul], the input type must be same" in reason and "knob_params" in reason


# -- a best value at the edge of those tried ------------------------------------------------------------------------

def edge_sweep(tmp_path: Path, prefetch: list, best: int, data_share: float):
    scripts = {"baseline": Script(data_share=0.6)}
    scripts.update({f"+prefetch_size={v}": Script(1.3 if v == best else 1.1, data_share=data_share)
                    for v in prefetch})
    sweep, _ = make_sweep(tmp_path, {"prefetch_size": prefetch}, scripts, baseline={"prefetch_size": 2},
                          retry_on_stack=False)
    return sweep.run()


def test_a_best_value_at_the_edge_with_its_split_still_dominant_is_noted(tmp_path):
    result = edge_sweep(tmp_path, [4, 8], best=8, data_share=0.59)
    assert edge_notes(result) == [
        "prefetch_size=8, the best value, is the largest tried (2, 4, 8) and the step there is still 59% waiting for "
        "data: a larger value than any tried may help further"]
    text = sweep_summary(result, tmp_path / "out", None)
    assert "note: prefetch_size=8, the best value, is the largest tried" in text


def test_no_edge_note_inside_the_range_or_once_the_split_no_longer_dominates(tmp_path):
    assert edge_notes(edge_sweep(tmp_path / "inside", [4, 8], best=4, data_share=0.59)) == []
    assert edge_notes(edge_sweep(tmp_path / "fed", [4, 8], best=8, data_share=0.1)) == []


def test_data_workers_at_the_machines_cores_say_the_machine_is_the_limit(tmp_path):
    scripts = {"baseline": Script(data_share=0.6), "+num_parallel_workers=2": Script(1.3, data_share=0.59)}
    sweep, _ = make_sweep(tmp_path, {"num_parallel_workers": [2]}, scripts, retry_on_stack=False)
    result = sweep.run()
    result.environment = Environment(perftune_version="x", mindspore_version="x", python_version="x", device="CPU",
                                     host="h", cpu_model="c", cpu_count=2, utc_time="t")  # the scripted runner's none
    [note] = edge_notes(result)
    assert note.startswith("num_parallel_workers=2, the best value, is the largest tried (1, 2) and the step there "
                           "is still 59% waiting for data: it is also the most this machine's 2 cores allow")


# -- tables whose figures agree with their verdicts -----------------------------------------------------------------

class PairedAt(ScriptedRunner):
    """Fresh processes as scripted; paired processes at ``paired``'s factors (a fresh process measured on a busy
    machine reads lower than the paired ones that decide its comparison)."""

    def __init__(self, scripts: dict, paired: dict):
        super().__init__(scripts)
        self.paired_scripts = paired

    def paired(self, spec, trial_dir):
        fresh, self.scripts = self.scripts, self.paired_scripts
        try:
            return super().paired(spec, trial_dir)
        finally:
            self.scripts = fresh


def test_a_row_decided_by_paired_processes_shows_figures_that_agree_with_its_verdict(tmp_path):
    scripts = {"baseline": Script(), "+num_parallel_workers=2": Script(1.05)}
    plan = Plan(name="paired", workload="tiny_mlp", variables={"num_parallel_workers": [2]}, accuracy=FIXED_WINDOW,
                decision={"retry_on_stack": False})
    runner = PairedAt(scripts, {"baseline": Script(), "+num_parallel_workers=2": Script(1.2)})
    result = Sweep(plan, tmp_path / "out", runner).run()
    df = singles_table(result)
    row = df[df.configuration == "+num_parallel_workers=2"].iloc[0]
    assert row.speedup == pytest.approx(1.2, rel=0.02)  # the paired processes' ratio
    base = df[df.verdict == "baseline"].samples_per_s.median()
    assert row.samples_per_s / base == pytest.approx(row.speedup, rel=0.01)  # the figure beside it agrees
    assert row.process_samples_per_s == pytest.approx(105, rel=0.02)
    assert "its first process alone: 105" in row.reason
    md = to_markdown(df, "val_loss")
    assert next(ln for ln in md.splitlines() if ln.startswith("| +num_parallel_workers=2 |")).split(" | ")[2] \
        .endswith("(paired)")


def test_the_reference_row_carries_the_splits_of_the_profiled_baseline_process():
    result = load_folder(SAMPLE).result
    first = next(t for t in result.trials if t.kind == "baseline")
    assert first.result.profile.splits is not None
    first.excluded = "3 of 3 timed windows contended (other processes used the cores): not used"  # as if contended
    row = ablation_table(result).iloc[0]
    assert row.configuration == "baseline" and row.trial_id != first.trial_id  # a process the sweep used
    assert row.data_ms == first.result.profile.splits.data_ms and row.forward_ms == first.result.profile.splits.forward_ms
    assert "splits: its run 1's (the profiled process)" in row.reason


def test_splits_from_another_process_are_marked_with_that_process_step():
    """The reference row's step is the process the sweep used (run 2), its splits the profiled process's (run 1):
    the splits cell says which step they add up to, and the reason which process each figure is of."""
    result = load_folder(SAMPLE).result
    first = next(t for t in result.trials if t.kind == "baseline")
    first.excluded = "3 of 3 timed windows contended (other processes used the cores): not used"
    df = ablation_table(result)
    row = df.iloc[0]
    splits = first.result.profile.splits
    assert row.splits_step_ms == splits.step_ms and row.step_ms != splits.step_ms
    assert f"which add up to that process's mean step {splits.step_ms:.2f} ms, not to the step shown (run 2's)" \
        in row.reason
    cell = next(ln for ln in to_markdown(df, "val_loss").splitlines() if ln.startswith("| baseline |")).split(" | ")[5]
    assert cell.endswith(f"{splits.other_ms:.2f} (of {splits.step_ms:.2f})")
    # a process's own splits are not marked (the singles table: each process's own)
    own = next(ln for ln in to_markdown(singles_table(result), "val_loss").splitlines() if ln.startswith("| baseline"))
    assert "(of " not in own.split(" | ")[5]
