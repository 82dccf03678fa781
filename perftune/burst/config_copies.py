"""The config route in the burst: the trial's own copy of each config file a knob sets (``workload.knob_config``),
written into the trial folder and passed to the script in place of the original, and whether the script read it.

The user's file is only read (``perftune.io.config_files.write_copy``).  Whether the script opened the copy comes from
Python's audit hook on ``open`` (PEP 578): every way a script reads a file (``open``, ``yaml.safe_load(open(...))``,
``json.load``, ``pathlib``) passes through it, so a copy never opened means the knob's field was never read and the
trial says ``no effect`` instead of measuring nothing as if it were something.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from perftune.io.config_files import write_copy
from perftune.io.records import Note, TrialSpec
from perftune.knobs import format_value
from perftune.routes import config_arg_index, config_fields, split_target

#: the trial folder's subfolder holding the copies
COPIES_DIR = "config"


class OpenWatch:
    """Records which of ``paths`` the process opens.  An audit hook cannot be removed: ``close`` makes it inert."""

    def __init__(self, paths: list[Path]):
        self.wanted = {str(p.resolve()) for p in paths}
        self.opened: set[str] = set()
        self.active = True
        sys.addaudithook(self.hook)

    def hook(self, event: str, args: tuple) -> None:
        if not self.active or event != "open" or not args or isinstance(args[0], int):
            return
        try:
            path = os.fsdecode(args[0])
        except TypeError:
            return
        full = os.path.abspath(path)
        if full in self.wanted:
            self.opened.add(full)

    def close(self) -> None:
        self.active = False


class ConfigCopies:
    """Writes one trial's copies and rewrites its argv; ``notes()`` after the script ran says what was not read."""

    def __init__(self, spec: TrialSpec, trial_dir: Path):
        self.spec = spec
        self.folder = Path(spec.script.script).parent
        self.fields = config_fields(spec.script, spec.knobs)
        self.copies: dict[str, Path] = {}
        for i, (file, values) in enumerate(self.fields.items()):
            name = Path(file).name
            taken = {p.name for p in self.copies.values()}
            dest = trial_dir / COPIES_DIR / (name if name not in taken else f"{i}-{name}")
            write_copy(self.folder / file, dest, values)
            self.copies[file] = dest.resolve()
        self.watch = OpenWatch(list(self.copies.values())) if self.copies else None

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` (script first) with each config file replaced by its copy's absolute path."""
        argv = list(argv)
        for file, copy in self.copies.items():
            found = config_arg_index(self.spec.script.args, file, self.folder)
            if found is not None:
                index, prefix = found
                argv[1 + index] = prefix + str(copy)
        return argv

    def applied(self, trial_dir: Path) -> dict[str, Any]:
        """What the trial passed: each copy (relative to the trial folder) and the fields set in it."""
        return {file: {"copy": str(copy.relative_to(trial_dir.resolve())), "fields": self.fields[file]}
                for file, copy in self.copies.items()}

    def notes(self) -> list[Note]:
        """A ``no_effect`` note per knob whose copy the script never opened."""
        if self.watch is None:
            return []
        self.watch.close()
        out = []
        for name, target in self.spec.script.knob_config.items():
            file, dotted = split_target(target)
            if str(self.copies[file]) not in self.watch.opened:
                out.append(Note(kind="no_effect", knob=name, text=(
                    f"{name}={format_value(self.spec.knobs[name])}: the script never opened its copy of {file}, so "
                    f"the field {dotted} was not read (is {file} the file the script loads?)")))
        return out
