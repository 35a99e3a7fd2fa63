"""Text bound for the user's terminal that may hold what a run directory holds (an env id, a config
key, a file name): written so that it stays the one line it is meant to be. And stdout kept for what
a program reads from it (machine_stdout): an env's own prints go to stderr."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from typing import Iterator, Optional


def printable(text: str) -> str:
    """``text`` with every character that is not printable (a newline, ESC, other control codes) written
    as its Python escape (``\\n``, ``\\x1b``): a name read from a run's files could otherwise set the
    terminal's title, hide or recolour what follows, or forge another ``proxima:`` line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


#: the real-stdout stream of the machine_stdout block in force (a nested block shares it)
_active: list = []


@contextlib.contextmanager
def machine_stdout(active: bool = True) -> Iterator:
    """While active, stdout is for the one thing a program reads from it (``eval --json``'s object,
    a dry run's config): whatever else writes to it goes to stderr instead, so an env that prints as
    it is built or reset (``print``, C code's ``printf``, ``os.write(1, ...)``, a subprocess or forked
    worker inheriting fd 1) cannot put its lines in front of the JSON. Python's ``sys.stdout`` becomes
    ``sys.stderr`` and fd 1 is pointed at fd 2; the block is handed a stream that writes to the real
    stdout, through the ``sys.stdout`` it replaced (so a failed write is seen where that one's are).
    Both are put back on exit, exception or Ctrl-C included. Inactive (``active=False``, a command
    without --json): nothing changes and the stream given is ``sys.stdout``.

    When ``sys.stdout`` does not write to fd 1 (pytest's capsys, a notebook's stream) only the Python
    swap is seen there; fd 1 is diverted all the same: what C code writes to it is no output either.
    A block inside another shares the outer one's diversion and stream."""
    if not active or _active:
        yield _active[-1] if _active else sys.stdout
        return
    stream = sys.stdout
    if stream is not None:
        stream.flush()  # what was printed before the block is the real output: out before the diversion
    _flush_c_stdio()
    saved = _divert_fd1()
    out = _RealStdout(stream, saved if _writes_fd1(stream) else None)
    _active.append(out)
    sys.stdout = sys.stderr
    try:
        yield out
    finally:
        _active.pop()
        try:
            # what the block left in buffers (C's stdio, the old stream through a reference kept to it)
            # is its own output: it goes to stderr before fd 1 is the real stdout again
            if stream is not None:
                stream.flush()
            _flush_c_stdio()
        finally:
            if saved is not None:
                os.dup2(saved, 1)
                os.close(saved)
            out._saved = None  # written to after the block: stdout is the real one again
            sys.stdout = stream


class _RealStdout:
    """The stream machine_stdout hands its block: ``stream`` (the sys.stdout it replaced), with fd 1
    pointed back at the real stdout (``saved``) while it writes when ``stream`` writes to fd 1. Each
    write is flushed at once, so nothing of it waits in a buffer to come out on stderr."""

    def __init__(self, stream, saved: Optional[int]):
        self._stream, self._saved = stream, saved

    def write(self, text: str) -> int:
        if self._stream is None:  # no stdout at all (pythonw): print() to it writes nothing either
            return len(text)
        with self._real_fd1():
            written = self._stream.write(text)
            self._stream.flush()
        return written

    def writelines(self, lines) -> None:
        self.write("".join(lines))

    def flush(self) -> None:
        if self._stream is None:
            return
        with self._real_fd1():
            self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)

    @contextlib.contextmanager
    def _real_fd1(self):
        if self._saved is None:
            yield
            return
        self._stream.flush()  # held since the block began (a reference kept to it): the block's, for stderr
        _flush_c_stdio()
        os.dup2(self._saved, 1)
        try:
            yield
        finally:
            os.dup2(2, 1)


def _divert_fd1() -> Optional[int]:
    """A copy of fd 1 (not inherited by children), once fd 1 is pointed at fd 2; None when either is
    not open (nothing to divert, or nowhere to)."""
    try:
        saved = os.dup(1)
    except OSError:
        return None
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        return None
    return saved


def _writes_fd1(stream) -> bool:
    try:
        return stream is not None and stream.fileno() == 1
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: a StringIO, capsys' stream
        return False


def _flush_c_stdio() -> None:
    """Flush C's stdio buffers: a C library's printf to a pipe waits in one, and would come out on
    whatever fd 1 is when it is flushed (at exit: the real stdout, after the JSON)."""
    libc = _libc()
    if libc is not None:
        libc.fflush(None)


@functools.lru_cache(maxsize=None)
def _libc():
    try:
        import ctypes

        return ctypes.CDLL(None)
    except (OSError, TypeError, AttributeError):  # no C library to load by that name (Windows)
        return None
