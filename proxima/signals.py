"""Clean stops: SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 finish the iteration, write a checkpoint, and exit
130/143/129/138/140.

SIGUSR1 and SIGUSR2 are a scheduler's request to checkpoint and stop before its time limit (Slurm's
``--signal=B:USR1@120``); their default action killed the run with no line, no checkpoint and its lock
left behind.

SIGHUP (an SSH session or terminal closed) stops a run as SIGTERM does, rather than killing it with
no checkpoint and its lock left behind; a SIGHUP that the process ignores (``nohup``) stays ignored
(stop_signals).

A second SIGINT exits at once (from the Python API it raises a plain KeyboardInterrupt instead, not
the first's TrainingInterrupted: SignalGuard's ``second_raises``); checkpoints are written
atomically (checkpoint.py), so the last one stays loadable whatever moment the process dies. Under
torchrun a repeat of the first signal within REPEAT_WINDOW seconds is the same stop delivered
twice, not a second interrupt (SignalGuard); in a single process the same goes for a repeat of any
stop signal but SIGINT within DUPLICATE_WINDOW (a job script that forwards SIGTERM, srun and the
scheduler both sending it).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from . import _startup

#: defined where the console script's first handling needs them (_startup); named here for launch and the CLI too
under_torchrun, resumes, stop_signals = _startup.under_torchrun, _startup.resumes, _startup.stop_signals


class TrainingInterrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM/SIGHUP stopped the run (after a checkpoint was written, in the loop); ``exit_code``
    is 128+signum. ``what``: the line after "stopped by SIG...; " (default: the checkpoint and the
    command that continues the run, ``proxima resume RUN_DIR``: a run's or a population's).

    A KeyboardInterrupt, so that a script's ``try: train(cfg) except KeyboardInterrupt:`` (the usual
    idiom) catches a first Ctrl-C's checkpointed stop as it catches a second Ctrl-C's immediate one,
    and a notebook shows an interrupt, not a foreign exception; ``except TrainingInterrupted`` (first,
    where both are caught) tells the checkpointed stop apart. SIGTERM's and SIGHUP's stop is this
    class too: ``signum`` and ``exit_code`` say which signal it was, whatever the class suggests.

    Not an Exception, as KeyboardInterrupt is not: outside the loop OutsideLoop raises it wherever
    the signal lands, in the env's code or a library's too, and an ``except Exception`` there (the env
    adapter's, which turns the env's errors into one EnvError line; a best-effort fallback) must not
    take it for the env's failure or swallow it."""

    def __init__(self, signum: int, checkpoint: Optional[Path], what: Optional[str] = None):
        super().__init__(f"stopped by {signal.Signals(signum).name}; {what or checkpoint_line(checkpoint)}")
        self.signum, self.checkpoint, self.exit_code, self.what = signum, checkpoint, 128 + signum, what

    def __reduce__(self):  # picklable: an env worker process (--vector async) may raise it to its parent
        return type(self), (self.signum, self.checkpoint, self.what)


def says_stops() -> bool:
    """Whether this process says a stop's lines ("SIGTERM received", "stopped by SIGTERM; ..."): not a torchrun
    rank other than 0, whose lines were rank 0's again (torchrun passes the stop to every rank,
    and the ranks agree on it: DistContext.agree_stop; a job of K processes printed each line K times)."""
    return not under_torchrun() or os.environ.get("RANK", "0") == "0"


def say_stopped(e: TrainingInterrupted) -> None:
    """The stop's line on stderr in one write (print(), its text, then the newline, let two processes' lines run
    together); rank 0's only under torchrun (says_stops)."""
    from .terminal import printable  # the run directory and env id in it are the run's: no escape reaches the terminal

    if says_stops():  # a SIGHUP's terminal may be gone: the exit code still says it
        _write_stderr(f"proxima: {printable(str(e))}\n")


def _holding_dir(checkpoint: Path) -> Path:
    """The run directory that holds ``checkpoint``: RUN for RUN/checkpoints/step_N.pt, else its folder."""
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent


def stopped_run_dir(e: TrainingInterrupted) -> Optional[Path]:
    """The run directory (a population's too) that holds the stop's checkpoint, as checkpoint_line names it
    in its ``continue with`` command; None for a stop without one (before training started: a new run's
    directory is not kept)."""
    if e.checkpoint is None:
        return None
    path = Path(e.checkpoint)
    return path.parent.parent if path.parent.name == "checkpoints" else path.parent


#: where workers_stopped's stop landed (train() says it of a new run's first iteration too, whose files it removes)
WORKERS_ENDED = "it ended the env's worker processes (--vector async) too, before the iteration's end"


def workers_stopped(stop: "Stop", vector: str, checkpoint: Optional[Path], what: str = "run") -> Optional[TrainingInterrupted]:
    """The TrainingInterrupted for an env failure during an iteration in which a stop signal arrived
    and the envs run in worker processes (--vector async): the same signal, sent to the process
    group, ended the workers too (they keep SIGTERM's default: gym_adapter._worker_signals). None
    otherwise: the failure is the env's own."""
    if not stop.signum or vector != "async":
        return None
    return TrainingInterrupted(stop.signum, checkpoint, f"{WORKERS_ENDED}; the {what} is as its last checkpoint left it; "
                               f"{checkpoint_line(checkpoint)}")


def checkpoint_line(checkpoint: Optional[Path], total: Optional[int] = None) -> str:
    """``checkpoint: RUN/checkpoints/step_N.pt; continue with: proxima resume RUN`` (a population's
    checkpoint is RUN/checkpoints/step_N.pt too: resume continues every member); ``proxima resume
    --env MODULE:CLASS RUN`` when the run trains a module env, which resume imports only when the
    user names it (env_flag); the command that works for a run of more processes than this machine
    has CPUs (resume_advice). None (no checkpoint on disk yet): ``no checkpoint was written``
    (docs/distributed.md). ``total``: the command continues to it (``--total-timesteps N``; from Python,
    ``PPOConfig(total_timesteps=N)``): a resume that extends the run and stops before its first checkpoint
    leaves the old target in the checkpoint, which a plain resume trains to."""
    if checkpoint is None:
        return "no checkpoint was written"
    path = Path(checkpoint)
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    command, how = continue_advice(run_dir)
    if total is not None:
        command = f"{command} --total-timesteps {total}"
    call = (python_resume(run_dir, total) if from_python() and os.environ.get("WORLD_SIZE", "1") == "1" and not how
            else None)
    if call is not None:  # a notebook continues the run in its own process; the shell command still works
        return f"checkpoint: {checkpoint}; continue with: {call} (in a shell: {command})"
    return f"checkpoint: {checkpoint}; continue with: {command}{how}"


#: whether the run going on in this context was started from Python (trainer.train without argv): the
#: lines that say how to go on (checkpoint_line, rundir.not_empty_message) then name train()'s
#: arguments, which a script or notebook can give, where the command line's name its flags
_PYTHON_CALLER: contextvars.ContextVar = contextvars.ContextVar("proxima_python_caller", default=False)


def hold_python_caller(python: bool) -> Callable[[], None]:
    """Set for a run whether its caller is Python (trainer.train: ``argv is None``) until the release
    this returns is called (train()'s ``held`` list); a context variable, so a run started by the CLI
    and one started from Python never see each other's."""
    token = _PYTHON_CALLER.set(bool(python))
    return lambda: _PYTHON_CALLER.reset(token)


def hold_python_unless_held() -> Callable[[], None]:
    """hold_python_caller(True) where nothing in this context has said who the caller is: a script's own
    make_env(), outside any run. A run holds its caller itself (trainer.train, train_population, load()),
    and the CLI holds False for its command (cli._command), so their env builds keep the words they had."""
    if _PYTHON_CALLER in contextvars.copy_context():
        return lambda: None
    return hold_python_caller(True)


#: the session (rundir.RunSession) of the new run training now, whose directory a second signal's immediate
#: exit removes while it has no checkpoint (SignalGuard), as train() does for a first stop before the run trained
_FRESH_RUN: contextvars.ContextVar = contextvars.ContextVar("proxima_fresh_run", default=None)


def hold_fresh_run(session) -> Callable[[], None]:
    """Name ``session`` (a RunSession that claimed a new run's directory) for a second signal's exit, until the
    release this returns is called. Its discard_fresh removes only what the new run wrote, and nothing of a
    run that has a checkpoint; a resumed run's session claimed nothing, so nothing of it is removed."""
    token = _FRESH_RUN.set(session)
    return lambda: _FRESH_RUN.reset(token)


def _discard_fresh_run() -> bool:
    """Remove the new run's files (hold_fresh_run) before a second signal's exit; whether nothing of it is
    left (a folder that was there before the run stays, empty). Best effort: the exit follows regardless."""
    session = _FRESH_RUN.get()
    run_dir = getattr(session, "created", None)
    if run_dir is None:
        return False
    try:
        session.discard_fresh()
        return not os.path.lexists(run_dir) or not any(Path(run_dir).iterdir())
    except Exception:  # noqa: BLE001 - in a signal handler: never fail on the way out
        return False


def ignore_stops(code=0) -> None:
    """The command has returned its status ``code`` and the process is ending (distributed.exit_process):
    a stop signal from now on ends it at once with that status, never 128 + signum. Interpreter shutdown
    takes a second or more after a run (torch's teardown): a SIGUSR1 or SIGTERM then (a Slurm job's
    warning) ended a finished run 138 or 143 with no line, and its job script requeued it.

    Two stages, because shutdown first joins the user's threads and runs the atexit hooks (either can
    hang: an env's simulator thread), then puts the default actions back for handlers written in Python:
    until the atexit hooks run, a stop flushes the output and exits ``code`` at once (a hung shutdown
    stays stoppable); from the atexit hooks on, the stop signals are ignored (SIG_IGN survives the
    defaults being put back), for the module teardown that follows. Nothing is started after it, so no
    child inherits it."""
    import atexit

    status = code if isinstance(code, int) else 1

    def finish(signum, frame):
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)

    if threading_main():
        for sig in stop_signals():
            with contextlib.suppress(OSError, ValueError):
                signal.signal(sig, finish)
        atexit.unregister(_ignore_stop_signals)  # once, however many commands one process ran (tests)
        atexit.register(_ignore_stop_signals)  # registered last, run first: the hooks before it may hang


def _ignore_stop_signals() -> None:
    """SIG_IGN for the stop signals: ignore_stops' second stage (an atexit hook)."""
    for sig in stop_signals():
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_IGN)


def from_python() -> bool:
    """Whether the run going on was started from Python (hold_python_caller)."""
    return _PYTHON_CALLER.get()


def python_resume(run_dir, total: Optional[int] = None) -> Optional[str]:
    """``proxima.train(None, resume='RUN')``, with ``env_id='module:Class'`` for a run of a module env
    (a resume imports it only when named: module_env): how a Python caller continues the run
    ``run_dir`` with the config it recorded, whatever the config in hand says (``train(cfg,
    resume='auto')`` starts a new run when cfg names no run_dir). A population's directory:
    ``proxima.train_population(None, resume='RUN')``, whose config names a module env
    (``proxima.PPOConfig(env_id='module:Class')`` in place of None: train_population has no env_id).
    ``total``: to that target, ``proxima.PPOConfig(total_timesteps=N)`` in place of None (after a
    population's env_id). None for a run of several processes (recorded_world): train() in one process
    cannot resume it, its command line can; None too for an RLHF run's directory, which train() does
    not resume."""
    from .rundir import recorded_kind

    run_dir = Path(run_dir)
    target = [] if total is None else [f"total_timesteps={total}"]
    if os.path.lexists(run_dir / "population.json"):
        env_id = module_env(run_dir)
        fields = ([] if env_id is None else [f"env_id={env_id!r}"]) + target
        config = f"proxima.PPOConfig({', '.join(fields)})" if fields else "None"
        return f"proxima.train_population({config}, resume={str(run_dir)!r})"
    if recorded_world(run_dir) > 1 or recorded_kind(run_dir / "meta.json") == "rlhf":
        return None
    env_id = module_env(run_dir)
    config = f"proxima.PPOConfig({target[0]})" if target else "None"
    return f"proxima.train({config}, resume={str(run_dir)!r}" + ("" if env_id is None else f", env_id={env_id!r}") + ")"


def resume_command(run_dir, world: Optional[int] = None) -> str:
    """``proxima resume RUN``, with the ``--env`` a run of a ``module:Class`` env needs (env_flag: a
    resume never imports a module named only in the run's files) and the path shell-quoted (a path
    with a space or ``$(...)`` pastes as itself); ``proxima train [ENV_ID] --resume RUN --nproc K``
    where `proxima resume` would refuse the run's K processes and that command starts them
    (resume_route "nproc"). ``world``: the run's process count (None: its meta.json's)."""
    return resume_advice(run_dir, world)[0]


def continue_advice(run_dir) -> tuple:
    """(command, how) of resume_advice for the run ``run_dir`` that this process trains: under a torchrun
    of several machines (LOCAL_WORLD_SIZE below WORLD_SIZE) the ranks' own ``proxima resume RUN`` and
    ", under the same torchrun command (K processes)"; else resume_advice for this job's WORLD_SIZE
    (unset: the run's meta.json's). The stop line (checkpoint_line) and train's closing 'train on:'
    line (cli.next_commands) both say it, so they name the same command."""
    world = os.environ.get("WORLD_SIZE", "1")
    # a resume needs as many processes (train_state.load): `proxima resume` starts them on one machine
    if world.isdigit() and int(world) > 1 and os.environ.get("LOCAL_WORLD_SIZE", world) != world:
        # the ranks' own command: what each machine's torchrun runs
        return resume_command(run_dir, 1), f", under the same torchrun command ({world} processes)"
    return resume_advice(run_dir, int(world) if world.isdigit() and int(world) > 1 else None)


def resume_advice(run_dir, world: Optional[int] = None, path=None) -> tuple:
    """(command, how): resume_command's command and what to add after it: ", under the same torchrun
    command (K processes)" for a run that only its own torchrun command can resume here (resume_route
    "torchrun"), else "". ``path``: what the command resumes from where it is not ``run_dir`` (a
    checkpoint in RUN/checkpoints/, or a loose one: ``run_dir`` None, no run files to read), as
    `proxima resume PATH`'s refusal names it (cli._written_by)."""
    run_dir = None if run_dir is None else Path(run_dir)
    flag = "" if run_dir is None else env_flag(run_dir)
    quoted = shlex.quote(str(run_dir if path is None else path))
    if world is None:
        world = 1 if run_dir is None else recorded_world(run_dir)
    try:
        route = resume_route(run_dir, world)
    except Exception:  # noqa: BLE001 - a stop's line must come out whatever the run's files hold
        route = "resume"
    if route == "nproc":  # train takes a module env as ENV_ID, where resume takes --env
        return f"proxima train {flag[len('--env '):]}--resume {quoted} --nproc {world}", ""
    how = f", under the same torchrun command ({world} processes)" if route == "torchrun" else ""
    return f"proxima resume {flag}{quoted}", how


def resume_route(run_dir: Optional[Path], world: int) -> str:
    """How a PPO run of ``world`` processes resumes on this machine, the one decision of the refusal of
    `proxima resume` (cli._written_by) and of every line that suggests a command: "resume" (`proxima
    resume` starts them: no more than the CPUs this process may use, cpuinfo.usable_cpus, a recorded
    count being data); "nproc"
    (more: a run that `train --nproc K` started resumes with `proxima train --resume RUN --nproc K`,
    up to launch.PROCS_PER_CPU x the CPUs); "torchrun" (more still, or a run torchrun started by hand:
    under its own torchrun command). An RLHF run above the CPUs is "torchrun": it has no --nproc, and
    rlhf.api.resume_processes refuses `proxima resume` there.
    ``run_dir`` None: no run's files (a loose checkpoint), taken as a run of `train --nproc K`."""
    from .cpuinfo import usable_cpus

    cpus = usable_cpus()
    if world <= cpus:
        return "resume"
    from .rundir import recorded_kind

    if run_dir is not None and recorded_kind(Path(run_dir) / "meta.json") == "rlhf":
        return "torchrun"
    from .launch import PROCS_PER_CPU

    by_hand = run_dir is not None and started_by_torchrun(Path(run_dir))
    return "torchrun" if by_hand or world > PROCS_PER_CPU * cpus else "nproc"


def started_by_torchrun(run_dir: Path) -> bool:
    """Whether ``run_dir``'s meta.json records a launch by torchrun started by hand (which may have
    spanned several machines): its command lacks --nproc, which `train --nproc K` records. Unknown
    (no meta.json, an unreadable one) counts as not: `train --resume ... --nproc K` works on one
    machine either way."""
    import json

    from .rundir import RunFileError, read_run_text

    try:
        command = json.loads(read_run_text(Path(run_dir) / "meta.json")).get("command")
    except (OSError, RunFileError, ValueError, AttributeError):
        return False
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        return False
    return not any(a == "--nproc" or a.startswith("--nproc=") for a in command)


def recorded_world(run_dir: Path) -> int:
    """The process count the run ``run_dir`` records (meta.json's world_size; every checkpoint of a
    run has that count: a resume with another is refused); 1 when unknown. Only read for a line
    that suggests a command: it starts nothing."""
    import json

    from .rundir import read_run_text

    try:
        world = json.loads(read_run_text(Path(run_dir) / "meta.json")).get("world_size", 1)
    except Exception:  # noqa: BLE001 - a stop's line must come out whatever the run's files hold
        return 1
    return world if isinstance(world, int) and not isinstance(world, bool) and world > 1 else 1


def eval_command(run_dir) -> str:
    """``proxima eval RUN``, with the ``--env`` and quoting of resume_command (eval, as resume, builds a
    module:Class env only when --env names it)."""
    return f"proxima eval {env_flag(Path(run_dir))}{shlex.quote(str(run_dir))}"


def env_flag(run_dir: Path) -> str:
    """``--env ENV_ID `` when the env id ``run_dir`` records (population.json's, else config.yaml's:
    what the run trains now, a resume's --env included) is one a resume refuses to import unless
    the user names it (run_setup.check_resumed_env: gym_adapter.imports_code); else "". Read from
    the run's files rather than passed in, so that every stop line (a run's, a population's, a
    worker's) says it; best effort: on the way out of a stop, an unreadable file only leaves it out."""
    env_id = module_env(run_dir)
    return "" if env_id is None else f"--env {shlex.quote(env_id)} "


def module_env(run_dir: Path) -> Optional[str]:
    """The env id of env_flag's ``--env`` (a ``module:Class`` one ``run_dir`` records), else None."""
    try:
        import json

        from .config import load_yaml
        from .rundir import read_run_text

        try:
            recorded = json.loads(read_run_text(run_dir / "population.json"))
        except FileNotFoundError:
            recorded = load_yaml(read_run_text(run_dir / "config.yaml"))
        env_id = recorded.get("env_id") if isinstance(recorded, dict) else None
        if not isinstance(env_id, str):  # an RLHF run's config has none: gymnasium need not be imported for it
            return None
        from .envs.gym_adapter import imports_code

        if imports_code(env_id):
            return env_id
    except Exception:  # noqa: BLE001 - the stop's line must come out whatever the run's files hold
        pass
    return None


def loop_stopped(signum: int, checkpoint, complete: bool) -> TrainingInterrupted:
    """The loop's stop after ``checkpoint`` (a run's or a population's); ``complete``: that checkpoint
    ends the training (the last iteration, or --stop-return's), so what `proxima resume` "continues"
    is the end-of-run evaluation."""
    if not complete:
        return TrainingInterrupted(signum, checkpoint)
    return TrainingInterrupted(signum, checkpoint, "after the final checkpoint, before the end-of-run evaluation; training "
                               f"is complete; {checkpoint_line(checkpoint)} (it trains nothing more and evaluates)")


@dataclass
class Stop:
    signum: int = 0
    #: set by the loop as the final checkpoint is written: a stop now comes after that checkpoint, with
    #: training complete, so the handler's line says so rather than "after this iteration"
    final: bool = False


def _write_stderr(text: str) -> None:
    """A line from a signal handler: after a SIGHUP the terminal may be gone (EIO), and an error raised
    here would land in the training loop where the signal did, in place of the stop and its checkpoint."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


#: seconds after the first signal in which the same signal again is the same stop (SignalGuard)
REPEAT_WINDOW = 3.0

#: the same for a single process (SignalGuard's window 0), for every stop signal but SIGINT: a job
#: script that forwards SIGTERM, or srun and the scheduler, deliver one stop twice within milliseconds;
#: a second Ctrl-C is a user's deliberate act and still exits at once
DUPLICATE_WINDOW = 1.0

#: set by proxima.torchrun for the ranks it starts: a file it creates just before it ends the job with
#: SIGTERM because a rank failed (torch's agent sends that SIGTERM as it would pass on a user's stop)
TEARDOWN_ENV = "PROXIMA_TEARDOWN_FILE"


def torn_down(signum: int) -> bool:
    """Whether ``signum`` is torchrun's SIGTERM ending the job after another rank failed (TEARDOWN_ENV's
    file exists), not a user's stop: the failed rank's peers are gone, so no checkpoint can follow,
    and the collective this rank meets next fails and says so with the last checkpoint
    (DistContext.report_failure). One stat, safe in a signal handler."""
    path = os.environ.get(TEARDOWN_ENV)
    return bool(path) and signum == signal.SIGTERM and os.path.exists(path)


class SignalGuard:
    """First SIGINT/SIGTERM: finish the iteration, checkpoint, stop. Second SIGINT: exit at once
    (checkpoints are written atomically, so the last one stays loadable).

    ``second_raises`` (the trainer passes it for a run started from Python, trainer.train without
    argv): a second SIGINT raises KeyboardInterrupt where it lands instead of os._exit, which took a
    Jupyter kernel, and everything the user had in it, down with the run; train() then ends the env
    workers, releases the run's lock and puts back the caller's settings on the way out. A second
    SIGTERM still exits at once: it asks for the process to end.

    ``repeat_window`` (seconds; the trainer passes REPEAT_WINDOW under torchrun): the same signal
    again within that long of the first is ignored. A job-wide stop reaches a rank twice: once
    directly (Slurm's scancel and time limit, systemd's KillMode=control-group signal every process)
    and once more a moment later from torchrun, which passes on what it got (twice, when the
    launcher forwards a copy to it too); taken as a second interrupt it killed rank 0 before its
    checkpoint. A single process keeps the immediate second Ctrl-C (window 0), but takes a repeat of
    SIGTERM, SIGHUP, SIGUSR1 or SIGUSR2 within DUPLICATE_WINDOW for the same stop delivered twice.
    ``last_checkpoint``: returns the checkpoint on disk (None: none yet), so the exit line is true; every guard
    has one (the trainer's, a population's, RLHF's loop), which a second signal's line names.
    ``run_dir`` (the trainer passes it): the directory this process trains in, whose lock a second signal removes;
    a checkpoint outside it (a resume's loose FILE, ``proxima resume FILE --run-dir NEW``, before NEW's first
    checkpoint) is not this run's, and the lines say none was written. Without it, the directory holding the
    last checkpoint."""

    def __init__(self, last_checkpoint: Callable[[], Optional[Path]], repeat_window: float = 0.0,
                 second_raises: bool = False, run_dir: Optional[Path] = None):
        self.stop = Stop()
        self._run_dir = run_dir
        self._raises = bool(second_raises)
        self._old = {}
        self._last_checkpoint = last_checkpoint
        self._window = float(repeat_window)
        self._first_at = 0.0
        from .logger import _is_terminal  # here, not in the handler: no import where a signal lands
        from .rundir import remove_own_lock

        self._is_terminal = _is_terminal
        self._remove_own_lock = remove_own_lock

    def __enter__(self):
        if threading_main():
            outside = getattr(signal.getsignal(signal.SIGINT), "__self__", None)
            if isinstance(outside, OutsideLoop):  # a stop before the loop that was swallowed where it landed
                outside.check()
            for sig in stop_signals():
                self._old[sig] = signal.signal(sig, self._handle)
        return self.stop

    def _handle(self, signum, frame):
        if torn_down(signum):  # no line: "writing a checkpoint after this iteration" would be false, the peers are gone
            self.stop.signum = self.stop.signum or signum  # an evaluation under way is cut short for the next collective
            return
        now = time.monotonic()
        if self.stop.signum:
            window = self._window or (0.0 if signum == signal.SIGINT else DUPLICATE_WINDOW)
            if signum == self.stop.signum and now - self._first_at < window:
                return  # the same stop delivered again (directly and through torchrun): keep going to the checkpoint
            if self._raises and signum == signal.SIGINT:
                _write_stderr(f"{self._lead()}proxima: second interrupt, stopping now without this iteration's "
                              f"checkpoint ({self._kept()}): KeyboardInterrupt\n")
                raise KeyboardInterrupt
            # which signals, unless two Ctrl-Cs (the usual case, which the line's words already say)
            which = ("" if signum == self.stop.signum == signal.SIGINT else
                     f": {signal.Signals(signum).name} after {signal.Signals(self.stop.signum).name}")
            kept = self._kept()
            if kept == "no checkpoint was written" and _discard_fresh_run():
                kept += "; nothing was kept"  # a new run's directory is gone, as a first stop's before its checkpoint
            # flushed: os._exit flushes nothing
            _write_stderr(f"{self._lead()}proxima: second interrupt, exiting now ({kept}){which}{self._resume()}\n")
            self._leave_run()
            os._exit(128 + signum)
        self.stop.signum, self._first_at = signum, now
        if self._window:
            again = (f"the same signal again {self._window:g} s or more from now "
                     + ("stops at once with KeyboardInterrupt" if self._raises and signum == signal.SIGINT else "exits at once"))
        elif signum == signal.SIGINT:  # "interrupt": a Ctrl-C
            again = "interrupt again to " + ("stop at once with KeyboardInterrupt" if self._raises else "exit at once")
        else:  # the same signal within DUPLICATE_WINDOW is the same stop delivered twice: only later does it exit
            later = f"the same signal again {DUPLICATE_WINDOW:g} s or more from now"
            again = (f"interrupt to stop at once with KeyboardInterrupt; {later} exits at once" if self._raises
                     else f"interrupt, or {later}, to exit at once")
        what = ("training is complete: stopping after the final checkpoint, before the end-of-run evaluation"
                if self.stop.final else "writing a checkpoint after this iteration")
        if says_stops():
            _write_stderr(f"{self._lead()}proxima: {signal.Signals(signum).name} received; {what} ({again})\n")

    def _lead(self) -> str:
        """A newline first where stderr redraws a progress bar's '\\r' frame in place (a terminal, Jupyter),
        so that the message does not land inside the frame; elsewhere (a log file, logger.LineProgress's
        whole lines) it would only leave a blank line."""
        try:
            return "\n" if self._is_terminal(sys.stderr) else ""
        except Exception:  # noqa: BLE001 - in a signal handler: never fail on the way out
            return "\n"

    def _last(self) -> Optional[Path]:
        """The run's last checkpoint: None before one is written, and for a resume's loose checkpoint outside
        ``run_dir``, whose folder `proxima resume` refuses as no run directory."""
        try:
            last = self._last_checkpoint()
            if last is None or self._run_dir is None:
                return last
            held = _holding_dir(Path(last))
            same = os.path.abspath(held) == os.path.abspath(self._run_dir) or os.path.samefile(held, self._run_dir)
            return last if same else None
        except Exception:  # noqa: BLE001 - in a signal handler: never fail on the way out
            return None

    def _kept(self) -> str:
        return "last checkpoint kept" if self._last() else "no checkpoint was written"

    def _resume(self) -> str:
        """``; checkpoint: RUN/checkpoints/step_N.pt; continue with: proxima resume RUN`` (checkpoint_line)
        after a second signal's line, when a checkpoint is on disk; else ""."""
        last = self._last()
        if not last:
            return ""
        try:
            return f"; {checkpoint_line(last)}"
        except Exception:  # noqa: BLE001 - in a signal handler: never fail on the way out
            return ""

    def _leave_run(self) -> None:
        """Before a second signal's os._exit (which runs no cleanup): the run's lock (``run_dir``'s, or the last
        checkpoint's directory's) removed when this process holds it (the next resume then says nothing of a lock
        left behind, as after a first stop), and, when the run has a checkpoint on disk, ``run directory: D`` as
        stdout's last line, as a first stop's (a script's ``| tail -1``; rank 0 only). Best effort: the exit
        follows regardless."""
        last = self._last()
        run_dir = self._run_dir if self._run_dir is not None else (None if last is None else _holding_dir(Path(last)))
        if run_dir is None:
            return
        try:
            self._remove_own_lock(run_dir)
        except Exception:  # noqa: BLE001 - in a signal handler: never fail on the way out
            pass
        if last is None or os.environ.get("RANK", "0") != "0":
            return  # no checkpoint of its own: no line, as a first stop's without one (stopped_run_dir)
        run_dir = _holding_dir(Path(last))  # as the stderr line's `continue with` names it
        try:
            sys.stdout.flush()
        except Exception:  # noqa: BLE001 - a write the signal cut short: the line still goes out below
            pass
        try:
            os.write(sys.stdout.fileno(), f"run directory: {run_dir}\n".encode(errors="replace"))
        except Exception:  # noqa: BLE001 - no stdout (closed, a notebook's stream without a descriptor)
            pass

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


class BeforeTraining:
    """From the command line's start (cli.entry, before torch imports) to the handover to a run's own
    handling: SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 raise TrainingInterrupted("before training
    started; ``what``"), whose line and 128+signum the CLI prints and exits with, where SIGTERM's
    default killed the process with no line (143) and a Ctrl-C printed a KeyboardInterrupt traceback.
    Nothing is on disk yet: the run's directory is created under OutsideLoop (trainer.train).

    OutsideLoop, as it installs its own handlers, takes over (``handed_over``): it restores the
    handlers from before this guard when it ends, never this guard's "before training started", and
    takes on a stop whose exception was swallowed where it landed (C code importing NumPy for torch
    clears any error), raised as its handling starts. Once ``retire``d (a torchrun launch that put
    this guard back as it ended), a signal meets the handling from before this guard. A torchrun
    rank has none: the launcher says a rank's stop before training (launch._RankWatch).

    While ``holding`` (torch's import), a signal is only recorded, and ``check()`` raises it after:
    torch's C++ calls Python code as it imports, and an exception raised there aborted the process
    ("terminate called after throwing an instance of 'pybind11::error_already_set'", SIGABRT)."""

    def __init__(self, what: str = "nothing was kept"):
        self.what, self.signum, self.retired, self.holding, self._old = what, 0, False, False, {}

    def __enter__(self):
        if threading_main() and not under_torchrun():
            # a signal between two installs (its handler in place, the next one's not yet) is raised once
            # all are: raised inside signal.signal, it left the others default and escaped as a traceback
            self.holding = True
            try:
                for sig in stop_signals():
                    old = signal.signal(sig, self._handle)
                    # the console script's first handler (_startup) hands over: what was there before it is put back
                    self._old[sig] = _startup.original(sig) if old is _startup._handle else old
            finally:
                self.holding = False
            self.check()
        return self

    def _handle(self, signum, frame):
        if self.retired:  # as before this guard: SIGTERM's default ends the process, SIGINT's raises KeyboardInterrupt
            signal.signal(signum, self._old.get(signum, signal.SIG_DFL))
            signal.raise_signal(signum)
            return
        self.signum = self.signum or signum
        if not self.holding:
            raise TrainingInterrupted(signum, None, f"before training started; {self.what}")

    def handed_over(self, sig: int):
        """The handler from before this guard for ``sig``, for OutsideLoop to restore in its place."""
        self.retired = True
        return self._old.get(sig, signal.SIG_DFL)

    def retire(self) -> None:
        self.retired = True

    def check(self) -> None:
        """Raise TrainingInterrupted when a signal has arrived (its first exception may have been swallowed)."""
        if self.signum and not self.retired:
            raise TrainingInterrupted(self.signum, None, f"before training started; {self.what}")

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()
        return False


def retire_before_training() -> None:
    """Retire the BeforeTraining guard that a command's own handling put back as it ended (BeforeTraining.retire)."""
    if threading_main():
        for sig in stop_signals():
            guard = getattr(signal.getsignal(sig), "__self__", None)
            if isinstance(guard, BeforeTraining):
                guard.retire()


class OutsideLoop:
    """Around a whole run, outside the loop's SignalGuard (building the env and agent, writing
    config.yaml and meta.json, the end-of-run evaluation): SIGINT/SIGTERM raise TrainingInterrupted
    at once, with no checkpoint, so the caller can take back a new run's files and its lock rather
    than die half-written (SIGTERM's default) or with a KeyboardInterrupt that skips the cleanup.
    The loop's SignalGuard replaces these handlers while it runs and restores them after.

    A signal whose exception was swallowed where it landed (a probe that catches everything but a
    Ctrl-C's own KeyboardInterrupt: doctor.collect, for meta.json) is raised again by ``check()``, which the
    loop's SignalGuard calls as it starts: the stop comes late, before the first iteration, but
    is never lost. Within ``stops_held()`` a signal is only recorded, and raised as that block ends."""

    def __init__(self):
        self._old = {}
        self.signum = 0
        self.held = 0  # nested stops_held() blocks now running
        self.failing = False  # hold_for_failure()

    def hold_for_failure(self) -> None:
        """From now on a signal is ignored: the run is failing because another rank is gone, and the
        SIGTERM that torchrun ends the job with would otherwise land in the failure's report and replace
        its line (which names the last checkpoint) with "stopped by SIGTERM; no checkpoint was written"."""
        self.failing = True

    def __enter__(self):
        if threading_main():
            for sig in stop_signals():
                old = signal.signal(sig, self._handle)
                early = getattr(old, "__self__", None)
                if isinstance(early, BeforeTraining):  # the CLI's guard hands over, with a stop it may have had
                    old, self.signum = early.handed_over(sig), self.signum or early.signum
                self._old[sig] = old
            # the guard's stop, swallowed where it landed: raised now, where the caller takes back what it made
            self.check()
        return self

    def _handle(self, signum, frame):
        if self.failing:  # the run's failure is the line to read (hold_for_failure)
            return
        if torn_down(signum):
            # torchrun ending the job after another rank failed (as set up, before the loop): this rank's
            # next collective fails with the lost-contact line; "stopped by SIGTERM; nothing was kept" was false
            self.failing = True
            return
        if self.held:  # raised by stops_held() as its block ends
            self.signum = self.signum or signum
            return
        self.signum = signum
        raise TrainingInterrupted(signum, None)

    def check(self) -> None:
        """Raise TrainingInterrupted when a signal has arrived (its first exception may have been swallowed)."""
        if self.signum:
            raise TrainingInterrupted(self.signum, None)

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


@contextlib.contextmanager
def stops_held():
    """A few steps that must all happen or none (RunSession taking a run's lock and recording that it
    holds it): a SIGINT/SIGTERM that lands meanwhile is recorded by OutsideLoop's handler and raised
    as the block ends, where the caller's cleanup finds the lock either not taken or held and
    recorded, never a lock file (or its temp file) that no one will remove. A no-op where OutsideLoop's
    handler is not installed, and off the main thread (Python runs handlers in the main thread only).

    Not the signal mask (pthread_sigmask): it is one thread's, and the OS delivers a signal sent to
    the process to any thread that does not block it (torch's, gloo's under torchrun), after which
    Python runs the handler in the main thread all the same."""
    outside = getattr(signal.getsignal(signal.SIGINT), "__self__", None) if threading_main() else None
    if not isinstance(outside, OutsideLoop):
        yield
        return
    outside.held += 1
    try:
        yield
    finally:
        outside.held -= 1
        if not outside.held:
            outside.check()


def threading_main() -> bool:
    return threading.current_thread() is threading.main_thread()
