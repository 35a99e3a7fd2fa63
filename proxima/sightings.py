"""Values a module reports while a caller watches, so that a caller learns what deep code chose
without that code returning it (``train --dry-run`` prints the encoder and the action range of the
one env its checks build, rather than building the user's env a second time)."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator


class Sightings:
    """``with sightings.watch() as seen:`` collects every ``sightings.report(x)`` made inside the
    ``with``, in order; nested and overlapping watches each get every report made while they are open."""

    def __init__(self):
        self._open: list = []

    @contextlib.contextmanager
    def watch(self) -> Iterator[list]:
        seen: list = []
        self._open.append(seen)
        try:
            yield seen
        finally:
            self._open.remove(seen)

    def report(self, item: Any) -> None:
        for seen in self._open:
            seen.append(item)
