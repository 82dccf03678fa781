"""The profiled steps of a burst: ``mindspore.Profiler`` around ``burst.profile_steps`` steps after the timed
windows (so the profiler never slows the speed figures), then its analysis into the trial's splits."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from perftune.burst.failures import one_line
from perftune.burst.results import analyse_profile
from perftune.io.records import ProfileSummary, StepRecord, TrialResult


class ProfiledSteps:
    """One profiler session: opened as the profiled phase begins, analysed as it ends.  A profiler that fails
    leaves its error on the summary: the speed figures stand without a profile."""

    def __init__(self, out_dir: Path):
        self.dir = Path(out_dir)
        self.session: Optional[Any] = None

    def open(self, result: TrialResult, steps: int) -> None:
        from perftune.profile.session import ProfilerSession

        summary = ProfileSummary(profiled_steps=steps, unprofiled_step_ms=result.step_ms_mean)
        result.profile = summary
        try:
            self.session = ProfilerSession(self.dir / "profile", profile_memory=True)
            self.session.start()
        except Exception as exc:  # noqa: BLE001 - the speed figures stand without a profile
            summary.error = one_line(exc)
            self.session = None

    def close(self, result: TrialResult, records: list[StepRecord]) -> None:
        summary = result.profile
        if self.session is None or summary is None:
            return
        try:
            summary.analyse_s = self.session.stop_and_analyse()
        except Exception as exc:  # noqa: BLE001
            summary.error = one_line(exc)
            return
        analyse_profile(result, summary, records, self.dir / "profile", self.dir)
