"""The parent side of a trial: start the burst process(es), watch them, clean up, always return a ``TrialResult``.

``run_trial`` is the one entry: ``workers >= 2`` runs the ranks under msrun (``msrun.py``), anything else one
process (``local.py``).  The burst is started by module name (``python -m perftune.burst``); nothing here imports
it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from perftune.io.files import SPEC_NAME, TRIAL_NAME, TRIAL_OUTPUTS
from perftune.io.outdir import clear_trial_outputs
from perftune.io.records import TrialResult, TrialSpec
from perftune.io.store import write_json_atomic

#: what an unfinished attempt leaves in a trial folder: a redone trial must not find (and mix in) any of it; the
#: profiler refuses a folder holding a second run ("two profiler folders for rank 0")
PARTIAL = TRIAL_OUTPUTS


def clear_partial(trial_dir: Path) -> None:
    """Remove the outputs of an earlier attempt at this trial (never ``spec.json``, never other files)."""
    clear_trial_outputs(trial_dir)


def run_trial(spec: TrialSpec, trial_dir: Path, timeout_s: Optional[float] = None) -> TrialResult:
    """Run one trial in ``trial_dir`` (``spec.json`` in, ``trial.json`` out) and return its result."""
    from perftune.runner.local import run_local
    from perftune.runner.msrun import run_distributed

    trial_dir = Path(trial_dir)
    trial_dir.mkdir(parents=True, exist_ok=True)
    if (trial_dir / SPEC_NAME).exists():  # perftune's own folder from an earlier attempt (never a stranger's)
        clear_partial(trial_dir)
    else:
        (trial_dir / TRIAL_NAME).unlink(missing_ok=True)
    write_json_atomic(trial_dir / SPEC_NAME, spec.model_dump(mode="json"))
    timeout = float(timeout_s if timeout_s is not None else spec.burst.timeout_s)
    if int(spec.knobs["workers"]) >= 2:  # one rank per worker under msrun; writes trial.json itself
        return run_distributed(spec, trial_dir, timeout)
    return run_local(spec, trial_dir, timeout)
