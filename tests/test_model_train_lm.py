"""A transformer language model's unchanged ``Model.train`` script under a real burst (``tests/lm_model_train.py``:
tiny_gpt's network with its loss inside, as mindformers' ``LlamaForCausalLM`` has it, LossMonitor and TimeMonitor),
beside the same job in a custom loop.  What must hold on both routes: the profile covers exactly the profiled steps
(no compile, no extra epoch in it), the profiled steps ran as the timed ones did (their compute within the phase
check's limit), and each split lies in its own range.  Timing figures are judged only where the timed windows ran
uncontended: on a shared 2-core machine another process can slow any window."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from perftune.burst.agreement import AGREE_LIMIT
from perftune.burst.contention import CONTENDED_SHARE
from perftune.engine.plan_load import load_plan
from perftune.engine.specs import make_spec
from perftune.io.records import TrialResult
from perftune.profile.layouts import load_profile
from perftune.runner import run_trial

SCRIPT = Path(__file__).resolve().parent / "lm_model_train.py"
BURST = {"warmup_steps": 2, "steps": 10, "repeats": 2, "profile_steps": 3, "timeout_s": 300}

pytestmark = pytest.mark.slow


def burst(folder: Path, name: str, loop: bool, **workload) -> tuple[TrialResult, Path]:
    shutil.copy(SCRIPT, folder / SCRIPT.name)
    plan = {"name": name,
            "workload": {"script": SCRIPT.name, "args": ["--epochs", "50", *(["--loop"] if loop else [])],
                         **workload},
            "device": "CPU", "burst": BURST, "accuracy": {"metric": "train_loss", "samples": 160, "seeds": 1},
            "baseline": {"mode": "graph"}, "decision": {"baseline_runs": 1}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    out = folder / "runs" / name
    return run_trial(make_spec(load_plan(path), {}, name), out), out


def contended(result: TrialResult) -> bool:
    return any(n.text.startswith("contention") for n in result.notes)


@pytest.mark.parametrize("loop", [False, True], ids=["model_train", "custom_loop"])
def test_the_profiled_steps_are_the_timed_computation(tmp_path, loop):
    """Also ``workload.generate``: the plan's function samples the network the script trains (``Model``'s, or the
    one its loop asked for gradients) at the accuracy window's end; the steps after it run as before."""
    shutil.copy(SCRIPT.parent / "lm_generate.py", tmp_path / "lm_generate.py")
    result, out = burst(tmp_path, "lm", loop, generate="lm_generate.py:generate")
    assert result.status == "ok", result.reason
    acc = result.accuracy
    assert acc.sample_text is not None and len(acc.sample_text) == 32, [n.text for n in result.notes]
    assert acc.repetition_rate is not None and 0.0 <= acc.repetition_rate <= 1.0
    assert not [n.text for n in result.notes if "workload.generate" in n.text]
    profile = result.profile
    assert profile is not None and profile.error is None and profile.splits is not None
    profiled = [r for r in result.steps if r.phase == "profiled"]
    assert len(profiled) == BURST["profile_steps"] and profile.profiled_steps == len(profiled)
    # the profile holds the profiled steps' launches and no others: every op ran a whole number of times per step
    assert load_profile(out / "profile").launch_steps == len(profiled)
    assert result.samples_per_step == 16 and result.tokens_per_sample == 32
    sp = profile.splits
    for phase, (low, high) in (sp.phase_ranges or {}).items():
        assert low - 1e-6 <= getattr(sp, f"{phase}_ms") <= high + 1e-6, phase
    if contended(result):
        pytest.skip("another process used the machine during the timed windows: the timing checks need it idle")
    agreement = result.phase_agreement
    assert agreement is not None and agreement.agree, agreement
    busy = agreement.others_share  # others' use of the cores in each phase: a contended phase is not judged
    assert {"accuracy", "warmup", "timed", "profiled"} <= set(busy)
    if max(busy["profiled"], busy["timed"]) <= CONTENDED_SHARE:
        ratio = agreement.medians_ms["profiled"] / agreement.medians_ms["timed"]
        assert 1 / AGREE_LIMIT <= ratio <= AGREE_LIMIT

