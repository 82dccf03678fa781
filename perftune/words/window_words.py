"""The accuracy gate's set-up and the final stack's check at length, in words.

The engine records both as data (``AccuracyCalibration``, its ``reach``, and ``SweepResult.stack_check``); these are
the words of the sweep's progress lines, the console summary and the HTML report's section ``stack-check``: how the
window was sized and what it reached (the fall, the flattening, the seeds' spread), what a window of this length
cannot see, and whether the final stack held at the longer window (and what to do when it did not).
"""

from __future__ import annotations

from typing import Optional

from perftune.io.accuracy_window import CURVE, FigureCheck, StackCheck, WindowReach
from perftune.io.records import TrialResult
from perftune.io.sweep_records import AccuracyCalibration, SweepResult
from perftune.words.gate_words import figure_label
from perftune.words.rules import sizing_text


def changes_text(changes: dict) -> str:
    """``+amp_level=O3 +mode=graph``: a stack by its changes (``the baseline`` without any)."""
    return " ".join(f"+{k}={v}" for k, v in changes.items()) or "the baseline"


def calibration_line(cal: AccuracyCalibration) -> str:
    """The progress line once the gate is set up: the window and the seeds it is judged against."""
    return (f"  accuracy window: {sizing_text(cal.sizing)}; judged against {len(cal.runs) + 1} seed(s) of the "
            "baseline" + (" (uncalibrated: the fixed tolerance judges)" if not cal.runs else ""))


def window_run_text(result: TrialResult) -> str:
    """One accuracy-only run's progress line: its training and validation loss, or why it failed."""
    acc = result.accuracy
    if result.status != "ok" or acc is None:
        return f"{result.status}: {result.reason}"
    val = f", val loss {acc.val_loss:.4f}" if acc.val_loss is not None else ""
    train = f"train loss {acc.train_loss:.4f}" if acc.train_loss is not None else "no training loss"
    return f"{train}{val}"


def reach_text(reach: WindowReach) -> str:
    """The fall, the flattening and what came after, as measured on the baseline's longest probe."""
    parts = []
    if reach.fall is not None:
        parts.append(f"the baseline's training loss fell {reach.fall:.0%} from its first steps"
                     if reach.fall >= 0 else f"the baseline's training loss rose {-reach.fall:.0%}")
    if reach.clear_fall:
        parts.append("the window reaches past the budget, to where the loss had fallen 3x the tolerance (the shortest "
                     "window the gate can judge)")
    if reach.late_share is not None:
        how = "flat" if reach.flat else "still falling"
        parts.append(f"its last quarter made {max(reach.late_share, 0.0):.0%} of that fall (log scale; {how}: the "
                     f"knee is at most {reach.flat_share:.0%})")
    if reach.after_fall is not None:
        parts.append(f"it fell a further {reach.after_fall:.0%} by {reach.curve_samples} samples")
    if len(reach.seed_spread) >= 2:
        (s0, a), (s1, b) = reach.seed_spread[0], reach.seed_spread[-1]
        trend = "still shrinking" if b < 0.8 * a else "no longer shrinking"
        parts.append(f"the seeds' training loss spread {a:.1%} of its value at {s0} samples, {b:.1%} at {s1} "
                     f"({trend})")
    return "; ".join(parts)


def window_lines(result: SweepResult) -> list[str]:
    """The summary's line on how the gate was set up (none for a plan that fixed it, or a sweep measured before the
    gate was calibrated)."""
    cal = result.accuracy_calibration
    if cal is None or not (cal.sized or cal.runs or cal.failed):
        return []
    seeds = (f"calibrated on {len(cal.runs) + 1} seeds of the baseline (seed runs {cal.seeds_s:.0f} s)" if cal.runs
             else "uncalibrated (one seed: the fixed tolerance judges)")
    probes = f", probes {cal.sizing_s:.0f} s" if cal.sized else ""
    reach = f" ({reach_text(cal.reach)})" if cal.reach is not None and reach_text(cal.reach) else ""
    failed = f"; failed seed runs: {'; '.join(cal.failed)}" if cal.failed else ""
    return [f"window {sizing_text(cal.sizing)}{reach}{probes}; {seeds}{failed}"]


def limits_line(result: SweepResult) -> Optional[str]:
    """What a window of this length cannot see, and what sees further."""
    cal, check = result.accuracy_calibration, result.stack_check
    if cal is None:
        return None
    further = (f"the stack check trained the final stack to {check.samples} samples, nothing else past the window"
               if check is not None and check.samples else "nothing in this sweep trained past it")
    return (f"a harm that shows only after {cal.samples} samples (a precision floor, a learning rate that diverges "
            f"later, a batch too large to keep improving) passes every candidate's gate; {further}; the final "
            "quality of a full training run is beyond any window here")


def figure_check_text(f: FigureCheck) -> str:
    """One figure of the stack check against the baseline's seeds at the longer window."""
    if f.name == "nonfinite":
        return "NaN/Inf in the loss or gradients (the baseline had none)"
    if f.spreads is None:
        return f"{figure_label(f.name)} {f.value:.4g} vs baseline {f.mean:.4g} (limit {f.limit:.4g}, uncalibrated)"
    side = "worse" if f.spreads > 0 else "better"
    return (f"{figure_label(f.name)} {f.value:.4g} vs the baseline's seeds {f.mean:.4g} +- {f.sd:.2g} (sd of {f.n}): "
            f"{abs(f.spreads):.1f} seed spreads {side}, seed noise explains up to {f.limit:.4g}")


def _advice(check: StackCheck) -> str:
    names = ", ".join(changes_text(s) for s in check.suspects)
    by = {"only_change": "the only stacked change",
          "leave_one_out": f"removing it passed at {check.samples} samples" if any(c.ok for c in check.leave_one_out)
          else "no single removal passed (leave-one-out)",
          "not_run": "leave-one-out did not fit accuracy.verify_budget_s: try each change alone"}.get(
        check.suspects_by, "")
    return (f"suspect {names} ({by}); do not adopt the stack as it is: drop the suspect, or judge every candidate at "
            f"this length (accuracy.samples: {check.samples}) and sweep again")


def stack_check_lines(result: SweepResult) -> list[str]:
    """The summary's lines on the final stack's check at length (none for a sweep measured before there was one)."""
    check = result.stack_check
    if check is None:
        return []
    what = changes_text(check.best)
    if check.status == "skipped":
        why = {"no_change": "no change was kept (or accuracy.verify_multiple is 0), nothing to check",
               "uncalibrated": "accuracy.seeds is 1: no seed band to judge the stack against at length",
               "budget": f"accuracy.verify_budget_s ({check.budget_s:g} s) allows no window longer than the sweep's "
                         f"({check.window} samples): raise it to check the stack at length",
               "out_of_time": "the sweep's decision.budget_s ran out before it",
               "no_accuracy": "no accuracy was measured"}.get(check.skipped_why, check.skipped_why)
        return [f"stack check: not run: {why}"]
    if check.status == "failed":
        return [f"stack check of {what} at {check.samples} samples failed: {'; '.join(check.failed) or 'no run'}"]
    length = (f"{check.samples} samples ({check.samples / check.window:.1f}x the window"
              + (f", cut by accuracy.verify_budget_s {check.budget_s:g} s" if check.budget_bound else "") + ")")
    cost = f"; {len(check.trial_ids)} runs, {check.cost_s:.0f} s"
    if check.status == "verified":
        main = next((f for f in check.figures if not f.name.startswith(CURVE)), None)
        detail = f" ({figure_check_text(main)})" if main is not None else ""
        return [f"stack check: {what} verified at {length}: every figure within the baseline's seed noise"
                f"{detail}{cost}"]
    bad = [f for f in check.figures if f.outcome == "worse"]
    worst = max(bad, key=lambda f: f.spreads if f.spreads is not None else float("inf"))
    more = f"; {len(bad) - 1} more figure(s) worse" if len(bad) > 1 else ""
    return [f"stack check: {what} REFUSED at {length}: {figure_check_text(worst)}{more}{cost}", f"  {_advice(check)}"]
