"""The whole spec of one process the sweep runs, built in one place: the configuration's trial (``specs``), a
repeat's timed windows (``window_count``), a paired process's two arms (``specs.paired_spec``) and the compile
cache it compiles into or loads (``graph_cache``)."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from perftune.engine import graph_cache, window_count
from perftune.engine.paired import counterbalanced
from perftune.engine.specs import paired_label, paired_spec
from perftune.engine.stats import Noise
from perftune.io.plan import Plan
from perftune.io.records import TrialResult, TrialSpec
from perftune.io.sweep_records import WindowCount

#: a configuration's trial: ``(changes, replicate, windows)`` -> ``specs.make_spec`` of the sweep's plan
ConfigSpec = Callable[[dict[str, Any], int, Optional[int]], TrialSpec]


def process_spec(plan: Plan, config_spec: ConfigSpec, changes: dict[str, Any], replicate: int = 0, *,
                 first: Optional[TrialResult] = None, done: Sequence[TrialResult] = (),
                 noise: Optional[Noise] = None, reference: Optional[dict[str, Any]] = None
                 ) -> tuple[TrialSpec, Optional[WindowCount]]:
    """Process ``replicate`` of the configuration ``changes``, and the timed windows chosen for it (None: the
    plan's ``burst.repeats``) from its processes so far (``done``) and the sweep's ``noise`` (None: the prior);
    with ``reference``, paired process ``replicate`` of ``changes`` against ``reference`` instead (arm 0 the
    candidate in every other one: ``counterbalanced``).  ``first``: the finished first process of the configuration
    whose compile cache the process loads (arm 0's), None while there is none."""
    if reference is not None:
        ref, cand = config_spec(reference, 0, None), config_spec(changes, 0, None)
        swapped = counterbalanced(replicate)
        d = plan.decision
        spec = paired_spec(cand if swapped else ref, ref if swapped else cand, replicate, d.paired_blocks,
                           d.paired_window_s)
        spec = spec.model_copy(update={"label": paired_label(ref.label, cand.label, replicate)})
        return graph_cache.for_process(spec, first), None
    choice = window_count.for_repeat(plan, replicate, done, noise or Noise.pooled(()))
    spec = config_spec(changes, replicate, choice.windows if choice else None)
    return graph_cache.for_process(spec, first), choice
