"""Process-wide changes a run needs while it goes on (torch's default dtype, warnings filters, a
thread hook, a folder on sys.path), shared by the runs going on at once (train() in several threads,
a sweep in a notebook): made when the first run takes one, undone when the last releases it, so that
no run undoes what another still needs and the caller gets back what it had."""

from __future__ import annotations

import threading
from typing import Callable


class SharedChange:
    """``make()`` makes the change and returns its undo; ``hold()`` returns the release of one holder."""

    def __init__(self, make: Callable[[], Callable[[], None]]) -> None:
        self._make = make
        self._undo: Callable[[], None] = lambda: None
        self._holders = 0
        self.lock = threading.RLock()  # also held by code that reads ``held`` and adds to the change

    @property
    def held(self) -> bool:
        return self._holders > 0

    def hold(self) -> Callable[[], None]:
        with self.lock:
            if self._holders == 0:
                self._undo = self._make()
            self._holders += 1
        released = []

        def release() -> None:
            with self.lock:
                if released:  # a release called twice (close() after a failed start) counts once
                    return
                released.append(True)
                self._holders -= 1
                if self._holders == 0:
                    undo, self._undo = self._undo, (lambda: None)
                    undo()

        return release
