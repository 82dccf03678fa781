"""What the report reads from a sweep folder: ``results.json`` and, per trial, the full ``trial.json``.

``results.json`` drops per-step rows; the loss curve comes from ``Accuracy.loss_curve`` when present, else from
the accuracy-phase steps of ``trials/<id>/trial.json``.  A missing or unreadable trial file is not an error: the
report says the curve is missing instead.  Its figures are checked against the trial files, which win where the two
differ (``io/crosscheck.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from perftune.errors import UserError
from perftune.io.crosscheck import check_against_trials
from perftune.io.files import RESULTS_NAME, SPEC_NAME, TRIAL_NAME, TRIALS_DIR, read_spec, read_sweep, read_trial
from perftune.io.plan import Plan
from perftune.io.records import TrialResult, TrialSpec
from perftune.io.seals import read_seals, seal_mismatch, trial_file_doubt
from perftune.io.sweep_records import SweepResult, SweepTrial
from perftune.knobs import KNOBS, label_of


@dataclass
class SweepFolder:
    out_dir: Path
    result: SweepResult
    #: first appearance of each trial id, in sweep order (leave-one-out rows may reuse a decided trial)
    trials: list[SweepTrial] = field(default_factory=list)
    _full: dict[str, Optional[TrialResult]] = field(default_factory=dict)
    #: trial id -> its folder relative to ``out_dir`` (default ``trials/<id>``; a lone trial folder is its own)
    trial_dirs: dict[str, str] = field(default_factory=dict)
    #: trial id -> the digest its trial.json had when the sweep accepted it (``io/seals.py``)
    seals: dict[str, str] = field(default_factory=dict)
    #: trial id -> why its trial.json is not believed (unreadable, or changed since its seal)
    doubts: dict[str, str] = field(default_factory=dict)
    #: results.json's figures that disagreed with their trial files (the trial files' are used: ``io/crosscheck.py``)
    mismatches: list[str] = field(default_factory=list)

    def integrity_record(self) -> list[str]:
        """What the sweep logged of its folder (files set aside, folders that vanished) and what reading it found
        (``mismatches``): a report that rests on the folder says it."""
        return [*self.result.integrity, *self.mismatches]

    def trial_dir(self, trial_id: str) -> str:
        return self.trial_dirs.get(trial_id, f"{TRIALS_DIR}/{trial_id}")

    @property
    def by_id(self) -> dict[str, SweepTrial]:
        return {t.trial_id: t for t in self.trials}

    def full(self, trial_id: str) -> Optional[TrialResult]:
        """``trials/<id>/trial.json`` (with per-step rows), or None when it is missing, unreadable or changed since
        the sweep sealed it (``doubts`` says why)."""
        if trial_id not in self._full:
            path = self.out_dir / self.trial_dir(trial_id) / TRIAL_NAME
            try:
                self._full[trial_id] = read_trial(path)
                why = seal_mismatch(path, self.seals.get(trial_id))
            except UserError as exc:
                self._full[trial_id], why = None, str(exc)
            if why is not None:
                self._full[trial_id] = None
                self.doubts[trial_id] = why
        return self._full[trial_id]

    def loss_curve(self, trial_id: str) -> list[tuple[int, float]]:
        trial = self.by_id.get(trial_id)
        acc = trial.result.accuracy if trial else None
        if acc and acc.loss_curve:
            return [(int(s), float(v)) for s, v in acc.loss_curve]
        full = self.full(trial_id)
        if full is None:
            return []
        if full.accuracy and full.accuracy.loss_curve:
            return [(int(s), float(v)) for s, v in full.accuracy.loss_curve]
        return [(s.samples_seen, s.loss) for s in full.steps if s.phase == "accuracy" and s.loss is not None]

    def trace_href(self, trial: SweepTrial) -> Optional[str]:
        """The Chrome-trace file relative to the sweep folder (where report.html is), or None."""
        profile = trial.result.profile
        if profile is None or not profile.trace_file:
            return None
        folder = self.trial_dir(trial.trial_id)
        return f"{folder}/{profile.trace_file}" if folder else profile.trace_file


def load_folder(out_dir: Path) -> SweepFolder:
    out_dir = Path(out_dir)
    if not (out_dir / RESULTS_NAME).is_file() and (out_dir / TRIAL_NAME).is_file():
        return lone_trial(out_dir)
    result, mismatches = check_against_trials(read_sweep(out_dir), out_dir)
    seen: dict[str, SweepTrial] = {}
    for t in result.trials:
        seen.setdefault(t.trial_id, t)
    return SweepFolder(out_dir=out_dir, result=result, trials=list(seen.values()), seals=read_seals(out_dir),
                       mismatches=mismatches)


def lone_trial(out_dir: Path) -> SweepFolder:
    """A folder holding one ``trial.json`` and no sweep (a hand-added ``perftune.Callback(out=DIR)``, or one trial
    folder of a sweep, a ``perftune run`` folder): reported as a sweep of that one measurement, with no reference."""
    trial = read_trial(out_dir / TRIAL_NAME)
    if (why := trial_file_doubt(out_dir / TRIAL_NAME)) is not None:  # the report would rest on it alone
        raise UserError(why)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(trial.workload).replace("script:", "")).strip("-.")[:80] or "job"
    name = name if name[0].isalnum() else f"job-{name}"[:80]
    device = trial.device if trial.device in ("CPU", "GPU", "Ascend") else "CPU"
    spec = read_spec(out_dir / SPEC_NAME) if (out_dir / SPEC_NAME).is_file() else None
    if spec is None:  # a hand-added perftune.Callback: perftune knows the measurement, not how it was launched
        plan = Plan(name=name, workload=trial.workload, device=device, burst=trial.burst)
        command = f"measured by perftune.Callback: {trial.workload}"
    else:  # `perftune run`, or one trial folder of a sweep: the plan that reproduces this one burst
        plan = plan_of_spec(spec, name, device)
        command = f"one burst ({spec.label}), by `perftune run` or as one trial of a sweep"
    stamp = datetime.fromtimestamp((out_dir / TRIAL_NAME).stat().st_mtime, timezone.utc).isoformat(timespec="seconds")
    # labelled by its knobs away from perftune's defaults and "measured": one trial is no baseline of anything
    label = label_of({k: v for k, v in trial.knobs.items() if k in KNOBS and v != KNOBS[k].default},
                     empty="perftune's default knobs")
    verdict = "measured" if trial.status == "ok" else trial.status
    row = SweepTrial(trial_id=trial.trial_id, label=label, kind="baseline", verdict=verdict,
                     reason=trial.reason or "", result=trial.model_copy(update={"steps": []}))
    result = SweepResult(plan=plan, command=command, status="complete",
                         started_utc=stamp, finished_utc=stamp, trials=[row], environment=trial.environment,
                         best_label=label if trial.status == "ok" else None,
                         best_trial_id=trial.trial_id if trial.status == "ok" else None)
    return SweepFolder(out_dir=out_dir, result=result, trials=[row], _full={trial.trial_id: trial},
                       trial_dirs={trial.trial_id: ""})


def plan_of_spec(spec: TrialSpec, name: str, device: str) -> Plan:
    """A plan whose baseline is this spec's burst: the workload as it was given (a script with its arguments), the knobs
    it imposed (a script's only: the others stayed as the script sets them), the accuracy window and the seed."""
    knobs = {k: spec.knobs[k] for k in spec.script_knobs if k in spec.knobs} if spec.script else dict(spec.knobs)
    return Plan(name=name, workload=spec.script or spec.workload, workload_params=spec.workload_params, device=device,
                seed=spec.seed, burst=spec.burst, baseline=knobs, accuracy={"samples": spec.accuracy_samples})
