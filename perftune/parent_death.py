"""A child process that dies with its parent: shared by the launchers (the burst's pre-exec set-up) and the burst
itself (an msrun rank asks for it once started), so it sits below both and imports nothing of perftune."""

from __future__ import annotations

import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child: ask Linux to SIGKILL it when its parent dies (even by SIGKILL), so no burst is orphaned."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
