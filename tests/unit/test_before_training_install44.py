"""A stop that lands while BeforeTraining installs its handlers (between two signal.signal calls) is
raised once every handler is in place: raised inside the install loop, it left the later signals at
their defaults and escaped cli.entry as a traceback with exit 1 (a fast-tier run under load, SIGUSR1)."""

import signal

import pytest

from proxima import signals
from proxima.signals import BeforeTraining, TrainingInterrupted


def test_a_signal_between_two_installs_is_raised_after_every_handler_is_in_place(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    before = {sig: signal.getsignal(sig) for sig in signals.stop_signals()}
    real = signal.signal
    calls = []

    def install(sig, handler):  # the first stop signal arrives right after the first handler is in place
        old = real(sig, handler)
        calls.append(sig)
        if len(calls) == 1:
            signal.raise_signal(sig)
        return old

    monkeypatch.setattr(signal, "signal", install)
    guard = BeforeTraining()
    try:
        with pytest.raises(TrainingInterrupted) as e:
            guard.__enter__()
        assert e.value.signum == calls[0] and "before training started; nothing was kept" in str(e.value)
        assert calls == list(signals.stop_signals())  # every handler installed before the stop was raised
        assert all(signal.getsignal(sig) == guard._handle for sig in calls)
    finally:
        monkeypatch.setattr(signal, "signal", real)
        guard.__exit__()
    assert {sig: signal.getsignal(sig) for sig in signals.stop_signals()} == before
