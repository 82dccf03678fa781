"""Bottleneck notes: one line per trial saying where its step time goes and which knobs to try next.

The rules read the profiler's splits (``TrialResult.profile.splits``); without them they fall back to the burst's own
timing (time spent waiting for the next batch vs the median step), which can only tell data-bound from not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

from perftune import knobs as knob_registry
from perftune.io.records import COMMUNICATION_FLAG_SHARE, DATA_BOUND_SHARE, TrialResult
from perftune.io.sweep_records import SweepResult
from perftune.words.rules import edge_text

COMPUTE_SHARE = 0.50  # forward + backward
OPTIMIZER_SHARE = 0.25
OTHER_SHARE = 0.50  # not explained by profiled ops or data waiting: framework / host overhead
DATA_TRIES = ["num_parallel_workers", "prefetch_size", "dataset_format=mindrecord"]


@dataclass(frozen=True)
class Bottleneck:
    kind: str  # "data", "communication", "compute", "optimizer", "overhead", "balanced", "unknown"
    text: str
    source: str  # "profile", "burst timing" or "none"


#: what the sweep measured per knob: knob -> [(value, verdict)] of the single changes (see :func:`tried_changes`)
Tried = dict[str, list[tuple[Any, str]]]


def tried_changes(trials: Iterable[Any]) -> Tried:
    """knob -> [(value, verdict)] over the sweep's one-at-a-time trials (``SweepTrial``s of kind ``single``)."""
    out: Tried = {}
    for t in trials:
        if t.kind == "single" and len(t.changes) == 1:
            (knob, value), = t.changes.items()
            out.setdefault(knob, []).append((value, t.verdict))
    return out


def _advice(suggestions: list[str], tried: Optional[Tried]) -> str:
    """``try a / b / c``, where a suggestion the sweep already measured says what happened instead: a note never
    recommends a change the sweep refused.  A suggestion is ``knob`` (any value) or ``knob=value``
    (``amp_level=O1/O2``: either value); free text (``a larger batch_size``) names its knob last."""
    tries, done = [], []
    for text in suggestions:
        knob, _, values = text.partition("=")
        knob = knob.split()[-1]
        wanted = set(values.split("/")) if values else None
        measured = [(v, verdict) for v, verdict in (tried or {}).get(knob, [])
                    if wanted is None or str(v) in wanted]
        if not measured:
            tries.append(text)
        else:
            done.append(", ".join(f"{knob}={v} was tried: {verdict}" for v, verdict in measured))
    parts = (["try " + " / ".join(tries)] if tries else []) + done
    return "; ".join(parts) if parts else "every usual change for it was tried"


def _compute_advice(knobs: dict, tried: Optional[Tried]) -> str:
    tries = []
    if knobs.get("mode") == "pynative":
        tries.append("mode=graph")
    tries += ["jit_level", "amp_level=O1/O2", "a larger batch_size"]
    return _advice(tries, tried)


def timing_data_share(result: TrialResult) -> Optional[float]:
    """The step's wait for data as a share of the step, from the burst's own timing (where there is no profile)."""
    if result.step_ms_median and result.data_wait_ms_median is not None:
        return result.data_wait_ms_median / result.step_ms_median
    return None


def bottleneck_note(result: TrialResult, tried: Optional[Tried] = None, repeat: bool = False) -> Bottleneck:
    """The dominant phase of ``result``'s step and what to try for it; ``tried`` (:func:`tried_changes`) turns a
    suggestion the sweep measured into what happened to it; ``repeat``: a repeat process, which skips the profiler
    by design (its configuration's first process has the profile)."""
    if result.status != "ok":
        return Bottleneck("unknown", f"no measurement ({result.status})", "none")
    knobs = result.knobs or {}
    splits = result.profile.splits if result.profile else None
    if splits is None or not splits.step_ms:
        if (share := timing_data_share(result)) is not None:
            if share >= DATA_BOUND_SHARE:
                return Bottleneck("data", f"waiting for data is {share:.0%} of the step (burst timing, no profile): "
                                  + _advice(DATA_TRIES, tried), "burst timing")
            rest = ("a repeat process skips the profiler: the split of the rest is in its configuration's first "
                    "process" if repeat and result.burst.profile_steps > 0 else
                    "profile it (burst.profile_steps > 0) to split the rest")
            return Bottleneck("unknown", f"waiting for data is only {share:.0%} of the step (burst timing); {rest}",
                              "burst timing")
        return Bottleneck("unknown", "no profile and no step timing", "none")
    shares = splits.shares
    compute = shares["forward"] + shares["backward"]
    if shares["data"] >= DATA_BOUND_SHARE:
        return Bottleneck("data", f"data loading is {shares['data']:.0%} of the step: " + _advice(DATA_TRIES, tried),
                          "profile")
    if shares["communication"] >= COMMUNICATION_FLAG_SHARE:
        return Bottleneck("communication", f"communication is {shares['communication']:.0%} of the step: revisit the "
                                     "parallel strategy (data vs model parallel, gradient fusion, fewer all-reduces "
                                     "via grad_accum_steps)", "profile")
    if compute >= COMPUTE_SHARE:
        return Bottleneck("compute", f"forward + backward are {compute:.0%} of the step (compute-bound): "
                               f"{_compute_advice(knobs, tried)}", "profile")
    if shares["optimizer"] >= OPTIMIZER_SHARE:
        return Bottleneck("optimizer", f"the optimizer is {shares['optimizer']:.0%} of the step (fewer updates per "
                                       "sample help): " + _advice(["grad_accum_steps", "a larger batch_size"], tried),
                          "profile")
    if shares["other"] >= OTHER_SHARE:
        tries = ["mode=graph"] if knobs.get("mode") == "pynative" else []
        tries += ["dataset_sink_mode", "train_step", "kernel_threads", "dispatch_threads"]
        return Bottleneck("overhead", f"{shares['other']:.0%} of the step is outside profiled ops and data waiting "
                                f"(host / framework overhead): {_advice(tries, tried)}", "profile")
    top = max(("data", "forward", "backward", "optimizer", "communication"), key=lambda p: shares[p])
    return Bottleneck("balanced", f"no single phase dominates (largest: {top} {shares[top]:.0%})", "profile")


def _dominant_share(result: TrialResult, group: str) -> Optional[tuple[str, float]]:
    """``(what, share)`` of the step that ``group``'s knobs act on, when it still dominates there: data waiting
    (at least ``DATA_BOUND_SHARE``; the profile's split, else the burst's timing) or forward + backward (at least
    ``COMPUTE_SHARE``, profile only)."""
    splits = result.profile.splits if result.profile else None
    shares = splits.shares if splits is not None and splits.step_ms else None
    if group == "data":
        share = shares["data"] if shares else timing_data_share(result)
        return ("waiting for data", share) if share is not None and share >= DATA_BOUND_SHARE else None
    if group == "compute" and shares:
        share = shares["forward"] + shares["backward"]
        return ("forward + backward", share) if share >= COMPUTE_SHARE else None
    return None


def edge_notes(result: SweepResult) -> list[str]:
    """A numeric knob whose best value (the largest gain of its kept singles) sits at the edge of the values tried
    (the baseline's included) while the split it acts on still dominates that configuration's step: the sweep
    stopped where the next value might still help, and says so."""
    env = result.environment
    cores = env.cpu_count if env is not None and result.plan.executor == "local" else None
    base = knob_registry.effective(result.plan.baseline) if result.plan.baseline is not None else {}
    notes = []
    for knob, values in result.plan.variables.items():
        spec = knob_registry.KNOBS.get(knob)
        numbers = [v for v in [base.get(knob), *values] if isinstance(v, int) and not isinstance(v, bool)]
        if spec is None or spec.kind != "int" or len(numbers) < 2:
            continue
        kept = [t for t in result.trials if t.kind == "single" and t.verdict == "kept" and t.replicate == 0
                and list(t.changes) == [knob] and t.vs_baseline is not None and t.result.status == "ok"]
        if not kept:
            continue
        best = max(kept, key=lambda t: t.vs_baseline.ratio)
        value = best.changes[knob]
        where = "largest" if value == max(numbers) else "smallest" if value == min(numbers) else None
        dominant = _dominant_share(best.result, spec.group) if where else None
        if where and dominant:
            notes.append(edge_text(knob, value, sorted(set(numbers)), where, dominant[0], dominant[1],
                                   cores if knob == "num_parallel_workers" else None))
    return notes
