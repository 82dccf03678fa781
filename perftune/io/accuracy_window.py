"""Records of the accuracy window's reach and of the final stack's check at length, in ``results.json``: a
window that judges only the curve's steep start misses a harm that shows late, so what it reached is kept.

Decisions as data: the engine (``perftune.engine.accuracy.sizing``, ``perftune.engine.accuracy.stack_check``) fills
them, ``perftune.words.window_words`` says them in words.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from perftune.io.records import Accuracy, Record

#: the prefix of a curve checkpoint's name: ``train_loss@640`` is the mean training loss over the steps whose samples
#: seen fall in the checkpoint's share of the window ending at 640 samples
CURVE = "train_loss@"


class WindowReach(Record):
    """What the accuracy window reached on the baseline's curve: how far the loss fell, whether it had flattened."""

    samples: int  # the window's end (samples seen)
    curve_samples: int  # the longest curve of the baseline it was chosen on (the longest probe)
    #: the training loss's relative fall from its first steps to the window's end: 1 - end / start (0.62: fell 62%)
    fall: Optional[float] = None
    #: share of that fall (on a log scale) made in the window's last quarter: small once the curve has flattened
    late_share: Optional[float] = None
    flat: bool = False  # the knee was reached (late_share at most ``flat_share``) within the budget
    flat_share: float = 0.0  # the rule's share
    budget_bound: bool = False  # the budget ended the window before the curve flattened
    #: the window was extended past the budget to where the loss had fallen 3x the tolerance (the gate can judge)
    clear_fall: bool = False
    #: the loss's further relative fall from the window's end to the longest probe's end (None: no longer probe)
    after_fall: Optional[float] = None
    seconds_per_sample: Optional[float] = None  # the baseline's training time per sample (the first probe)
    #: the seeds' relative spread (sd / mean) of the training loss at the window's checkpoints: (samples, spread)
    seed_spread: list[tuple[int, float]] = Field(default_factory=list)


class FigureCheck(Record):
    """One figure of the final stack against the baseline's seeds at the longer window (as a
    ``perftune.engine.accuracy.seed_band.Judgement`` judges it)."""

    name: str
    value: float
    mean: float
    sd: float
    n: int
    limit: float
    outcome: Literal["pass", "worse", "unseparated", "uncalibrated"]
    spreads: Optional[float] = None  # seed spreads worse (negative: better); None when uncalibrated


class LeaveOneOutCheck(Record):
    """The final stack without one of its changes, judged at the longer window: does removing it cure the stack?"""

    removed: dict = Field(default_factory=dict)
    ok: Optional[bool] = None  # None: it measured nothing
    worst: Optional[FigureCheck] = None


StackCheckStatus = Literal["verified", "refused", "skipped", "failed"]


class StackCheck(Record):
    """The final stack and the baseline trained for a longer window after stacking
    (``perftune.engine.accuracy.stack_check``).

    ``verified``: every figure within the baseline's seed noise at ``samples``; ``refused``: at least one worse
    (``suspects``: the stacked changes to suspect); ``skipped``: nothing to check (``skipped_why``: no change kept,
    one seed (no band), a budget that allows no longer window, the sweep's time budget spent); ``failed``: a run
    measured nothing."""

    status: StackCheckStatus
    skipped_why: Literal["", "no_change", "uncalibrated", "budget", "out_of_time", "no_accuracy"] = ""
    best: dict = Field(default_factory=dict)  # the final stack's changes
    window: int = 0  # the sweep's accuracy window (samples)
    samples: int = 0  # the check's window
    multiple: float = 0.0  # the plan's accuracy.verify_multiple
    budget_s: float = 0.0  # the plan's accuracy.verify_budget_s
    budget_bound: bool = False  # the budget shortened the window below multiple x window
    seeds: list[int] = Field(default_factory=list)  # the baseline's seeds at the longer window (the plan's first)
    baseline_runs: list[Accuracy] = Field(default_factory=list)
    stack_run: Optional[Accuracy] = None  # the final stack at the plan's seed
    figures: list[FigureCheck] = Field(default_factory=list)
    suspects: list[dict] = Field(default_factory=list)  # stacked changes to suspect when refused
    suspects_by: Literal["", "only_change", "leave_one_out", "not_run"] = ""
    leave_one_out: list[LeaveOneOutCheck] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)  # runs that measured nothing, and why
    cost_s: float = 0.0  # wall time of the check's runs (as measured, also when a resume reused them)
    trial_ids: list[str] = Field(default_factory=list)
