"""torchrun as ``proxima train --nproc K`` starts it: a stop by signal ends in an exit code, not a traceback.

On SIGINT/SIGTERM torchrun passes the signal to every rank, waits for them (each writes its part of
the checkpoint and prints one line), then raises ``SignalException`` out of its ``main``, and
Python prints that as a traceback under the ranks' lines, as if the run had crashed. Here it is the
exit code the signal means (130, 143), as a single process exits. torch's agent handles only the
signals of torchrun's --signals-to-handle (by default SIGTERM, SIGINT, SIGHUP, SIGQUIT): here every
stop (caught_stops) is added to them (handled_signals), so that SIGUSR1/SIGUSR2, a scheduler's warning
before its time limit, take the same path to the ranks and exit 138/140, where their default action
killed torchrun and its ranks stopped by SIGTERM as a second interrupt, with no checkpoint.

When ranks fail, torchrun raises ``ChildFailedError``, printed as a ~40-line "proxima FAILED"
traceback under lines the ranks already printed. Here (child_failure_exit) a job whose ranks all
ended alike, with a refusal (2), a stop (130, 143, 129, 138, 140) or a closed pipe (141, ``| head``), exits with
that code and prints nothing more; any other failure prints one line naming each failed rank's exit code and
exits 1. torch's own warnings and errors ("failed (exitcode: 143)", "Sending process ... closing signal") are
held (HeldLogs) and printed at the end only for such a failure. A stop that comes once the ranks have completed
the run, as torchrun tears down, exits 0 with one line saying so (run_completed). Before torch's agent
ends the other ranks with SIGTERM after a failure, it creates the file signals.TEARDOWN_ENV names for
the ranks, which tells that SIGTERM apart from a user's stop (signals.torn_down); not when the agent
stops the ranks to restart them (teardown_marking). Its folder names torchrun's pid, so that the next
launch removes one a SIGKILL left behind (sweep_stale_markers), once no process holds the flock
torchrun keeps on its lock file. The ranks' error files go to that folder too (needs_log_dir), not to a
/tmp/torchelastic_* that torch leaves behind. Everything else
is torchrun's own ``main`` with its own arguments: ``python -m proxima.torchrun --nproc-per-node K --standalone
-m proxima train ...`` behaves as ``python -m torch.distributed.run ...`` does.

A stop before torchrun starts the ranks (while it imports torch, or meets itself at the rendezvous)
ends it with 128 + signum and no traceback; the launcher, which sent the stop, says the line
(launch.launch_torchrun). The launcher starts it with the stops (STOPS) blocked, so that a stop that
comes while Python itself starts waits for ``main`` instead of interrupting the imports before it.
A stop while torchrun starts the ranks reaches them once all are started (torchrun would otherwise
leave them running), and a Ctrl-C reaches ranks that have no stop handling yet as SIGTERM (_passed_on).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import logging
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading

#: the signals that stop a run (signals.stop_signals): SIGHUP too, a closed terminal or SSH session; SIGUSR1 and
#: SIGUSR2, a scheduler's warning before its time limit (Slurm's --signal=B:USR1@120)
STOPS = (signal.SIGINT, signal.SIGTERM) + tuple(getattr(signal, name) for name in ("SIGHUP", "SIGUSR1", "SIGUSR2")
                                                if hasattr(signal, name))
#: how a rank ends whose output went to a reader that closed it (``| head``): 128 + SIGPIPE and no line, as a
#: single process does (docs/reliability.md); its run may have finished
PIPE_CODE = 128 + signal.SIGPIPE
#: exit codes a rank ends with after printing its own line: a refusal (a user error, docs/reliability.md)
#: and a stop by one of STOPS with its checkpoint; and PIPE_CODE, with no line to print
QUIET_CODES = (2,) + tuple(128 + sig for sig in STOPS) + (PIPE_CODE,)
#: how a rank ends when torchrun ends it with SIGTERM after another rank failed: killed by the signal
#: (no handler yet), or its handler's stop (143)
TEARDOWN_CODES = (-signal.SIGTERM, 128 + signal.SIGTERM)


def quiet_exit_code(codes) -> "int | None":
    """The exit code of a job whose failed ranks exited with ``codes``, when the ranks' own lines
    said all there is: every one the same code of QUIET_CODES, or one refusal or SIGINT stop beside
    ranks that torchrun's teardown ended (TEARDOWN_CODES). None otherwise."""
    sigterm = 128 + signal.SIGTERM
    codes = {sigterm if c in TEARDOWN_CODES else c for c in codes}
    if len(codes) == 1 and codes <= set(QUIET_CODES):
        return codes.pop()
    own = codes - {sigterm}
    if len(own) == 1 and own <= set(QUIET_CODES):
        return own.pop()
    return None


#: said of a rank killed by SIGKILL, which prints nothing: here and in its peers' lost-contact line
#: (distributed.lost_contact_line)
KILLED_NOTE = "often the out-of-memory killer: check dmesg or the job's memory limit; it printed nothing"


#: said of a rank that torchrun itself killed with SIGKILL: after a failure it sends SIGTERM, waits its shutdown timeout
#: (30 s, --shutdown-timeout) and kills a rank still running ("Unable to shutdown process ... forcefully exiting via 9")
FORCED_NOTE = "was killed by torchrun after its shutdown timeout (it did not stop on SIGTERM)"
#: the exit codes of a rank that Proxima ends itself, after its own line (1: a failure's, or Python's traceback); any
#: other positive code is one its env or the user's code exited with (sys.exit, os._exit), of which Proxima said nothing
OWN_CODES = (1,) + QUIET_CODES + (128 + signal.SIGTERM,)


def _how(code: int, forced: bool = False) -> str:
    if code == -signal.SIGKILL and forced:
        return FORCED_NOTE
    if code == -signal.SIGKILL:
        return f"was killed by SIGKILL ({KILLED_NOTE})"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    if code > 0 and code not in OWN_CODES:  # not Proxima's exit: it printed no line of its own for it
        return (f"exited {code} without an error line from Proxima (its env or code ended the process: sys.exit or "
                "os._exit; anything it printed is above)")
    return f"exited {code}"


def child_failure_exit(failures: dict, first=None, forced=()) -> int:
    """The job's exit code for torchrun's ChildFailedError ``failures`` ({rank: ProcessFailure}); one
    line on stderr unless quiet_exit_code finds the ranks' own lines enough. ``first``: the rank that
    failed first (torchrun's root cause), named first. ``forced``: the pids torchrun killed with SIGKILL
    after its shutdown timeout (forced_kills), whose SIGKILL is no out-of-memory kill."""
    codes = {rank: int(f.exitcode) for rank, f in failures.items()}
    code = quiet_exit_code(codes.values())
    if code is not None:
        return code
    groups: dict = {}
    for rank in sorted(codes, key=lambda r: (r != first, r)):  # the first failure leads the line
        how = _how(codes[rank], rank != first and getattr(failures[rank], "pid", None) in forced)
        groups.setdefault(how, []).append(f"{rank} (first)" if rank == first else str(rank))
    parts = []
    for how, ranks in groups.items():
        shown = ", ".join(ranks[:8]) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
        parts.append(f"rank{'s' if len(ranks) > 1 else ''} {shown} {how}")
    print(f"proxima: the job failed: {'; '.join(parts)}; each rank's own lines above say why", file=sys.stderr)
    return 1


def caught_stops() -> tuple:
    """STOPS less a SIGHUP this process ignores (nohup): the job is to outlive its terminal."""
    return tuple(sig for sig in STOPS if not (sig == getattr(signal, "SIGHUP", None)
                                                and signal.getsignal(sig) is signal.SIG_IGN))


#: the environment variable from which torch's agent takes the signals it passes on to the ranks (PContext.start),
#: set by torchrun from its --signals-to-handle (default: SIGTERM,SIGINT,SIGHUP,SIGQUIT)
SIGNALS_ENV = "TORCHELASTIC_SIGNALS_TO_HANDLE"


def handled_signals(names: "str | None") -> str:
    """torchrun's comma-separated list of signals to pass on, ``names`` (None: its default), with every stop
    of caught_stops it lacks added: SIGUSR1/SIGUSR2 (not in torchrun's default) killed torchrun by their
    default action, and the ranks, losing it, stopped by SIGTERM as a second interrupt; a stop left out by
    hand (--signals-to-handle SIGTERM) kept EarlyStops' handler, which raised EarlyStop inside torchrun's
    agent with the ranks running. The order and the user's other signals (SIGQUIT) are kept."""
    given = [n.strip() for n in ("SIGTERM,SIGINT,SIGHUP,SIGQUIT" if names is None else names).split(",") if n.strip()]
    return ",".join(given + [sig.name for sig in caught_stops() if sig.name not in given])


class EarlyStop(KeyboardInterrupt):
    """A stop (STOPS) before any rank started (EarlyStops): nothing was written yet. A KeyboardInterrupt,
    so that code that lets Ctrl-C pass (``except Exception``) lets it pass too."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class EarlyStops:
    """Within ``with EarlyStops(...) as stops:`` the stops (caught_stops) raise EarlyStop (SIGTERM's,
    SIGUSR1's default would end the process with no line). ``unblock``: and take them out of the signal mask, where the
    launcher put them (launch._block_stops), so that one sent meanwhile is raised here.

    A stop whose exception was swallowed where it landed (C code that imports NumPy for torch and
    clears any error it raises) is raised again by ``check()``, which the caller calls before it
    starts anything, as signals.OutsideLoop does: the stop comes late, but is never lost."""

    def __init__(self, unblock: bool = False):
        self.unblock, self.signum, self._old = unblock, 0, {}

    def __enter__(self):
        try:
            if threading.current_thread() is threading.main_thread():
                for sig in caught_stops():
                    self._old[sig] = signal.signal(sig, self._raise)
            if self.unblock and hasattr(signal, "pthread_sigmask"):
                signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _raise(self, signum, frame):
        self.signum = self.signum or signum
        raise EarlyStop(signum)

    def check(self) -> None:
        if self.signum:
            raise EarlyStop(self.signum)

    def ignore(self) -> None:
        """From now on the stops are ignored, after the ``with`` too: the job has ended, its ranks are gone, and
        the process only finishes (torch's teardown takes seconds), where a stop, by its default action, made a
        completed job exit 143."""
        if threading.current_thread() is threading.main_thread():
            for sig in caught_stops():
                signal.signal(sig, signal.SIG_IGN)
            self._old.clear()

    def __exit__(self, *exc):
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old.clear()
        return False


def child_pids(pid: int) -> list:
    """Direct children of ``pid``'s main thread (Linux /proc; empty elsewhere): torchrun's, its ranks."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def _sigterm(pid: int) -> "str | None":
    """How process ``pid`` takes SIGTERM (/proc/PID/status): "caught", "ignored", "default"; None when unknown."""
    try:
        with open(f"/proc/{pid}/status") as f:
            masks = dict(line.split(":", 1) for line in f if line.startswith(("SigCgt:", "SigIgn:")))
        bit = 1 << (signal.SIGTERM - 1)
        return "caught" if int(masks["SigCgt"], 16) & bit else "ignored" if int(masks["SigIgn"], 16) & bit else "default"
    except (OSError, ValueError, KeyError):
        return None


def handles_stops(pid: int) -> bool:
    """Whether process ``pid`` has a SIGTERM handler of its own: in a rank, proxima's stop handling, in
    place from its run's start to its end (trainer.train: signals.OutsideLoop), which says where it stopped."""
    return _sigterm(pid) == "caught"


def _passed_on(signum: int) -> int:
    """The signal torchrun passes to its ranks for a stop by ``signum``: SIGTERM for a SIGINT while every
    rank takes SIGTERM by its default, none having stop handling yet. Such a rank has written nothing,
    and SIGTERM ends it at once and silently, where SIGINT's KeyboardInterrupt lands wherever it is: in
    Python's own start-up, a "Fatal Python error" and a traceback."""
    ranks = child_pids(os.getpid())
    if signum == signal.SIGINT and ranks and all(_sigterm(r) == "default" for r in ranks):
        return signal.SIGTERM
    return signum


#: the teardown marker's folder in the temp dir: MARKER_PREFIX + the launcher's pid + "-" + mkdtemp's 8 characters
MARKER_PREFIX = "proxima-torchrun-"
_MARKER_NAME = re.compile(re.escape(MARKER_PREFIX) + r"([1-9][0-9]{0,9})-[a-z0-9_]{8}")
#: the file in that folder on which its launcher holds an exclusive flock for its whole life: a pid alone
#: cannot say the launcher is gone (another pid namespace sharing /tmp, a pid handed out again)
LOCK_NAME = "lock"


def _hold_lock(marker_dir: str) -> int:
    """The fd of ``marker_dir``/LOCK_NAME with LOCK_EX taken; kept open until the folder is removed."""
    fd = os.open(os.path.join(marker_dir, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _launcher_gone(path: str, pid: int) -> bool:
    """Whether the launcher of marker folder ``path`` is gone: its lock file's flock can be taken (held by
    no process, in any pid namespace); a folder without one (left by an older version): its pid is no process's."""
    try:
        fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return not _alive(pid)
    except OSError:  # a symlink planted as the lock, unreadable: keep the folder
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # EWOULDBLOCK: a live launcher holds it
        return False
    finally:
        os.close(fd)  # drops our lock too: rmtree follows at once
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process (or no such pid at all: kept, harmless)
        return True
    return True


def sweep_stale_markers(tmpdir: "str | None" = None) -> list:
    """Remove the marker folders (MARKER_PREFIX) of launchers that are gone: the ``finally`` that removes its
    own never runs in a launcher killed by SIGKILL (kill -9, the OOM killer). Only folders of the exact name,
    owned by this user, not symlinks, whose lock (LOCK_NAME) no process holds (a folder without one: whose pid no
    process has); the paths removed. ``tmpdir``: tempfile's."""
    tmpdir = tmpdir or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(tmpdir)
    except OSError:
        return removed
    for name in names:
        match = _MARKER_NAME.fullmatch(name)
        if match is None:
            continue
        path = os.path.join(tmpdir, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or not _launcher_gone(path, int(match.group(1))):
            continue
        shutil.rmtree(path, ignore_errors=True)  # refuses a symlink swapped in since the lstat
        if not os.path.lexists(path):
            removed.append(path)
    return removed


def _write_marker(marker: str, text: str = "") -> None:
    """Create ``marker`` in its folder only if that is still this launcher's: never recreated (a folder of that
    name made meanwhile may be anyone's), a real directory of this user, and the marker no symlink (O_NOFOLLOW:
    one planted there would truncate what it points at). OSError when it is not so. ``text``: written into it
    (failed_text), for the ranks to read (distributed.killed_peers)."""
    st = os.lstat(os.path.dirname(marker))
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise OSError(errno.EPERM, "not this launcher's marker folder", os.path.dirname(marker))
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if text:
            os.write(fd, text.encode())
    finally:
        os.close(fd)


def failed_text(failures: dict) -> str:
    """The teardown marker's text for torch's ``failures`` ({local rank: ProcessFailure}): a line
    ``LOCAL_RANK EXITCODE`` for each (a negative code: the signal that killed it, SIGKILL's -9)."""
    lines = []
    for rank, f in failures.items():
        try:  # the marker is written on the way out of a failure: a failure record of another shape is skipped
            lines.append(f"{int(rank)} {int(f.exitcode)}\n")
        except (AttributeError, TypeError, ValueError):
            continue
    return "".join(lines)


def failure_close_marking(marker: str, monitor_workers, close) -> tuple:
    """Wrappers of LocalElasticAgent's ``_monitor_workers`` and PContext's ``close``: torch's SubprocessContext
    ends the other ranks itself (its ``_poll`` calls ``close``) the moment one fails, before the agent's
    ``_stop_workers``, so that SIGTERM came without the marker and rank 0, still setting up, said "stopped by
    SIGTERM; before training started; nothing was kept". The marker is created there when the agent has no
    restart left (with one left, the job goes on: no marker)."""
    ending: list = []  # the agent checking its ranks has no restart left

    def monitor_workers_noting(self, *args, **kwargs):
        ending.append(getattr(self, "_remaining_restarts", 0) <= 0)
        try:
            return monitor_workers(self, *args, **kwargs)
        finally:
            ending.pop()

    def close_marked(self, *args, **kwargs):
        if ending and ending[-1] and getattr(self, "_failures", None):
            try:  # as in teardown_marking: never keep the agent from ending the ranks
                _write_marker(marker, failed_text(self._failures))
            except (OSError, TypeError, ValueError):
                pass
        return close(self, *args, **kwargs)

    return monitor_workers_noting, close_marked


def teardown_marking(marker: str, stop_workers, restart_workers=None) -> tuple:
    """Wrappers of LocalElasticAgent's ``_stop_workers`` and ``_restart_workers``: the first creates ``marker``
    (signals.TEARDOWN_ENV) before the agent ends the ranks, the second keeps it from doing so while the agent
    restarts them (--max-restarts, a multi-node membership change), which stops the ranks the same way
    but does not end the job. ``restart_workers`` None: the second wrapper is None."""
    restarting: list = []

    def stop_workers_marked(self, *args, **kwargs):
        # the agent ends the ranks after one failed with the SIGTERM it passes on for a user's stop: the
        # marker, written first, lets a rank tell the two apart (signals.torn_down)
        if not restarting:
            try:  # the marker only changes a rank's line (without it, the generic one): never keep the agent from ending the ranks
                _write_marker(marker)
            except OSError:
                pass
        return stop_workers(self, *args, **kwargs)

    if restart_workers is None:
        return stop_workers_marked, None

    def restart_workers_unmarked(self, *args, **kwargs):
        restarting.append(True)
        try:
            return restart_workers(self, *args, **kwargs)
        finally:
            restarting.pop()

    return stop_workers_marked, restart_workers_unmarked


def forced_kills(close) -> tuple:
    """(a wrapper of torch's SubprocessHandler ``close``, the set it fills): the pids of the ranks torch's agent
    killed with SIGKILL (its _close, after the shutdown timeout), which child_failure_exit tells from the OOM killer's."""
    forced: set = set()

    def close_noting(self, death_sig=None, *args, **kwargs):
        if death_sig == signal.SIGKILL:
            with contextlib.suppress(AttributeError):
                forced.add(self.proc.pid)
        return close(self, death_sig, *args, **kwargs)

    return close_noting, forced


#: torch's loggers whose warnings and errors HeldLogs holds: the elastic agent's ("failed (exitcode: 143)",
#: "Sending process ... closing signal SIGTERM", "Received 15 death signal") and its launcher's
HELD_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher")


class HeldLogs(logging.Handler):
    """Within ``with HeldLogs() as logs:`` the warnings and errors of HELD_LOGGERS are held back (lower
    levels, shown only with LOGLEVEL=INFO, pass at once); ``logs.show()`` prints them as torch would
    have. A job that ends as the ranks' own lines say (0, QUIET_CODES) drops them: torch's lines for a stop
    or a refusal read as a crash under a rank's line that said where it stopped."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list = []
        self._loggers = [logging.getLogger(name) for name in HELD_LOGGERS]
        self._propagate: list = []

    def emit(self, record) -> None:
        if record.levelno >= logging.WARNING:
            self.records.append(record)
        else:
            self._pass(record)

    @staticmethod
    def _pass(record) -> None:
        # to the handlers above the held logger (torch's own on "torch.distributed"), as propagation would have
        held = next((n for n in HELD_LOGGERS if record.name == n or record.name.startswith(n + ".")), HELD_LOGGERS[0])
        logging.getLogger(held).parent.callHandlers(record)

    def show(self) -> None:
        records, self.records = self.records, []
        for record in records:
            self._pass(record)

    def __enter__(self):
        for logger in self._loggers:
            self._propagate.append(logger.propagate)
            logger.addHandler(self)
            logger.propagate = False
        return self

    def __exit__(self, *exc):
        for logger, propagate in zip(self._loggers, self._propagate):
            logger.removeHandler(self)
            logger.propagate = propagate
        self._propagate.clear()
        return False


#: the environment variable from which torchrun takes --log-dir when it is not given (its ``env`` action)
LOG_DIR_ENV = "PET_LOG_DIR"


def needs_log_dir(argv: list) -> bool:
    """Whether torchrun run with ``argv`` would make a folder of its own, /tmp/torchelastic_XXXXXXXX, for the
    ranks' error files, and leave it behind: no --log-dir (nor LOG_DIR_ENV) and no log file asked for
    (--redirects, --tee, --duplicate-*-filters), whose folder is the user's to read. False too when torchrun
    will refuse ``argv`` (it says why itself)."""
    from torch.distributed.run import parse_args

    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            args = parse_args(list(argv))
    except (SystemExit, Exception):  # --help, a wrong option: torchrun's own parse says it
        return False
    return not (args.log_dir or str(args.redirects) != "0" or str(args.tee) != "0"
                or getattr(args, "duplicate_stdout_filters", None) or getattr(args, "duplicate_stderr_filters", None))


def port_in_use_line(exc: BaseException, argv: list) -> "str | None":
    """The line for torchrun's store that could not listen on its port (EADDRINUSE), run with ``argv``: the static
    rendezvous's --master-port (the docs' multi-node recipe) or the port of --rdzv-endpoint; None for any other error."""
    text = str(exc)
    if "EADDRINUSE" not in text and "address already in use" not in text.lower():
        return None
    found = re.search(r"port: (\d+)", text)
    port = found.group(1) if found else "?"
    pick = "pick another --master-port"
    from torch.distributed.run import parse_args

    with contextlib.suppress(SystemExit, Exception), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        if parse_args(list(argv)).rdzv_backend != "static":
            pick = "give --rdzv-endpoint another port"
    return f"proxima: port {port} on this machine is in use (another job?): {pick}"


def run_completed(agent) -> bool:
    """Whether the ranks that torch's ``agent`` started had completed the run: local rank 0 exited 0 (a rank exits
    only past the barrier after the last checkpoint) and every other rank exited 0 too, or was ended by
    torchrun's teardown (TEARDOWN_CODES) on its way out."""
    handlers = getattr(getattr(agent, "_pcontext", None), "subprocess_handlers", None)
    try:
        codes = {rank: handler.proc.poll() for rank, handler in (handlers or {}).items()}
    except (AttributeError, OSError):
        return False
    return codes.get(0) == 0 and all(code == 0 or code in TEARDOWN_CODES for code in codes.values())


def main(argv=None) -> int:
    try:
        with EarlyStops(unblock=True) as early:  # until torchrun's handlers replace these as it starts the ranks
            return _run(argv, early)
    except KeyboardInterrupt as e:  # EarlyStop: the launcher, which sent the stop, says its line
        return 128 + getattr(e, "signum", signal.SIGINT)


def _run(argv, early: EarlyStops) -> int:
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing import api
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    early.check()

    raise_stop = getattr(api, "_terminate_process_handler", None)
    start_workers = getattr(LocalElasticAgent, "_start_workers", None)
    stop_workers = getattr(LocalElasticAgent, "_stop_workers", None)
    restart_workers = getattr(LocalElasticAgent, "_restart_workers", None)
    monitor_workers = getattr(LocalElasticAgent, "_monitor_workers", None)
    close = getattr(getattr(api, "PContext", None), "close", None)
    handler_cls = getattr(api, "SubprocessHandler", None)
    handler_close = getattr(handler_cls, "close", None)
    from .distributed import TORCHRUN_PID_ENV
    from .signals import TEARDOWN_ENV

    own_process = argv is None  # the command line of this process, which ends with the job
    old_pid, old_marker, old_signals, old_log_dir = (os.environ.get(name) for name in (
        TORCHRUN_PID_ENV, TEARDOWN_ENV, SIGNALS_ENV, LOG_DIR_ENV))
    marker_dir, lock_fd = None, None
    stopping: list = []  # the stop torchrun passed on
    agents: list = []  # the agent that started the ranks (start_workers_whole)
    forced: set = set()  # the pids of the ranks torch's agent killed after its shutdown timeout (forced_kills)
    logs = HeldLogs()
    try:  # from before the folder exists: a stop anywhere after leaves nothing behind (but see sweep_stale_markers)
        sweep_stale_markers()
        marker_dir = tempfile.mkdtemp(prefix=f"{MARKER_PREFIX}{os.getpid()}-")
        lock_fd = _hold_lock(marker_dir)  # until the finally: the sweep of another launch keeps the folder meanwhile
        marker = os.path.join(marker_dir, "torn-down")  # signals.TEARDOWN_ENV
        if needs_log_dir(sys.argv[1:] if argv is None else argv):  # in this folder, removed with it
            os.environ[LOG_DIR_ENV] = os.path.join(marker_dir, "logs")
        starting: list = []  # not empty while the agent starts the ranks (start_workers_whole)
        held: list = []  # a stop that came meanwhile, raised once the agent holds them
        if raise_stop is not None:  # installed by torchrun when it starts the ranks (api.PContext.start)

            def first_stop_only(signum, frame):
                # A job-wide stop reaches torchrun more than once (Slurm and systemd signal every process,
                # and the launcher forwards its own copy): once torchrun is stopping its ranks (passing the
                # signal on, waiting, then killing them), a copy that raised again would land inside that
                # shutdown, in its logging, as a traceback. A stop at once goes to the ranks (launch.py).
                if stopping:
                    return
                if starting:
                    held.append(signum)
                    return
                stopping.append(signum)
                raise_stop(_passed_on(signum), frame)

            def start_workers_whole(self, *args, **kwargs):
                # torchrun's handler is in place before it starts the first rank, but the agent records the
                # ranks (self._pcontext) only once all are started: a stop raised in between would leave the
                # ones started without a signal, running on after torchrun exits, holding the terminal
                early.check()  # a stop before, swallowed where it landed: no rank is started
                os.environ[SIGNALS_ENV] = handled_signals(os.environ.get(SIGNALS_ENV))  # read by the start's PContext.start
                with contextlib.suppress(FileNotFoundError):  # a restart's ranks are not being ended
                    os.remove(marker)
                starting.append(True)
                agents[:] = [self]
                try:
                    return start_workers(self, *args, **kwargs)
                finally:
                    starting.clear()
                    if early.signum and not held:  # one that landed as the agent set the ranks up, swallowed or not
                        held.append(early.signum)
                    if held and not stopping:
                        stopping.append(held[0])
                        raise_stop(_passed_on(held[0]), None)

            api._terminate_process_handler = first_stop_only
            if start_workers is not None:
                LocalElasticAgent._start_workers = start_workers_whole

        if monitor_workers is not None and close is not None:
            LocalElasticAgent._monitor_workers, api.PContext.close = failure_close_marking(marker, monitor_workers, close)
        if handler_close is not None:
            handler_cls.close, forced = forced_kills(handler_close)
        if stop_workers is not None:
            marked, unmarked = teardown_marking(marker, stop_workers, restart_workers)
            LocalElasticAgent._stop_workers = marked
            if restart_workers is not None:
                LocalElasticAgent._restart_workers = unmarked

        # the ranks inherit this: one whose torchrun died before it asked for PDEATHSIG still stops (stop_with_parent)
        os.environ[TORCHRUN_PID_ENV] = str(os.getpid())
        os.environ[TEARDOWN_ENV] = marker
        with logs:
            try:
                torchrun_main(argv)
            finally:
                if own_process:  # torchrun has ended: nothing is left for a stop to stop
                    early.ignore()
    except SignalException as e:
        signum = stopping[0] if stopping else int(e.sigval)  # the stop's, whatever went on to the ranks
        if agents and run_completed(agents[0]):  # it came as torchrun tore down a finished job
            print(f"proxima: {signal.Signals(signum).name} came after the run had completed; exit 0", file=sys.stderr)
            return 0
        if 128 + signum not in QUIET_CODES:
            logs.show()
        return 128 + signum
    except ChildFailedError as e:
        if quiet_exit_code(int(f.exitcode) for f in e.failures.values()) is None:
            logs.show()  # torch's lines, then the job's (child_failure_exit)
        return child_failure_exit(e.failures, e.get_first_failure()[0], forced)
    except Exception as e:
        line = port_in_use_line(e, sys.argv[1:] if argv is None else argv)
        if line is not None:  # torch's 47-line traceback says no more than this
            print(line, file=sys.stderr)
            return 2
        logs.show()
        raise
    finally:
        if old_pid is None:
            os.environ.pop(TORCHRUN_PID_ENV, None)
        else:
            os.environ[TORCHRUN_PID_ENV] = old_pid
        for name, old in ((TEARDOWN_ENV, old_marker), (SIGNALS_ENV, old_signals), (LOG_DIR_ENV, old_log_dir)):
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
        if marker_dir is not None:
            shutil.rmtree(marker_dir, ignore_errors=True)
        if lock_fd is not None:  # after the folder is gone: a sweep never finds it unlocked while this runs
            os.close(lock_fd)
        if handler_close is not None:
            handler_cls.close = handler_close
        if stop_workers is not None:
            LocalElasticAgent._stop_workers = stop_workers
        if restart_workers is not None:
            LocalElasticAgent._restart_workers = restart_workers
        if monitor_workers is not None and close is not None:
            LocalElasticAgent._monitor_workers, api.PContext.close = monitor_workers, close
        if raise_stop is not None:
            api._terminate_process_handler = raise_stop
            if start_workers is not None:
                LocalElasticAgent._start_workers = start_workers
    return 0


if __name__ == "__main__":
    sys.exit(main())
