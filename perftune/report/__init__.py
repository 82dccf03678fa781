"""The HTML report: ``write_report(DIR)`` turns a sweep folder into one self-contained ``DIR/report.html``.

Self-contained means: figures are embedded PNGs (``data:`` URIs), the CSS is inline, there is no JavaScript, and a
Content-Security-Policy forbids fetching anything, so the file opens offline and shows the same thing everywhere.
Modules: ``load`` (results.json + trial.json files), ``figures`` (matplotlib -> PNG), ``notes`` (bottleneck
notes), ``html`` (context and jinja2 rendering, templates in ``templates/``), ``tables`` (ablation.csv/.md),
``summary`` (the lines a command prints), ``frames`` (``perftune.load_results``), ``accuracy_notes`` (the accuracy
gate's "cannot judge" lines; numbers, reasons and samples in words are ``perftune.words``'); ``extra`` (template
``extra.html``: ``efficiency`` for MFU, ``figures_extra`` for MFU, drift and loss-difference figures) and ``export``
(``perftune export``: TensorBoard runs and the step CSV).
"""

from __future__ import annotations

from pathlib import Path

from perftune.errors import UserError
from perftune.io.files import RESULTS_NAME, TRIAL_NAME
from perftune.io.store import write_text_atomic

REPORT_NAME = "report.html"


def write_report(out_dir: Path) -> Path:
    """Write ``out_dir/report.html`` from ``out_dir/results.json`` (a sweep) or ``out_dir/trial.json`` (one
    measurement: a hand-added ``perftune.Callback``'s folder) and return its path."""
    return write_report_said(out_dir)[0]


def write_report_said(out_dir: Path) -> tuple[Path, list[str]]:
    """``write_report``, and the folder's integrity record beside it (what ``perftune report`` says: the sweep's
    logged warnings, and results.json figures its trial files contradict).  A folder that cannot be written (a
    read-only file system, a full disk) is a ``UserError``: the report is the command's only output."""
    from perftune.io.outdir import cannot_write
    from perftune.report.html import build_context, render
    from perftune.report.load import load_folder

    out_dir = Path(out_dir)
    if not (out_dir / RESULTS_NAME).is_file() and not (out_dir / TRIAL_NAME).is_file():
        what = "no such folder" if not out_dir.exists() else \
            "no results.json or trial.json in it (not a perftune sweep or trial folder)"
        raise UserError(f"{out_dir}: {what}")
    folder = load_folder(out_dir)
    html = render(build_context(folder))
    path = out_dir / REPORT_NAME
    try:
        write_text_atomic(path, html)
    except OSError as exc:
        raise cannot_write(path, exc) from None
    return path, folder.integrity_record()
