"""The compile cache per configuration (``perftune.engine.graph_cache`` and ``perftune.burst.graph_check``)
on real bursts: a configuration's first process compiles cold into its own folder, a repeat loads it and reproduces
the first loss, and a folder that serves another graph is caught by that loss, removed, and the process measured
again compiling.  Timings are not asserted (the machine's mood); MindSpore's own files and losses are."""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

import pytest
from conftest import TINY_BURST, TINY_MLP

from perftune.burst import graph_check
from perftune.engine import graph_cache
from perftune.engine.plan_load import parse_plan
from perftune.engine.specs import make_spec, paired_spec
from perftune.io.graph_key import MANIFEST
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
    """Another configuration's graph (batch 16, a different loss) in this configuration's folder under a record
    naming this configuration: the repeat's first loss does not match, the folder goes, and the process is measured again compiling (a warning says so)."""
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
    # a record that lies (this configuration's key over the other's files): only the losses can tell
    graph_check.write_manifest(folder, repeat_spec, graph_check.read_manifest(folder)["files"])
    result = graph_cache.run_checked(lambda s: run_trial(s, tmp_path / "repeat"), repeat_spec)
    assert result.status == "ok", result.reason
    assert result.compile_cache is None  # measured again without the cache
    assert any("served another graph" in n.text and n.kind == "warning" for n in result.notes)
    assert not folder.exists() or not list(folder.rglob("*.mindir"))
    assert result.first_loss == pytest.approx(first.first_loss, rel=1e-4)


def test_swapped_folders_of_configurations_that_differ_after_the_forward_pass_are_refused(tmp_path):
    """loss_scale none and static (a power of two, exact in fp32) give bit-identical losses at every step, so no loss
    tells their graphs apart: their folders swapped, each repeat finds the other's record in its folder, refuses it,
    and compiles its own (a warning says so); an unswapped repeat still loads."""
    p = plan()
    cache = tmp_path / "cache"
    firsts = {}
    for name, changes in (("none", {}), ("static", {"loss_scale": "static"})):
        spec = graph_cache.for_process(make_spec(p, changes, name, 0, cache), None)
        firsts[name] = (changes, spec, run_trial(spec, tmp_path / f"first_{name}"))
        assert firsts[name][2].status == "ok", firsts[name][2].reason
        assert firsts[name][2].second_loss is not None
    assert firsts["none"][2].first_loss == firsts["static"][2].first_loss  # why a loss cannot catch it
    assert firsts["none"][2].second_loss == firsts["static"][2].second_loss
    a, b = Path(firsts["none"][1].compile_cache), Path(firsts["static"][1].compile_cache)
    assert a.name != b.name and (a / MANIFEST).is_file()
    a.rename(tmp_path / "swap")
    b.rename(a)
    (tmp_path / "swap").rename(b)
    for name, (changes, _, first) in firsts.items():
        spec = graph_cache.for_process(make_spec(p, changes, name, 1, cache), first)
        result = graph_cache.run_checked(lambda s, n=name: run_trial(s, tmp_path / f"repeat_{n}"), spec)
        assert result.status == "ok", result.reason
        assert result.compile_cache == "filled"
        assert any("another configuration's graphs" in n.text and n.kind == "warning" for n in result.notes)
    # each folder now holds its own configuration's graphs again: a second repeat loads
    changes, _, first = firsts["static"]
    again = run_trial(graph_cache.for_process(make_spec(p, changes, "static", 2, cache), first), tmp_path / "again")
    assert again.status == "ok", again.reason
    assert again.compile_cache == "loaded" and again.second_loss == pytest.approx(first.second_loss, rel=1e-4)


def test_a_fifo_in_the_cache_folder_is_refused_without_opening_it(tmp_path):
    """A FIFO where MindSpore reads its graphs would block the process until timeout_s: it is refused by ``lstat``,
    the folder removed, the process compiles its own graphs within seconds, and the next one loads again."""
    p = plan()
    first_spec = graph_cache.for_process(make_spec(p, {}, "baseline", 0, tmp_path / "cache"), None)
    first = run_trial(first_spec, tmp_path / "first")
    assert first.status == "ok", first.reason
    folder = Path(first_spec.compile_cache)
    mindir = next(folder.rglob("*.mindir"))
    mindir.unlink()
    os.mkfifo(mindir)
    repeat_spec = graph_cache.for_process(make_spec(p, {}, "baseline", 1, tmp_path / "cache"), first)
    started = time.monotonic()
    result = run_trial(repeat_spec, tmp_path / "repeat", timeout_s=240)
    took = time.monotonic() - started
    assert result.status == "ok", result.reason
    assert took < 120, f"{took:.0f} s"
    assert result.compile_cache == "filled"
    assert any("a FIFO" in n.text and n.kind == "warning" for n in result.notes), [n.text for n in result.notes]
    assert not any(stat.S_ISFIFO(os.lstat(f).st_mode) for f in folder.rglob("*"))
    again = run_trial(graph_cache.for_process(make_spec(p, {}, "baseline", 2, tmp_path / "cache"), first),
                      tmp_path / "again")
    assert again.status == "ok" and again.compile_cache == "loaded", again.reason


def test_a_folder_is_checked_by_lstat_before_anything_is_opened(tmp_path):
    """The folder's own checks without a burst: a link, a FIFO, a missing record, a changed file."""
    p = plan()
    spec = graph_cache.with_cache(make_spec(p, {}, "baseline", 1, tmp_path))
    folder = Path(spec.compile_cache)
    assert graph_check.refusal(folder, spec) == "empty"
    (folder / "rank_0").mkdir(parents=True)
    (folder / "rank_0" / "compile_cache_0.mindir").write_bytes(b"graph")
    assert "no readable record" in graph_check.refusal(folder, spec)
    graph_check.write_manifest(folder, spec, {"rank_0/compile_cache_0.mindir":
                                              graph_check.file_digest(folder / "rank_0" / "compile_cache_0.mindir")})
    assert graph_check.refusal(folder, spec) is None
    (folder / "rank_0" / "compile_cache_0.mindir").write_bytes(b"another graph")
    assert "not the one its first process wrote" in graph_check.refusal(folder, spec)
    (folder / "rank_0" / "link").symlink_to("/dev/zero")
    assert "a symbolic link" in graph_check.refusal(folder, spec)
    os.mkfifo(folder / "pipe")
    (folder / "rank_0" / "link").unlink()
    assert "a FIFO" in graph_check.refusal(folder, spec)
    other = graph_cache.with_cache(make_spec(p, {"loss_scale": "static"}, "static", 1, tmp_path))
    assert graph_cache.cache_key(other) != graph_cache.cache_key(spec)
    # the cache folder changes no trial id (a resumed older sweep reuses its trials)
    assert other.trial_id == make_spec(p, {"loss_scale": "static"}, "static", 1, tmp_path).trial_id
