"""Write a file whole, never through a symbolic link: the one way Proxima replaces a file it owns.

A run directory is data that may come from someone else, and it may hold symbolic links planted
at the names Proxima writes (``metrics.csv``, ``report.md``) or at the temporary names it writes
them through (``metrics.csv.tmp``). Opening such a name for writing would follow the link and
overwrite the file it points to, outside the run. Here:

* the temporary file is created next to the target with ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a
  random name, so an existing file or link at that name is never opened (a new name is tried);
* it is written, flushed and fsynced, then ``os.replace``d over the target: a rename replaces a
  symbolic link at the target itself, never the file it points to;
* the folder is fsynced (best effort), so the rename survives a power loss;
* on any error the temporary file is removed and the target is left as it was: no half file.

Unlike ``tempfile.mkstemp`` (mode 0600), the file is created with mode 0666 less the umask, as
``open(path, "w")`` would create it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Iterator, Optional, Union

PathLike = Union[str, os.PathLike]

#: the most bytes of the target's name kept in the temporary name: with "." and ".<12 hex>.tmp"
#: (18 bytes) it stays within the 255 bytes a file name may have on most filesystems
_NAME_PART = 200


def _name_part(name: str) -> str:
    """``name`` cut to at most _NAME_PART bytes as the filesystem encodes it, on a character
    boundary: the limit is on bytes, and a character cut short would not decode."""
    part = name[:_NAME_PART]  # each character is at least one byte
    while len(os.fsencode(part)) > _NAME_PART:
        part = part[:-1]
    return part


def new_temp_file(path: Path, keep_suffix: bool = False) -> tuple:
    """(fd, temp path): a new file next to ``path`` (``.NAME.<random>.tmp``; ``keep_suffix``:
    ``.STEM.<random>.tmp.SUFFIX``), opened for writing, never an existing file or link
    (O_CREAT | O_EXCL | O_NOFOLLOW)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    stem, suffix = (path.stem, path.suffix) if keep_suffix else (path.name, "")
    hidden, part = "" if path.name.startswith(".") else ".", _name_part(stem)
    for _ in range(100):
        tmp = path.with_name(f"{hidden}{part}.{secrets.token_hex(6)}.tmp{suffix}")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path}: could not create a temporary file next to it")  # pragma: no cover - 100 collisions


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems cannot fsync a folder
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(path: PathLike, mode: str = "w", encoding: str = "utf-8", newline=None,
                temp_like: Optional[PathLike] = None) -> Iterator:
    """``with atomic_open(path, "w") as f: f.write(...)``: ``path`` is replaced by what was written
    when the block ends without an error, and left as it was otherwise. ``mode``: "w" (text) or
    "wb". An OSError (disk full, read-only folder) is raised as it is, the temporary file removed.
    ``temp_like``: the temporary file is named after it instead (beside ``path``), for a folder whose
    readers match names (TensorBoard reads any file with "tfevents" in its name)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode {mode!r}; use 'w' or 'wb'")
    path = Path(path)
    fd, tmp = new_temp_file(path.with_name(Path(temp_like).name) if temp_like is not None else path)
    try:
        if mode == "wb":
            f = os.fdopen(fd, "wb")
        else:
            f = os.fdopen(fd, "w", encoding=encoding, newline=newline)
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_folder(path.parent)


def write_atomic(path: PathLike, data: Union[str, bytes], encoding: str = "utf-8") -> Path:
    """Replace ``path`` with ``data`` (bytes, or text written in ``encoding``), all or nothing."""
    with atomic_open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode(encoding))
    return Path(path)


def reserve_temp(path: PathLike) -> Path:
    """A new empty file next to ``path`` (``.STEM.<random>.tmp.SUFFIX``, never an existing file or
    link), for a caller that writes several files and renames them into place together (replace_into)
    once all are written: the suffix kept, a writer that matches names (``.json``) still sees the kind."""
    fd, tmp = new_temp_file(Path(path), keep_suffix=True)
    os.close(fd)
    return tmp


def replace_into(tmp: PathLike, path: PathLike) -> None:
    """Rename ``tmp`` over ``path`` (a symbolic link at ``path`` replaced, never followed), the folder fsynced."""
    os.replace(tmp, path)
    _fsync_folder(Path(path).parent)


def leads_outside(path: PathLike, root: PathLike) -> bool:
    """Whether ``path`` (which may not exist) resolves outside the folder ``root``: it, or a folder
    on the way to it, is a symbolic link (dangling or not) to somewhere else."""
    real, top = os.path.realpath(path), os.path.realpath(root)
    return not (real == top or real.startswith(top.rstrip(os.sep) + os.sep))
