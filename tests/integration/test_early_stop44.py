"""A stop while `proxima train`/`resume` starts, before the run's own handling (signals.BeforeTraining):
one line, 128 + signum, nothing left on disk; and `resume FILE --steps N` names a file as no run directory."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proxima.signals import BeforeTraining, OutsideLoop, TrainingInterrupted, retire_before_training
from tests.cli_helpers import error_line, run_main

REPO = Path(__file__).resolve().parents[2]
STOPS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2")


def _catches_sigterm(pid: int) -> bool:
    """Whether the process catches every stop signal (BeforeTraining installs them one by one: a signal
    sent once SIGTERM alone was caught could meet SIGUSR1's default and kill the process)."""
    with open(f"/proc/{pid}/status") as f:
        caught = int(next(line for line in f if line.startswith("SigCgt:")).split()[1], 16)
    # SIGHUP only where this process does not ignore it (the child inherits SIG_IGN and keeps it: nohup)
    names = [n for n in STOPS if n != "SIGHUP" or signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN]
    return all(caught & (1 << (getattr(signal, name) - 1)) for name in names)


def _stop_while_starting(args: list, signum: int, cwd) -> tuple:
    """(exit code, stdout, stderr) of ``python -m proxima ARGS`` sent ``signum`` as soon as it catches
    SIGTERM (proxima's first handler): asserted to come before torch is loaded, seconds before training."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen([sys.executable, "-m", "proxima", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and not _catches_sigterm(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.002)
        assert proc.poll() is None, "proxima ended before it caught SIGTERM"
        with open(f"/proc/{proc.pid}/maps") as f:
            torch_loaded = "libtorch" in f.read()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert not torch_loaded, f"proxima caught SIGTERM only once torch was loaded: {err[-400:]}"
    return proc.returncode, out, err


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the process's signal handling from /proc")
@pytest.mark.parametrize("name", STOPS)
def test_stop_while_train_starts_says_one_line_and_leaves_no_run(tmp_path, name):
    signum = getattr(signal, name)
    run_dir = tmp_path / "run"
    code, out, err = _stop_while_starting(["train", "CartPole-v1", "--total-timesteps", "2048", "--run-dir", str(run_dir)],
                                          signum, tmp_path)
    assert (code, out) == (128 + signum, ""), err
    assert err == f"proxima: stopped by {name}; before training started; nothing was kept\n"
    assert not run_dir.exists()
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the process's signal handling from /proc")
def test_stop_while_resume_starts_leaves_the_run_as_it_was(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("env_id: CartPole-v1\n")
    code, out, err = _stop_while_starting(["resume", str(run_dir)], signal.SIGTERM, tmp_path)
    assert (code, out) == (143, ""), err
    assert err == "proxima: stopped by SIGTERM; before training started; the run is as its last checkpoint left it\n"
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", "config.yaml"]
    assert list((run_dir / "checkpoints").iterdir()) == []


@pytest.fixture
def handlers_back():
    """The stop signals' handlers as they were, whatever the test left installed."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


def test_outside_loop_takes_over_and_puts_back_what_came_before(handlers_back):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with BeforeTraining() as early:
        with pytest.raises(TrainingInterrupted) as stopped:
            signal.raise_signal(signal.SIGTERM)
        assert (stopped.value.exit_code, str(stopped.value)) == (143, "stopped by SIGTERM; before training started; "
                                                                       "nothing was kept")
        # that stop swallowed where it landed (as C code does): the run's handling raises it as it starts
        outside = OutsideLoop()
        try:
            with pytest.raises(TrainingInterrupted) as again:
                outside.__enter__()
            assert (again.value.signum, again.value.checkpoint) == (signal.SIGTERM, None)
            early.check()  # handed over: raised once, by the run's handling
        finally:
            outside.__exit__()
        # the run's handling ended: SIGTERM as before proxima, never "before training started" again
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    got = []
    signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
    with BeforeTraining():
        retire_before_training()  # as after launch_torchrun put the guard back
        signal.raise_signal(signal.SIGUSR1)  # a retired guard: the handling from before it
        assert got == [signal.SIGUSR1]


def test_a_stop_during_torchs_import_is_raised_after_it(handlers_back):
    with BeforeTraining() as early:
        early.holding = True
        signal.raise_signal(signal.SIGINT)  # recorded only: raised in torch's C++ it aborted the process
        early.holding = False
        with pytest.raises(TrainingInterrupted) as stopped:
            early.check()
    assert (stopped.value.exit_code, str(stopped.value)) == (130, "stopped by SIGINT; before training started; "
                                                                   "nothing was kept")


def test_resume_steps_of_a_file_says_it_is_no_run_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("some_file.txt").write_text("not a run\n")
    code, out, err = run_main(["resume", "some_file.txt", "--steps", "100"], capsys)
    line = error_line(code, err, "some_file.txt is a file, not a run directory")
    assert line == ("proxima resume: error: --steps: some_file.txt is a file, not a run directory; --steps extends an "
                    "RLHF run: give its directory (proxima resume RUN_DIR --steps N)")
    assert out == "" and "PPO run" not in err
