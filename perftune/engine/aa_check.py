"""The sweep's A/A checks: the baseline against itself, from processes the race measured anyway (and two paired
processes where the sweep compares in paired processes), so a reader sees how far the machine drifted."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Hashable, Optional, Protocol

from perftune.engine import verdicts
from perftune.engine.budget import spend_or_none
from perftune.engine.paired import decide_paired
from perftune.engine.stats import Noise, Policy, ProcessRun, compare
from perftune.io.sweep_records import ComparisonRecord

#: the reference of the sweep's A/A check: the baseline's earlier half of processes
AA_REFERENCE = "baseline (earlier runs)"


class AAProcesses(Protocol):
    """What the A/A checks use of the sweep's processes (``perftune.engine.processes.Processes``)."""

    runs: list[ProcessRun]
    configs: dict[Hashable, Any]

    def pairable(self, reference: Hashable, candidate: Hashable) -> Any: ...
    def measure_pair(self, reference: Hashable, candidate: Hashable) -> Optional[ProcessRun]: ...


def aa_checks(procs: AAProcesses, base: Hashable, policy: Policy, noise: Callable[[], Noise],
              paired: bool) -> tuple[Optional[ComparisonRecord], Optional[ComparisonRecord]]:
    """The baseline's later usable processes against its earlier ones (the later half in measured order against the
    earlier half), and, where ``paired`` (the singles compared in paired processes) and some change pairs with the
    baseline, two paired processes of the baseline against itself (both arm orders): the paired design's own noise,
    not measured where no verdict used it (the quickstart's singles are all decided by their first processes).  The
    first against the last alone, one process each, gave the quickstart +-19-21%: the between-process noise of two
    processes rather than the machine's drift."""
    aa = aa_paired = None
    base_runs = [r for r in procs.runs if r.config == base]
    base_runs = [r for r in base_runs if r.node == base_runs[0].node] if base_runs else []  # one machine's drift
    if len(base_runs) > 1:
        # the processes as measured (their contention included); independent groups, looked at once
        runs, half = [replace(r, remeasured=0) for r in base_runs], len(base_runs) // 2
        aa = verdicts.record(compare(runs[:half], runs[half:], noise(), policy), AA_REFERENCE, final=False)
    if paired and any(k != base and procs.pairable(base, k) for k in procs.configs):
        runs = [r for r in spend_or_none(lambda: [procs.measure_pair(base, base) for _ in range(2)]) or []
                if r is not None]
        d = decide_paired(runs, policy, looks=1) if runs else None
        aa_paired = verdicts.record(d, "baseline (other pipeline)", final=False) if d else None
    return aa, aa_paired
