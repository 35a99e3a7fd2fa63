"""Stops a cluster delivers: one SIGTERM delivered twice within milliseconds (a job script that forwards it,
srun and the scheduler) is one stop in a single process too; SIGUSR1/SIGUSR2 (Slurm's --signal=B:USR1@120)
checkpoint and stop as SIGTERM does; a second signal's line names the signals, the checkpoint and the command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from proxima import checkpoint as ckpt
from proxima.signals import DUPLICATE_WINDOW, SignalGuard, stop_signals
from cli_helpers import stop
import warm_python

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


class _Exited(Exception):
    pass


@pytest.fixture
def exits(monkeypatch):
    """os._exit raises _Exited(code) instead of ending pytest."""
    def exited(code):
        raise _Exited(code)

    monkeypatch.setattr(os, "_exit", exited)


def test_one_process_takes_a_sigterm_repeated_within_milliseconds_for_the_same_stop(exits, capsys):
    guard = SignalGuard(last_checkpoint=lambda: None)  # the trainer's window for one process: 0
    guard._handle(signal.SIGTERM, None)
    guard._handle(signal.SIGTERM, None)  # old code: "second interrupt, exiting now", exit 143
    assert guard.stop.signum == signal.SIGTERM
    assert "second interrupt" not in capsys.readouterr().err


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGUSR1])
def test_other_repeated_stop_signals_are_the_same_stop_too(exits, signum):
    guard = SignalGuard(last_checkpoint=lambda: None)
    guard._handle(signum, None)
    guard._handle(signum, None)
    assert guard.stop.signum == signum


def test_a_second_ctrl_c_still_exits_at_once(exits):
    guard = SignalGuard(last_checkpoint=lambda: None)
    guard._handle(signal.SIGINT, None)
    with pytest.raises(_Exited) as e:
        guard._handle(signal.SIGINT, None)
    assert e.value.args == (130,)


def test_a_sigterm_after_the_window_exits_and_names_the_signals_checkpoint_and_command(exits, capsys, tmp_path):
    last = tmp_path / "run" / "checkpoints" / "step_000000000128.pt"
    guard = SignalGuard(last_checkpoint=lambda: last)
    guard._handle(signal.SIGTERM, None)
    guard._first_at -= DUPLICATE_WINDOW + 0.1  # the first came longer ago than the window
    with pytest.raises(_Exited) as e:
        guard._handle(signal.SIGTERM, None)
    assert e.value.args == (143,)
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"proxima: second interrupt, exiting now (last checkpoint kept): SIGTERM after SIGTERM; checkpoint: {last}; "
        f"continue with: proxima resume {tmp_path / 'run'}")


def test_sigusr1_and_sigusr2_are_stop_signals():
    assert {signal.SIGUSR1, signal.SIGUSR2} <= set(stop_signals())


# --- real `proxima train` processes ---------------------------------------------------------------------

ARGS = ["--num-envs", "2", "--num-steps", "64", "--total-timesteps", "1000000", "--checkpoint-every", "1000",
        "--eval-episodes", "0", "--no-progress", "--threads", "1"]


def _started(run_dir) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = warm_python.Popen([sys.executable, "-m", "proxima", "train", "CartPole-v1", "--run-dir", str(run_dir), *ARGS],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (run_dir / "metrics.csv").exists() or len((run_dir / "metrics.csv").read_text().splitlines()) < 2:
        if proc.poll() is not None:
            pytest.fail(f"process ended early ({proc.returncode}): {proc.communicate()[1][-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("no metrics.csv row in time")
        time.sleep(0.05)
    return proc


def test_two_sigterms_milliseconds_apart_write_the_checkpoint_and_exit_143(tmp_path):
    run_dir = tmp_path / "run"
    proc = _started(run_dir)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.005)
    code, err = stop(proc, signal.SIGTERM)
    assert code == 143, err
    assert "second interrupt" not in err
    state = ckpt.load_checkpoint(run_dir)
    assert err.strip().splitlines()[-1].startswith(
        f"proxima: stopped by SIGTERM; checkpoint: {ckpt.checkpoint_path(run_dir, state['global_step'])}")


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGUSR2])
def test_sigusr_checkpoints_and_exits_128_plus_signum_leaving_no_lock(tmp_path, signum):
    run_dir = tmp_path / "run"
    code, err = stop(_started(run_dir), signum)
    assert code == 128 + signum, err  # 138, 140; old code: killed by the signal, no line, no checkpoint
    name = signal.Signals(signum).name
    assert f"proxima: {name} received; writing a checkpoint after this iteration" in err
    state = ckpt.load_checkpoint(run_dir)
    assert err.strip().splitlines()[-1] == (f"proxima: stopped by {name}; checkpoint: "
                                            f"{ckpt.checkpoint_path(run_dir, state['global_step'])}; "
                                            f"continue with: proxima resume {run_dir}")
    assert not (run_dir / ".proxima.lock").exists()
