"""The ``perftune`` command: arguments in, a call to one plain function out.  User mistakes exit 2 in one line.

Also what only a terminal needs: the progress display of a sweep, the command line it records, and writing the
``--markdown`` / ``--json`` files of ``compare``.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import sys
import time
from pathlib import Path

import click

from perftune.errors import UserError
from perftune.stop import leave, stop_signals_as_interrupt, stopped


def clock(seconds: float) -> str:
    """The progress line's clock: whole seconds (an estimate's tenths mean nothing)."""
    from perftune.words.format import duration_text  # pandas comes with it: not at the command's start

    return duration_text(seconds, whole_seconds=True)


def user_errors(func):
    """Turn a ``UserError`` into its message on stderr and exit code 2, Ctrl-C into "interrupted" and 130; anything
    else is a bug with a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except UserError as exc:
            click.echo(f"perftune: {exc}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("\nperftune: interrupted", err=True)
            leave(130)

    return wrapper


class SweepProgressDisplay:
    """The sweep's progress on stderr: a tqdm bar on a terminal; otherwise (CI logs, ``nohup``) each line as it
    happens (a process measured, a verdict), flushed, with the lines done of those expected, the time elapsed and an
    estimate of the time left (elapsed per line x lines left); or nothing.  The lines come worded by the sweep
    (``perftune.words.reasons``, the one renderer of decisions), and are printed as they are."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.bar = None
        self.total = 0
        self.finished = 0
        self.most = 0
        self.started = time.monotonic()

    def begin(self, total: int) -> None:
        self.total, self.finished, self.started = total, 0, time.monotonic()
        if self.enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="trial", file=sys.stderr, dynamic_ncols=True,
                            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} trials [{elapsed}<{remaining}]")

    def start(self, label: str) -> None:
        if self.bar is not None:
            self.bar.set_description(label[:50])

    def timing(self) -> str:
        """``[3/9 done, 1 min 02 s elapsed, ~2 min 04 s left]``: progress lines (a process measured, a verdict) given
        of those expected so far (no estimate before the first)."""
        elapsed = time.monotonic() - self.started
        left = max(self.total - self.finished, 0)
        most = max(self.most - self.finished, 0)  # the races may still run extra rounds (engine.progress.most_lines)
        per_line = elapsed / self.finished if self.finished else 0.0
        estimate = "" if not self.finished else f", ~{clock(per_line * left)} left" if left else \
            "" if most else ", none left"
        if self.finished and most > left:  # "at most": every race run to max_runs, every change stacked
            estimate += f", at most ~{clock(per_line * most)}{'' if left else ' left'}"
        return f"[{self.finished}/{self.total} done, {clock(elapsed)} elapsed{estimate}]"

    def bound(self, most: int) -> None:
        self.most = most

    def done(self, line: str) -> None:
        self.finished += 1
        self.total = max(self.total, self.finished)  # a line past those expected (the sweep grows the bar after it)
        if self.bar is not None:
            self.bar.write(line, file=sys.stderr)
            self.bar.update(1)
        elif self.enabled:
            print(f"{line}  {self.timing()}", file=sys.stderr, flush=True)

    def grow(self, n: int) -> None:
        self.total += max(n, 0)
        if self.bar is not None and n > 0:
            self.bar.total += n
            self.bar.refresh()

    def end(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def check_same(a: Path, b: Path) -> bool:
    return Path(os.path.abspath(a)).resolve() == Path(os.path.abspath(b)).resolve()


def _write_file(path: Path, text: str) -> None:
    from perftune.io.store import write_text_atomic

    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise UserError(f"{path}: cannot be written ({exc.strerror or exc})") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="perftune")
def main() -> None:
    """Performance-tuning experiments for MindSpore training: measure, profile, change one thing at a time."""


@main.command()
@click.argument("plan_path", type=click.Path(dir_okay=False, path_type=Path))
@user_errors
def validate(plan_path: Path) -> None:
    """Check PLAN_PATH without running anything (exit 2 with one line per problem)."""
    from perftune.engine.plan_load import load_plan
    from perftune.words.search_words import planned_text

    plan = load_plan(plan_path)
    n_values = sum(len(v) for v in plan.variables.values())
    click.echo(f"{plan_path}: ok ({plan.workload} on {plan.device}, {len(plan.variables)} variable(s), "
               f"{n_values} one-at-a-time trial(s))")
    for name, searched in plan.ranges.items():
        click.echo(f"  {planned_text(name, searched, plan.decision.search_steps)}")


@main.command(name="knobs")
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="List the knobs PLAN routes itself (its own knobs): route, type, baseline and values.")
@user_errors
def knobs_command(plan_path: Path | None) -> None:
    """List every knob: its values, default, what it changes and the backends that can run it."""
    from perftune.commands import knob_lines

    click.echo("\n".join(knob_lines(plan_path)))


@main.command()
@click.argument("plan_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--set", "overrides", multiple=True, metavar="KNOB=VALUE", help="Override a baseline knob.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Trial folder (default: reports/<plan name>/runs/<trial id>).")
@user_errors
def run(plan_path: Path, overrides: tuple[str, ...], out_dir: Path | None) -> None:
    """Run one burst of PLAN_PATH's baseline (with --set overrides) and print a summary."""
    from perftune.commands import run_one
    from perftune.report.summary import trial_summary

    received: list = []
    try:
        with stop_signals_as_interrupt(received):
            result, trial_dir = run_one(plan_path, overrides, out_dir,
                                        say=lambda line: click.echo(f"perftune: {line}", err=True))
    except KeyboardInterrupt:
        stopped(received, "the burst and every process it started were stopped")
    click.echo(trial_summary(result, trial_dir))
    if result.status != "ok":
        sys.exit(1)


@main.command()
@click.argument("plan_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Results folder (default: the plan's output_dir, else reports/<plan name>).")
@click.option("--fresh", is_flag=True, help="Start over instead of reusing finished trials.")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar on stderr.")
@click.option("--report/--no-report", default=True, help="Write report.html at the end.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default=None,
              help="Where the bursts run: here (local), or one Ray task per trial on a Ray cluster's nodes (ray; "
                   "needs pip install 'perftune[ray]').  Default: the plan's executor, else local.")
@click.option("--address", default=None, metavar="HOST:PORT",
              help="The Ray cluster's head (with --executor ray; default: the plan's ray.address, else the cluster "
                   "started on this machine).")
@user_errors
def sweep(plan_path: Path, out_dir: Path | None, fresh: bool, progress: bool, report: bool, executor: str | None,
          address: str | None) -> None:
    """Run the sweep of PLAN_PATH: baseline, one variable at a time, stack what helped; resumable."""
    from perftune.commands import plan_output_dir
    from perftune.commands import sweep as run_sweep
    from perftune.engine.plan_load import load_plan
    from perftune.report import REPORT_NAME
    from perftune.report.summary import sweep_summary

    plan = load_plan(plan_path)
    out = out_dir or plan_output_dir(plan, plan_path)
    argv = ["sweep", str(plan_path)] + (["--out", str(out_dir)] if out_dir else [])
    argv += (["--executor", executor] if executor else []) + (["--address", address] if address else [])
    command = "perftune " + " ".join(shlex.quote(a) for a in argv)
    received: list = []
    try:
        with stop_signals_as_interrupt(received):
            result = run_sweep(plan, out, plan_path, fresh=fresh, progress=SweepProgressDisplay(progress),
                               command=command, report=report,
                               say=lambda line: click.echo(f"perftune: {line}", err=True),
                               executor=executor, address=address)
    except KeyboardInterrupt:
        again = shlex.join(["perftune", *argv])
        stopped(received, f"finished trials are saved in {out}; resume with: {again}")
    click.echo(sweep_summary(result, out, out / REPORT_NAME if report else None))
    first = result.trials[0] if result.trials else None
    if first is None or first.result.status != "ok":
        click.echo(f"perftune: the baseline failed ({first.reason if first else 'nothing ran'}): nothing could be "
                   "compared", err=True)
        sys.exit(1)


def _threshold(text: str) -> float:
    """``0.05`` or ``5%``, in [0, 1)."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UserError(f"--threshold {text!r}: expected a relative change such as 0.05 or 5%") from None
    if not (0 <= value < 1):  # NaN fails this too
        raise UserError(f"--threshold {value!r}: expected a relative change in [0, 1), e.g. 0.05 or 5%")
    return value


def _metric(text: str) -> str:
    from perftune.compare.metrics import METRICS_HELP, known_metric

    metric = known_metric(text)
    if metric is None:
        raise UserError(f"--metric {text!r}: unknown metric (allowed: {METRICS_HELP})")
    return metric


@main.command(name="compare")
@click.argument("old", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--threshold", "threshold_text", default="5%", show_default=True, metavar="FRACTION|PERCENT",
              help="Relative change that counts (0.05 or 5%); smaller significant changes are reported, not flagged.")
@click.option("--metric", default="throughput", show_default=True,
              help="What decides the exit code: throughput | step_time | data_wait | split.data (any phase: "
                   "forward, backward, optimizer, communication, other) | memory | memory.host_rss | "
                   "memory.allocator | memory.device | val_loss | train_loss | perplexity.  Only throughput and "
                   "step_time have confidence intervals; the others use the threshold on the relative change.")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a Markdown table (for a pull request or $GITHUB_STEP_SUMMARY).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the full comparison as JSON.")
@user_errors
def compare_command(old: Path, new: Path, threshold_text: str, metric: str, markdown: Path | None,
                    json_out: Path | None) -> None:
    """Compare NEW against OLD with the measurement noise taken into account.

    OLD and NEW are each a sweep's results.json, a trial.json, a folder holding one of them, or a folder of such
    folders (several runs of the same plan, pooled).  Trials are matched by their knob values; runs of the same
    knobs on one side are pooled, and configurations measured more than once give the noise estimate.

    \b
    Exit codes:
      0  no significant regression beyond the threshold in --metric
      1  a significant regression beyond the threshold (or a configuration that ran on OLD fails on NEW)
      2  unusable input: missing, empty, corrupted or wrong-version file, different workload or device,
         nothing in common; the reason is printed in one line
    Differences that do not stop the comparison (versions, machine, workload params, burst settings) are printed
    as warning lines on stderr.
    """
    from perftune.compare.render import render_markdown, render_text
    from perftune.compare.run import run_compare
    from perftune.io.store import check_output

    for option, path in (("--markdown", markdown), ("--json", json_out)):
        if path is not None:
            check_output(path, [old, new], option)
    if markdown is not None and json_out is not None and check_same(markdown, json_out):
        raise UserError(f"--markdown {markdown} and --json {json_out}: the same file; give two files")
    try:
        report = run_compare(old, new, threshold=_threshold(threshold_text), metric=_metric(metric))
    except (UserError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - exit 1 means "regression" to CI: a failure to compare must not say it
        if os.environ.get("PERFTUNE_DEBUG"):
            raise
        raise UserError(f"compare could not use {old} and {new} ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:200] if str(exc) else 'no message'}); "
                        "no verdict (a bug in perftune "
                        "if both are perftune's files: PERFTUNE_DEBUG=1 shows the traceback)") from None
    if markdown is not None:
        _write_file(markdown, render_markdown(report))
    if json_out is not None:
        _write_file(json_out, json.dumps(report.to_dict(), indent=1, allow_nan=False) + "\n")
    for warning in report.warnings:
        click.echo(f"perftune: warning: {warning}", err=True)
    click.echo(render_text(report))
    sys.exit(report.exit_code)


@main.command(name="report")
@click.argument("results_dir", type=click.Path(file_okay=False, path_type=Path))
@user_errors
def report_command(results_dir: Path) -> None:
    """Write RESULTS_DIR/report.html (one self-contained file) from a sweep's RESULTS_DIR/results.json, or from
    the trial.json of one measurement (a hand-added perftune.Callback's folder)."""
    from perftune.io.seals import folder_doubts
    from perftune.report import write_report_said

    path, record = write_report_said(results_dir)
    click.echo(path)
    for line in record:  # the folder's integrity record: what the sweep logged, and what reading it found
        click.echo(f"perftune: warning: {line}", err=True)
    for doubt in folder_doubts(results_dir):  # left out of the report, as export leaves them out
        click.echo(f"perftune: warning: left out {doubt}", err=True)


@main.command(name="peak")
@click.option("--device", type=click.Choice(["CPU", "GPU", "Ascend"]), default="CPU", show_default=True)
@click.option("--refresh", is_flag=True, help="Measure again even when a peak is cached.")
@click.option("--size", type=click.IntRange(16, 16384), default=2048, show_default=True,
              help="Matrix size n of the n x n x n float32 MatMul.")
@click.option("--seconds", type=click.FloatRange(0.05, 60), default=2.0, show_default=True,
              help="How long to keep calling it (at least 3 calls).")
@user_errors
def peak_command(device: str, refresh: bool, size: int, seconds: float) -> None:
    """Measure this machine's peak matmul FLOP/s with MindSpore once and cache it; reports use it for MFU."""
    from perftune.io.peak_cache import cache_path
    from perftune.peak_probe import machine_peak

    record, measured = machine_peak(device, refresh=refresh, size=size, seconds=seconds)
    click.echo(f"{record.flops_per_s / 1e9:.1f} GFLOP/s peak ({record.dtype}; median call "
               f"{record.median_flops_per_s / 1e9:.1f}) on {record.host}, {record.device}, MindSpore "
               f"{record.mindspore_version}: {record.method}")
    load = f" at load average {record.load_avg_1m:.1f}" if record.load_avg_1m is not None else ""
    click.echo(f"{'measured now' if measured else 'cached'} ({record.measured_utc}{load}) in {cache_path()}"
               + ("" if measured else "; --refresh measures again"))


@main.command(name="export")
@click.argument("results_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--tensorboard", "tb_out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for TensorBoard event files, one run per trial (then: tensorboard --logdir FOLDER).")
@click.option("--csv", "csv_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="CSV file of every recorded step of every trial (for pandas).")
@user_errors
def export_command(results_dir: Path, tb_out: Path | None, csv_out: Path | None) -> None:
    """Export the per-step records of the sweep in RESULTS_DIR: TensorBoard runs and/or a CSV file."""
    from perftune.io.store import check_output
    from perftune.report.export import export_csv, export_tensorboard

    if tb_out is None and csv_out is None:
        raise UserError("export: nothing to do (give --tensorboard FOLDER and/or --csv FILE)")
    if tb_out is not None:
        check_output(tb_out, [results_dir], "--tensorboard", folder=True)
    if csv_out is not None:
        check_output(csv_out, [results_dir], "--csv")
    summaries = []
    if tb_out is not None:
        s = export_tensorboard(results_dir, tb_out)
        click.echo(f"{tb_out}: {len(s.runs)} TensorBoard run(s): {', '.join(s.runs)}  "
                   f"(tensorboard --logdir {shlex.quote(str(tb_out))})")
        summaries.append(s)
    if csv_out is not None:
        s = export_csv(results_dir, csv_out)
        click.echo(f"{csv_out}: {s.rows} step row(s)")
        summaries.append(s)
    for skipped in dict.fromkeys(x for s in summaries for x in s.skipped):
        click.echo(f"perftune: warning: left out {skipped}", err=True)


if __name__ == "__main__":
    main()
