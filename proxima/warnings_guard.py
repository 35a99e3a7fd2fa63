"""Proxima's only way to change the warnings filters for a while.

warnings.catch_warnings saves the whole process-wide filter list on entry and puts it back on exit;
it is not thread-safe. Two blocks overlapping in two threads (train() called from several threads,
each loading a checkpoint) restore each other's lists, and the "ignore" one block added can then
stay for good: every later warning in the process silenced. Every such block in Proxima takes this
one lock, so they never overlap. Reentrant: a block inside another, in the same thread, is fine.
"""

from __future__ import annotations

import contextlib
import threading
import warnings

_FILTERS_LOCK = threading.RLock()


@contextlib.contextmanager
def catch_warnings(**kwargs):
    """warnings.catch_warnings(**kwargs), holding the lock every Proxima block of it takes."""
    with _FILTERS_LOCK, warnings.catch_warnings(**kwargs) as caught:
        yield caught


@contextlib.contextmanager
def quiet_warnings():
    """Every warning dropped while inside: an error stays one line."""
    with catch_warnings():
        warnings.simplefilter("ignore")
        yield
