"""Mutation-testing follow-up (session 48) of f3ee55c (rundir: a linked --run-dir moved aside where it
leads, read-only advice, a --run-dir that cannot be created) and 1f23e81 (signals: the console script's
first handler, stops ignored once the command returned, a second signal before a new run's checkpoint).
Each test pins behaviour a surviving mutant changed."""

from __future__ import annotations

import argparse
import atexit
import errno
import os
import signal
import subprocess
import sys
import types
from datetime import datetime as real_datetime
from pathlib import Path

import pytest

from proxima import _startup, cli, distributed, rundir
from proxima.signals import BeforeTraining, SignalGuard, hold_fresh_run, stop_signals

ROOT = Path(__file__).resolve().parents[2]
posix = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


class _Exited(Exception):
    pass


@pytest.fixture
def exits(monkeypatch):
    """os._exit raises _Exited(code) instead of ending pytest."""
    def exited(code):
        raise _Exited(code)

    monkeypatch.setattr(os, "_exit", exited)


@pytest.fixture
def handlers(monkeypatch):
    """The stop signals' handlers, and _startup's record of the ones it replaced, put back after the test."""
    saved = {sig: signal.getsignal(sig) for sig in stop_signals()}
    monkeypatch.setattr(_startup, "_ORIGINAL", {})
    yield
    for sig, old in saved.items():
        signal.signal(sig, old)


def _a_run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text('{"kind": "ppo"}')
    (folder / "config.yaml").write_text("env_id: CartPole-v1\n")
    return folder


def _with_checkpoint(run: Path) -> Path:
    (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    (run / "checkpoints" / "step_000000000064.pt").write_bytes(b"")
    return run


# ---------------------------------------------------------------------- rundir: a --run-dir never created
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT], ids=["ENOSPC", "EDQUOT"])
def test_a_run_dir_that_cannot_be_created_for_space_says_to_free_some(tmp_path, code):
    run = tmp_path / "a" / "b"
    error = rundir.lock_write_error(run, OSError(code, os.strerror(code)))
    assert str(error) == (f"--run-dir {run}: cannot create it ({os.strerror(code)} in {tmp_path}); free some space there; "
                          "choose another --run-dir")


# ---------------------------------------------------------------------- rundir: a read-only run's way on
def _advice(run: Path, code: int = errno.EACCES) -> str:
    return str(rundir.lock_write_error(run, OSError(code, os.strerror(code))))


def test_a_read_only_filesystem_seen_by_statvfs_gets_the_copy_advice_even_for_eacces(tmp_path, monkeypatch):
    run = _with_checkpoint(tmp_path / "run")
    run.chmod(0o555)
    monkeypatch.setattr(os, "statvfs", lambda path: types.SimpleNamespace(f_flag=os.ST_RDONLY))
    try:
        advice = _advice(run)
    finally:
        run.chmod(0o755)
    assert f"cp -r {run} NEW_DIR && chmod -R u+w NEW_DIR && proxima resume NEW_DIR" in advice
    assert f"chmod -R u+w {run}" not in advice


def test_a_run_whose_own_bits_allow_writing_is_never_told_to_chmod_it(tmp_path):
    # refused by something else (an ACL, a parent's sticky bit): chmod u+w would change nothing
    run = _with_checkpoint(tmp_path / "run")
    advice = _advice(run)
    assert f"cp -r {run} NEW_DIR && chmod -R u+w NEW_DIR && proxima resume NEW_DIR" in advice
    assert f"chmod -R u+w {run}" not in advice and "is yours and read-only" not in advice


def test_a_run_whose_filesystem_cannot_be_asked_gets_the_copy_advice(tmp_path, monkeypatch):
    run = _with_checkpoint(tmp_path / "run")
    run.chmod(0o555)

    def fails(path):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(os, "statvfs", fails)
    try:
        advice = _advice(run)
    finally:
        run.chmod(0o755)
    assert "NEW_DIR && chmod -R u+w NEW_DIR" in advice and f"chmod -R u+w {run} &&" not in advice


def test_a_read_only_population_is_not_offered_init_from(tmp_path, monkeypatch):
    run = _with_checkpoint(tmp_path / "pop")
    (run / "population.json").write_text("{}")
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(run).st_uid + 1)
    advice = _advice(run)
    assert advice.endswith("proxima resume NEW_DIR") and "--init-from" not in advice


# ---------------------------------------------------------------------- rundir: a linked --run-dir moved aside
def test_when_the_old_run_cannot_be_put_back_the_line_says_where_it_is(tmp_path, monkeypatch):
    target = _a_run(tmp_path / "real")
    link = tmp_path / "lnk"
    link.symlink_to(target)
    real_rename, calls = os.rename, []

    def rename(src, dst):
        calls.append((src, dst))
        if len(calls) > 1:  # the put-back
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_rename(src, dst)

    def refuse(path, mode=0o777):
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), str(path))

    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "mkdir", refuse)
    with pytest.raises(rundir.RunDirError) as e:
        rundir.move_aside(link)
    dest = calls[0][1]
    assert str(e.value).endswith(f"({os.strerror(errno.EDQUOT)}); the old run is in {dest}")
    assert (Path(dest) / "meta.json").is_file() and not target.exists()


def test_a_linked_run_moved_aside_twice_in_one_second_gets_the_next_free_name(tmp_path, monkeypatch):
    class Frozen:
        @staticmethod
        def now():
            return real_datetime(2026, 1, 2, 3, 4, 5)

    monkeypatch.setattr(rundir, "datetime", Frozen)
    target = _a_run(tmp_path / "real")
    link = tmp_path / "lnk"
    link.symlink_to(target)
    _a_run(tmp_path / "real.old-20260102-030405")  # an earlier run moved aside in the same second
    first = rundir.move_aside(link)
    (target / "meta.json").write_text("{}")
    second = rundir.move_aside(link)
    assert (first.name, second.name) == ("real.old-20260102-030405-2", "real.old-20260102-030405-3")
    assert (first / "config.yaml").is_file() and (second / "meta.json").read_text() == "{}"
    assert link.is_symlink() and target.is_dir() and list(target.iterdir()) == []


def test_a_relative_link_moved_aside_names_the_folder_it_leads_to_in_full(tmp_path, capsys):
    target = _a_run(tmp_path / "scratch" / "real")
    link = tmp_path / "lnk"
    link.symlink_to(Path("scratch") / "real")  # ln -s scratch/real lnk
    session = rundir.RunSession()
    try:
        assert session.claim_fresh(link, overwrite=True) == link
    finally:
        session.release()
    old = [p for p in (tmp_path / "scratch").iterdir() if p.name.startswith("real.old-")]
    assert len(old) == 1 and (old[0] / "meta.json").is_file() and list(target.iterdir()) == []
    real = Path(os.path.realpath(target))
    assert (f"proxima: --overwrite: moved the old {link} (a link to {real}, kept) to {real.parent / old[0].name}"
            in capsys.readouterr().err)


# ---------------------------------------------------------------------- signals: a second signal, no checkpoint
class _Leaves:
    """A session whose discard_fresh leaves what ``leave`` says (a file; or raises)."""

    def __init__(self, created, leave):
        self.created, self.leave = created, leave

    def discard_fresh(self):
        if self.leave == "raises":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        (self.created / "metrics.csv").unlink()


def _second_sigterm(session, last=lambda: None):
    release = hold_fresh_run(session)
    try:
        guard = SignalGuard(last_checkpoint=last)
        guard._handle(signal.SIGTERM, None)
        with pytest.raises(_Exited) as code:
            guard._handle(signal.SIGINT, None)
    finally:
        release()
    return code.value.args[0]


@posix
def test_a_new_run_in_a_folder_that_was_there_is_emptied_and_nothing_was_kept(tmp_path, exits, capsys):
    run = tmp_path / "run"
    run.mkdir()  # the user's empty folder: it stays, empty
    session = rundir.RunSession()
    session.claim_fresh(run)
    (run / "metrics.csv").write_text("global_step\n")
    try:
        assert _second_sigterm(session) == 130
    finally:
        session.release()
    assert run.is_dir() and list(run.iterdir()) == []
    assert capsys.readouterr().err.splitlines()[-1] == ("proxima: second interrupt, exiting now (no checkpoint was "
                                                         "written; nothing was kept): SIGINT after SIGTERM")


@posix
@pytest.mark.parametrize("leave", ["a file", "raises"])
def test_a_new_run_not_fully_removed_never_says_nothing_was_kept(tmp_path, exits, capsys, leave):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("global_step\n")
    (run / "notes.txt").write_text("kept\n")
    assert _second_sigterm(_Leaves(run, leave)) == 130
    assert (run / "notes.txt").is_file()
    assert capsys.readouterr().err.splitlines()[-1] == ("proxima: second interrupt, exiting now (no checkpoint was "
                                                         "written): SIGINT after SIGTERM")


@posix
def test_a_second_signal_after_a_checkpoint_discards_nothing(tmp_path, exits, capsys):
    run = tmp_path / "run"
    session = rundir.RunSession()
    session.claim_fresh(run)
    (run / "metrics.csv").write_text("global_step\n")
    ckpt = _with_checkpoint(run) / "checkpoints" / "step_000000000064.pt"
    try:
        assert _second_sigterm(session, last=lambda: ckpt) == 130
    finally:
        session.release()
    assert (run / "metrics.csv").is_file() and ckpt.is_file()
    assert "(last checkpoint kept): SIGINT after SIGTERM" in capsys.readouterr().err


# ---------------------------------------------------------------------- signals: once the command returned
def _a_stop_now_exits_with(code: int) -> None:
    """Each stop signal's handler, once the command returned, ends the process with the command's status."""
    for sig in stop_signals():
        handler = signal.getsignal(sig)
        # was: the default action (a SIGUSR1 ended a finished run 138), or Python's Ctrl-C handler
        assert callable(handler) and handler is not signal.default_int_handler, (sig, handler)
        with pytest.raises(_Exited) as done:
            handler(sig, None)
        assert done.value.args == (code,), sig


@posix
def test_doctor_ends_keeping_its_status_through_a_late_signal(monkeypatch, handlers, exits):
    monkeypatch.setattr(atexit, "register", lambda hook: hook)  # no hook left in pytest's own shutdown
    monkeypatch.setattr(cli, "_read", lambda argv: argparse.Namespace(command="doctor"))
    monkeypatch.setattr(cli, "_command", lambda args: 3)
    monkeypatch.setattr(sys, "argv", ["proxima", "doctor"])
    with pytest.raises(SystemExit) as done:
        cli.entry()
    assert done.value.code == 3
    _a_stop_now_exits_with(3)


@posix
def test_a_torchrun_rank_ends_keeping_its_status_through_a_late_signal(monkeypatch, handlers, exits):
    monkeypatch.setattr(atexit, "register", lambda hook: hook)
    monkeypatch.setattr(distributed, "is_torchrun_rank", lambda: True)
    monkeypatch.setattr(distributed, "stop_with_parent", lambda: None)
    monkeypatch.setattr(distributed, "_ENDS_WITH_COMMAND", distributed._ENDS_WITH_COMMAND)
    with pytest.raises(_Exited) as done:
        distributed.exit_process(lambda: 4)
    assert done.value.args == (4,)
    _a_stop_now_exits_with(4)


# ---------------------------------------------------------------------- _startup: which process is the command line
@pytest.mark.parametrize("orig, expected", [
    (["python", "-m", "proxima", "train"], True),
    (["python", "-mproxima", "train"], True),
    (["python", "-X", "dev", "-m", "proxima"], True),
    (["python", "-m", "mytools.sweep"], False),
    (["python", "-mmytools.sweep"], False),
], ids=["-m proxima", "-mproxima", "-X dev -m proxima", "-m other", "-mother"])
def test_python_dash_m_is_the_command_line_only_for_proxima(monkeypatch, orig, expected):
    monkeypatch.setattr(sys, "argv", ["-m"])
    monkeypatch.setattr(sys, "orig_argv", orig, raising=False)
    assert _startup.command_line() is expected


def test_a_script_of_ones_own_is_not_the_command_line(monkeypatch, tmp_path):
    script = str(tmp_path / "sweep.py")
    monkeypatch.setattr(sys, "argv", [script])
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__file__=script))
    assert _startup.command_line() is False
    console = str(tmp_path / "bin" / "proxima")
    monkeypatch.setattr(sys, "argv", [console, "train"])
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__file__=console))
    assert _startup.command_line() is True


@posix
def test_importing_proxima_from_a_script_file_leaves_sigterm_alone(tmp_path):
    script = tmp_path / "sweep.py"
    script.write_text("import signal, proxima\nprint(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)\n")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout == "True\n", out.stderr


# ---------------------------------------------------------------------- _startup: its handler
@posix
def test_a_torchrun_rank_gets_no_early_handler(monkeypatch, handlers):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job1")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _startup.install()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and _startup._ORIGINAL == {}


@posix
@pytest.mark.parametrize("argv, sig, code, what", [
    (["train", "CartPole-v1"], signal.SIGTERM, 143, "nothing was kept"),
    (["resume", "runs/x"], signal.SIGUSR1, 138, "the run is as its last checkpoint left it"),
    (["rlhf", "--resume", "auto"], signal.SIGHUP, 129, "the run is as its last checkpoint left it"),
], ids=["train-SIGTERM", "resume-SIGUSR1", "rlhf-resume-SIGHUP"])
def test_a_stop_while_a_training_command_imports_exits_128_plus_signum(monkeypatch, capfd, exits, argv, sig, code, what):
    monkeypatch.setattr(sys, "argv", ["proxima", *argv])
    with pytest.raises(_Exited) as done:
        _startup._handle(sig, None)
    assert done.value.args == (code,)
    assert capfd.readouterr().err == f"proxima: stopped by {signal.Signals(sig).name}; before training started; {what}\n"


@posix
def test_a_stop_line_that_cannot_be_written_still_exits_with_the_signal(monkeypatch, exits):
    def gone(fd, data):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(sys, "argv", ["proxima", "train", "CartPole-v1"])
    monkeypatch.setattr(os, "write", gone)
    with pytest.raises(_Exited) as done:
        _startup._handle(signal.SIGHUP, None)
    assert done.value.args == (129,)


@posix
def test_a_ctrl_c_while_another_command_imports_exits_130_silently(monkeypatch, capfd, exits):
    monkeypatch.setattr(sys, "argv", ["proxima", "eval", "runs/x"])
    with pytest.raises(_Exited) as done:
        _startup._handle(signal.SIGINT, None)
    assert done.value.args == (130,) and capfd.readouterr().err == ""


@posix
def test_another_signal_while_another_command_imports_meets_the_handler_from_before(monkeypatch, handlers):
    raised = []

    def before(signum, frame):
        pass

    monkeypatch.setattr(sys, "argv", ["proxima", "eval", "runs/x"])
    monkeypatch.setattr(signal, "raise_signal", raised.append)  # the signal again, to the handler put back
    _startup._ORIGINAL[signal.SIGUSR1] = before
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    _startup._handle(signal.SIGUSR1, None)
    assert raised == [signal.SIGUSR1] and signal.getsignal(signal.SIGUSR1) is before


@posix
def test_the_cli_handling_puts_back_what_was_there_before_the_early_handler(monkeypatch, handlers):
    def before(signum, frame):
        pass

    signal.signal(signal.SIGUSR1, before)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _startup.install()
    assert signal.getsignal(signal.SIGUSR1) is _startup._handle
    guard = BeforeTraining()
    guard.__enter__()
    guard.__exit__(None, None, None)
    # was it: the early handler, whose "before training started" line would follow a finished run
    assert signal.getsignal(signal.SIGUSR1) is before and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
