"""The scripted runner behind the decision tests (``test_sweep_logic``, ``test_lanes``, ``test_progress_lines``): a
stand-in for ``launch.run_trial`` that returns real, valid ``TrialResult`` records whose window throughputs,
accuracy, notes and status the test chooses per configuration (with fixed, seeded noise), and writes ``trial.json``
atomically like a burst, so resume is real.  Not a test module: shared by several."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from perftune.burst.arms import pair_schedule
from perftune.engine.sweep import Sweep
from perftune.io.derived import throughput
from perftune.io.plan import AccuracyGate, Plan
from perftune.io.records import Accuracy, Memory, Note, TrialResult, TrialSpec, WindowStats
from perftune.io.store import write_json_atomic

#: the accuracy window fixed and no seed runs: these tests script the comparisons (test_accuracy_gate: the seeds)
FIXED_WINDOW = AccuracyGate(samples=960, seeds=1)
BASE_SPS = 100.0  # baseline throughput, samples/s
WINDOWS = 3


@dataclass
class Script:
    """What one configuration (by label) measures: throughput factor vs the baseline, or per replicate."""

    factor: float | list[float] = 1.0
    status: str = "ok"
    reason: Optional[str] = None
    notes: list[Note] = field(default_factory=list)
    applied: dict[str, Any] = field(default_factory=dict)
    val_loss: float = 2.0
    data_share: float = 0.1  # data wait / step, for the order rule (baseline's first run)
    contended: tuple[int, ...] = ()  # replicates measured while other processes competed for the cores
    window_noise: float = 0.005  # a paired process's windows: +- this share of seeded uniform noise
    memory_bytes: Optional[int] = None  # its processes' peak host memory (model-side knobs pair where two fit)
    wall_s: Optional[float] = None  # its processes' wall time (repeats then choose their windows: window_count)


class ScriptedRunner:
    """``run(spec, trial_dir) -> TrialResult`` with chosen numbers; records every call it got."""

    def __init__(self, scripts: dict[str, Script], interrupt_at: Optional[int] = None, drift: float = 0.0):
        self.scripts = scripts
        self.interrupt_at = interrupt_at  # raise KeyboardInterrupt on this call (1-based), before writing
        self.drift = drift  # the machine slows down by this share per process, whatever it runs
        self.calls: list[tuple[str, int]] = []

    def __call__(self, spec: TrialSpec, trial_dir: Path) -> TrialResult:
        if self.interrupt_at is not None and len(self.calls) + 1 == self.interrupt_at:
            raise KeyboardInterrupt
        self.calls.append((spec.label, spec.replicate))
        if spec.pair is not None:
            return self.paired(spec, trial_dir)
        s = self.scripts.get(spec.label)
        assert s is not None, f"the sweep ran a configuration the test did not script: {spec.label}"
        fields = dict(trial_id=spec.trial_id, workload=spec.workload, device=spec.device, knobs=spec.knobs,
                      burst=spec.burst, notes=list(s.notes), applied=dict(s.applied))
        if s.status != "ok":
            result = TrialResult(status=s.status, reason=s.reason or f"scripted {s.status}", **fields)
        else:
            factor = s.factor[min(spec.replicate, len(s.factor) - 1)] if isinstance(s.factor, list) else s.factor
            factor *= (1 - self.drift) ** len(self.calls)
            rng = random.Random(f"{spec.label}/{spec.replicate}")  # deterministic noise per process
            sps = [BASE_SPS * factor * (1 + rng.uniform(-0.01, 0.01)) for _ in range(WINDOWS)]
            step_ms = 1000 * spec.knobs["batch_size"] / (BASE_SPS * factor)
            contended = spec.replicate in s.contended
            result = TrialResult(
                status="ok", **fields, contended_windows=WINDOWS if contended else 0,
                windows=[WindowStats(steps=10, total_ms=10 * 1000 * spec.knobs["batch_size"] / v,
                                     median_step_ms=1000 * spec.knobs["batch_size"] / v, samples_per_s=v,
                                     contended=contended)
                         for v in sps],
                samples_per_s=sorted(sps)[1], step_ms_median=step_ms, data_wait_ms_median=s.data_share * step_ms,
                accuracy=Accuracy(samples_seen=spec.accuracy_samples, val_loss=s.val_loss, train_loss=s.val_loss),
                memory=Memory(host_rss_peak_bytes=s.memory_bytes), wall_s=s.wall_s)
        write_json_atomic(trial_dir / "trial.json", result.model_dump(mode="json"))
        return result

    def paired(self, spec: TrialSpec, trial_dir: Path) -> TrialResult:
        """A paired process: windows in the meter's ABBA/BAAB order, each arm at its script's factor (its first
        process's), with seeded uniform noise per window (``Script.window_noise``)."""
        factors, noise = [], []
        for label in (spec.pair.reference_label, spec.pair.label):
            s = self.scripts.get(label)
            assert s is not None, f"the sweep paired a configuration the test did not script: {label}"
            factors.append(s.factor[0] if isinstance(s.factor, list) else s.factor)
            noise.append(s.window_noise)
        rng = random.Random(f"{spec.label}/{spec.replicate}")
        windows = []
        for arm in pair_schedule(spec.pair.blocks):
            v = BASE_SPS * factors[arm] * (1 + rng.uniform(-noise[arm], noise[arm]))
            windows.append(WindowStats(steps=10, total_ms=10 * 1000 * spec.knobs["batch_size"] / v,
                                       median_step_ms=1000 * spec.knobs["batch_size"] / v, samples_per_s=v, arm=arm))
        result = TrialResult(status="ok", trial_id=spec.trial_id, workload=spec.workload, device=spec.device,
                             knobs=spec.knobs, burst=spec.burst, windows=windows,
                             samples_per_s=throughput([w for w in windows if w.arm == 0]),  # as the burst's
                             wall_s=1.0)
        write_json_atomic(trial_dir / "trial.json", result.model_dump(mode="json"))
        return result


def make_sweep(tmp_path: Path, variables: dict[str, list], scripts: dict[str, Script], *,
               interrupt_at: Optional[int] = None, baseline: Optional[dict] = None, drift: float = 0.0,
               **decision) -> tuple[Sweep, ScriptedRunner]:
    """The one place sweeps are built (so a package move changes one function); ``decision``: plan fields."""
    plan = Plan(name="scripted", workload="tiny_mlp", baseline=baseline or {}, variables=variables,
                decision=decision, accuracy=FIXED_WINDOW)
    runner = ScriptedRunner(scripts, interrupt_at, drift)
    return Sweep(plan, tmp_path / "out", runner), runner
