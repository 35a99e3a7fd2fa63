"""``proxima train ... --nproc K`` (and ``proxima rlhf ... --nproc K``): run the same command under torchrun with K processes.

The launcher runs::

    python -m proxima.torchrun --nproc-per-node K --standalone -m proxima train <args without --nproc>

(``proxima.torchrun`` is torchrun's own ``main``; a stop by signal exits 128 + signum instead of printing
torchrun's ``SignalException`` traceback) with PYTHONSAFEPATH=1, so that neither torchrun nor a rank
imports from the current directory (torchrun_command), and waits for it. torchrun starts K ranks on
this machine (``--standalone``: a local rendezvous on a free port), and tears all of them down when
one fails. The launcher forwards SIGINT/SIGTERM/SIGHUP (a closed terminal; not under nohup) and SIGUSR1/SIGUSR2
(a scheduler's warning before its time limit) to torchrun once (torchrun passes it on to every
rank; the ranks agree on the iteration to stop at, rank 0 writes a checkpoint, all exit); a second
signal is sent straight to the ranks, which then exit at once if it comes 3 s or more after the
first (signals.SignalGuard: within that, a rank takes it for the same stop reaching it twice); the
last checkpoint stays loadable (written atomically).

Exit status: torchrun's, except that a run stopped by a signal the launcher forwarded exits
128 + signum (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP, 138/140 for SIGUSR1/SIGUSR2), like a single-process
run; ranks that all refused (2) or stopped (130/143/129/138/140) alike give their code, other failures 1 with one
line (proxima.torchrun). A stop
that comes before any rank could take it (the checks, torchrun or the ranks importing torch) prints
the line a single process prints for a stop before training, once, and no traceback. Multi-node runs
call torchrun directly (docs/distributed.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Optional

from . import checkpoint as ckpt
from .config import ConfigError
from .signals import resumes as _resumes, under_torchrun  # noqa: F401 (cli, run_setup and rlhf import under_torchrun from here)
from .torchrun import STOPS, EarlyStop, caught_stops, handles_stops


#: the launcher's command line, as JSON, for the ranks to record in meta.json (typed_command)
COMMAND_ENV = "PROXIMA_LAUNCH_COMMAND"

#: the packages whose __main__.py starts a command: `python -m MODULE`
_MAIN_MODULES = {("proxima",): "proxima", ("proxima", "rlhf"): "proxima.rlhf"}


def _main_module(argv0: str) -> Optional[str]:
    """``proxima`` or ``proxima.rlhf`` when ``argv0`` is that package's __main__.py, None otherwise."""
    path = Path(argv0)
    if path.name != "__main__.py":
        return None
    return next((m for parts, m in _MAIN_MODULES.items() if path.parent.parts[-len(parts):] == parts), None)


def _program(argv0: str) -> list:
    """The words that start the command ``argv0`` began. ``python -m proxima`` leaves the package's
    __main__.py in argv[0], and that file run as a script fails on its relative imports."""
    module = _main_module(argv0)
    return [sys.executable, "-m", module] if module else [argv0]


def _torchrun_words(environ) -> Optional[list]:
    """``torchrun --nproc-per-node K [--nnodes N]`` for a process that torchrun started (its agent sets
    LOCAL_WORLD_SIZE, the processes per machine, and GROUP_WORLD_SIZE, the machines, in every rank's
    environment), None for any other. The rendezvous flags of a multi-machine job are not in the environment."""
    if not environ.get("TORCHELASTIC_RUN_ID"):
        return None
    try:
        local = int(environ["LOCAL_WORLD_SIZE"])
        nodes = int(environ.get("GROUP_WORLD_SIZE", "1"))
    except (KeyError, ValueError):
        return None
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")  # the one beside this Python, as for python -m
    words = [torchrun if os.path.isfile(torchrun) else "torchrun", "--nproc-per-node", str(local)]
    return words + ["--nnodes", str(nodes)] if nodes > 1 else words


def typed_command(argv: Optional[list] = None, environ=None) -> list:
    """The command line that started this run, as the user typed it, for meta.json (docs/cli.md, "Run
    directory"): the --nproc launcher's in its ranks (COMMAND_ENV, ``--nproc K`` included); else this
    process's ``argv`` (sys.argv), with ``python -m proxima`` (or ``proxima.rlhf``) for the package's
    __main__.py, and, in a rank of a torchrun started by hand, the torchrun words before it: the
    process count is part of the run, and a rank's argv alone starts one process."""
    environ = os.environ if environ is None else environ
    argv = list(sys.argv if argv is None else argv)
    try:
        typed = json.loads(environ[COMMAND_ENV])
        if isinstance(typed, list) and all(isinstance(a, str) for a in typed):
            return typed
    except (KeyError, ValueError):
        pass
    if not argv or argv[0] in ("", "-c"):  # the interpreter's prompt, python -c: no program to name
        return argv
    torchrun = _torchrun_words(environ)
    if torchrun is None:
        return [*_program(argv[0]), *argv[1:]]
    module = _main_module(argv[0])
    if module:
        return [*torchrun, "-m", module, *argv[1:]]
    # torchrun runs a .py file with Python and anything else (a console script: proxima) as it is
    return [*torchrun, *([] if argv[0].endswith(".py") else ["--no-python"]), *argv]


def _typed_words(argv: list) -> list:
    """The command the user typed to start the --nproc launch of ``proxima <argv>``: the program, then
    ``argv``, without the word ``rlhf`` after ``python -m proxima.rlhf`` (which takes only its flags)."""
    program = _program(sys.argv[0])
    if program[-1:] == ["proxima.rlhf"] and argv[:1] == ["rlhf"]:
        argv = argv[1:]
    return [*program, *argv]


def strip_nproc(argv: list) -> list:
    """argv without ``--nproc K`` / ``--nproc=K`` (the ranks must not launch again)."""
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--":
            out.extend(argv[i:])
            break
        if a == "--nproc":
            skip = True
            continue
        if a.startswith("--nproc="):
            continue
        out.append(a)
    return out


#: Python 3.11+ reads PYTHONSAFEPATH (set in launch_torchrun); torchrun passes it on to every rank it starts
SAFE_PATH_ENV = sys.version_info >= (3, 11)
#: set beside PYTHONSAFEPATH when the launch added it, so that a rank can drop both from its environment
SAFE_PATH_SET_ENV = "PROXIMA_SAFE_PATH_SET"

# Before 3.11, `python -m` always puts the current directory first on sys.path, so there torchrun and
# each rank start through `-c` code that drops it before importing anything (runpy included).
_DROP_CWD = "import sys\nif sys.path[:1] == ['']:\n    del sys.path[0]\n"
_TORCHRUN_BOOT = _DROP_CWD + "from proxima.torchrun import main\nsys.exit(main())\n"
_RANK_BOOT = _DROP_CWD + "from proxima.cli import entry\nentry()\n"


def torchrun_command(nproc: int, argv: list, python: Optional[str] = None) -> list:
    """The torchrun command line for ``proxima <argv>`` (argv starts with the subcommand, ``train``).

    None of the processes it starts may import from the current directory: ``cd RUN && proxima
    resume .`` of a downloaded run would otherwise import the run's own ``proxima/`` (or ``torch.py``)
    in place of the real one, --trust-run or not (docs/reliability.md, "Data, never code")."""
    python = python or sys.executable
    torchrun_args = ["--nproc-per-node", str(nproc), "--standalone"]
    if SAFE_PATH_ENV:
        return [python, "-m", "proxima.torchrun", *torchrun_args, "-m", "proxima", *strip_nproc(list(argv))]
    return [python, "-c", _TORCHRUN_BOOT, *torchrun_args, "--no-python", python, "-u", "-c", _RANK_BOOT,
            *strip_nproc(list(argv))]


#: a typed --nproc may be at most this many times the CPUs this process may use (cpuinfo.usable_cpus),
#: on a new run and on a resume alike: a
#: few processes more than cores still run (a multi-process test on a laptop), a thousand is a typo that
#: would start a thousand. A count recorded by a run is data and is taken only up to the CPUs
#: (`proxima resume`: cli.py, rlhf/api.py); above them the user types it, and this limit applies.
PROCS_PER_CPU = 4


def other_count_advice(run: str, env_id: Optional[str] = None, nproc: Optional[int] = None,
                       run_dir: Optional[Path] = None) -> str:
    """The way on from a resume refused for its process count (run_setup.check_processes, cli._resume_nproc):
    a resume needs the count that wrote the run (the optimizer's and the envs' state are per process), but
    --init-from starts a new run from its weights with any. ``run``: the run as the command names it (quoted);
    ``env_id``: the run's env, else read from ``run_dir``'s config.yaml, else ENV_ID; ``nproc``: the count the
    user asked for (1: no --nproc), else K."""
    import shlex

    if env_id is None and run_dir is not None:
        env_id = _recorded_env(run_dir)
    env = shlex.quote(env_id) if isinstance(env_id, str) and env_id else "ENV_ID"
    count = "" if nproc == 1 else f" --nproc {'K' if nproc is None else nproc}"
    return (f"to continue with another count, start a new run from its weights: proxima train {env} --init-from {run}{count} "
            "(its weights and --norm-obs statistics only: a fresh optimizer, learning-rate schedule and counters)")


def with_nproc(argv: list, nproc: int, module_env: Optional[str] = None) -> str:
    """``proxima <argv> --nproc K``: the command the user typed (the words after ``proxima``), every flag
    kept and any --nproc replaced, for a line that asks for the count to be typed (cli._written_by).
    ``module_env``: the run's module:Class env (signals.module_env), added as ``--env`` where the command
    names neither --env nor --trust-run, without which the resume would refuse to import it."""
    import shlex

    words = strip_nproc(list(argv))
    if module_env and not any(w in ("--env", "--trust-run") or w.startswith("--env=") for w in words):
        words += ["--env", module_env]
    return shlex.join(["proxima", *words, "--nproc", str(nproc)])


def _recorded_env(run_dir: Path) -> Optional[str]:
    """The env id ``run_dir``'s config.yaml records, None when it cannot be read (a line's detail only)."""
    from .config import load_yaml
    from .rundir import read_run_text

    try:
        env_id = load_yaml(read_run_text(Path(run_dir) / "config.yaml")).get("env_id")
    except Exception:  # noqa: BLE001 - a refusal's suggestion must come out whatever the run's files hold
        return None
    return env_id if isinstance(env_id, str) else None


def check_nproc(nproc: int) -> None:
    """ConfigError for a typed --nproc above PROCS_PER_CPU x the CPUs this process may use."""
    from .cpuinfo import cpus_text, usable_cpus

    cpus = usable_cpus()
    limit = PROCS_PER_CPU * cpus
    if nproc > limit:
        raise ConfigError(f"--nproc {nproc}: must be at most {limit} ({PROCS_PER_CPU} x {cpus_text(cpus)}); give "
                          f"--nproc {limit} or fewer (several machines: torchrun on each, docs/distributed.md)")


def _check(nproc: int, argv: list) -> None:
    """Fail fast, in this process, on what would make every rank fail the same way."""
    if nproc < 1:
        raise ConfigError(f"--nproc {nproc}: must be at least 1")
    if under_torchrun():  # or a WORLD_SIZE and RANK left in the shell, which the line names too
        from .distributed import under_launcher_line

        raise ConfigError(under_launcher_line())
    import torch.distributed

    if not torch.distributed.is_available():
        raise ConfigError("--nproc: this torch build has no torch.distributed (run `proxima doctor`)")
    from .distributed import check_socket_ifname

    check_socket_ifname()  # every rank joins through gloo (PPO's and RLHF's alike): a wrong interface fails each of them
    if argv[:1] == ["rlhf"]:  # `proxima rlhf ... --nproc K`: an RLHF run's own checks
        from .rlhf.cli import check_launch

        _check_nccl(check_launch(nproc, strip_nproc(list(argv))))
        return
    from .cli import build_parser, config_from_args, typed_flags
    from .config import validate

    args = build_parser().parse_args(strip_nproc(list(argv)))
    if args.command == "resume" and _is_rlhf_run(Path(args.path)):
        _check_rlhf_resume(nproc, args)
        return
    from .distributed import dist_timeout

    dist_timeout()  # read by every rank as it joins the process group: a bad value would fail each of them alike
    resume = args.path if args.command == "resume" else getattr(args, "resume", None)
    if resume == "auto":  # a run directory without a checkpoint starts afresh
        target = getattr(args, "run_dir", None) or config_from_args(args, "proxima train").run_dir
        resume = target if target and ckpt.list_checkpoints(Path(target)) else None
    if resume is not None:  # the config is the checkpoint's: check the flags a resume may change
        import contextlib
        import io

        from .config import recorded_config
        from .distributed import check_rank_pieces
        from .envs.gym_adapter import _env_module, imports_code, treat_as_data
        from .logger import check_logs_readable
        from .run_setup import apply_resume_overrides, check_resumed_env, check_same_run, read_run_config, resumed_run_dir

        # the lock first: reading a live run's checkpoints could set its newest one aside mid-write
        named = ckpt.source_path(resume)
        if named.is_dir():  # a live run before its first checkpoint: in use (with the launcher to signal), first
            _check_not_in_use(named)
        src, own_dir = resumed_run_dir(resume)
        run_dir = own_dir
        if run_dir is None:  # a loose checkpoint file trains in the --run-dir given (without one, every rank refuses it)
            run_dir = getattr(args, "run_dir", None)
        if run_dir is not None:
            _check_not_in_use(Path(run_dir))
        for folder in ckpt.data_folders(src):  # as rank 0 does (run_setup.resolve_start) before any env import
            treat_as_data(folder)
        state = _resumable_unrenamed(resume)
        if own_dir is not None:  # another run's checkpoint copied in: every rank would refuse it (run_setup.resolve_start)
            check_same_run(state, own_dir, read_run_config(own_dir)[0])
        command = "resume" if args.command == "resume" else "train --resume"
        env_id = getattr(args, "env", None) if args.command == "resume" else getattr(args, "env_id", None)
        check_rank_pieces(state)  # as resumed_config does, first: a refusal that no --env would lift
        recorded = recorded_config(state["config"], source=state["path"])  # a field an older run lacks: as it ran
        # what rank 0 refuses of the env (run_setup.resumed_config): a recorded module env neither
        # named (--env) nor trusted, another env, one not registered; once here, not once per rank
        check_resumed_env(recorded, state, env_id, getattr(args, "trust_run", False), command)
        if imports_code(recorded.env_id):  # its module, named or trusted: every rank imports it, each with its own
            _env_module(recorded.env_id)  # line (rank 0's alone naming the folder the run was trained in): once, here
        with contextlib.redirect_stderr(io.StringIO()):  # its notes are rank 0's to say
            cfg = apply_resume_overrides(recorded, typed_flags(args), state)
        if own_dir is not None:  # what rank 0's logger would refuse (trainer.run), before it rewrites anything
            check_logs_readable(Path(own_dir))
        from .run_setup import check_processes

        # every rank would refuse it (train_state.restore) after torchrun started them all
        check_processes(state, nproc, launcher=True)
        check_nproc(nproc)  # after check_processes: a count other than the run's is told the run's
        check_rank_pieces(state)
        # what every rank checks of the config it resumes with (trainer.train: validate, then the
        # device flags), as a new run's is checked below: --threads 0, --device cuda without CUDA
        from .device import resolve_device
        from .trainer import check_device_flags

        validate(cfg, nproc, resume=True)
        check_device_flags(cfg, resolve_device(cfg.device), nproc, resumed=True)
        _check_nccl(resolve_device(cfg.device))
        return
    from .rundir import RunDirError
    from .run_setup import check_new_run_dir, preflight

    check_nproc(nproc)
    cfg = config_from_args(args, "proxima train")
    validate(cfg, nproc)
    preflight(cfg, nproc)  # device flags, the env, memory: what every rank would refuse alike
    from .device import resolve_device

    _check_nccl(resolve_device(cfg.device))
    run_dir = args.run_dir if getattr(args, "run_dir", None) is not None else cfg.run_dir
    if run_dir is not None:  # what rank 0's claim of the directory would refuse, as train --dry-run checks it
        try:
            check_new_run_dir(run_dir, overwrite=getattr(args, "overwrite", False),
                              restart=getattr(args, "resume", None) == "auto")
        except RunDirError as e:
            raise RunDirError(f"{e}{_launcher_note(Path(run_dir))}") from None
        _check_writable(Path(run_dir))
    if not getattr(args, "quiet", False):  # here, once for the job: the ranks leave it to the launcher (COMMAND_ENV)
        from .trainer import threads_note

        note = threads_note(cfg.threads, nproc)
        if note:
            print(f"proxima: note: {note}", file=sys.stderr)


def _check_nccl(device) -> None:
    """NCCL_SOCKET_IFNAME (check_nccl_ifname) for ranks that train on ``device``, the run's resolved --device:
    NCCL starts only at their first collective of CUDA tensors, so a --device cpu run never reads it, even
    where CUDA and NCCL are (its ranks join with 'cpu:gloo,cuda:nccl' all the same: distributed.init)."""
    from .distributed import check_nccl_ifname, nccl_used

    if device.type == "cuda" and nccl_used():
        check_nccl_ifname()


def _check_writable(run_dir: Path) -> None:
    """StorageError, in the words of rank 0's claim of ``run_dir`` (rundir.RunLock), when the folder
    it would create the run in (or the run directory itself, when it is there) is not writable for
    this user, by the system's own answer (access(2)): every rank would fail on it after start-up.
    Nothing is created to find out; what access(2) cannot tell (a folder where mkdir fails whoever
    asks, as in /proc) still fails in the ranks, with their line and exit 2."""
    import errno

    from .rundir import lock_write_error

    folder = next((p for p in (run_dir, *run_dir.parents) if p.exists()), None)
    if folder is None or not folder.is_dir() or os.access(folder, os.W_OK | os.X_OK):
        return
    code = errno.EROFS if os.statvfs(folder).f_flag & os.ST_RDONLY else errno.EACCES
    raise lock_write_error(run_dir, OSError(code, os.strerror(code)))


def _check_not_in_use(run_dir: Path) -> None:
    """rundir.check_not_in_use, naming the launcher to signal when the run is a --nproc run."""
    from .rundir import RunDirError, check_not_in_use

    try:
        check_not_in_use(run_dir)
    except RunDirError as e:
        raise RunDirError(f"{e}{_launcher_note(run_dir)}") from None


def _parent_pid(pid: int) -> Optional[int]:
    try:  # /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces and parentheses
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _launcher_note(run_dir: Path) -> str:
    """For a lock held by rank 0 of a live ``--nproc`` run on this machine: the process to signal. The
    lock names rank 0 (it writes the run), but the job is the launcher's: a stop sent there reaches
    every rank (a second one, 3 s later, ends them at once) and the launcher exits with its code. "" otherwise."""
    from .rundir import holder_alive, lock_copied_from, read_lock

    def cmdline(pid) -> bytes:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b""

    info = read_lock(run_dir) or {}
    pid = info.get("pid")
    if not (isinstance(pid, int) and pid > 0 and holder_alive(info)) or lock_copied_from(run_dir, info):
        return ""  # a lock copied with the run: its holder trains the original, never to be stopped for this one
    torchrun = _parent_pid(pid)
    if torchrun is None or b"proxima.torchrun" not in cmdline(torchrun):
        return ""
    launcher = _parent_pid(torchrun)
    if launcher is None or b"proxima" not in cmdline(launcher):  # torchrun started by hand
        return f"; pid {pid} is rank 0 of a multi-process run: stop the run by signalling its torchrun, pid {torchrun}"
    return (f"; pid {pid} is rank 0 of a --nproc run: stop that run by signalling its launcher, pid {launcher} "
            f"(kill -INT {launcher}: every rank checkpoints and stops)")


def _is_rlhf_run(path: Path) -> bool:
    from .rundir import recorded_kind

    return recorded_kind(path / "meta.json", strict=True) == "rlhf"


def _check_rlhf_resume(nproc: int, args) -> None:
    """``proxima resume RUN`` of an RLHF run (cli.cmd_resume starts its recorded process count): what
    every rank would refuse alike, before torchrun starts them (rlhf.api.check_resume)."""
    import torch

    from .device import resolve_device
    from .rlhf.api import check_resume
    from .rundir import check_not_in_use

    path = Path(args.path)
    check_not_in_use(path)
    cfg = check_resume(path, steps=getattr(args, "steps", None), trust_run=getattr(args, "trust_run", False))
    device = resolve_device(cfg.device)  # a recorded --device cuda where CUDA is not usable: one line
    if device.type == "cuda" and nproc > torch.cuda.device_count():
        raise ConfigError(f"--device {cfg.device}: {path} trains with {nproc} processes, one GPU each, and this machine has "
                          f"{torch.cuda.device_count()} CUDA device(s); resume it under the torchrun command that ran it "
                          "(docs/rlhf.md)")
    _check_nccl(device)


def _resumable_unrenamed(resume) -> dict:
    """checkpoint.load_resumable without setting a damaged newest checkpoint aside: this process holds no
    lock on the run, and may not be able to write there (a read-only folder, a colleague's run), where
    the rename failed with a traceback. Rank 0 sets it aside, with its note, once it holds the lock."""
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):  # its "resuming from ... instead" note is rank 0's to say
        return ckpt.load_resumable(resume, set_aside=False)


def _child_pids(pid: int) -> list:
    """Direct children of ``pid`` (Linux /proc; empty elsewhere)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the launcher dies (even by SIGKILL), so no rank is orphaned."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def early_stop_line(signum: int, args) -> str:
    """The line for a stop that came before any rank trained, in the words a single process uses for a
    stop before its first iteration (trainer.train): nothing of a new run is kept, a resumed run is untouched."""
    what = "the run is as its last checkpoint left it" if _resumes(args) else "nothing was kept"
    return f"proxima: stopped by {signal.Signals(signum).name}; before training started; {what}"


def _block_stops() -> None:
    """In torchrun's process, before it starts Python: the stops (STOPS) held until proxima.torchrun.main
    takes them (torchrun.EarlyStops). A stop forwarded while Python starts would otherwise land in the
    imports before ``main``, as a KeyboardInterrupt traceback (or SIGTERM's silent death)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)


def _preexec() -> None:
    _die_with_parent()
    _block_stops()


class _RankWatch:
    """Whether a rank of the torchrun ``pid`` has had proxima's stop handling in place: a rank catches
    SIGTERM from its run's start (trainer.train: signals.OutsideLoop) to its end, and says where a
    stop found it. One stopped before (Python starting, torch importing) exits 128 + signum without a
    line, as does torchrun: the launcher says it then (launch_torchrun). Polled from the start, as
    a rank past its run's end has no handler either, and a stop then is no stop before training.
    ``seen`` is True from the start where /proc lists no process's children: nothing to tell, no line."""

    def __init__(self, pid: int):
        me = os.getpid()
        self.seen = not Path(f"/proc/{me}/task/{me}/children").exists()
        self._pid, self._done = pid, threading.Event()
        self._thread = threading.Thread(target=self._poll, name="proxima-rank-watch", daemon=True)
        self._thread.start()

    def look(self) -> bool:
        if not self.seen:
            self.seen = any(handles_stops(rank) for rank in _child_pids(self._pid))
        return self.seen

    def _poll(self) -> None:
        while not self.look() and not self._done.wait(0.2):
            pass

    def close(self) -> None:
        self._done.set()
        self._thread.join()


def launch_torchrun(nproc: int, argv: list, env: Optional[dict] = None, announce: Optional[str] = None) -> int:
    """Run ``proxima <argv>`` (without --nproc) under torchrun with ``nproc`` processes; return its exit code.
    ``announce``: a line for stderr once the checks have passed (so a refused launch prints only its error).

    A stop (torchrun.STOPS: SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2) that comes before any rank could
    take it exits 128 + signum with one line, as a single process stopped before its first iteration: during the checks here, while torchrun
    starts, or while the ranks import torch (_RankWatch); from then on the ranks say where they stopped."""
    received: list = []
    forwarded: list = []
    proc = watch = None
    checking, early = True, []

    def on_stop(signum, frame):
        if checking:  # the checks build the env and may take seconds: a stop ends them
            early.append(signum)
            raise EarlyStop(signum)
        received.append(signum)
        if proc is not None:  # before, torchrun gets it once it is started (below)
            pass_on(signum)

    def pass_on(signum):
        try:
            if not forwarded:
                forwarded.append(signum)
                watch.look()  # whether a rank will say where it stopped, before the stop reaches them
                proc.send_signal(signum)  # torchrun passes it to every rank: checkpoint and stop
            else:
                for pid in _child_pids(proc.pid):  # the ranks: second signal, exit now
                    os.kill(pid, signum)
        except ProcessLookupError:
            pass

    old = {}
    if threading.current_thread() is threading.main_thread():
        for sig in caught_stops():
            old[sig] = signal.signal(sig, on_stop)
    try:
        try:
            _check(nproc, argv)
            if early:  # its exception swallowed where it landed (torch's C code importing NumPy clears any)
                raise EarlyStop(early[0])
            if announce:
                print(announce, file=sys.stderr)
            checking = False
        except KeyboardInterrupt as e:  # EarlyStop; a KeyboardInterrupt off the main thread
            signum = getattr(e, "signum", signal.SIGINT)
            print(early_stop_line(signum, argv), file=sys.stderr)
            return 128 + signum
        cmd = torchrun_command(nproc, argv)
        child_env = dict(os.environ if env is None else env)
        child_env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default too; --threads sets torch's own
        if SAFE_PATH_ENV and not child_env.get("PYTHONSAFEPATH"):  # see torchrun_command; PYTHONPATH entries (a
            child_env["PYTHONSAFEPATH"] = "1"  # user's own env package) still count
            child_env[SAFE_PATH_SET_ENV] = "1"  # a rank takes it out again for what it starts (proxima/__main__.py)
        # meta.json records the command the user typed (with --nproc), not the ranks' own argv
        child_env[COMMAND_ENV] = json.dumps(_typed_words(argv))
        # a session of its own: a Ctrl-C in the terminal reaches torchrun once (forwarded), not
        # twice (terminal + launcher), which would cut torchrun's graceful shutdown short
        started = subprocess.Popen(cmd, env=child_env, start_new_session=True,
                                   preexec_fn=_preexec if sys.platform.startswith("linux") else None)
        watch = _RankWatch(started.pid)
        proc = started
        if received and not forwarded:  # a stop while torchrun was being started: it takes it in its main
            pass_on(received[0])
        rc = proc.wait()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if proc is not None and proc.poll() is None:  # only when wait() itself was interrupted by an exception
            proc.terminate()
        if watch is not None:
            watch.close()
    if rc < 0:
        rc = 128 - rc
    if received and rc != 0:
        if rc == 128 + received[0] and not watch.seen:  # no rank said it (_RankWatch)
            print(early_stop_line(received[0], argv), file=sys.stderr)
        return 128 + received[0]
    return rc
