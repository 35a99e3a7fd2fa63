"""A job-wide SIGTERM under torchrun: every process gets it at once (Slurm's scancel or time limit,
systemd's KillMode=control-group), and torchrun passes it on to the ranks a moment later. The
copies are one stop, not a "second interrupt": rank 0 still writes the checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from distributed_helpers import SMALL, env, start, train_cmd, wait_for_rows
import warm_python

GUARD = textwrap.dedent("""
    import os, signal, sys, time
    from proxima.signals import SignalGuard

    window, gap, last = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3] or None
    with SignalGuard(lambda: last, repeat_window=window) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(gap)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        print(f"still running, stop {stop.signum}", flush=True)
""")


def _guard(tmp_path, window: float, gap: float, last: str = "") -> subprocess.CompletedProcess:
    script = tmp_path / "guard.py"
    script.write_text(GUARD)
    return warm_python.run([sys.executable, str(script), str(window), str(gap), last], env=env(), capture_output=True,
                           text=True, timeout=60)


def test_the_same_signal_again_within_the_window_is_the_same_stop(tmp_path):
    res = _guard(tmp_path, window=3.0, gap=0.05)
    assert res.returncode == 0, res.stderr
    assert f"still running, stop {int(signal.SIGTERM)}" in res.stdout
    assert "second interrupt" not in res.stderr
    assert "the same signal again 3 s or more from now exits at once" in res.stderr


def test_a_later_second_signal_exits_at_once_and_says_what_is_on_disk(tmp_path):
    res = _guard(tmp_path, window=0.3, gap=0.6)  # after the window: a real second interrupt
    assert res.returncode == 143 and "still running" not in res.stdout
    assert "second interrupt, exiting now (no checkpoint was written)" in res.stderr
    # one process: no torchrun window, and a repeat 1 s or more apart (signals.DUPLICATE_WINDOW) is a second signal
    res = _guard(tmp_path, window=0.0, gap=1.2, last="run/checkpoints/step_000000000128.pt")
    assert res.returncode == 143
    assert "second interrupt, exiting now (last checkpoint kept)" in res.stderr


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_sigterm_to_every_process_of_the_job_still_checkpoints(tmp_path):
    from proxima.checkpoint import list_checkpoints, load_checkpoint
    from proxima.launch import _child_pids

    # iterations long enough (2 x 16,384 steps) that torchrun's copy arrives before the checkpoint
    proc = start(train_cmd(*SMALL, "--num-envs", "64", "--num-steps", "256", "--total-timesteps", str(10**8), "--run-dir", "run"), tmp_path)
    wait_for_rows(tmp_path / "run" / "metrics.csv", 2, proc)
    torchrun = _child_pids(proc.pid)
    ranks = [pid for t in torchrun for pid in _child_pids(t)]
    assert len(torchrun) == 1 and len(ranks) == 2, (torchrun, ranks)
    # as scancel does: every process gets it; the ranks' own copy first (copies that arrive together
    # merge into one), then the launcher's and torchrun's, which torchrun passes on to the ranks
    for pid in ranks:
        os.kill(pid, signal.SIGTERM)
    time.sleep(0.2)
    for pid in [proc.pid, *torchrun]:
        os.kill(pid, signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 143, err[-4000:]
    assert "second interrupt" not in err, err[-4000:]
    assert "Traceback" not in err, err[-4000:]
    assert err.count("proxima: stopped by SIGTERM; checkpoint: run/checkpoints/step_") == 1, err[-4000:]  # rank 0's
    files = list_checkpoints(tmp_path / "run")
    assert len(files) == 1
    state = load_checkpoint(files[0])
    assert state["iteration"] >= 2 and len(state["ranks"]) == 2
