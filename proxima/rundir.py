"""One run per run directory: the lock that a trainer holds for its life, and the rules for reuse.

* ``RUN/.proxima.lock`` holds the pid, host and process start time of the trainer that owns the
  run. It is created atomically (a hard link of a finished temp file, so a reader never sees half a
  lock). A second trainer, or a resume of a run that is still going, stops with
  ``run R is in use by pid P``. A lock whose process is gone (a SIGKILL, a crash, a reboot: the
  start time tells a reused pid apart) is taken over with a line saying so. A lock written on
  another host cannot be checked that way: its holder refreshes the file's mtime every
  HEARTBEAT_SECONDS, and one not refreshed for STALE_SECONDS is taken over (a container or a job's
  pod restarted after a kill comes back under a new hostname).
* A new run refuses a directory that already holds files: ``--resume`` continues the run there,
  ``--overwrite`` moves the old directory aside (``R.old-YYYYmmdd-HHMMSS``) and says where (for an
  R that is a symbolic link, the folder it leads to, beside itself: the link is kept).
* A new run that fails before finishing its first iteration (a broken env, a full disk at the
  start) removes what it wrote; one that fails later keeps its metrics for the diagnosis (a later
  ``--resume auto`` continues from its checkpoint, or moves it aside when it has none).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import stat
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

from .config import ConfigError, ProximaError
from .diskspace import StorageError, write_error
from .signals import from_python, stops_held
from .terminal import printable

LOCK_NAME = ".proxima.lock"
_LOCK_MAX_BYTES = 64 * 1024  # a lock is ~200 bytes of JSON

#: how often a lock's holder refreshes its lock file's mtime (RunLock's heartbeat thread), and how
#: long a lock from another host may go unrefreshed before it counts as left by a process that is
#: gone: ten missed beats, so a slow shared filesystem or a busy host is never taken for a dead one.
#: The age is this host's clock against the mtime the file server stores (its clock, or the writer's):
#: they are assumed to agree within a minute or so (NTP); a reader whose clock runs behind only waits longer.
HEARTBEAT_SECONDS = 60.0
STALE_SECONDS = 600.0


class RunDirError(ConfigError):
    """A run directory that cannot be used as asked (in use, not empty); the message says what to do."""


def expand_home(path):
    """``path`` with a leading ``~`` or ``~user`` expanded (os.path.expanduser): a str as a str, another
    path as a Path; anything else (None, a path without ~) as it is. The paths the Python API takes
    (run directories, checkpoints, init_from, a video file), which no shell expands: ``run_dir="~/x"``
    made a directory named ``~`` in the working directory."""
    if isinstance(path, (str, os.PathLike)):
        text = os.fspath(path)
        if isinstance(text, str) and text.startswith("~"):
            expanded = os.path.expanduser(text)
            return expanded if isinstance(path, str) else Path(expanded)
    return path


def _process_start(pid: int) -> Optional[str]:
    """The start time of ``pid`` in clock ticks since boot (Linux /proc), to tell a reused pid apart."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # the name in parentheses may hold spaces
    return fields[19] if len(fields) > 19 else None


def _owner(run_dir=None) -> dict:
    """What a lock records of its holder: pid, host, process start, since, command and, for a lock of
    ``run_dir``, that directory's resolved path (``run_dir``): a lock that came along with a copy of the
    run (``cp -r`` of a run still training) names the directory its holder trains, not the copy."""
    owner = {"pid": os.getpid(), "host": socket.gethostname(), "start": _process_start(os.getpid()),
             "since": datetime.now().isoformat(timespec="seconds"), "command": " ".join(sys.argv)[:300]}
    if run_dir is not None:
        owner["run_dir"] = os.path.realpath(run_dir)
    return owner


#: the scripts a notebook's kernel runs as (Jupyter, VS Code's notebooks, Colab): their argv (``-f
#: /tmp/kernel-....json``) is the kernel's connection file, no command that trains anything
KERNEL_LAUNCHERS = ("ipykernel_launcher.py", "colab_kernel_launcher.py")


def python_command(call: str = "proxima.train(...)", argv: Optional[list] = None) -> str:
    """What meta.json and report.md record as the command of a run started from Python (``argv``: the
    process's, sys.argv when None): the call and where it ran, as ``python: proxima.train(...) from
    t1.py --lr 3e-4`` or ``... from a Jupyter kernel``. The process's argv alone read as a command
    line that trains (``ipykernel_launcher.py -f /tmp/tmpkos8ig2r.json``) and is none."""
    argv = list(sys.argv if argv is None else argv)
    first = str(argv[0]) if argv else ""
    if os.path.basename(first) in KERNEL_LAUNCHERS:
        where = "a Jupyter kernel"
    elif first in ("", "-c"):  # the interpreter's prompt, or `python -c CODE` (whose code argv leaves out)
        where = "an interactive Python session" if first == "" else "python -c"
    else:
        import shlex

        where = shlex.join(map(str, argv))
    return f"python: {call} from {where}"


def is_kernel_argv(command) -> bool:
    """Whether a recorded command (meta.json's list) is a notebook kernel's argv, which says nothing of
    how the run was started (runs recorded before python_command)."""
    return (isinstance(command, list) and bool(command) and isinstance(command[0], str)
            and os.path.basename(command[0]) in KERNEL_LAUNCHERS)


class LockInfo(dict):
    """A lock's owner as read_lock read it, with the file's ``mtime`` then: its last heartbeat (a
    dict still, so that it compares equal to the owner written)."""

    mtime: Optional[float] = None


def lock_age(info: dict) -> Optional[float]:
    """Seconds since the lock was last refreshed; None when not known (a dict not from read_lock)."""
    mtime = getattr(info, "mtime", None)
    return None if mtime is None else max(0.0, time.time() - mtime)


def holder_alive(info: dict) -> bool:
    """Whether the process recorded in a lock still runs. A lock from another host cannot be checked
    from here: it counts as alive while refreshed within STALE_SECONDS (and when its age is unknown).
    A lock of an older Proxima, which never refreshed it, ages from its creation: one from another host
    is taken over STALE_SECONDS after it was taken, even if its trainer still runs there."""
    if info.get("host") != socket.gethostname():
        age = lock_age(info)
        return age is None or age < STALE_SECONDS
    pid = info.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        pass
    start = _process_start(pid)
    return not (start and info.get("start") and start != info["start"])  # same pid, another process


def read_lock(run_dir: Path) -> Optional[dict]:
    """The lock's owner (a LockInfo, with its mtime), {} for an unreadable lock, None when there is no lock."""
    return _read_json_file(Path(run_dir) / LOCK_NAME, with_mtime=True)


def remove_own_lock(run_dir: Path) -> bool:
    """Remove ``run_dir``'s lock when this process holds it (its pid and host in the lock): True when it did,
    False when the lock is gone or another process's. An OSError of the removal is raised: RunLock.release says
    so; a second stop's handler (signals.SignalGuard._leave_run), about to exit, ignores it."""
    info = read_lock(run_dir)
    if not info or info.get("pid") != os.getpid() or info.get("host") != socket.gethostname():
        return False
    (Path(run_dir) / LOCK_NAME).unlink(missing_ok=True)
    return True


def _read_json_file(path: Path, unreadable=None, with_mtime: bool = False) -> Optional[dict]:
    """A small JSON object file (a lock, a run's meta.json) as a dict; None when missing; when it is
    there but no small regular file holding a JSON object: ``unreadable`` ({} when not given), or, if
    that is an exception class, that exception raised with a line naming the file. A symbolic link
    is read when it stays inside the folder holding it, and refused (said so) when it leads out.
    ``with_mtime``: a LockInfo holding the mtime of the file read (the same open file: a lock put in
    its place meanwhile is not mistaken for it)."""

    def bad(why: str, whole: bool = False):
        if isinstance(unreadable, type) and issubclass(unreadable, Exception):
            raise unreadable(why if whole else f"{path}: {why}; the run directory's {Path(path).name} was damaged or edited")
        return {} if unreadable is None else unreadable

    try:
        target = _inside_target(Path(path), Path(path).parent)
    except RunFileError as e:
        return bad(str(e), whole=True)
    try:
        # non-blocking, and never through a link swapped in since it was resolved: a FIFO planted at
        # the file's name would block a plain read forever; anything but a small regular file is unreadable
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        return bad(f"not readable ({type(e).__name__})")
    try:
        st = os.fstat(fd)
        regular = stat.S_ISREG(st.st_mode)
    except OSError:
        regular = False
    if not regular:
        os.close(fd)
        return bad("not a regular file")
    try:
        with os.fdopen(fd, "rb") as f:
            info = json.loads(f.read(_LOCK_MAX_BYTES).decode("utf-8"))  # cut short: not JSON
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: '[' nested past Python's stack
        return bad(f"not readable JSON ({type(e).__name__})")
    if not isinstance(info, dict):
        return bad(f"expected a JSON object, got {type(info).__name__}")
    if with_mtime:
        info = LockInfo(info)
        info.mtime = st.st_mtime
    return info


# Caps on run files read whole: a run directory may come from anyone, and a sparse file claiming
# terabytes must be one line, not a MemoryError. Proxima writes far less than these.
TEXT_MAX_BYTES = 16 << 20  # config.yaml, eval.json, summary.json, meta.json-like files
LOG_MAX_BYTES = 2 << 30  # metrics.csv, samples.jsonl (long runs write a row per iteration)


class RunFileError(ProximaError, OSError):
    """A run file that is there but is not a readable regular file within its size cap, or a link
    that leads out of the run; the message is one line naming the file. An OSError, so callers that
    treat an unreadable file as unreadable keep doing so. ``why``: what is wrong, without the file's
    name or the run's words, for a caller that reads a file the user named (``--config``)."""

    def __init__(self, message: str, why: Optional[str] = None) -> None:
        super().__init__(message)
        self.why = why or message


class NotRegularFileError(RunFileError):
    """A FIFO, device or socket at a run file's name (open_run_file): never waited on or read."""


def _inside_target(path: Path, root) -> Path:
    """What to open for the run file ``path``: ``path`` itself, or for a symbolic link that stays inside
    ``root`` the file it resolves to (opened with O_NOFOLLOW, so a link swapped in since is not
    followed). RunFileError naming ``path`` and where it leads when it resolves outside ``root``: a run
    directory is data, and a link planted there (``config.yaml -> ../hosts.yml``) would have a
    report copy another file's secrets into report.md."""
    from .atomic import leads_outside

    link = os.path.islink(path)
    if not leads_outside(path, root):
        return Path(os.path.realpath(path)) if link else path
    where = "is a symbolic link" if link else "is a symbolic link (or lies under one)"
    raise RunFileError(f"{path}: {where} to {os.path.realpath(path)}, outside the run directory {root}; Proxima does not "
                       "read a run's files through it: remove the link (or copy what it points to into the run) and try again",
                       f"{where} to {os.path.realpath(path)}, outside its folder")


def open_run_file(path, root=None):
    """The run file ``path`` opened for reading, as a blocking binary file object, without waiting on
    a FIFO planted at its name: opened once (a file replaced or removed meanwhile is read as it was
    when opened) and refused unless it is a regular file. Raises FileNotFoundError when it is not
    there and the other OSErrors of opening it as open() does (PermissionError, ...),
    IsADirectoryError for a directory, NotRegularFileError (a RunFileError naming it) for a FIFO,
    device or socket: each caller says it in its own words (a checkpoint, a run file, a shard).
    ``root``: the run directory a symbolic link at ``path`` must stay inside (a RunFileError naming
    it otherwise); None: not checked here (a file the user named, or checkpoint.check_inside_run's)."""
    path = Path(path)
    target = _inside_target(path, root) if root is not None else path
    nofollow = getattr(os, "O_NOFOLLOW", 0) if target is not path else 0  # the link resolved: no other may replace it
    fd = os.open(target, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | nofollow)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):  # opening one read-only succeeds on Linux
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(f"{path}: is not a regular file (a FIFO, device or socket); the run directory was edited",
                                      "is not a regular file (a FIFO, device or socket)")
        if hasattr(os, "set_blocking"):  # O_NONBLOCK was for the open only: reads wait for their bytes
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_run_bytes(path, limit: int = TEXT_MAX_BYTES, root=None, follow: bool = False) -> bytes:
    """The whole content of the run file ``path``, read without blocking on a FIFO planted at its
    name and refusing anything but a regular file of at most ``limit`` bytes (RunFileError naming
    it). FileNotFoundError when it is not there, as for open(). A symbolic link is read when it
    stays inside ``root`` (default: the folder holding ``path``, the run directory) and refused
    (RunFileError naming it and where it leads) otherwise; ``follow``: any link is read (a file the
    user named: ``--config FILE``)."""
    path = Path(path)
    try:
        f = open_run_file(path, None if follow else (path.parent if root is None else root))
    except (FileNotFoundError, RunFileError):
        raise
    except IsADirectoryError:
        raise RunFileError(f"{path}: is a directory, not a file", "is a directory, not a file") from None
    except OSError as e:
        raise RunFileError(f"{path}: cannot read ({e.strerror or e})", f"cannot read ({e.strerror or e})") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise RunFileError(f"{path}: {size:,} bytes, more than the {limit:,} a run writes there; "
                               "the run directory was damaged or edited", f"{size:,} bytes, more than the {limit:,} read from it")
        data = f.read(limit + 1)
    if len(data) > limit:  # grew while read
        raise RunFileError(f"{path}: more than the {limit:,} bytes a run writes there; the run directory was damaged or edited",
                           f"more than the {limit:,} bytes read from it")
    return data


#: how deeply arrays and objects may nest in a run's JSON file (eval.json, meta.json, population.json):
#: Proxima's nest a few levels (a config's env_kwargs at most config.MAX_NESTING more); thousands of
#: '[' would end the reader's json.loads, or a later walk of what it read, in a RecursionError
JSON_MAX_DEPTH = 64


def _json_value(path: Path, text: str):
    """``json.loads(text)``; RunFileError naming ``path`` when it nests deeper than JSON_MAX_DEPTH
    (ValueError, as from json.loads, when it is no JSON)."""
    from .config import nesting_depth

    try:
        value = json.loads(text)
        deep = nesting_depth(value, JSON_MAX_DEPTH, max_values=None) > JSON_MAX_DEPTH
    except RecursionError:
        deep = True
    if deep:
        raise RunFileError(f"{path}: nests arrays or objects more than {JSON_MAX_DEPTH} deep, which no run writes; the "
                           f"run directory's {path.name} was damaged or edited",
                           f"nests arrays or objects more than {JSON_MAX_DEPTH} deep")
    return value


def read_run_text(path, limit: int = TEXT_MAX_BYTES, root=None, follow: bool = False) -> str:
    """read_run_bytes decoded as UTF-8 (UnicodeDecodeError as from Path.read_text). A ``*.json`` file
    nested deeper than JSON_MAX_DEPTH is a RunFileError naming it, so that every reader that parses
    it (report, resume, a population's eval, plot and report) says so in its one line rather than
    ending in a RecursionError; its other faults are left to the reader's own json.loads."""
    path = Path(path)
    text = read_run_bytes(path, limit, root, follow).decode("utf-8")
    if path.name.endswith(".json"):
        try:
            _json_value(path, text)
        except ValueError:
            pass
    return text


def read_run_json(path, limit: int = TEXT_MAX_BYTES, root=None):
    """The JSON value of the run file ``path``, read as read_run_text reads it: RunFileError (an
    OSError) for a file that cannot be read, a link out of ``root`` or nesting past JSON_MAX_DEPTH;
    ValueError (UnicodeDecodeError, json.JSONDecodeError) for one that is not JSON."""
    path = Path(path)
    return _json_value(path, read_run_bytes(path, limit, root).decode("utf-8"))


def holds_text(path, text: str) -> bool:
    """Whether the run file ``path`` holds exactly ``text``; False when it is missing, not a regular
    file or longer (read no further than ``text``'s length: a resume compares before it rewrites)."""
    data = text.encode("utf-8")
    try:
        return read_run_bytes(path, len(data)) == data
    except OSError:
        return False


def _minutes(seconds: float) -> str:
    minutes = int(seconds // 60)
    return f"{minutes} minute{'' if minutes == 1 else 's'}" if minutes else f"{int(seconds)} s"


def lock_copied_from(run_dir, info: dict) -> Optional[str]:
    """The directory a live lock found in ``run_dir`` was taken for, when that is another directory that
    is still there: ``run_dir`` holds a copy of a run (``cp -r`` while it trained), whose lock came with
    it, and no process trains the copy. None when the lock records no directory (an older Proxima's),
    records this one (by any path to it), one that is gone (a run moved while it trained: its trainer may
    still write to the moved files), was written on another host (whose paths are that host's), or whose
    own lock does not name the same process (pid and start): another folder made at that path since (``cp
    -r A B; rm -rf A; mkdir A``), where no trainer of this lock runs, so the copy may be what it trains."""
    recorded = info.get("run_dir")
    if not isinstance(recorded, str) or not recorded or info.get("host") != socket.gethostname():
        return None
    try:
        if os.path.samefile(recorded, run_dir):
            return None
    except (OSError, ValueError):  # either one gone (or a name with a NUL): not known to be a copy
        return None
    theirs = read_lock(Path(recorded))  # the live trainer's own lock is there, naming the same process
    if not theirs or theirs.get("pid") != info.get("pid") or theirs.get("start") != info.get("start"):
        return None
    return recorded


def copied_lock_note(run_dir, info: dict, copied: str) -> str:
    """``its lock RUN/.proxima.lock was copied from DIR, whose trainer (pid N, since T) still runs there;
    deleting this copy's lock is safe (...): rm RUN/.proxima.lock``: for a lock lock_copied_from found."""
    import shlex

    lock = Path(run_dir) / LOCK_NAME
    return (f"its lock {lock} was copied from {copied}, whose trainer (pid {info.get('pid')}, since "
            f"{info.get('since', '?')}) still runs there; deleting this copy's lock is safe (the run in {copied} goes "
            f"on): rm {shlex.quote(str(lock))}")


def in_use_message(run_dir: Path, info: dict) -> str:
    lock = Path(run_dir) / LOCK_NAME
    copied = lock_copied_from(run_dir, info)
    if copied is not None:
        return f"run {run_dir} is not in use: {copied_lock_note(run_dir, info, copied)}, then try again"
    host = info.get("host")
    if host == socket.gethostname():
        return (f"run {run_dir} is in use by pid {info.get('pid')} (since {info.get('since', '?')}); wait for it to "
                f"finish or stop it (a lock left by a process that is gone is taken over; {lock})")
    import shlex

    # no pid check reaches another host, and a restarted container or job's pod comes back under a new
    # hostname: say when the lock goes stale by itself, and which file to delete to go on sooner
    age = lock_age(info)
    refreshed = "" if age is None else f"; lock refreshed {_minutes(age)} ago"
    return (f"run {run_dir} is in use by pid {info.get('pid')} on host {host} (since {info.get('since', '?')}{refreshed}), "
            f"which cannot be checked from this host: wait for it to finish, or, if no process on host {host} runs it "
            f"any more (a container or job that was restarted), delete {shlex.quote(str(lock))} (a lock not refreshed "
            f"for {_minutes(STALE_SECONDS)} is taken over)")


def lock_write_error(run_dir, exc: OSError, default: bool = False):
    """diskspace.write_error for a lock that could not be written in ``run_dir``; for a run there that
    cannot be written (a read-only filesystem or folder: EROFS, EACCES, EPERM) that holds checkpoints,
    the ways on: it can be evaluated where it is, and trained on from a writable copy or as a new run
    from its weights. A ``run_dir`` that is not there (it could not be created) is said so, in the
    words of the folder that refused it (cannot_create_message; ``default``: a name chosen, no --run-dir given),
    never as a lock inside it."""
    run_dir = Path(run_dir)
    if not os.path.isdir(run_dir):
        return StorageError(cannot_create_message(run_dir, exc, default))
    error = write_error(run_dir / LOCK_NAME, exc, "could not take the run's lock")
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and any((run_dir / "checkpoints").glob("step_*.pt")):
        error = type(error)(f"{error}{read_only_way_on(run_dir, exc.errno)}")
    return error


def cannot_create_message(run_dir: Path, exc: OSError, default: bool = False) -> str:
    """``--run-dir ro/run: cannot create it (Permission denied in ro); choose another --run-dir``: the
    nearest folder above ``run_dir`` that is there is the one that refused it (``run_dir`` from Python).
    A link that leads nowhere is said to be one, and links that lead round in a loop are said to.
    ``default``: a name Proxima chose (runs/...), which no --run-dir named: ``runs/X: cannot create the default
    run directory (...); pass --run-dir in a writable folder``."""
    flag = "run_dir" if from_python() else "--run-dir"
    if os.path.islink(run_dir) and _link_loops(run_dir):
        return (f"{flag} {run_dir}: is a symbolic link to {os.readlink(run_dir)}, and the links it leads through form a loop; "
                f"remove or fix them, or choose another {flag}")
    if os.path.islink(run_dir):
        return (f"{flag} {run_dir}: is a symbolic link to {os.readlink(run_dir)}, which leads to no folder; create the "
                f"folder it names, or choose another {flag}")
    folder = next((p for p in Path(run_dir).parents if os.path.lexists(p)), Path("."))
    reason = exc.strerror or type(exc).__name__
    room = "; free some space there" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    if default:
        return f"{run_dir}: cannot create the default run directory ({reason} in {folder}){room}; {default_run_dir_fix()}"
    return f"{flag} {run_dir}: cannot create it ({reason} in {folder}){room}; choose another {flag}"


def default_run_dir_fix() -> str:
    """What to do when the default run directory (runs/...) cannot be made: name one."""
    if from_python():
        return "pass run_dir= (or set PPOConfig.run_dir) in a writable folder"
    return "pass --run-dir in a writable folder"


def _link_loops(path: Path) -> bool:
    """Whether following the symbolic links of ``path`` never ends (ELOOP: a links to b, b to a)."""
    try:
        os.path.realpath(path, strict=True)
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


def read_only_way_on(run_dir: Path, code: Optional[int] = None) -> str:
    """``; the run can be evaluated where it is; to train on, copy it ...`` for a run in a folder this
    process cannot write (``code``: the errno of that write): the copy's commands and, for a single run,
    ``proxima train ENV --init-from RUN`` (its env id from config.yaml; ENV_ID when unreadable). The copy
    is made writable (chmod -R u+w): ``cp -r`` keeps a read-only run's permission bits, so its copy
    refused the same way. A run made read-only only by its own permission bits (a copy made so) and
    owned by this user is made writable where it is instead."""
    import shlex

    from .signals import env_flag

    run = shlex.quote(str(run_dir))
    if _read_only_by_its_mode(run_dir, code):
        way = (f"; {run} is yours and read-only by its permission bits (cp -r copies a read-only run's bits too): make "
               f"it writable and resume: chmod -R u+w {run} && proxima resume {env_flag(run_dir)}{run}; or evaluate it "
               f"where it is (proxima eval {env_flag(run_dir)}{run})")
    else:
        copy = "NEW_DIR"
        way = (f"; the run can be evaluated where it is (proxima eval {env_flag(run_dir)}{run}); to train on, copy it to a "
               f"writable place and resume there: cp -r {run} {copy} && chmod -R u+w {copy} && "
               f"proxima resume {env_flag(run_dir)}{copy}")
    if (run_dir / "population.json").is_file():  # --init-from takes one run's weights
        return way
    return f"{way}, or start a new run from its weights: proxima train {shlex.quote(_recorded_env_id(run_dir))} --init-from {run}"


def _read_only_by_its_mode(run_dir: Path, code: Optional[int]) -> bool:
    """Whether ``run_dir`` belongs to this user, whose write bit its mode lacks, on a filesystem that is
    not read-only: a ``chmod -R u+w`` makes it writable (a ``cp -r`` of a read-only run is made so)."""
    if code == errno.EROFS:
        return False
    try:
        st = os.stat(run_dir)
        read_only_fs = bool(os.statvfs(run_dir).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False
    return not read_only_fs and st.st_uid == os.geteuid() and not st.st_mode & stat.S_IWUSR


def _recorded_env_id(run_dir: Path) -> str:
    """The env id the run's config.yaml records; ENV_ID when it cannot be read (only a suggested command holds it)."""
    from .config import load_yaml

    try:
        env_id = load_yaml(read_run_text(run_dir / "config.yaml")).get("env_id")
    except Exception:  # noqa: BLE001 - an error line is being written: an unreadable file only leaves the id out
        env_id = None
    return env_id if isinstance(env_id, str) and env_id else "ENV_ID"


class RunInUseError(RunDirError):
    """The run directory is locked by a live process (in_use_message)."""


class _NameTaken(RunDirError):
    """A default run name (unique_default) that another run took between its choice and its claim."""


def check_not_in_use(run_dir: Path) -> None:
    info = read_lock(run_dir)
    if info and holder_alive(info):
        raise RunInUseError(in_use_message(run_dir, info))


def _write_new_file(path: Path, text: str) -> Path:
    """A new file next to ``path`` holding ``text``, at a random name created with O_EXCL and
    O_NOFOLLOW: a link planted in the run directory at a name Proxima would write is never
    followed (atomic.py). Returns its path; removed again on an error. The name holds this
    process's id (``.NAME.<pid>.<random>.tmp``), so a failed start can tell its own (_remove_empty_dir)."""
    from .atomic import new_temp_file

    fd, tmp = new_temp_file(path.with_name(f"{path.name}.{os.getpid()}"))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _make_dir(path: Path) -> bool:
    """Create ``path`` (and its parents); True when this call created it, False when it was there."""
    try:
        path.mkdir(parents=True)
        return True
    except FileExistsError:
        if path.is_dir():
            return False
        raise


def _link_exclusive(tmp: Path, path: Path) -> None:
    """Create ``path`` with ``tmp``'s content, failing with FileExistsError if it exists."""
    try:
        os.link(tmp, path)
    except OSError as e:
        if isinstance(e, FileExistsError) or e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        # no hard links here: create (never through a link planted at the name), then write
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(tmp.read_text())


class RunLock:
    """The exclusive lock of one run directory, held by one trainer (rank 0) for its life."""

    def __init__(self, run_dir, default: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.default = default  # a name Proxima chose (no --run-dir given): its errors say so
        self.path = self.run_dir / LOCK_NAME
        self.held = False
        self.made_dir = False  # acquire() created the run directory: only then may a failed start remove it
        self._beat_stop: Optional[threading.Event] = None
        self._pid = os.getpid()

    def acquire(self) -> None:
        """Take the lock or raise RunDirError naming the pid that holds it; take over a stale one."""
        me = None
        for _ in range(10):
            try:
                self.made_dir = _make_dir(self.run_dir) or self.made_dir
                me = me or _owner(self.run_dir)  # once the directory is there: its resolved path
                tmp = _write_new_file(self.path, json.dumps(me))
            except OSError as e:  # a full disk or a read-only folder, at the very start of a run
                raise lock_write_error(self.run_dir, e, self.default) from None
            try:
                _link_exclusive(tmp, self.path)
                self.held, self._pid = True, os.getpid()
                self._start_heartbeat(me)
                return
            except FileExistsError:
                pass
            finally:
                tmp.unlink(missing_ok=True)
            info = read_lock(self.run_dir)
            if info is None:
                continue  # released meanwhile
            if info and holder_alive(info):
                raise RunInUseError(in_use_message(self.run_dir, info))
            if not info and self.path.is_dir() and not self.path.is_symlink():  # never delete a folder
                raise RunDirError(f"{self.path}: is a directory, not a lock file; remove it (or rename it) and try again")
            self._take_over(info)
        raise RunDirError(f"{self.path}: could not take the run's lock (other processes keep taking it); try again")

    def _take_over(self, stale: dict) -> None:
        """Move a stale lock away; only the process whose rename wins goes on (and it checks that
        what it moved is the stale lock it read, not a fresh one another process just made)."""
        moved = self.path.with_name(f"{LOCK_NAME}.stale.{os.getpid()}")
        try:
            os.rename(self.path, moved)
        except FileNotFoundError:
            return
        got = _read_json_file(moved, with_mtime=True) or {}
        # a live lock taken by a faster process, or another host's refreshed since it was read: put it back
        if got and holder_alive(got):
            try:
                os.link(moved, self.path)
            except OSError:
                pass
        elif stale and stale.get("host") != socket.gethostname():
            age = lock_age(got or stale)
            # the lock's fields are data: a newline or ESC in them is shown, never acted on by the terminal
            print(printable(f"proxima: note: {self.run_dir}: took over the lock left by pid {stale.get('pid')} on host "
                            f"{stale.get('host')} (since {stale.get('since', '?')}), not refreshed for "
                            f"{_minutes(age if age is not None else STALE_SECONDS)}"), file=sys.stderr)
        elif stale:
            print(printable(f"proxima: note: {self.run_dir}: took over the lock left by pid {stale.get('pid')} "
                            f"(since {stale.get('since', '?')}), which is no longer running"), file=sys.stderr)
        else:
            print(f"proxima: note: {self.run_dir}: took over an unreadable lock file", file=sys.stderr)
        moved.unlink(missing_ok=True)

    def release(self) -> None:
        """Remove the lock, best effort: it runs in train()'s final cleanup, where a failure would replace
        what the run is raising (its error line, a stop's exit 130) with a traceback. A lock that stays
        (a run directory made read-only, or remounted so, mid-run) names a process that is gone once
        this one exits, and the next run takes it over (acquire); a note says so."""
        if not self.held or os.getpid() != self._pid:  # a forked child holds a copy, not the lock
            return
        self.held = False
        if self._beat_stop is not None:
            self._beat_stop.set()
            self._beat_stop = None
        try:
            remove_own_lock(self.run_dir)
        except OSError as e:
            sys.stderr.write(f"proxima: note: could not remove the run's lock file {self.path} "
                             f"({e.strerror or type(e).__name__}); it was left, and the next run or resume there "
                             "takes it over as stale, since this process will no longer be running\n")
            sys.stderr.flush()

    def _start_heartbeat(self, owner: dict) -> None:
        """Keep the lock fresh for readers on other hosts (holder_alive) while this process holds it: a
        daemon thread, so it never keeps the process alive, and one that fork does not copy into the
        env workers; it refreshes only the lock that is still ``owner``'s and stops on release()."""
        stop = threading.Event()
        try:
            threading.Thread(target=_heartbeat, args=(self.path, owner, stop), name="proxima-lock-heartbeat",
                             daemon=True).start()
        except RuntimeError as e:  # no thread to be had (RLIMIT_NPROC): the lock still holds on this host
            print(f"proxima: note: {self.run_dir}: could not start the thread that refreshes the run's lock ({e}); "
                  f"a trainer on another host sharing this folder would take it over after {_minutes(STALE_SECONDS)}",
                  file=sys.stderr)
            return
        self._beat_stop = stop


def _heartbeat(path: Path, owner: dict, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_SECONDS):
        _beat(path, owner)


def _beat(path: Path, owner: dict) -> None:
    """Set the lock file's mtime to now if it still holds ``owner``. The file checked is the one touched
    (through its descriptor): a lock another process put at the name since is never refreshed for us.
    Errors are skipped (a full or stalled filesystem): the next beat tries again."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode) and json.loads(os.read(fd, _LOCK_MAX_BYTES)) == owner:
            os.utime(fd if os.utime in os.supports_fd else path)
    except Exception:  # noqa: BLE001 - a traceback from this thread would only interleave with the run's output
        pass
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------------
def holds_files(run_dir: Path) -> bool:
    """True when ``run_dir`` exists and holds anything besides a lock file (and what a process killed
    while it took the lock left: lock_leftover)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return run_dir.exists()
    return any(p.name != LOCK_NAME and not lock_leftover(p.name) for p in run_dir.iterdir())


_LEFTOVER = re.compile(rf"^{re.escape(LOCK_NAME)}\.(?:(\d+)\.[A-Za-z0-9_]+\.tmp|stale\.(\d+))$")


def lock_leftover(name: str) -> bool:
    """Whether ``name`` is a lock's temp file (_write_new_file) or a stale lock moved aside (_take_over)
    of a process that no longer runs on this machine: what a SIGKILL in those microseconds leaves, which
    is no one's data and must not make the folder "not empty". (A process of the same pid on another
    machine sharing the folder is taken as alive: it may be taking the lock now.)"""
    m = _LEFTOVER.match(name)
    if not m:
        return False
    pid = int(m.group(1) or m.group(2))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def _remove_lock_files(folder: Path, which) -> None:
    """Remove the files of ``folder`` whose name ``which(name)`` picks (lock temp files, lock_leftover's)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if which(name):
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass


def move_aside(run_dir: Path) -> Path:
    """Rename ``run_dir`` to ``<name>.old-<time>`` (next free name) and return the new path.

    The name is made absolute first (``.`` and ``sub/..`` have no name of their own to add to); a
    directory that is, or holds, the current directory is refused (the process would go on working
    inside the moved-aside one), and a rename that fails is a RunDirError naming it. A ``run_dir`` that
    is a symbolic link keeps its link: the folder it leads to is renamed beside itself (on its own
    filesystem: a link to scratch) and made again, empty, so that the new run is written where the link
    leads, never in a new folder at the link's place."""
    check_movable(run_dir)
    run_dir = Path(os.path.abspath(run_dir))
    if os.path.islink(run_dir):
        return _move_link_target_aside(run_dir)
    dest = _old_name(run_dir)
    try:
        os.rename(run_dir, dest)
    except OSError as e:
        from .diskspace import describe

        raise RunDirError(describe(run_dir, e, f"could not move it aside to {dest.name}")) from None
    return dest


def _old_name(folder: Path) -> Path:
    """``folder.old-YYYYmmdd-HHMMSS`` beside ``folder``, with ``-2``, ``-3`` while that name is taken."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    dest = folder.with_name(f"{folder.name}.old-{stamp}")
    n = 2
    while os.path.lexists(dest):
        dest = folder.with_name(f"{folder.name}.old-{stamp}-{n}")
        n += 1
    return dest


def _move_link_target_aside(link: Path) -> Path:
    """move_aside of a run directory given as a symbolic link: its target renamed to
    ``TARGET.old-TIME`` and an empty folder made at TARGET, the link left as it is."""
    target = Path(os.path.realpath(link))
    dest = _old_name(target)
    try:
        os.rename(target, dest)
    except OSError as e:  # e.g. a link to /scratch/USER itself, in a folder only the admins write
        raise RunDirError(f"{link}: a link to {target}, which could not be moved aside to {dest.name} "
                          f"({e.strerror or type(e).__name__}); empty that folder yourself, or choose another "
                          "--run-dir") from None
    try:
        os.mkdir(target)
    except OSError as e:
        try:
            os.rename(dest, target)  # put the old run back: the link leads to it as before
            kept = f"the old run was put back in {target}"
        except OSError:
            kept = f"the old run is in {dest}"
        raise RunDirError(f"{link}: a link to {target}, where no new folder could be made after moving the old run "
                          f"aside ({e.strerror or type(e).__name__}); {kept}") from None
    return dest


def check_movable(run_dir: Path) -> None:
    """RunDirError when move_aside would refuse ``run_dir`` before trying the rename: it is, or holds,
    the current directory, or it is the root. Read-only, so train --dry-run and the --nproc launcher
    (run_setup.check_new_run_dir) refuse an --overwrite the run would refuse, in the same line."""
    absolute = Path(os.path.abspath(run_dir))
    cwd = os.path.realpath(os.getcwd())
    real = os.path.realpath(absolute)
    if cwd == real or cwd.startswith(real.rstrip(os.sep) + os.sep) or absolute.parent == absolute:
        where = "is the current directory" if cwd == real else "holds the current directory"
        flag = "run_dir" if from_python() else "--run-dir"  # from Python no flag was typed
        raise RunDirError(f"{flag} {run_dir}: {where}, which cannot be moved aside; run from another directory "
                          f"(cd ..) or choose another {flag}")


def holds_a_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds the files a Proxima run writes when it starts: a meta.json of a
    Proxima kind beside its config.yaml or metrics.csv (train_state.open_run_dir), or a population's
    population.json. A project's own config.yaml, metrics.csv or checkpoints/ is no run: --resume
    auto never moves such a folder aside."""
    run_dir = Path(run_dir)
    if recorded_kind(run_dir / "population.json") == "ppo-population":
        return True
    return (recorded_kind(run_dir / "meta.json") in RUN_KINDS
            and any((run_dir / name).is_file() for name in ("config.yaml", "metrics.csv")))


def recorded_kind(path: "Path | str", strict: bool = False) -> Optional[str]:
    """The "kind" a meta.json or population.json records ("ppo", "rlhf", "ppo-population"); "" for an
    empty file (a run killed while open_run_dir wrote its meta.json, which is written in place); None
    for anything else. ``strict``: a file that is there but not a JSON object raises RunDirError (one
    line naming it) instead. Read without following links and without blocking (a run directory is data)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISREG(info.st_mode) and info.st_size == 0:
        return ""
    kind = (_read_json_file(Path(path), RunDirError if strict else None) or {}).get("kind")
    return kind if isinstance(kind, str) else None


def rlhf_run_line(run_dir) -> str:
    """What eval, plot and report (PPO runs' commands) say of an RLHF run's directory: where that
    run's results are instead, so the user is not sent to retrain it or to guess a metric."""
    return (f"{run_dir}: an RLHF run (proxima rlhf), not a PPO run: its trained policy is {Path(run_dir) / 'policy'} "
            f"(a Hugging Face model folder), its reward and KL curve {Path(run_dir) / 'curve.png'}, its numbers "
            f"metrics.csv and summary.json there (docs/rlhf.md)")


def hf_model_line(folder) -> Optional[str]:
    """What eval says of a Hugging Face model folder (config.json or adapter_config.json, no checkpoints/):
    an RLHF run's policy/ above all, which its users take for the run. None for any other folder."""
    folder = Path(folder)
    if (folder / "checkpoints").exists() or not any((folder / n).is_file() for n in ("config.json", "adapter_config.json")):
        return None
    run = folder.parent
    if recorded_kind(run / "meta.json") == "rlhf":
        return (f"{folder}: the policy an RLHF run released, a Hugging Face model folder, not a PPO run: load it with "
                f"transformers (AutoModelForCausalLM.from_pretrained('{folder}'), or peft's PeftModel for a LoRA adapter); "
                f"the run's numbers are in {run / 'summary.json'} and {run / 'metrics.csv'}, its curve {run / 'curve.png'}")
    return (f"{folder}: a Hugging Face model folder, not a Proxima run directory: proxima eval evaluates PPO runs "
            "(checkpoints/step_*.pt); load it with transformers")


def not_empty_message(run_dir: Path, command: str = "train", from_file: Optional[str] = None, caller: str = "train") -> str:
    """Why a new run refuses ``run_dir``, and what to do, in the words of what was asked: ``command``
    "train" a new run (--overwrite and --resume auto apply), "resume" a loose checkpoint continued
    in a new directory (either command), where neither does. ``from_file``: the --config file whose
    run_dir this is (a new run's, not typed): the line starts with the file and says to choose another
    directory, never to resume or overwrite what is there (a copied config.yaml names its run's own).
    ``caller``: the Python function whose arguments the line names from Python, "train" or
    "train_population" (proxima.train_population's population)."""
    names = sorted(p.name for p in Path(run_dir).iterdir() if p.name != LOCK_NAME and not lock_leftover(p.name))[:4]
    if from_file is not None and command == "train":
        what = ("it holds another run, whose directory the file names (a run's config.yaml, copied, keeps its run_dir)"
                if holds_a_run(run_dir) else "it holds no Proxima run")
        return (f"{from_file}: run_dir {run_dir}: not empty ({', '.join(names)}...): {what}; choose another --run-dir, "
                f"or edit run_dir in {from_file}")
    from .signals import resume_advice

    resume, how = resume_advice(run_dir)  # how: a run only its own torchrun command resumes here says so
    if from_python():
        return _not_empty_python(run_dir, names, command, f"`{resume}`{how}", caller)
    if command == "resume":
        what = "it holds another run" if holds_a_run(run_dir) else "it holds no Proxima run"
        also = f", or continue that run with `{resume}`{how}" if holds_a_run(run_dir) else ""
        return (f"{run_dir} is not empty ({', '.join(names)}...): {what}; a checkpoint continues in a new or empty "
                f"directory: choose another --run-dir{also}")
    if not holds_a_run(run_dir):
        return (f"{run_dir} is not empty ({', '.join(names)}...) and holds no Proxima run (no meta.json of one beside its "
                "config.yaml or metrics.csv); choose another --run-dir, or --overwrite to move it aside and start there")
    if not _wrote_a_checkpoint(run_dir):  # `proxima resume` would only say there is nothing to resume from
        return (f"{run_dir} is not empty ({', '.join(names)}...): it holds another run, which wrote no checkpoint; "
                "start over with --resume auto or --overwrite (either moves the old directory aside), or choose another "
                "--run-dir")
    return (f"{run_dir} is not empty ({', '.join(names)}...): it holds another run; continue it with --resume auto "
            f"(or `{resume}`{how}), start over with --overwrite (the old directory is moved aside), "
            "or choose another --run-dir")


def _not_empty_python(run_dir: Path, names: list, command: str, shell: str, caller: str = "train") -> str:
    """not_empty_message for a run started from Python (signals.from_python): ``caller``'s arguments
    (train() or train_population(): run_dir, resume='auto', overwrite=True) where the command line's line
    names its flags, which a notebook cannot type; ``shell``: the command that continues the run there,
    for one that train() in this process cannot resume (signals.python_resume). A run of the other kind
    (a population where train() was called, a single run where train_population() was) is continued by
    its own call only: ``caller``'s resume='auto' would refuse it."""
    from .signals import python_resume

    listed = f"{run_dir} is not empty ({', '.join(names)}...)"
    other = f"give {caller}() another run_dir"
    own = python_resume(run_dir) or shell
    if command == "resume":
        what = "it holds another run" if holds_a_run(run_dir) else "it holds no Proxima run"
        also = f", or continue that run with {own}" if holds_a_run(run_dir) else ""
        return f"{listed}: {what}; a checkpoint continues in a new or empty directory: {other}{also}"
    if not holds_a_run(run_dir):
        return (f"{listed} and holds no Proxima run (no meta.json of one beside its config.yaml or metrics.csv); {other}, "
                f"or {caller}(..., overwrite=True) to move it aside and start there")
    if not _wrote_a_checkpoint(run_dir):
        return (f"{listed}: it holds another run, which wrote no checkpoint; start over with {caller}(..., resume='auto') "
                f"or {caller}(..., overwrite=True) (either moves the old directory aside), or {other}")
    population = recorded_kind(Path(run_dir) / "population.json") == "ppo-population"
    if population != (caller == "train_population"):  # train(resume='auto') refuses a population, and the reverse
        what, go_on = ("a population" if population else "a single run"), own
    else:
        what, go_on = ("another population" if population else "another run"), f"{caller}(..., resume='auto') (or {own})"
    return (f"{listed}: it holds {what}; continue it with {go_on}, start over with {caller}(..., overwrite=True) (the old "
            f"directory is moved aside), or {other}")


def _wrote_a_checkpoint(run_dir) -> bool:
    """``run_dir``/checkpoints holds a step_*.pt file (a PPO run's, a population's or an RLHF run's),
    read without following links; checkpoint.list_checkpoints's question without importing torch
    (this module is read by every command's error path)."""
    try:
        with os.scandir(Path(run_dir) / "checkpoints") as entries:
            return any(e.name.startswith("step_") and e.name.endswith(".pt") and e.is_file(follow_symlinks=False)
                       for e in entries)
    except OSError:
        return False


#: the "kind" a Proxima run records in its meta.json (train_state.open_run_dir, rlhf/rundir.py; "": an
#: empty one, above): a folder holding one is a run, which ``--resume auto`` may restart when it wrote no checkpoint
RUN_KINDS = ("ppo", "rlhf", "")

#: what Proxima writes in a run directory (and the fixed temporary names some writers use): resuming
#: or restarting a run writes, truncates or prunes these, so none may lead out of the run (check_own_entries).
#: report_curve.png: `proxima report RUN`'s image beside report.md (report._curve_path), checked as
#: curve.png is, so a link planted at either name is refused alike. diverged.json: a population member's record of
#: its divergence (population_run.DIVERGED_FILE), which eval and report read as the member's own
RUN_ENTRIES = ("checkpoints", "checkpoints/best.pt", "config.yaml", "config.yaml.tmp", "meta.json", "meta.json.tmp",
               "metrics.csv", "metrics.csv.tmp", "eval.json", "eval.json.tmp", "report.md", "report.md.tmp", "curve.png",
               "curve.png.tmp", "report_curve.png", "population.json", "population.json.tmp", "summary.json", "summary.json.tmp",
               "samples.jsonl", "samples.jsonl.tmp", "policy", ".policy.partial", ".policy.old", "diverged.json")


def check_own_entries(run_dir, entries=RUN_ENTRIES, root=None) -> None:
    """RunDirError naming the first of ``run_dir``'s ``entries`` that is a symbolic link (or lies
    under one) leading outside ``root`` (default: ``run_dir``). A run directory is data: a link
    planted at a name Proxima writes would make a resume truncate, overwrite or prune files of
    another run or anywhere else. Links that stay inside the run are fine; missing entries too."""
    from .atomic import leads_outside

    run_dir = Path(run_dir)
    root = Path(root) if root is not None else run_dir
    for name in entries:
        path = run_dir / name
        if leads_outside(path, root):
            raise RunDirError(f"{path}: is a symbolic link (or lies under one) to {os.path.realpath(path)}, outside the run "
                              f"directory {root}; Proxima does not write or prune through it: remove the link (or copy "
                              "what it points to into the run) and try again")


#: {name unique_default chose: [the default name it was chosen for, choices not yet claimed]}: where a claim
#: with ``next_free`` moves on from when another run claims the name first (RunSession.claim_fresh). Only the
#: caller knows whether its name is one it just chose (a --run-dir the user typed is theirs, and a lost claim
#: of it is refused): a path left here by a choice never claimed (a run that failed before its claim) must
#: never rename a later run that names the same path, so no claim but a default one's reads this
_DEFAULT_NAMES: dict = {}


def unique_default(path: Path) -> Path:
    """``path`` or, when it already exists (two runs started in the same second), ``path-2``, ``path-3``...
    Only checked here, not taken: the claim comes once the env is built (RunSession.claim_fresh), and a
    run that loses it to one started at the same moment moves on to the next free suffix there."""
    return _free_default(path)


def _free_default(path: Path) -> Path:
    candidate, n = Path(path), 2
    while os.path.lexists(candidate):
        candidate = Path(f"{path}-{n}")
        n += 1
    _DEFAULT_NAMES.setdefault(str(candidate), [Path(path), 0])[1] += 1
    return candidate


def _default_base(run_dir: Path) -> Optional[Path]:
    """The default name ``run_dir`` was chosen for by unique_default, taken out as it is claimed (once per
    choice): the same path typed as --run-dir by a later run of this process is the user's."""
    entry = _DEFAULT_NAMES.get(str(run_dir))
    if entry is None:
        return None
    entry[1] -= 1
    if entry[1] <= 0:
        del _DEFAULT_NAMES[str(run_dir)]
    return entry[0]


class RunSession:
    """Rank 0's hold on its run directory across train(): the lock, and what to undo on failure."""

    def __init__(self) -> None:
        self.lock: Optional[RunLock] = None
        self.created: Optional[Path] = None  # a fresh run directory claimed (and written) by this session

    def lock_existing(self, run_dir: Path) -> None:
        """Lock a run directory that is being continued (resume), and refuse one whose files lead
        out of it (check_own_entries): a resume truncates metrics.csv and prunes checkpoints/. A
        stop meanwhile is raised once the lock is recorded as the session's (signals.stops_held),
        so release() removes it."""
        with stops_held():
            lock = RunLock(run_dir)
            lock.acquire()
            try:
                check_own_entries(run_dir)
            except BaseException:
                lock.release()
                raise
            self.lock = lock

    def claim_fresh(self, run_dir: Path, overwrite: bool = False, restart_note: Optional[str] = None,
                    command: str = "train", next_free: bool = False, caller: str = "train") -> Path:
        """Lock ``run_dir`` for a new run: refuse one in use; one that holds files only with
        ``overwrite`` (moved aside, said on stderr) or ``restart_note`` (a run that never wrote a
        checkpoint, restarted by --resume auto; moved aside too). A stop (SIGINT/SIGTERM/SIGHUP) meanwhile
        is raised as this returns (signals.stops_held), never between the lock's files being made and
        recorded here, where no cleanup would know of them. ``command``, ``caller``: not_empty_message's.

        ``next_free``: ``run_dir`` is a default name the caller has just chosen with unique_default, never
        a path the user gave (the caller trains in the directory returned): one that another run took since
        it was chosen, parallel runs of one env and seed started in the same second, moves on to the next
        free ``-N`` suffix instead of failing the run as "in use". Returns the directory claimed."""
        run_dir = Path(run_dir)
        base = _default_base(run_dir)  # every claim uses up its choice: none is left to a later run of the path
        if not next_free:
            base = None
        with stops_held():
            for _ in range(1000):
                try:
                    self._claim_fresh(run_dir, overwrite, restart_note, command, default=base is not None, caller=caller)
                    return run_dir
                except (RunInUseError, _NameTaken):
                    if base is None:
                        raise
                run_dir = _free_default(base)
                _default_base(run_dir)
            raise RunDirError(f"{base}: no free -N suffix found for the default run directory; give --run-dir")

    def _claim_fresh(self, run_dir: Path, overwrite: bool, restart_note: Optional[str], command: str,
                     default: bool = False, caller: str = "train") -> None:
        check_not_in_use(run_dir)
        if default and holds_files(run_dir):  # another run started there since the name was chosen: never moved aside
            raise _NameTaken(not_empty_message(run_dir, command, caller=caller))
        if holds_files(run_dir):
            # --resume auto restarts a run that never checkpointed: a folder that holds no run (a
            # project, someone's files) is not one, and is never moved aside without --overwrite
            if not (overwrite or (restart_note and holds_a_run(run_dir))):
                raise RunDirError(not_empty_message(run_dir, command, caller=caller))
            # a link keeps leading where it led (move_aside): the old run is moved aside there
            old = (f"{run_dir} (a link to {os.path.realpath(run_dir)}, kept)" if os.path.islink(run_dir)
                   else str(run_dir))
            dest = move_aside(run_dir)
            why = restart_note or ("overwrite=True" if from_python() else "--overwrite")
            print(f"proxima: {why}: moved the old {old} to {dest}", file=sys.stderr)
        lock = RunLock(run_dir, default)
        try:
            lock.acquire()
        except BaseException:  # a stop (TrainingInterrupted, a BaseException) too: nothing left behind
            if lock.held:
                lock.release()
            if lock.made_dir:  # never rmtree: a trainer that won the lock may be writing its run there
                _remove_empty_dir(run_dir)
            raise
        if holds_files(run_dir):  # another process started a run here between the check and the lock
            lock.release()
            raise (_NameTaken if default else RunDirError)(not_empty_message(run_dir, command, caller=caller))
        _remove_lock_files(run_dir, lock_leftover)  # under the run's own lock: no process is making one here now
        self.lock, self.created = lock, run_dir

    def discard_fresh(self) -> None:
        """A new run that failed before it trained anything: remove what it wrote (never a checkpoint)."""
        from .checkpoint import list_checkpoints

        run_dir, self.created = self.created, None
        if run_dir is None or not run_dir.is_dir() or list_checkpoints(run_dir):
            return
        made_dir = self.lock is not None and self.lock.made_dir
        _remove_contents(run_dir)  # still locked: claimed empty, so everything in it is this run's
        self.release()
        if made_dir:  # a folder that was there (empty, or the target of a link given as --run-dir) stays
            _remove_empty_dir(run_dir)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def _remove_contents(run_dir: Path, keep: frozenset = frozenset()) -> None:
    """Remove what ``run_dir`` holds but its lock (and the names in ``keep``), keeping the folder (through
    a link given as the run directory, its target's entries, never the link); a link inside is removed,
    never followed. Best effort, as the failure that called it is the error to report."""
    try:
        entries = [p for p in run_dir.iterdir() if p.name != LOCK_NAME and p.name not in keep]
    except OSError:
        return
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
            continue
        try:
            entry.unlink()
        except OSError:
            pass


def _remove_empty_dir(path: Path) -> None:
    """Remove ``path`` if it is an empty folder: what a failed start created, and nothing more. This
    process's own lock temp files (_write_new_file) do not count: a failed start removes them."""
    own = f"{LOCK_NAME}.{os.getpid()}."
    _remove_lock_files(path, lambda name: name.startswith(own) and name.endswith(".tmp"))
    try:
        os.rmdir(path)
    except OSError:
        pass
