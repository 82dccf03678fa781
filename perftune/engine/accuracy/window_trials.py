"""The accuracy gate's own trials: accuracy-only bursts of the baseline (and of the final stack), run or reused.

The window's probes (``sizing``), the baseline's seed runs (``seeds``) and the stack check (``stack_check``) each
measure one accuracy window and nothing else, through the existing burst settings (no warm-up beyond the queue's
drain, one timed step, no profiler), in their own trial folders, so a resumed sweep reuses them and makes the same
choice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Protocol

from perftune.engine.progress import SweepProgress
from perftune.engine.specs import make_spec, trial_id
from perftune.io.plan import BurstSettings, Plan
from perftune.io.records import TrialResult, TrialSpec
from perftune.words.window_words import window_run_text

#: runs one accuracy-only trial (reusing a finished one): its result, and whether it was reused
Measure = Callable[[TrialSpec], tuple[TrialResult, bool]]


def accuracy_only(plan: Plan, samples: int, seed: int) -> Plan:
    """``plan`` for a burst that measures the accuracy window only: the cheapest burst its settings allow."""
    burst = BurstSettings(warmup_steps=0, steps=1, repeats=1, profile_steps=0, timeout_s=plan.burst.timeout_s)
    return plan.model_copy(update={"seed": seed, "burst": burst,
                                   "accuracy": plan.accuracy.model_copy(update={"samples": samples})})


def window_spec(plan: Plan, samples: int, seed: int, label: str, cache_dir: Optional[str],
                changes: Optional[dict] = None) -> TrialSpec:
    """An accuracy-only trial of the baseline (with ``changes``) of ``samples`` with ``seed``; the data stays the
    plan's (``data_seed``)."""
    spec = make_spec(accuracy_only(plan, samples, seed), changes or {}, label, 0,
                     Path(cache_dir) if cache_dir else None)
    return spec.model_copy(update={"data_seed": plan.seed, "label": label,
                                   "trial_id": trial_id({"accuracy_window": spec.trial_id, "data_seed": plan.seed})})


def seconds_per_sample(result: TrialResult) -> Optional[float]:
    """The baseline's training seconds per sample in an accuracy-only trial: what prices a longer window."""
    steps = [s for s in result.steps if s.phase == "accuracy"][1:]  # the first is the compile
    samples = steps[-1].samples_seen - steps[0].samples_seen if len(steps) > 1 else 0
    return sum(s.step_ms for s in steps[1:]) / 1e3 / samples if samples > 0 else None


class SweepTrials(Protocol):
    """What these runs need of a sweep's trials (``perftune.engine.trial_store.TrialStore``)."""

    @property
    def cache_dir(self) -> Path: ...  # the sweep's compile cache
    @property
    def progress(self) -> SweepProgress: ...
    def run_or_reuse(self, spec: TrialSpec) -> tuple[TrialResult, bool]: ...


class Runs:
    """``Measure`` for a sweep: each trial run or reused by the sweep's own ``run_or_reuse``, one progress line
    each."""

    def __init__(self, trials: SweepTrials, say: Callable[[str], None]):
        self.trials, self.say = trials, say

    def __call__(self, spec: TrialSpec) -> tuple[TrialResult, bool]:
        self.trials.progress.start(spec.label)
        result, reused = self.trials.run_or_reuse(spec)
        self.say(f"  {spec.label}: {window_run_text(result)}" + (" (reused)" if reused else ""))
        return result, reused
