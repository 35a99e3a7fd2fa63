"""Stop signals at a command's edges: after a run has finished (interpreter shutdown) a signal changes no
exit status; a second signal before a new run's first checkpoint keeps no run directory; a signal while the
command's modules import is one line, no traceback; a repeated SIGTERM's first line says what exits at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proxima import distributed
from proxima.signals import DUPLICATE_WINDOW, SignalGuard, stop_signals

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

PROXIMA = str(Path(sys.executable).with_name("proxima"))


def _env(**extra) -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **extra)


def _wait_for(predicate, timeout: float = 120.0, proc=None) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the command ended (rc {proc.returncode}) before what the test waits for")
        if time.monotonic() > end:
            raise AssertionError("timed out")
        time.sleep(0.02)


def _catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (/proc's SigCgt mask); True where there is no /proc."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    mask = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(mask >> (sig - 1) & 1)


class _Exited(Exception):
    pass


@pytest.fixture
def exits(monkeypatch):
    """os._exit raises _Exited(code) instead of ending pytest."""
    def exited(code):
        raise _Exited(code)

    monkeypatch.setattr(os, "_exit", exited)


@pytest.fixture
def handlers():
    """The stop signals' handlers put back after the test."""
    saved = {sig: signal.getsignal(sig) for sig in stop_signals()}
    yield
    for sig, old in saved.items():
        signal.signal(sig, old)


# (1) a signal once the command has returned
def test_once_the_command_returned_its_status_the_stop_signals_are_ignored_through_shutdown(handlers):
    with pytest.raises(SystemExit) as done:
        distributed.exit_process(lambda: 0)
    assert done.value.code == 0
    # was: the default actions, put back by interpreter shutdown: a SIGUSR1 ended a finished run 138. Until the
    # atexit hooks, a stop exits with the command's status (a hung shutdown stays stoppable); from them on, ignored
    installed = {sig: signal.getsignal(sig) for sig in stop_signals()}
    assert all(callable(h) and h not in (signal.SIG_IGN, signal.SIG_DFL) for h in installed.values())
    from proxima.signals import _ignore_stop_signals

    _ignore_stop_signals()  # what the atexit hook does
    assert {sig: signal.getsignal(sig) for sig in stop_signals()} == {sig: signal.SIG_IGN for sig in stop_signals()}


def test_a_stop_during_a_hung_shutdown_exits_with_the_commands_status_at_once(tmp_path):
    # a user env's simulator thread (not a daemon) keeps shutdown waiting: SIG_IGN made the finished process
    # unstoppable but by SIGKILL; a stop now ends it with the command's own status (fresh-eyes review, 1f23e81)
    script = tmp_path / "hang.py"
    script.write_text(
        "import sys, threading, time\n"
        "from proxima import distributed\n"
        "def main():\n"
        "    threading.Thread(target=time.sleep, args=(600,)).start()\n"
        "    print('returned', flush=True)\n"
        "    return 3\n"
        "distributed.exit_process(main)\n")
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "returned\n"
        time.sleep(0.3)  # in threading's shutdown join, the hook that ignores stops not yet run
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3, proc.stderr.read()


def test_a_sigusr1_just_after_a_finished_run_leaves_exit_status_0(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen([PROXIMA, "train", "CartPole-v1", "--num-envs", "2", "--num-steps", "32",
                             "--total-timesteps", "128", "--eval-episodes", "1", "--run-dir", str(run)],
                            cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    last = proc.stdout.readline()
    while last and not last.startswith("run directory:"):
        last = proc.stdout.readline()
    assert last == f"run directory: {run}\n"  # the command's last line: it has returned
    time.sleep(0.1)
    proc.send_signal(signal.SIGUSR1)  # Slurm's warning, a moment late
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err  # was 138, no line: the job script requeued a finished run
    assert (run / "eval.json").is_file()
    assert "stopped by" not in err


# (2) a second signal before a new run's first checkpoint
def test_a_second_sigint_before_the_first_checkpoint_keeps_no_run_directory(tmp_path):
    run = tmp_path / "run"
    err_path = tmp_path / "err"
    with open(err_path, "w") as err_file:
        proc = subprocess.Popen([PROXIMA, "train", "CartPole-v1", "--num-envs", "2", "--num-steps", "4096",
                                 "--total-timesteps", "1000000", "--eval-episodes", "0", "--run-dir", str(run)],
                                cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=err_file, text=True)
        try:
            # a row logged: in the loop, its first iteration done, no checkpoint (every 50 iterations)
            _wait_for(lambda: (run / "metrics.csv").is_file() and len((run / "metrics.csv").read_text().splitlines()) >= 2,
                      proc=proc)
            proc.send_signal(signal.SIGINT)
            _wait_for(lambda: "SIGINT received" in err_path.read_text(), proc=proc)
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    err = err_path.read_text()
    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == "proxima: second interrupt, exiting now (no checkpoint was written; nothing was kept)"
    # was: run/ kept with its lock, config.yaml, metrics.csv and an empty checkpoints/, which the same command refused
    assert not run.exists()
    assert "run directory:" not in out


class _Session:
    def __init__(self, created):
        self.created, self.discarded = created, 0

    def discard_fresh(self):
        self.discarded += 1
        for entry in self.created.iterdir():
            entry.unlink()
        self.created.rmdir()


def test_a_second_sigterm_removes_only_a_new_runs_files_and_says_so(tmp_path, exits, capsys):
    from proxima.signals import hold_fresh_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("global_step\n")
    release = hold_fresh_run(_Session(run))
    try:
        guard = SignalGuard(last_checkpoint=lambda: None)
        guard._handle(signal.SIGTERM, None)
        time.sleep(DUPLICATE_WINDOW + 0.05)
        with pytest.raises(_Exited) as code:
            guard._handle(signal.SIGTERM, None)
    finally:
        release()
    assert code.value.args == (143,)
    assert not run.exists()
    assert capsys.readouterr().err.splitlines()[-1] == ("proxima: second interrupt, exiting now (no checkpoint was "
                                                         "written; nothing was kept): SIGTERM after SIGTERM")


def test_a_second_sigint_of_a_resumed_run_removes_nothing(tmp_path, exits, capsys):
    from proxima.signals import hold_fresh_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("global_step\n")
    session = _Session(None)  # a resume locks its run and claims no new directory
    release = hold_fresh_run(session)
    try:
        guard = SignalGuard(last_checkpoint=lambda: None)
        guard._handle(signal.SIGINT, None)
        with pytest.raises(_Exited):
            guard._handle(signal.SIGINT, None)
    finally:
        release()
    assert session.discarded == 0 and (run / "metrics.csv").is_file()
    assert capsys.readouterr().err.splitlines()[-1] == "proxima: second interrupt, exiting now (no checkpoint was written)"


# (3) a signal while the command line's modules import
def test_a_sigint_while_the_cli_modules_import_is_one_line_and_exit_130(tmp_path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    marker = tmp_path / "importing"
    # the CLI's own imports (argparse is the CLI's, not the package's), made slow: the signal lands there
    (shadow / "argparse.py").write_text(f"import time\nopen({str(marker)!r}, 'w').close()\ntime.sleep(60)\n")
    proc = subprocess.Popen([PROXIMA, "train", "CartPole-v1", "--total-timesteps", "512"], cwd=tmp_path,
                            env=_env(PYTHONPATH=os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(marker.exists, timeout=60, proc=proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    # was: a KeyboardInterrupt traceback ending in 'from proxima.cli import entry'
    assert (proc.returncode, err, out) == (130, "proxima: stopped by SIGINT; before training started; nothing was kept\n", "")


def test_a_sigint_a_tenth_of_a_second_after_the_start_is_one_line(tmp_path):
    proc = subprocess.Popen([PROXIMA, "resume", str(tmp_path / "gone")], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.1)
    # a machine under load may not have started the interpreter yet: the handler caught SIGTERM before the signal
    _wait_for(lambda: _catches(proc.pid, signal.SIGTERM), timeout=60, proc=proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err
    assert (proc.returncode, err) == (130, "proxima: stopped by SIGINT; before training started; the run is as its last "
                                           "checkpoint left it\n")


def test_importing_proxima_in_a_script_leaves_its_signal_handlers_alone(tmp_path):
    # the handlers before and after the import: a pytest started in the background (a CI job, `cmd &`) hands its
    # children SIGINT ignored, so the child's own starting handlers are the reference, not Python's usual ones
    code = ("import signal\n"
            "sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)\n"
            "before = [signal.getsignal(s) for s in sigs]\n"
            "import proxima\n"
            "print([signal.getsignal(s) for s in sigs] == before, signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
    assert out.stdout == "True True\n", out.stderr


# (4) the line a repeated stop signal's first delivery prints
def test_a_first_sigterm_says_the_same_signal_exits_at_once_only_a_second_or_more_later(exits, capsys):
    SignalGuard(last_checkpoint=lambda: None)._handle(signal.SIGTERM, None)
    # was: "(interrupt again to exit at once)", where a SIGTERM again within 1 s is the same stop
    assert capsys.readouterr().err == ("proxima: SIGTERM received; writing a checkpoint after this iteration (interrupt, "
                                       "or the same signal again 1 s or more from now, to exit at once)\n")
    SignalGuard(last_checkpoint=lambda: None, second_raises=True)._handle(signal.SIGUSR1, None)
    assert capsys.readouterr().err == ("proxima: SIGUSR1 received; writing a checkpoint after this iteration (interrupt "
                                       "to stop at once with KeyboardInterrupt; the same signal again 1 s or more from "
                                       "now exits at once)\n")
