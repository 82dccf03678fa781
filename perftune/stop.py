"""How ``perftune sweep`` and ``perftune run`` stop: Ctrl-C, SIGTERM and SIGHUP (a closed terminal or ssh session)
all stop the running burst and kill every process it started (the runner's clean-up), save what finished, print
one line and exit with 130 (Ctrl-C) or 128 + the signal's number."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

import click


def leave(code: int) -> None:
    """Exit after Ctrl-C / SIGTERM at once, without the interpreter's shutdown: an interrupt that lands inside a
    half-finished import of a C extension can make that shutdown crash (seen: SIGABRT in ``perftune report``), and
    by now everything worth keeping is saved.  Inside another program (click's test runner) it raises SystemExit."""
    sys.stdout.flush()
    sys.stderr.flush()
    if sys.stdout is sys.__stdout__ and sys.stderr is sys.__stderr__:
        os._exit(code)
    sys.exit(code)


#: signals that stop ``sweep`` and ``run`` as Ctrl-C does (a closed terminal or ssh session sends SIGHUP)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stop_signals_as_interrupt(received: list):
    """SIGTERM and SIGHUP raise ``KeyboardInterrupt`` once (the running burst is stopped, its processes killed,
    results saved), every signal's number appended to ``received``; the previous handlers come back afterwards."""

    def on_signal(signum, frame):
        received.append(signum)
        # only the first one: a second SIGHUP/SIGTERM (a closing terminal sends several) landing inside the clean-up
        # would cut that clean-up short and leave the burst's processes and the folder's lock behind
        if len(received) == 1:
            raise KeyboardInterrupt

    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def stopped(received: list, what: str) -> None:
    """The one line after an interrupt or a stop signal, and the exit: 130 for Ctrl-C, 128 + the signal otherwise.
    The terminal may be gone (SIGHUP): a failed write is no reason for a traceback."""
    signum = received[0] if received else None
    why = f"terminated ({signal.Signals(signum).name})" if signum else "interrupted"
    try:
        click.echo(f"\n{why}: {what}", err=True)
    except OSError:
        pass
    leave(128 + signum if signum else 130)
