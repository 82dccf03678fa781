"""Reading one side of a comparison: a sweep's results.json, a trial.json, a folder holding one, or a folder of such
folders (several runs of the same plan, pooled)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from perftune.errors import UserError
from perftune.io.crosscheck import check_against_trials
from perftune.io.files import (
    RESULTS_NAME,
    SPEC_NAME,
    TRIAL_NAME,
    is_sweep,
    is_trial,
    read_json,
    read_sweep,
    read_trial,
)
from perftune.io.records import TrialResult
from perftune.io.seals import folder_doubts, trial_file_doubt


@dataclass
class Entry:
    """One trial (one process) as read from a file."""

    result: TrialResult
    source: str
    label: Optional[str] = None  # the sweep's label ("baseline", "+mode=graph"); None for a lone trial.json
    kind: Optional[str] = None  # the sweep's trial kind
    workload_params: Optional[dict] = None  # None: unknown (a trial.json without its spec.json)
    seed: Optional[int] = None
    #: a sweep's repeat process whose timed windows perftune chose (``burst.repeats`` is then not the plan's)
    chosen_windows: bool = False

    @property
    def ok(self) -> bool:
        return self.result.status == "ok" and bool(self.result.windows)


@dataclass
class Side:
    name: str  # "OLD" / "NEW"
    path: str
    files: list[str] = field(default_factory=list)
    file_kinds: list[str] = field(default_factory=list)  # "sweep" / "trial", per file
    entries: list[Entry] = field(default_factory=list)
    sweep_status: list[str] = field(default_factory=list)
    #: trial files beside a sweep's results.json that cannot be believed (the comparison uses results.json), and
    #: results.json figures its trial files contradict (the comparison uses the trial files')
    doubts: list[str] = field(default_factory=list)


def _spec_fields(trial_file: Path) -> tuple[Optional[dict], Optional[int]]:
    """Workload params and seed of a lone trial, from the ``spec.json`` the launcher writes next to it."""
    try:
        spec = read_json(trial_file.parent / SPEC_NAME, "a perftune spec.json")
    except UserError:
        return None, None
    if not isinstance(spec, dict) or not isinstance(spec.get("workload_params"), dict):
        return None, None
    return spec["workload_params"], spec.get("seed")


def _load_file(side: Side, path: Path) -> None:
    data = read_json(path)
    if is_sweep(data):
        sweep, mismatches = check_against_trials(read_sweep(path), path.parent)  # the trial files win
        params = sweep.plan.workload_params
        seed = sweep.plan.seed
        seen: set[str] = set()
        for t in sweep.trials:
            if t.trial_id in seen:  # leave-one-out rows reuse the single's (or the stack's) process
                continue
            seen.add(t.trial_id)
            side.entries.append(Entry(t.result, str(path), t.label, t.kind, params, seed,
                                      chosen_windows=t.window_count is not None))
        side.file_kinds.append("sweep")
        side.sweep_status.append(sweep.status)
        side.doubts += mismatches + [f"{d} (not used: the comparison reads {path.name})"
                                     for d in folder_doubts(path.parent)]
    elif is_trial(data):
        result = read_trial(path)
        if (why := trial_file_doubt(path)) is not None:  # the comparison would rest on it
            raise UserError(why)
        params, seed = _spec_fields(path)
        side.entries.append(Entry(result, str(path), None, None, params, seed))
        side.file_kinds.append("trial")
    else:
        raise UserError(f"{path}: {_what_else(data)}")
    side.files.append(str(path))


def _what_else(data) -> str:
    """Why a JSON file is neither of perftune's kinds, precisely enough to see which file it is."""
    expected = "neither a perftune results.json (\"kind\": \"perftune-sweep\") nor a perftune trial.json " \
               "(\"trial_id\")"
    if not isinstance(data, dict):
        return f"{expected}: it holds a JSON {type(data).__name__}, not an object"
    fields = ", ".join(sorted(map(str, data))[:8]) + (" ..." if len(data) > 8 else "")
    kind = f" \"kind\": {data['kind']!r}," if "kind" in data else ""
    return f"{expected}:{kind} its fields are {fields or '(none)'} (another tool's file or another schema)"


def load_side(path: str | Path, name: str) -> Side:
    """Read one side: a file, a folder holding results.json / trial.json, or a folder of such folders (pooled)."""
    p = Path(path)
    side = Side(name=name, path=str(p))
    if not p.exists():
        raise UserError(f"{name} {p}: no such file or folder")
    if p.is_dir():
        files = [p / n for n in (RESULTS_NAME, TRIAL_NAME) if (p / n).is_file()][:1]
        if not files:
            try:
                subs = sorted(d for d in p.iterdir() if d.is_dir())
            except OSError as exc:
                raise UserError(f"{name} {p}: cannot be read ({exc.strerror or exc})") from None
            files = ([d / RESULTS_NAME for d in subs if (d / RESULTS_NAME).is_file()]
                     or [d / TRIAL_NAME for d in subs if (d / TRIAL_NAME).is_file()])
        if not files:
            raise UserError(f"{name} {p}: no results.json or trial.json in this folder or the folders below it")
    else:
        files = [p]
    for f in files:
        _load_file(side, f)
    if not side.entries:
        raise UserError(f"{name} {p}: holds no trials (a sweep that has not finished its first trial?)")
    return side
