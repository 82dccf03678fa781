"""The compile cache per configuration (issue 38, ``perftune.engine.graph_cache`` and ``perftune.burst.graph_check``)
on real bursts: a configuration's first process compiles cold into its own folder, a repeat loads it and reproduces
the first loss, and a folder that serves another graph is caught by that loss, removed, and the process measured
again compiling.  Timings are not asserted (the machine's mood); MindSpore's own files and losses are."""

from __future__ import annotations

import shutil

import pytest
from conftest import TINY_BURST, TINY_MLP

from perftune.engine import graph_cache
from perftune.engine.plan_load import parse_plan
from perftune.engine.specs import make_spec, paired_spec
from perftune.runner import run_trial


def plan(**baseline):
    return parse_plan({"name": "cache", "workload": "mlp", "workload_params": TINY_MLP,
                       "burst": {**TINY_BURST, "profile_steps": 0},
                       "baseline": {"batch_size": 32, "mode": "graph", "prefetch_size": 2, **baseline},
                       "accuracy": {"samples": 64, "seeds": 1}}, "t")


def test_which_processes_use_the_cache(tmp_path):
    p = plan()
    first = make_spec(p, {}, "baseline", 0, tmp_path)
    assert graph_cache.why_not(first) is None
    assert graph_cache.with_cache(first).compile_cache.startswith(str(tmp_path / "compile"))
    assert graph_cache.cache_key(first) == graph_cache.cache_key(make_spec(p, {}, "baseline", 3, tmp_path))
    assert graph_cache.cache_key(first) != graph_cache.cache_key(make_spec(p, {"batch_size": 64}, "b", 0, tmp_path))
    for changes, why in (({"mode": "pynative"}, "PyNative"), ({"train_step": "function"}, "NaN losses"),
                         ({"workers": 2}, "per rank")):
        assert why in graph_cache.why_not(make_spec(p, changes, "x", 0, tmp_path))
    assert "no cache folder" in graph_cache.why_not(make_spec(p, {}, "baseline"))
    two_models = paired_spec(first, make_spec(p, {"amp_level": "O1"}, "amp", 0, tmp_path), 1, 2, 0.05)
    assert "two models" in graph_cache.why_not(two_models)
    # a later process without its first process's loss does not use the cache; the first compiles cold
    repeat = make_spec(p, {}, "baseline", 1, tmp_path)
    assert graph_cache.for_process(repeat, None).compile_cache is None
    assert graph_cache.for_process(first, None).first_loss is None


def test_a_repeat_loads_the_first_processes_graph_and_reproduces_its_loss(tmp_path):
    p = plan()
    first_spec = graph_cache.for_process(make_spec(p, {}, "baseline", 0, tmp_path / "cache"), None)
    first = run_trial(first_spec, tmp_path / "first")
    assert first.status == "ok", first.reason
    assert first.compile_cache == "filled" and first.first_loss is not None
    folder = tmp_path / "cache" / "compile" / graph_cache.cache_key(first_spec)
    assert list(folder.rglob("*.mindir")), "MindSpore wrote no cache files"
    repeat_spec = graph_cache.for_process(make_spec(p, {}, "baseline", 1, tmp_path / "cache"), first)
    assert repeat_spec.first_loss == first.first_loss
    repeat = run_trial(repeat_spec, tmp_path / "repeat")
    assert repeat.status == "ok", repeat.reason
    assert repeat.compile_cache == "loaded"
    assert repeat.first_loss == pytest.approx(first.first_loss, rel=1e-4)


def test_a_folder_serving_another_graph_is_removed_and_the_process_measured_again(tmp_path):
    """Another configuration's graph (batch 16, a different loss) in this configuration's folder: the repeat's first
    loss does not match, the folder goes, and the process is measured again compiling (a warning says so)."""
    p = plan()
    other_spec = graph_cache.for_process(make_spec(p, {"batch_size": 16}, "b16", 0, tmp_path / "cache"), None)
    other = run_trial(other_spec, tmp_path / "other")
    first_spec = graph_cache.for_process(make_spec(p, {}, "baseline", 0, tmp_path / "cache"), None)
    first = run_trial(first_spec, tmp_path / "first")
    assert other.status == first.status == "ok"
    folder = tmp_path / "cache" / "compile" / graph_cache.cache_key(first_spec)
    shutil.rmtree(folder)
    shutil.copytree(tmp_path / "cache" / "compile" / graph_cache.cache_key(other_spec), folder)
    repeat_spec = graph_cache.for_process(make_spec(p, {}, "baseline", 1, tmp_path / "cache"), first)
    result = graph_cache.run_checked(lambda s: run_trial(s, tmp_path / "repeat"), repeat_spec)
    assert result.status == "ok", result.reason
    assert result.compile_cache is None  # measured again without the cache
    assert any("served another graph" in n.text and n.kind == "warning" for n in result.notes)
    assert not folder.exists() or not list(folder.rglob("*.mindir"))
    assert result.first_loss == pytest.approx(first.first_loss, rel=1e-4)
