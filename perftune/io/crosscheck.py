"""``results.json`` checked against the trial files it summarises: where they disagree, the sealed trial file wins.

``results.json`` is a summary of the sweep's ``trials/<id>/trial.json`` files, and only those are sealed
(``seals.py``).  An edit of ``results.json`` that keeps it self-consistent (a candidate's throughput and every one
of its windows x10) passes every check of the file alone, and ``report`` and ``compare`` believed it.  So each
trial's measured figures in ``results.json`` are compared with its trial file (where that file is readable and not
changed since its seal); a difference is named in one line and, where the trial file is sealed, its figures are used
(where it is not, neither file is vouched for and ``results.json``'s stay).  A trial file that cannot be believed is
named by ``seals.folder_doubts`` instead, and ``results.json``'s figures stay.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from perftune.errors import UserError
from perftune.io.files import RESULTS_NAME, TRIAL_NAME, TRIALS_DIR, read_trial
from perftune.io.records import TrialResult
from perftune.io.seals import read_seals, seal_mismatch
from perftune.io.sweep_records import SweepResult

#: what a trial measured, as both files hold it (the engine's own notes, the wall time and the log are not figures)
FIGURES = ("status", "samples_per_s", "tokens_per_s", "windows", "step_ms_median", "step_ms_p10", "step_ms_p90",
           "data_wait_ms_median", "compile_ms", "first_loss", "contended_windows", "accuracy", "memory", "profile",
           "ranks", "world_size")


def differing_figures(summary: TrialResult, trial: TrialResult) -> list[str]:
    """The names of the figures ``summary`` (results.json's copy) holds otherwise than ``trial`` (the trial file)."""
    ours = summary.model_dump(mode="json", include=set(FIGURES))
    theirs = trial.model_dump(mode="json", include=set(FIGURES))
    return [name for name in FIGURES if ours.get(name) != theirs.get(name)]


def _shown(value) -> str:
    return f"{value:,.6g}" if isinstance(value, float) else str(value)


def believed_trial(out: Path, trial_id: str, seals: dict[str, str]) -> tuple[Optional[TrialResult], bool]:
    """(The trial file of ``trial_id`` in the sweep folder ``out`` where it can be believed, else None; whether it is
    sealed).  Unreadable or changed since its seal: None (``folder_doubts`` names it)."""
    path = Path(out) / TRIALS_DIR / trial_id / TRIAL_NAME
    try:
        if not path.is_file():
            return None, False
        trial = read_trial(path)
    except (UserError, OSError):
        return None, False
    if seal_mismatch(path, seals.get(trial_id)) is not None:
        return None, False
    return trial, trial_id in seals


def check_against_trials(sweep: SweepResult, out: Path, sealed_only: bool = False) -> tuple[SweepResult, list[str]]:
    """(``sweep`` with each trial's figures taken from its sealed trial file where the two differ; one line per trial
    that differed).  ``out``: the sweep folder holding ``results.json`` and ``trials/``; ``sealed_only``: say nothing
    of unsealed files (a resume sets those aside itself)."""
    seals = read_seals(out)
    lines: list[str] = []
    replaced: dict[str, TrialResult] = {}
    checked: set[str] = set()
    for t in sweep.trials:
        if t.trial_id in checked:  # leave-one-out rows reuse a decided trial's process
            continue
        checked.add(t.trial_id)
        trial, sealed = believed_trial(out, t.trial_id, seals)
        if trial is None or trial.trial_id != t.trial_id or (sealed_only and not sealed):
            continue
        names = differing_figures(t.result, trial)
        if not names:
            continue
        first = names[0]
        was, now = getattr(t.result, first), getattr(trial, first)
        scalar = isinstance(was, (int, float, str)) and isinstance(now, (int, float, str))
        example = f" ({first} {_shown(was)} there, {_shown(now)} in the trial file)" if scalar else ""
        what = ("the trial file's figures are used" if sealed else
                f"neither is sealed, so {RESULTS_NAME}'s figures are kept")
        lines.append(f"{RESULTS_NAME} of {out} disagrees with the {'sealed ' if sealed else ''}"
                     f"{TRIALS_DIR}/{t.trial_id}/{TRIAL_NAME} ({t.label}) on {', '.join(names)}{example}: edited or "
                     f"damaged; {what}")
        if sealed:
            replaced[t.trial_id] = t.result.model_copy(update={name: getattr(trial, name) for name in FIGURES})
    if not replaced:
        return sweep, lines
    trials = [t.model_copy(update={"result": replaced[t.trial_id]}) if t.trial_id in replaced else t
              for t in sweep.trials]
    return sweep.model_copy(update={"trials": trials}), lines
