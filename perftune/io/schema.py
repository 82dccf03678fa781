"""Schema versions of ``trial.json`` and ``results.json`` and the steps that upgrade older files (asv's way).

Each file carries an integer ``schema_version``.  A reader upgrades the raw JSON of an older file one step at a time
(``upgrade_to_2``, then ``upgrade_to_3`` ...) before validating it, so results written by an older perftune still
load; a file newer than this perftune is refused in one line.  A new version adds its step here and bumps
``TRIAL_SCHEMA_VERSION`` / ``RESULTS_SCHEMA_VERSION`` in ``records.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from perftune.errors import UserError
from perftune.io.records import RESULTS_SCHEMA_VERSION, TRIAL_SCHEMA_VERSION

_KNOB_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=")


def note_from_text(text: str) -> dict[str, Any]:
    """A version-1 note (a string) as a version-2 ``Note``: kind from its wording, knob from a leading ``name=``."""
    m = _KNOB_PREFIX.match(text)
    return {"kind": "no_effect" if "has no effect" in text else "info", "knob": m.group(1) if m else None,
            "text": text}


def _notes_to_records(trial: dict) -> None:
    notes = trial.get("notes")
    if isinstance(notes, list):
        trial["notes"] = [note_from_text(n) if isinstance(n, str) else n for n in notes]


def trial_upgrade_to_2(data: dict) -> dict:
    """Version 1 -> 2: ``notes`` are ``{"kind", "knob", "text"}`` records instead of strings."""
    _notes_to_records(data)
    data["schema_version"] = 2
    return data


def results_upgrade_to_2(data: dict) -> dict:
    """Version 1 -> 2: every trial's ``result.notes`` as in ``trial_upgrade_to_2``; ``command`` is empty for a sweep
    started from Python (version 1 recorded a bare ``"perftune "``)."""
    if isinstance(data.get("command"), str) and data["command"].strip() == "perftune":
        data["command"] = ""
    for trial in data.get("trials") or []:
        if isinstance(trial, dict) and isinstance(trial.get("result"), dict):
            trial_upgrade_to_2(trial["result"])
    data["schema_version"] = 2
    return data


def trial_upgrade_to_3(data: dict) -> dict:
    """Version 2 -> 3: the optional ``node`` (the cluster node that ran the trial) appeared; a version-2 trial ran
    locally, which is what an absent ``node`` means, so only the version changes."""
    data["schema_version"] = 3
    return data


def results_upgrade_to_3(data: dict) -> dict:
    """Version 2 -> 3: every trial's ``result`` as in ``trial_upgrade_to_3``."""
    for trial in data.get("trials") or []:
        if isinstance(trial, dict) and isinstance(trial.get("result"), dict):
            trial_upgrade_to_3(trial["result"])
    data["schema_version"] = 3
    return data


#: a throughput ratio with its interval as reasons before results schema 4 wrote it: ``x0.574 [0.441, 0.731]``
_RATIO_CI = re.compile(r"x(\d+\.\d+) \[(\d+\.\d+), (\d+\.\d+)\]")
_RATIO_FIELDS = ("ratio", "ci_low", "ci_high")


def lift_ratios(text: str, comparisons: list[dict]) -> list[dict]:
    """A version-3 reason as ``RatioPart`` records: its text, and its ratios lifted out as numbers, at the full
    precision of the comparison they were written from where one of ``comparisons`` matches the written digits."""
    parts, pos = [], 0
    for m in _RATIO_CI.finditer(text):
        if m.start() > pos:
            parts.append({"text": text[pos:m.start()]})
        digits = len(m.group(1).split(".")[1])
        numbers = dict(zip(_RATIO_FIELDS, (float(v) for v in m.groups())))
        for c in comparisons:
            if all(isinstance(c.get(k), (int, float)) and f"{c[k]:.{digits}f}" == written
                   for k, written in zip(_RATIO_FIELDS, m.groups())):
                numbers = {k: float(c[k]) for k in _RATIO_FIELDS}
                break
        parts.append(numbers)
        pos = m.end()
    if pos < len(text):
        parts.append({"text": text[pos:]})
    return parts


def results_upgrade_to_4(data: dict) -> dict:
    """Version 3 -> 4: reasons are data (``SweepTrial.why``).  A version-3 reason holding ratios keeps its words,
    its ratios lifted out once here (``lift_ratios``) so every output renders them in the one convention; the
    comparisons' ``remeasured`` stays unknown (their ``contended`` counted every contended process of either
    configuration in the sweep)."""
    for trial in data.get("trials") or []:
        if isinstance(trial, dict) and isinstance(trial.get("reason"), str) and _RATIO_CI.search(trial["reason"]):
            comparisons = [trial[k] for k in ("vs_baseline", "vs_previous") if isinstance(trial.get(k), dict)]
            trial["why"] = {"legacy": lift_ratios(trial["reason"], comparisons)}
    data["schema_version"] = 4
    return data


#: version N -> the step that turns a file of version N - 1 into version N
def trial_upgrade_to_4(data: dict) -> dict:
    """Version 3 -> 4: paired processes appeared (the spec's optional ``pair``, each window's ``arm``, default 0);
    an older trial had one arm, which is what the defaults say, so only the version changes."""
    data["schema_version"] = 4
    return data


def results_upgrade_to_5(data: dict) -> dict:
    """Version 4 -> 5: paired comparisons appeared (``paired``, ``aa_paired``, a comparison's ``design`` and its
    variance components, all optional) and the trials' results are version 4; only the versions change."""
    for trial in data.get("trials") or []:
        if isinstance(trial, dict) and isinstance(trial.get("result"), dict) and \
                trial["result"].get("schema_version") == 3:
            trial_upgrade_to_4(trial["result"])
    data["schema_version"] = 5
    return data


def results_upgrade_to_6(data: dict) -> dict:
    """Version 5 -> 6: the sweep's order rule, its multiplicity rule and the accuracy window's sizing are data
    (``OrderRule``, ``Multiplicity``, ``WindowSizing``) instead of prose; an older file's prose is kept whole as
    their ``legacy`` text (nothing parses it)."""
    for key in ("order_rule", "multiplicity"):
        text = data.get(key)
        data[key] = {"legacy": text} if isinstance(text, str) and text else None
    cal = data.get("accuracy_calibration")
    if isinstance(cal, dict):
        text = cal.get("sizing")
        cal["sizing"] = {"legacy": text} if isinstance(text, str) and text else None
    data["schema_version"] = 6
    return data


TRIAL_UPGRADES: dict[int, Callable[[dict], dict]] = {2: trial_upgrade_to_2, 3: trial_upgrade_to_3,
                                                    4: trial_upgrade_to_4}
RESULTS_UPGRADES: dict[int, Callable[[dict], dict]] = {2: results_upgrade_to_2, 3: results_upgrade_to_3,
                                                      4: results_upgrade_to_4, 5: results_upgrade_to_5,
                                                      6: results_upgrade_to_6}


class NewerFileError(UserError):
    """A file of a newer perftune: not damaged, so a resume refuses it rather than setting it aside."""


def _upgrade(data: dict, path: Path, what: str, current: int, steps: dict[int, Callable[[dict], dict]]) -> dict:
    version = data.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise UserError(f"{path}: {what} schema version {version!r} is not a version perftune ever wrote")
    if version > current:
        raise NewerFileError(f"{path}: {what} schema version {version} is newer than this perftune reads ({current}): "
                        "upgrade perftune to read it")
    for target in range(version + 1, current + 1):
        data = steps[target](data)
    return data


def upgrade_trial(data: dict, path: Path) -> dict:
    """The raw JSON of a ``trial.json`` (or a sweep's embedded trial) brought to ``TRIAL_SCHEMA_VERSION``."""
    return _upgrade(data, path, "trial", TRIAL_SCHEMA_VERSION, TRIAL_UPGRADES)


def upgrade_results(data: dict, path: Path) -> dict:
    """The raw JSON of a ``results.json`` brought to ``RESULTS_SCHEMA_VERSION``."""
    return _upgrade(data, path, "results", RESULTS_SCHEMA_VERSION, RESULTS_UPGRADES)
