"""Text bound for the user's terminal that may hold what a run directory holds (an env id, a config
key, a file name): written so that it stays the one line it is meant to be."""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` with every character that is not printable (a newline, ESC, other control codes) written
    as its Python escape (``\\n``, ``\\x1b``): a name read from a run's files could otherwise set the
    terminal's title, hide or recolour what follows, or forge another ``proxima:`` line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
