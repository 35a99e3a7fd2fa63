"""Writes that fail for lack of room (or rights): one line naming the file and the free space.

Every file Proxima writes (run start, TensorBoard, metrics.csv, checkpoints, plots, reports,
videos) turns an OSError into :class:`StorageError` through :func:`write_error`, which the CLI
prints as one line with exit status 2.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from pathlib import Path
from typing import Optional, Union

from .config import ProximaError


class StorageError(ProximaError, RuntimeError):
    """A file could not be written; the message names it, the reason and the free space there."""


def free_bytes(path: Union[str, Path]) -> Optional[int]:
    """Free bytes on the filesystem that holds ``path`` (or its nearest existing parent)."""
    p = Path(path).absolute()
    for candidate in (p, *p.parents):
        if candidate.exists():
            try:
                return shutil.disk_usage(candidate).free
            except OSError:
                return None
    return None


def path_problem(path: Union[str, Path], folder: bool = False, example: str = "") -> str:
    """Why ``path`` cannot be created ("" when it can): a file path that is a directory (``example``:
    a file name to suggest in it), a folder path that is a file, or a parent that is a file (the
    nearest existing one must be a folder, else mkdir/open fail with a misleading "File exists").
    Checked before the work whose result it will hold, so a bad name fails first."""
    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        return "exists and is not a directory"
    if not folder and path.is_dir():
        return "is a directory" + (f" (give a file name, e.g. {path / example})" if example else "")
    for parent in path.parents:
        if parent.exists():
            return "" if parent.is_dir() else f"{parent} is {_kind_of(parent)}, not a folder"
    return ""


def _kind_of(path: Path) -> str:
    """What ``path`` (which exists, and is not a folder) is, through a link: ``a file``, ``a FIFO (named pipe)``..."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a file"
    return ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a file")


def human_bytes(n: int) -> str:
    """``n`` bytes in binary units, as counted (1 KiB = 1,024 bytes): ``0 B``, ``36.0 KiB``, ``953.7 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def describe(path: Union[str, Path], exc: OSError, what: str = "could not write") -> str:
    """``PATH: could not write (No space left on device; 0 B free there)``. A file the error names
    that is not ``path``, a folder above it, a file beside it (a temp file of its) nor one in it is said
    before the reason:
    ``out.mp4: could not write the video (/x/ffmpeg: No such file or directory)``, the encoder
    binary missing, not the folder of out.mp4."""
    reason = exc.strerror or type(exc).__name__
    if isinstance(exc.filename, (str, bytes, os.PathLike)):
        other, own = Path(os.fsdecode(exc.filename)).absolute(), Path(path).absolute()
        if other != own and other.parent != own.parent and own not in other.parents and other not in own.parents:
            reason = f"{os.fsdecode(exc.filename)}: {reason}"
    # free space only where it can be the reason (not for a missing folder or a permission)
    free = free_bytes(path) if exc.errno in (errno.ENOSPC, errno.EDQUOT, None) else None
    room = f"; {human_bytes(free)} free there" if free is not None else ""
    hint = "; free some space (or choose another folder) and try again" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    if exc.errno == errno.EFBIG:
        hint = size_limit_hint()
    return f"{path}: {what} ({reason}{room}){hint}"


def is_out_of_room(exc: BaseException) -> bool:
    """Whether ``exc`` is a write stopped for lack of room: a full disk, a quota, or a file size limit
    (EFBIG), where the size the file needs is what the user can act on."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def file_size_limit() -> Optional[int]:
    """This process's largest file in bytes (RLIMIT_FSIZE: ulimit -f, or a batch scheduler's limit), None
    when unlimited or not known. Python ignores SIGXFSZ, so a write past it fails with EFBIG instead of
    killing the process."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError, AttributeError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 else soft


def size_limit_hint() -> str:
    """What to do about a write that failed with EFBIG ("File too large"): a limit on this process's file
    size (then named, with its size) or the filesystem's largest file (FAT32's is 4 GiB)."""
    limit = file_size_limit()
    if limit is not None:
        return (f"; this process may write files of at most {human_bytes(limit)} (its file size limit: ulimit -f, "
                "or a scheduler's): raise the limit (or choose a folder on another filesystem) and try again")
    return ("; the file reached a file size limit, the filesystem's largest file (FAT32's is 4 GiB) or another's: "
            "choose a folder on another filesystem (or raise the limit) and try again")


def write_error(path: Union[str, Path], exc: OSError, what: str = "could not write", suffix: str = "") -> StorageError:
    return StorageError(describe(path, exc, what) + suffix)


def is_stdout_failure(exc: BaseException) -> bool:
    """True when ``exc`` is a failed write of the command's own stdout, which cli._StdoutWatch records
    (``failed``) and reports in one line of its own: not a file of the run to name and measure."""
    return exc is not None and getattr(sys.stdout, "failed", None) is exc


def stdout_problem(exc: OSError, what: str = "the output") -> str:
    """Why stdout took no more output, for a command's one line: the file it writes to and the free
    space there when it is a regular file (``proxima report > out.md`` on a full disk), else
    ``<stdout>`` (a device or pipe, where the free space of some folder would mislead). Then fd 1 is
    pointed at /dev/null: what is left in the buffer would fail again, with a traceback, at exit."""
    name = "<stdout>"
    try:
        import stat

        if stat.S_ISREG(os.fstat(sys.stdout.fileno()).st_mode):
            target = os.readlink(f"/proc/self/fd/{sys.stdout.fileno()}")
            if os.path.isabs(target):
                name = target
    except (OSError, ValueError, AttributeError):
        pass
    if name == "<stdout>":
        why = f"<stdout>: could not write ({exc.strerror or type(exc).__name__}); send {what} to a file or pipe that takes it"
    else:
        why = describe(name, exc)
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return why
