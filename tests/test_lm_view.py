"""The language-model view (issue 18 items 2, 4, 5): tokens/s, perplexity, repetition and the greedy samples in every
output; the accuracy gate saying which metrics cannot judge at this burst length; a wrapped third-party-style LM.

The gate and the tables are tested on records the test builds (no timing); the outputs of a real tiny_gpt sweep
(``lm_sweep`` in conftest.py) and one real burst of ``experiments/third_party_lm.py`` check the plumbing and files; the sweep's report is opened in
headless Chromium as ``test_report.py`` opens the quick sweep's.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from test_report import chromium_path, copy_sweep, open_in_chromium

from perftune.cli import main
from perftune.engine.accuracy.gate import check, unjudged
from perftune.engine.sweep import Sweep
from perftune.io.plan import AccuracyGate, Plan
from perftune.io.records import Accuracy, BurstSettings, Splits, TrialResult, TrialSpec, WindowStats
from perftune.io.seals import TrialSeals
from perftune.io.store import write_json_atomic
from perftune.report import write_report
from perftune.report.frames import load_results
from perftune.report.summary import sweep_summary
from perftune.report.tables import markdown_report, singles_table, write_tables
from perftune.runner.ranks import mean_splits

REPO = Path(__file__).resolve().parents[1]
HOSTILE = "<script>alert(1)</script>"


def acc(**kw) -> Accuracy:
    fields = dict(samples_seen=64, train_loss=3.0, val_loss=3.1, perplexity=math.exp(3.1), repetition_rate=0.2,
                  loss_curve=[(8, 5.5), (32, 4.0), (64, 3.0)])
    fields.update(kw)
    return Accuracy(**fields)


# ---- the gate: metrics that cannot judge ----------------------------------------------------------------------------
def test_a_baseline_that_already_repeats_cannot_judge_repetition():
    lines = unjudged(acc(repetition_rate=0.95), AccuracyGate())
    assert list(lines) == ["repetition_rate"]
    text = lines["repetition_rate"]
    assert "cannot judge at this burst length" in text and "0.95" in text and "+0.10" in text
    assert "accuracy.samples" in text and "64 samples" in text  # what would make it judge: the plan field, its value
    assert unjudged(acc(repetition_rate=0.85), AccuracyGate()) == {}  # 0.85 + 0.10 < 1: a trial can still exceed it
    assert "repetition_rate" in unjudged(acc(repetition_rate=0.85), AccuracyGate(tolerances={"repetition_rate": 0.2}))


def test_a_loss_that_has_not_moved_cannot_judge():
    flat = dict(train_loss=5.40, loss_curve=[(8, 5.55), (32, 5.50), (64, 5.41)])  # -2.7%: inside a 5% tolerance
    lines = unjudged(acc(**flat), AccuracyGate(metric="val_loss", rel_tolerance=0.05))
    assert list(lines) == ["val_loss"]
    assert "5.55 to 5.4" in lines["val_loss"] and "learnt nothing" in lines["val_loss"]
    assert "accuracy.samples" in lines["val_loss"]
    # every tolerance the gate applies is checked: a tight train_loss tolerance can still judge, a loose one cannot
    lines = unjudged(acc(**flat), AccuracyGate(metric="val_loss", rel_tolerance=0.01, tolerances={"train_loss": 0.1}))
    assert list(lines) == ["train_loss"]
    # perplexity compounds the loss change: exp(0.15) - 1 = 16% > 5%, so the same curve judges perplexity
    assert unjudged(acc(**flat), AccuracyGate(metric="perplexity", rel_tolerance=0.05)) == {}
    assert unjudged(acc(), AccuracyGate()) == {}  # 5.5 -> 3.0: a trial stuck at 5.5 would be +83%
    assert unjudged(acc(loss_curve=[(64, 3.0)]), AccuracyGate()) == {}  # one point: nothing to say


def test_the_gate_passes_with_its_unjudged_metrics_and_still_fails_what_it_can_see():
    base = acc(repetition_rate=0.98, train_loss=5.45, loss_curve=[(8, 5.5), (64, 5.45)])
    passed = check(base, acc(repetition_rate=0.98, train_loss=5.45, val_loss=3.1), AccuracyGate())
    assert passed.ok and set(passed.unjudged) == {"repetition_rate", "val_loss"}
    failed = check(base, acc(nonfinite=True), AccuracyGate())
    assert not failed.ok and "NaN" in failed.reason and failed.unjudged == {}
    assert check(acc(), acc(), AccuracyGate()).unjudged == {}


# ---- a scripted sweep: the reason, the summary, the tables and the report --------------------------------------------
class LMRunner:
    """Returns the same measured language-model trial for every configuration (so verdicts are not significant)."""

    def __init__(self, baseline_acc: Accuracy, tokens_per_sample: int | None = 16):
        self.acc, self.tokens = baseline_acc, tokens_per_sample

    def __call__(self, spec: TrialSpec, trial_dir: Path) -> TrialResult:
        sps = [100.0, 101.0, 99.0]
        result = TrialResult(
            trial_id=spec.trial_id, status="ok", workload=spec.workload, device=spec.device, knobs=spec.knobs,
            burst=spec.burst, windows=[WindowStats(steps=10, total_ms=1e5 / v, median_step_ms=1e4 / v,
                                                   samples_per_s=v) for v in sps],
            samples_per_s=100.0, step_ms_median=80.0, data_wait_ms_median=1.0, tokens_per_sample=self.tokens,
            tokens_per_s=100.0 * self.tokens if self.tokens else None, flops_per_sample=2e6,
            accuracy=self.acc.model_copy(update={"samples_seen": spec.accuracy_samples}))
        write_json_atomic(trial_dir / "trial.json", result.model_dump(mode="json"))
        return result


def scripted(tmp_path: Path, baseline_acc: Accuracy, tokens: int | None = 16):
    plan = Plan(name="lm", workload="tiny_gpt", baseline={"batch_size": 8}, variables={"prefetch_size": [4]},
                # no seed runs to script; the scripted step waits for no data: race prefetch_size all the same
                decision={"baseline_runs": 2, "skip_cannot_gain": False}, accuracy={"samples": 64, "seeds": 1})
    out = tmp_path / "out"
    result = Sweep(plan, out, LMRunner(baseline_acc, tokens)).run()
    write_tables(result, out)
    return result, out


def test_a_degenerate_baseline_is_said_in_the_reason_the_summary_and_the_report(tmp_path):
    degenerate = acc(repetition_rate=0.98, train_loss=5.5, loss_curve=[(8, 5.55), (64, 5.5)], sample_text=" " * 32)
    result, out = scripted(tmp_path, degenerate)
    single = next(t for t in result.trials if t.kind == "single")
    assert single.verdict in ("not significant", "undecided", "equivalent")  # passed the gate, whatever the timing
    assert "not judged at this burst length: repetition_rate, val_loss" in single.reason
    assert "accuracy.samples" in single.reason
    summary = sweep_summary(result, out, None)
    assert "accuracy gate: repetition_rate cannot judge at this burst length" in summary
    assert "accuracy gate: val_loss cannot judge at this burst length" in summary
    assert "not judged at this burst length" in (out / "ablation.md").read_text()
    html = write_report(out).read_text(encoding="utf-8")
    assert html.count('class="warn gate-cannot-judge"') == 2 and "raise accuracy.samples" in html
    assert "gate metric(s) cannot judge at this burst length" in html
    # the greedy sample: only the baseline's (nothing was kept), and its blankness said in words
    assert "(32 whitespace characters and nothing else)" in html and "the final stack is the baseline" in html


def test_a_baseline_that_learns_says_nothing_of_the_kind(tmp_path):
    result, out = scripted(tmp_path, acc())
    assert all("not judged" not in t.reason for t in result.trials)
    assert "accuracy gate:" not in sweep_summary(result, out, None)
    assert "gate-cannot-judge" not in write_report(out).read_text(encoding="utf-8")


def test_language_model_columns_only_for_language_models(tmp_path):
    result, out = scripted(tmp_path / "lm", acc(sample_text="def f(x):"))
    md = markdown_report(result)
    assert "| samples/s | tokens/s |" in md and "| change | perplexity | repetition |" in md
    table = singles_table(result)
    assert table["tokens_per_s"].tolist() == [1600.0] * len(table)
    assert table["repetition_rate"].tolist() == [0.2] * len(table)
    assert table["model_gflop_per_s"].tolist() == pytest.approx([0.2] * len(table))  # 2e6 FLOPs x 100 samples/s
    rows = list(csv.DictReader((out / "ablation.csv").open()))
    assert {"tokens_per_s", "perplexity", "repetition_rate", "recompute_ms"} <= set(rows[0])
    # a classifier: no tokens, and exp(val_loss) is nobody's perplexity
    result, _ = scripted(tmp_path / "mlp", acc(repetition_rate=None), tokens=None)
    md = markdown_report(result)
    assert "tokens/s" not in md and "perplexity" not in md and "repetition" not in md


def test_mean_over_ranks_keeps_recompute():
    def rank(recompute):
        return Splits(step_ms=10, data_ms=1, forward_ms=2, backward_ms=5, optimizer_ms=1, communication_ms=0,
                      other_ms=1, explained_share=0.9, recompute_ms=recompute)

    assert mean_splits([rank(1.0), rank(3.0)]).recompute_ms == pytest.approx(2.0)
    assert mean_splits([rank(1.0), rank(None)]).recompute_ms is None  # unknown on one rank: unknown, not 0.5


# ---- a real tiny_gpt sweep ------------------------------------------------------------------------------------------
def lm_results(out: Path) -> dict:
    results = json.loads((out / "results.json").read_text())
    ok = [t for t in results["trials"] if t["result"]["status"] == "ok"]
    assert len(ok) == len(results["trials"]), [(t["label"], t["reason"]) for t in results["trials"]]
    return results


def test_a_tiny_gpt_sweep_prints_tokens_per_second_and_perplexity(lm_sweep):
    out, printed = lm_sweep
    results = lm_results(out)
    base = results["trials"][0]["result"]
    assert base["tokens_per_s"] == pytest.approx(base["samples_per_s"] * 16)
    # the first baseline process's line (repeat processes say "(run k)")
    progress = next(line for line in printed.splitlines() if line.startswith("  baseline: "))
    assert "samples/s" in progress and "tokens/s" in progress and "perplexity" in progress and "repetition" in progress
    verdict = next(line for line in printed.splitlines() if line.startswith("  +recompute=true: "))
    assert "tokens/s" in verdict and "perplexity" in verdict
    summary = next(line for line in printed.splitlines() if line.startswith("baseline: "))
    used = sorted((t["result"] for t in results["trials"] if t["kind"] == "baseline" and not t.get("excluded")),
                  key=lambda r: r["samples_per_s"])  # the processes the verdicts used: their median
    assert f"{used[(len(used) - 1) // 2]['tokens_per_s']:.0f} tokens/s" in summary
    assert f"perplexity {base['accuracy']['perplexity']:.2f}" in summary


def test_a_tiny_gpt_sweep_tables_carry_the_language_model_columns(lm_sweep):
    out, _ = lm_sweep
    results = lm_results(out)
    md = (out / "ablation.md").read_text()
    for header in ("tokens/s", "perplexity", "repetition", "recompute ms (of bwd)"):
        assert f"| {header} |" in md, header
    rows = {r["trial_id"]: r for r in csv.DictReader((out / "singles.csv").open())}
    for t in results["trials"]:
        if t["kind"] not in ("baseline", "single"):  # a candidate's repeat processes are in the Decisions section
            continue
        r, row = t["result"], rows[t["trial_id"]]
        if row.get("samples_per_s_from") == "paired":  # figures from the paired verdict; the process's own beside
            assert float(row["process_samples_per_s"]) == pytest.approx(r["samples_per_s"])
            assert float(row["tokens_per_s"]) / float(row["samples_per_s"]) == \
                pytest.approx(r["tokens_per_s"] / r["samples_per_s"])
        else:
            assert float(row["tokens_per_s"]) == pytest.approx(r["tokens_per_s"])
        if t["replicate"]:  # a repeat process leaves the accuracy window and the profile to the first (issue 38)
            assert r["accuracy"] is None and row["perplexity"] == row["recompute_ms"] == ""
            continue
        assert float(row["perplexity"]) == pytest.approx(r["accuracy"]["perplexity"])
        assert float(row["repetition_rate"]) == pytest.approx(r["accuracy"]["repetition_rate"])
        recompute = r["profile"]["splits"]["recompute_ms"]
        if recompute is None:
            assert row["recompute_ms"] == ""
        else:
            assert float(row["recompute_ms"]) == pytest.approx(recompute)
    frames = load_results(out)  # the notebook view carries them too
    firsts = frames.trials[frames.trials["replicate"] == 0]  # repeats have no accuracy window (issue 38)
    assert firsts["repetition_rate"].notna().all() and "recompute_ms" in frames.splits
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "tokens/s" in html and "perplexity" in html and "repetition" in html and "Greedy samples" in html


def test_sample_texts_are_escaped(lm_sweep, tmp_path):
    folder = tmp_path / "sweep"
    shutil.copytree(lm_sweep[0], folder, ignore=shutil.ignore_patterns("profile", "*.log"))
    results = json.loads((folder / "results.json").read_text())
    results["trials"][0]["result"]["accuracy"]["sample_text"] = HOSTILE
    (folder / "results.json").write_text(json.dumps(results))
    # the trial's own file says the same and is sealed again: the report believes the sealed trial file over
    # results.json (io/crosscheck.py), so the text must come from there
    trial_id = results["trials"][0]["trial_id"]
    trial_path = folder / "trials" / trial_id / "trial.json"
    trial = json.loads(trial_path.read_text())
    trial["accuracy"]["sample_text"] = HOSTILE
    trial_path.write_text(json.dumps(trial))
    TrialSeals(folder).seal(trial_path.parent, trial_id)
    html = write_report(folder).read_text(encoding="utf-8")
    assert "<script" not in html.lower() and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


# ---- the documented wrapper shape, one real burst -------------------------------------------------------------------
@pytest.mark.slow
def test_the_documented_third_party_wrapper_runs_a_burst(tmp_path, monkeypatch):
    """``experiments/third_party_lm.py`` loaded as ``package.module:function``, with recompute on the wrapper's layer
    names: one tiny burst, and its language-model figures in ``perftune run``'s summary."""
    monkeypatch.chdir(REPO)  # bursts find ``experiments.`` modules from the working directory, as users run them
    plan = tmp_path / "wrapped.yaml"
    plan.write_text(yaml.safe_dump({
        "name": "wrapped", "workload": "experiments.third_party_lm:build",
        "workload_params": {"d_model": 32, "n_layers": 1, "seq_len": 16, "train_samples": 128, "val_samples": 8,
                            "corpus_bytes": 30_000},
        "burst": {"warmup_steps": 1, "steps": 3, "repeats": 1, "profile_steps": 0, "timeout_s": 240},
        "baseline": {"batch_size": 8, "mode": "graph", "recompute": True}, "accuracy": {"samples": 16}}))
    result = CliRunner().invoke(main, ["run", str(plan), "--out", str(tmp_path / "trial")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    trial = json.loads((tmp_path / "trial" / "trial.json").read_text())
    assert trial["status"] == "ok", trial.get("reason")
    assert trial["tokens_per_s"] == pytest.approx(trial["samples_per_s"] * 16)
    assert trial["applied"]["recompute_cells"] == ["backbone.layers.0"]  # the wrapper's layer names were found
    acc_ = trial["accuracy"]
    assert acc_["perplexity"] > 1 and acc_["repetition_rate"] is not None and isinstance(acc_["sample_text"], str)
    assert "tokens/s" in result.output and "perplexity" in result.output and "sample " in result.output


# ---- words that fit the model (issue 28 item 4): one perplexity rule for every output --------------------------------
def measured_trial(accuracy: Accuracy, tokens_per_sample: int | None) -> TrialResult:
    return TrialResult(trial_id="t1", status="ok", workload="w", device="CPU", knobs={}, burst=BurstSettings(),
                       samples_per_s=100.0,
                       step_ms_median=80.0, step_ms_p10=79.0, step_ms_p90=81.0, data_wait_ms_median=1.0,
                       tokens_per_sample=tokens_per_sample, tokens_per_s=1600.0 if tokens_per_sample else None,
                       accuracy=accuracy)


def test_a_classifier_gets_no_perplexity_and_is_told_it_has_no_accuracy_metric(tmp_path):
    from perftune.report.summary import trial_summary
    from perftune.words import lm

    # the case: a classifier's validation loss of 323 made a 141-digit "perplexity"
    classifier = measured_trial(acc(val_loss=323.0, perplexity=math.exp(323.0), repetition_rate=None), None)
    text = trial_summary(classifier, tmp_path)
    assert "perplexity" not in text and "val loss 323.0000" in text
    assert "no accuracy metric: this workload reports losses only" in text
    assert lm.perplexity(classifier) is None and lm.progress_text(classifier) == "100 samples/s"
    # a script's own metric is an accuracy metric: then the line shows it instead
    scored = measured_trial(acc(val_loss=0.5, perplexity=None, val_metrics={"top1": 0.81}, val_metrics_samples=64),
                            None)
    text = trial_summary(scored, tmp_path)
    assert "no accuracy metric" not in text and "top1 0.81" in text


def test_a_language_model_perplexity_is_a_number_until_it_overflows(tmp_path):
    from perftune.report.summary import trial_summary
    from perftune.words import lm

    model = measured_trial(acc(val_loss=3.1, perplexity=math.exp(3.1)), 16)
    assert "perplexity 22.20" in trial_summary(model, tmp_path) and lm.perplexity(model) == pytest.approx(22.198, 1e-3)
    assert "no accuracy metric" not in trial_summary(model, tmp_path)
    diverged = measured_trial(acc(val_loss=323.0, perplexity=math.exp(323.0)), 16)
    for text in (trial_summary(diverged, tmp_path), lm.progress_text(diverged), lm.verdict_suffix(diverged)):
        assert "perplexity overflows (val loss 323.0)" in text, text
        assert not re.search(r"\d{20}", text), text  # no 141-digit number anywhere
    assert lm.perplexity(diverged) is None  # tables and data frames leave the cell empty
    clipped = measured_trial(acc(val_loss=6082.0, perplexity=math.exp(700.0)), 16)  # the burst clips exp at 700
    assert "perplexity overflows (val loss 6082.0)" in lm.progress_text(clipped)


# ---- the language-model view on the script route: read from the batch, no declaration needed ----------------------
#: a small language-model script as users write them: token ids (B, T) and shifted labels (B, T), a cross-entropy
#: over every position; ``--loop`` trains with its own loop, ``--classify`` is a text classifier (one label a sample)
LM_SCRIPT = '''
import argparse

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Model

VOCAB, SEQ = 64, 12


class Net(nn.Cell):
    def __init__(self, classes):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.head = nn.Dense(32, classes)
        self.classify = classes != VOCAB

    def construct(self, ids):
        h = self.embed(ids)
        return self.head(h.mean(1)) if self.classify else self.head(h)


class TokenLoss(nn.Cell):
    def __init__(self):
        super().__init__()
        self.ce = nn.CrossEntropyLoss()

    def construct(self, logits, labels):
        return self.ce(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def data(n, classify, batch):
    rng = np.random.default_rng(0)
    start = rng.integers(0, VOCAB, (n, 1))
    ids = ((start + np.arange(SEQ + 1)[None, :] * 3 + rng.integers(0, 2, (n, SEQ + 1))) % VOCAB).astype(np.int32)
    labels = (ids[:, :1] % 4).astype(np.int32) if classify else ids[:, 1:]  # (n, 1): one class a sample
    return ds.NumpySlicesDataset({"input_ids": ids[:, :-1], "labels": labels}, shuffle=False).batch(batch)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loop", action="store_true")
    parser.add_argument("--classify", action="store_true")
    args = parser.parse_args()
    net = Net(4 if args.classify else VOCAB)
    loss_fn = TokenLoss()  # over classes for the classifier: (B, 4) logits, (B, 1) labels
    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-2)
    dataset = data(512, args.classify, 8)
    if not args.loop:
        Model(net, loss_fn=loss_fn, optimizer=optimizer).train(50, dataset)
        return
    def forward(ids, labels):
        return loss_fn(net(ids), labels)

    grad = ms.value_and_grad(forward, None, optimizer.parameters)
    for _ in range(50):
        for ids, labels in dataset.create_tuple_iterator():
            loss, grads = grad(ids, labels)
            optimizer(grads)


if __name__ == "__main__":
    main()
'''
SCRIPT_BURST = {"warmup_steps": 1, "steps": 4, "repeats": 1, "profile_steps": 0, "timeout_s": 240}


def script_burst(folder: Path, name: str, args=(), **workload) -> TrialResult:
    from perftune.engine.plan_load import parse_plan
    from perftune.engine.specs import make_spec
    from perftune.runner import run_trial

    script = folder / "lm_script.py"
    script.write_text(LM_SCRIPT)
    plan = parse_plan({"name": "lm-script", "workload": {"script": str(script), "args": list(args), **workload},
                       "burst": SCRIPT_BURST, "accuracy": {"samples": 64, "seeds": 1}, "baseline": {"mode": "graph"}})
    return run_trial(make_spec(plan, {}, "baseline"), folder / name)


@pytest.mark.slow
def test_a_model_train_script_gets_tokens_per_second_and_perplexity_without_declaring_anything(tmp_path):
    """Tokens per sample from the batch's token ids (B, 12); the loss recognised as a token cross-entropy (a
    cross-entropy cell in the network Model trains, labels per token): perplexity = exp(the training loss)."""
    result = script_burst(tmp_path, "model")
    assert result.status == "ok", (result.reason, result.log_tail)
    assert result.tokens_per_sample == 12 and result.samples_per_step == 8
    assert result.tokens_per_s == pytest.approx(result.samples_per_s * 12)
    acc_ = result.accuracy
    assert acc_.train_loss is not None and acc_.perplexity == pytest.approx(math.exp(acc_.train_loss))
    assert 1 < acc_.perplexity < 64 * 2  # below a guess over 64 tokens (x2: a few noisy steps in)
    texts = [n.text for n in result.notes]
    assert any("12 tokens per sample" in t and "column 0" in t and "[8, 12]" in t for t in texts), texts
    assert any("exp(the script's training loss)" in t and "recognised" in t for t in texts), texts


@pytest.mark.slow
def test_a_custom_loop_gets_tokens_per_second_and_perplexity_only_where_declared(tmp_path):
    """A custom loop's loss function cannot be seen: tokens/s from the batch, perplexity only with
    ``workload.loss``; ``workload.tokens_per_sample`` overrides the batch's sequence dimension."""
    plain = script_burst(tmp_path, "loop", ["--loop"])
    assert plain.status == "ok", (plain.reason, plain.log_tail)
    assert plain.tokens_per_sample == 12 and plain.tokens_per_s == pytest.approx(plain.samples_per_s * 12)
    assert plain.accuracy.train_loss is not None and plain.accuracy.perplexity is None
    declared = script_burst(tmp_path, "declared", ["--loop"], loss="token_cross_entropy", tokens_per_sample=11)
    assert declared.status == "ok", (declared.reason, declared.log_tail)
    assert declared.tokens_per_sample == 11 and declared.tokens_per_s == pytest.approx(declared.samples_per_s * 11)
    assert declared.accuracy.perplexity == pytest.approx(math.exp(declared.accuracy.train_loss))
    assert any("declared by workload.loss" in n.text for n in declared.notes)


@pytest.mark.slow
def test_a_text_classifier_gets_tokens_per_second_but_no_perplexity(tmp_path):
    """Token ids in, one class label a sample: its cross-entropy is over classes, so exp(loss) is no perplexity;
    ``tokens_per_sample: 0`` says it is not a language model at all."""
    result = script_burst(tmp_path, "classify", ["--classify"])
    assert result.status == "ok", (result.reason, result.log_tail)
    assert result.tokens_per_sample == 12 and result.accuracy.perplexity is None
    off = script_burst(tmp_path, "off", ["--classify"], tokens_per_sample=0)
    assert off.status == "ok" and off.tokens_per_sample is None and off.tokens_per_s is None


def test_the_plan_takes_the_script_language_model_fields(tmp_path):
    from perftune.engine.plan_load import PlanError, parse_plan

    (tmp_path / "train.py").write_text("")
    plan = parse_plan({"name": "p", "workload": {"script": "train.py", "tokens_per_sample": 32,
                                                 "loss": "token_cross_entropy"}}, base_dir=tmp_path)
    assert plan.workload.tokens_per_sample == 32 and plan.workload.loss == "token_cross_entropy"
    for bad in ({"loss": "mse"}, {"tokens_per_sample": -1}):
        with pytest.raises(PlanError):
            parse_plan({"name": "p", "workload": {"script": "train.py", **bad}}, base_dir=tmp_path)


def test_language_model_report_in_headless_chromium(lm_sweep, tmp_path):
    """A tiny_gpt sweep's report: tokens/s, perplexity and repetition columns, and the greedy samples of the baseline
    and of the final stack side by side.  Which configuration ran faster is not this test's business: the copy names
    the measured single (with its own real sample) as the final stack, so that both samples are there to show."""
    chromium_path()
    folder = copy_sweep(lm_sweep[0], tmp_path / "sweep")
    results = json.loads((folder / "results.json").read_text())
    base, single = results["trials"][0], next(t for t in results["trials"] if t["kind"] == "single")
    assert base["result"]["status"] == single["result"]["status"] == "ok", (base["reason"], single["reason"])
    results.update(best_trial_id=single["trial_id"], best_label=single["label"], best_vs_baseline=single["vs_baseline"])
    (folder / "results.json").write_text(json.dumps(results))
    page = open_in_chromium(write_report(folder), tmp_path / "browser")
    facts = page["facts"]
    assert page["errors"] == [], page["errors"]
    for header in ("samples/s", "tokens/s", "perplexity", "repetition"):
        assert header in facts["headers"], facts["headers"]
    assert f"{base['result']['tokens_per_s']:.0f}" in facts["text"]
    assert [s["trial"] for s in facts["samples"]] == [base["trial_id"], single["trial_id"]]
    for shown, trial in zip(facts["samples"], (base, single)):
        assert shown["text"] == trial["result"]["accuracy"]["sample_text"]
    shown_text = facts["text"].lower()  # innerText applies the CSS (the card labels are upper-case)
    assert "greedy samples" in shown_text and f"final stack: {single['label']}" in shown_text
