"""``perftune export``: a sweep's per-step records out of perftune, for TensorBoard and for notebooks.

TensorBoard: one run (a sub-folder of OUT) per trial, named by the trial's label, so ``tensorboard --logdir OUT``
draws the trials side by side.  The x axis (TensorBoard's "step") is **samples seen**, perftune's own yardstick:
trials with different batch sizes line up at equal data, as the accuracy gate compares them.  Event files are
written by ``tensorboardX`` (a maintained writer), never by hand, and synchronously (its ``EventsWriter``, not the
``SummaryWriter``'s writer thread, which on a full disk dies with a traceback and leaves the export hanging on its
queue): a failed write is one line and exit 2.  ``OUT/.perftune-export.json`` lists the files each run wrote, and a
new export deletes only those: a user's file in a run folder stays.

CSV: every step of every trial (accuracy, warm-up, timed and profiled phases), one row each, with the trial's
label, verdict and knobs, for pandas.  The per-step rows live in ``trials/<id>/trial.json`` (``results.json``
drops them); a trial without that file is listed as skipped, not an error.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Optional

import pandas as pd

from perftune.errors import UserError
from perftune.io.files import read_json
from perftune.io.records import TrialResult
from perftune.io.store import write_json_atomic, write_text_atomic
from perftune.io.sweep_records import SweepTrial
from perftune.report.load import SweepFolder, load_folder

#: scalar tags written per trial (TensorBoard groups charts by the part before the slash)
TAG_LOSS = "loss/train"
TAG_LR = "optimizer/learning_rate"
TAG_GRAD_NORM = "optimizer/grad_norm"
TAG_STEP_MS = "time/step_ms"
TAG_DATA_WAIT_MS = "time/data_wait_ms"
TAG_COMPILE_MS = "time/compile_ms"
TAG_STEP_THROUGHPUT = "throughput/samples_per_s"
TAG_WINDOW_THROUGHPUT = "throughput/window_samples_per_s"
#: the phase whose steps are perftune's speed measurement (unprofiled, after warm-up and compile)
TIMED = "timed"
#: in the TensorBoard folder: run name -> the files perftune wrote there (the only ones a new export deletes)
MANIFEST = ".perftune-export.json"


@dataclass
class ExportSummary:
    """What an export wrote: run name -> trial id, and the trials left out with the reason."""

    out: Path
    runs: dict[str, str] = field(default_factory=dict)
    rows: int = 0
    skipped: list[str] = field(default_factory=list)


def run_name(trial: SweepTrial) -> str:
    """The trial's label as a folder name: ``baseline``, ``mode=graph``, ``+mode=graph_+num_parallel_workers=2``;
    a configuration's later processes (the baseline's runs, a candidate's repeats) get ``_run<N>``, as the tables
    label them ``(run N)``."""
    later = trial.kind in ("baseline", "repeat") and trial.replicate
    label = trial.label + (f" run{trial.replicate + 1}" if later else "")
    return re.sub(r"[^A-Za-z0-9._=+,-]+", "_", label).strip("_.") or trial.trial_id


def unique_run_names(trials: list[SweepTrial]) -> dict[str, str]:
    """trial id -> run name; a name two trials share gets the trial id appended, so no run mixes two trials."""
    names = {t.trial_id: run_name(t) for t in trials}
    taken = list(names.values())
    return {tid: (f"{n}_{tid}" if taken.count(n) > 1 else n) for tid, n in names.items()}


def _trials_with_steps(folder: SweepFolder, summary: ExportSummary) -> list[tuple[SweepTrial, TrialResult]]:
    out = []
    for t in folder.trials:
        full = folder.full(t.trial_id)
        if full is None:
            why = folder.doubts.get(t.trial_id, f"no readable trials/{t.trial_id}/trial.json")
            summary.skipped.append(f"{t.label} ({t.trial_id}): {why}")
        elif not full.steps:
            summary.skipped.append(f"{t.label} ({t.trial_id}): no steps recorded (status {full.status})")
        else:
            out.append((t, full))
    return out


def _load(results_dir: Path) -> SweepFolder:
    from perftune.io.files import RESULTS_NAME

    if not (Path(results_dir) / RESULTS_NAME).is_file():
        what = "no such folder" if not Path(results_dir).exists() else "no results.json in it (not a sweep folder)"
        raise UserError(f"{results_dir}: {what}")
    return load_folder(Path(results_dir))


def _start_time(result: TrialResult) -> float:
    """The trial's start (its environment's UTC time) as a Unix time, or 0 when unknown."""
    stamp = result.environment.utc_time if result.environment else None
    try:
        return datetime.fromisoformat(stamp).timestamp() if stamp else 0.0
    except ValueError:
        return 0.0


def write_trial_events(writer, trial: SweepTrial, result: TrialResult) -> None:
    """One trial's scalars.  Step = samples seen; wall time = the trial's start plus the summed step times (the
    gaps between phases, validation and profiling, are left out)."""
    clock = _start_time(result)
    per_step = result.samples_per_step or int(result.knobs.get("batch_size") or 0)
    first = result.steps[0]
    if result.compile_ms is not None:
        writer.add_scalar(TAG_COMPILE_MS, result.compile_ms, first.samples_seen, walltime=clock)
    window_end: dict[int, int] = {}
    for s in result.steps:
        clock += s.step_ms / 1e3
        x = s.samples_seen
        for tag, value in ((TAG_LOSS, s.loss), (TAG_LR, s.learning_rate), (TAG_GRAD_NORM, s.grad_norm)):
            if value is not None:
                writer.add_scalar(tag, value, x, walltime=clock)
        if s.phase == TIMED:
            writer.add_scalar(TAG_STEP_MS, s.step_ms, x, walltime=clock)
            writer.add_scalar(TAG_DATA_WAIT_MS, s.data_wait_ms, x, walltime=clock)
            if per_step and s.step_ms > 0:
                writer.add_scalar(TAG_STEP_THROUGHPUT, per_step / (s.step_ms / 1e3), x, walltime=clock)
            if s.window is not None:
                window_end[s.window] = x
    for i, w in enumerate(result.windows):
        if i in window_end:
            writer.add_scalar(TAG_WINDOW_THROUGHPUT, w.samples_per_s, window_end[i])
    knobs = ", ".join(f"{k}={v}" for k, v in sorted(result.knobs.items()))
    writer.add_text("trial", f"**{trial.label}** ({trial.trial_id}): verdict {trial.verdict}"
                             f"{': ' + trial.reason if trial.reason else ''}\n\nknobs: {knobs}", 0)


class EventWriter:
    """One run's event file, written synchronously by tensorboardX's ``EventsWriter`` (``add_scalar`` and
    ``add_text`` as ``SummaryWriter`` has them): an ``OSError`` comes back to the caller, nothing hangs."""

    def __init__(self, run_dir: Path):
        from tensorboardX.event_file_writer import EventsWriter

        run_dir.mkdir(parents=True, exist_ok=True)
        before = set(run_dir.iterdir())
        self.events = EventsWriter(str(run_dir / "events"))
        #: the file it writes (for the manifest)
        self.files = sorted(p.name for p in set(run_dir.iterdir()) - before)

    def _add(self, summary, step: int, walltime: Optional[float]) -> None:
        from tensorboardX.proto.event_pb2 import Event

        self.events.write_event(Event(summary=summary, step=int(step),
                                      wall_time=time.time() if walltime is None else walltime))

    def add_scalar(self, tag: str, value: float, step: int, walltime: Optional[float] = None) -> None:
        from tensorboardX import summary

        self._add(summary.scalar(tag, float(value)), step, walltime)

    def add_text(self, tag: str, text: str, step: int) -> None:
        from tensorboardX import summary

        self._add(summary.text(tag, text), step, None)

    def close(self) -> None:
        self.events.close()


def _read_manifest(out: Path) -> dict[str, list[str]]:
    try:
        data = read_json(out / MANIFEST, "a perftune export manifest")
    except UserError:
        return {}
    runs = data.get("runs") if isinstance(data, dict) else None
    return {k: [f for f in v if isinstance(f, str)] for k, v in runs.items() if isinstance(v, list)} \
        if isinstance(runs, dict) else {}


def _remove_own(out: Path, name: str, files: list[str]) -> None:
    """Delete the files an earlier export wrote in run ``name`` (only those), and the folder if nothing is left."""
    run_dir = out / name
    for f in files:
        path = run_dir / f
        if "/" not in f and path.is_file() and not path.is_symlink():
            path.unlink()
    if run_dir.is_dir() and not any(run_dir.iterdir()):
        run_dir.rmdir()


def export_tensorboard(results_dir: Path, out: Path) -> ExportSummary:
    """Write one TensorBoard run per trial of the sweep in ``results_dir`` under ``out``.

    A run an earlier export wrote is replaced (its files, as listed in the manifest), so exporting twice gives the
    same curves, not doubled ones; a disk that is full or read-only is one line (``UserError``)."""
    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        raise UserError("--tensorboard needs the tensorboardX package (pip install tensorboardX)") from None
    folder = _load(results_dir)
    out = Path(out)
    summary = ExportSummary(out=out)
    trials = _trials_with_steps(folder, summary)
    names = unique_run_names([t for t, _ in trials])
    manifest = _read_manifest(out)
    try:
        for trial, result in trials:
            name = names[trial.trial_id]
            _remove_own(out, name, manifest.pop(name, []))
            writer = EventWriter(out / name)
            try:
                manifest[name] = writer.files
                write_json_atomic(out / MANIFEST, {"runs": manifest})  # before the file fills: it is listed
                write_trial_events(writer, trial, result)
            finally:
                writer.close()
            summary.runs[name] = trial.trial_id
    except OSError as exc:
        raise UserError(f"{exc.filename or out}: cannot be written ({exc.strerror or exc})") from None
    return summary


def step_frame(folder: SweepFolder, summary: Optional[ExportSummary] = None) -> pd.DataFrame:
    """Every recorded step of every trial as one DataFrame (one row per step, in sweep order)."""
    summary = summary if summary is not None else ExportSummary(out=Path("."))
    rows = []
    for trial, result in _trials_with_steps(folder, summary):
        per_step = result.samples_per_step or int(result.knobs.get("batch_size") or 0)
        knobs = {f"knob.{k}": v for k, v in result.knobs.items()}
        for i, s in enumerate(result.steps):
            rows.append({
                "trial_id": trial.trial_id, "label": trial.label, "kind": trial.kind, "replicate": trial.replicate,
                "verdict": trial.verdict, "step": i, "phase": s.phase, "window": s.window,
                "samples_seen": s.samples_seen, "step_ms": s.step_ms, "data_wait_ms": s.data_wait_ms,
                "samples_per_s": per_step / (s.step_ms / 1e3) if per_step and s.step_ms > 0 else None,
                "loss": s.loss, "learning_rate": s.learning_rate, "grad_norm": s.grad_norm, **knobs,
            })
    return pd.DataFrame(rows)


def export_csv(results_dir: Path, path: Path) -> ExportSummary:
    """Write ``step_frame`` of the sweep in ``results_dir`` to ``path`` as CSV."""
    folder = _load(results_dir)
    summary = ExportSummary(out=Path(path))
    frame = step_frame(folder, summary)
    try:
        write_text_atomic(Path(path), frame.to_csv(index=False))
    except OSError as exc:
        raise UserError(f"{path}: cannot be written ({exc.strerror or exc})") from None
    summary.rows = len(frame)
    return summary
