"""mindformers as a supported third-party path: its own ``LlamaForCausalLM`` (2 layers, hidden 64, vocabulary 1000,
sequence 32) through both routes, for real, where mindformers is importable (its own virtualenv: experiments/README.md,
"A third-party language model"; ``.ci/run mindformers`` builds one and runs this file there).  Elsewhere every test
is skipped with the reason.

* ``build()``: ``experiments/third_party_lm.py`` wraps the model (logits out, the loss as its own cell over the
  model's 1000-token vocabulary): tokens/s, perplexity, a greedy sample, recompute on the wrapper's layer names;
* ``Model.train``: ``experiments/script_workload/llama_train.py``, unchanged, declares nothing: tokens/s from the
  batch's token ids, perplexity from the model's own cross-entropy, recognised.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from perftune.cli import main

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "experiments" / "script_workload" / "llama_train.py"
BURST = {"warmup_steps": 1, "steps": 4, "repeats": 1, "profile_steps": 2, "timeout_s": 300}

try:
    import mindformers  # noqa: F401

    MISSING = None
except ImportError as exc:  # the usual case: mindformers lives in its own virtualenv
    MISSING = f"mindformers is not importable here ({exc}); .ci/run mindformers runs this file in its own virtualenv"

pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def run(tmp_path: Path, plan: dict) -> tuple[dict, str]:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    result = CliRunner().invoke(main, ["run", str(path), "--out", str(tmp_path / "trial")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    trial = json.loads((tmp_path / "trial" / "trial.json").read_text())
    assert trial["status"] == "ok", (trial.get("reason"), trial.get("log_tail"))
    return trial, result.output


def test_the_build_route_trains_mindformers_llama(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the plan's experiments.third_party_lm is found from the working directory
    trial, output = run(tmp_path, {
        "name": "mf-build", "workload": "experiments.third_party_lm:build",
        "workload_params": {"model": "mindformers", "train_samples": 256, "val_samples": 16},
        "burst": BURST, "baseline": {"batch_size": 16, "mode": "graph", "recompute": True},
        "accuracy": {"samples": 64}})
    assert trial["parameter_count"] == 259_392  # LlamaForCausalLM's, 2 layers of 64 over 1000 tokens
    assert trial["tokens_per_sample"] == 32 and trial["tokens_per_s"] == pytest.approx(trial["samples_per_s"] * 32)
    acc = trial["accuracy"]
    assert 1 < acc["perplexity"] < 1000 * 1.5 and acc["perplexity"] == pytest.approx(math.exp(acc["val_loss"]))
    assert acc["repetition_rate"] is not None and isinstance(acc["sample_text"], str)
    assert trial["applied"]["recompute_cells"] == ["backbone.layers.0", "backbone.layers.1"]
    assert "tokens/s" in output and "perplexity" in output


def test_the_script_route_trains_mindformers_llama_declaring_nothing(tmp_path):
    trial, output = run(tmp_path, {
        "name": "mf-script",
        "workload": {"script": str(SCRIPT), "args": ["--epochs", "20", "--samples", "256", "--require-mindformers"],
                     "knob_args": {"batch_size": "--batch-size"}},
        "burst": BURST, "baseline": {"batch_size": 16, "mode": "graph"},
        "accuracy": {"metric": "train_loss", "samples": 64}})
    assert trial["parameter_count"] == 259_392
    assert trial["tokens_per_sample"] == 32 and trial["tokens_per_s"] == pytest.approx(trial["samples_per_s"] * 32)
    acc = trial["accuracy"]
    assert acc["perplexity"] == pytest.approx(math.exp(acc["train_loss"])) and 1 < acc["perplexity"] < 1500
    notes = [n["text"] for n in trial["notes"]]
    assert any("recognised: a cross-entropy over token ids" in n for n in notes), notes
    assert "tokens/s" in output and "perplexity" in output
    assert trial["profile"]["splits"] is not None  # the profiled steps' splits, on the script route too
