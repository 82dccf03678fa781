"""The graphs a burst compiled, by phase (``TrialResult.compiles``): that a process compiles its step once, shown
per trial.  Counted from MindSpore's own record of the graphs it made ready (``compat.compiled_graphs``) at the
phase changes the Meter reports, not per step (reading the record walks every Cell's cache)."""

from __future__ import annotations

from perftune.compat import compiled_graphs
from perftune.io.records import TrialResult


class GraphCount:
    def __init__(self, result: TrialResult):
        self.result = result
        self.seen = compiled_graphs()
        if self.seen:  # before the first step: AMP's forward probes, a script's own graphs
            result.compiles["build"] = self.seen

    def count(self, where: str) -> None:
        """The graphs compiled since the last count go to ``result.compiles[where]``."""
        now = compiled_graphs()
        if now is None or self.seen is None:
            return
        if now > self.seen:
            self.result.compiles[where] = self.result.compiles.get(where, 0) + now - self.seen
        self.seen = now
