"""The sweep's rules in words: the order of the singles, the multiplicity rule, the accuracy window's sizing.

The engine stores each as data (``OrderRule``, ``Multiplicity``, ``WindowSizing``); these words are what the progress
lines, the summary, the tables and the report print.  A record written before results schema 6 holds its prose as
``legacy``, printed as it was.
"""

from __future__ import annotations

from typing import Optional

from perftune.io.sweep_records import Multiplicity, OrderRule, WindowSizing


def order_rule_text(rule: Optional[OrderRule]) -> str:
    """``baseline waits for data 50% of the step (>= 30%): data-pipeline knobs first, then the rest in plan order``."""
    if rule is None:
        return ""
    if rule.first is None:
        return rule.legacy
    if rule.groups:
        return order_by_shares_text(rule)
    share = f"{rule.data_share:.0%}" if rule.data_share is not None else "unknown"
    data = rule.first == "data"
    return (f"baseline waits for data {share} of the step ({'>=' if data else '<'} {rule.threshold:.0%}): "
            f"{'data-pipeline' if data else 'compute'} knobs first, then the rest in plan order")


GROUP_WORDS = {"data": "data-pipeline", "compute": "compute", "distributed": "distributed"}
SHARE_WORDS = {"data": "waits for data", "compute": "computes", "distributed": "communicates"}


def order_by_shares_text(rule: OrderRule) -> str:
    """``baseline waits for data 50%, computes 50%, communicates 0% of the step: data-pipeline knobs first, then
    compute, then distributed; the plan's own knobs last``."""
    if not rule.shares:
        return "baseline not measured: compute knobs first, then data-pipeline, then distributed; own knobs last"
    shares = ", ".join(f"{SHARE_WORDS[g]} {rule.shares.get(g, 0):.0%}" for g in ("data", "compute", "distributed"))
    order = ", then ".join(GROUP_WORDS[g] for g in rule.groups[1:])
    return (f"baseline {shares} of the step: {GROUP_WORDS[rule.groups[0]]} knobs first, then {order}; the plan's "
            "own knobs last")


def family_text(m: Multiplicity) -> str:
    """The Benjamini-Hochberg family a single's discovery is judged in."""
    return (f"the {m.comparisons} one-at-a-time comparisons (Benjamini-Hochberg, false discovery rate "
            f"{m.false_discovery_rate:.0%})")


def multiplicity_text(m: Optional[Multiplicity]) -> str:
    if m is None:
        return ""
    if not m.looks:
        return m.legacy
    return (f"{family_text(m)}; each interval allows for up to {m.looks} looks (Pocock), so adding processes "
            "to an open comparison does not inflate false alarms")


def sizing_text(s: Optional[WindowSizing]) -> str:
    """What the accuracy window's length is and why."""
    if s is None:
        return ""
    if s.how is None:
        return s.legacy
    if s.how == "plan":
        return "set by the plan (accuracy.samples)"
    if s.how == "probe_failed":
        return f"{s.samples} samples: the probe of the baseline failed ({s.failure}); the baseline will say why"
    if s.how == "loss_fell":
        return (f"{s.samples} samples, sized from the baseline: its training loss fell {s.loss_fall:.0%} by then "
                f"(at least {s.fall_factor:g} x the {s.tolerance:.0%} tolerance)")
    if s.how == "knee":
        return (f"{s.samples} samples, sized from the baseline: where its loss curve flattened (its training loss "
                f"fell {s.loss_fall or 0:.0%} by then)")
    how = f"{s.loss_fall:.0%}" if s.loss_fall is not None else "too little to tell"
    if s.loss_fall is not None and s.loss_fall >= s.fall_factor * s.tolerance:
        return (f"{s.samples} samples, sized from the baseline: the longest window accuracy.window_budget_s "
                f"({s.budget_s:g} s) allows; its loss curve had not flattened (its training loss fell {how})")
    return (f"{s.samples} samples: the longest window probed within accuracy.window_budget_s ({s.budget_s:g} s); "
            f"the baseline's training loss fell only {how} (less than {s.fall_factor:g} x the tolerance): "
            "raise the budget or set accuracy.samples")


def budget_text(budget_s: Optional[float], left: list[str]) -> str:
    """What ``decision.budget_s`` left unmeasured (no process starts that would end past it); empty if nothing."""
    if not left:
        return ""
    shown = ", ".join(left[:6]) + (f" and {len(left) - 6} more" if len(left) > 6 else "")
    limit = f" ({budget_s:g} s)" if budget_s else ""
    return (f"decision.budget_s{limit} left unmeasured: {shown}, and what would have followed them (no process "
            "starts that would end past the budget)")


def edge_text(knob: str, value, tried: list, where: str, split: str, share: float, cores: Optional[int]) -> str:
    """A knob whose best value is the largest (or smallest) tried while its split still dominates the step."""
    values = ", ".join(str(v) for v in tried)
    head = (f"{knob}={value}, the best value, is the {where} tried ({values}) and the step there is still "
            f"{share:.0%} {split}")
    if cores is not None and where == "largest" and value >= cores:
        return (f"{head}: it is also the most this machine's {cores} cores allow (MindSpore refuses more), so the "
                "rest must come from the pipeline's other knobs or a machine with more cores")
    return f"{head}: a {'larger' if where == 'largest' else 'smaller'} value than any tried may help further"
