"""``perftune.stop``: a stop signal interrupts once; more of them (a closing terminal sends several) do not cut the
clean-up that the first one started."""

from __future__ import annotations

import os
import signal

import pytest

from perftune.stop import stop_signals_as_interrupt


def test_a_second_stop_signal_during_the_clean_up_is_recorded_not_raised():
    received: list = []
    cleaned = False
    before = signal.getsignal(signal.SIGHUP)
    with stop_signals_as_interrupt(received):
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGHUP)
        # the clean-up the first signal started: a second SIGHUP and a SIGTERM land in it
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGTERM)
        cleaned = True
    assert cleaned and received == [signal.SIGHUP, signal.SIGHUP, signal.SIGTERM]
    assert signal.getsignal(signal.SIGHUP) is before  # the previous handler is back
