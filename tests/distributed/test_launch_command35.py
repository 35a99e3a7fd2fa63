"""Review 35, with real processes: a run under torchrun by hand records a torchrun command that runs
again, and a --nproc launcher stopped before its ranks train exits with 130/143 and one line, no
traceback (whether torchrun or the ranks were still importing torch)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distributed_helpers import LIMIT, SMALL, run, start, train_cmd, wait_for_rows

#: the stop's line for a new run that no rank started training
LINE = "proxima: stopped by {}; before training started; nothing was kept"


def torchrun() -> str:
    path = os.path.join(os.path.dirname(sys.executable), "torchrun")
    return path if os.path.isfile(path) else "torchrun"


@pytest.mark.slow  # two 2-process jobs of ~15 s each: the slow tier (README)
def test_a_run_under_torchrun_by_hand_records_a_torchrun_command_that_runs_again(tmp_path):
    args = ["train", "CartPole-v1", *SMALL, "--total-timesteps", "1024", "--run-dir", "run"]
    res = run([torchrun(), "--standalone", "--nproc-per-node", "2", "-m", "proxima", *args], tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    command = meta["command"]
    assert command == [torchrun(), "--nproc-per-node", "2", "-m", "proxima", *args]  # not a rank's __main__.py
    assert meta["world_size"] == 2
    # the recorded command, as a user would paste it (a free port: PET_STANDALONE, torchrun's --standalone)
    again = [*command, "--resume", "auto", "--total-timesteps", "1536"]
    res = run(again, tmp_path, PET_STANDALONE="1")
    assert res.returncode == 0, res.stderr[-4000:]
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert [r["command"] for r in meta["resumes"]] == [again] and meta["world_size"] == 2
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert rows[-1].split(",")[1] == "1536"  # global_step: the 2 processes trained on


def _children(pid: int) -> list:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _torchrun_of(launcher: int) -> list:
    """[pid] of the launcher's torchrun once it runs (a child not yet exec'd shows the launcher's command line)."""
    return [pid for pid in _children(launcher) if b"proxima.torchrun" in _cmdline(pid)]


def _importing_torch(pid: int) -> bool:
    """Whether ``pid`` has loaded torch's C library: it is within `import torch`, or past it."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def _ranks_started(torchrun: int) -> bool:
    """Whether both ranks run Python (a child not yet exec'd shows torchrun's command line): they are
    starting Python or importing torch, seconds from training."""
    return len([pid for pid in _children(torchrun) if b"-m\0proxima\0train" in _cmdline(pid)]) == 2


def _wait_for(what, proc: subprocess.Popen, timeout: float = LIMIT):
    """The first truthy what() (polled every 10 ms), failing the test if the launcher ends first."""
    end = time.monotonic() + timeout
    while True:
        found = what()
        if found:
            return found
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"launcher ended (rc {proc.returncode}) before the moment to stop it:\n{err[-3000:]}")
        time.sleep(0.01)


def _stopped(proc: subprocess.Popen, sig) -> tuple:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"launcher still running 120 s after {sig.name}:\n{err[-3000:]}")
    return proc.returncode, err


NEW_RUN = [*SMALL, "--total-timesteps", str(10**6), "--run-dir", "run"]


@pytest.mark.slow  # a launch stopped within seconds, twice: the slow tier (README)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_torchrun_imports_torch_is_one_line_and_no_traceback(tmp_path, sig):
    proc = start(train_cmd(*NEW_RUN), tmp_path)
    (child,) = _wait_for(lambda: _torchrun_of(proc.pid), proc)
    _wait_for(lambda: _importing_torch(child), proc)  # torchrun imports torch, ~1 s and more before any rank
    code, err = _stopped(proc, sig)
    assert code == 128 + sig, err[-4000:]
    assert "Traceback" not in err, err[-4000:]
    assert err.count(LINE.format(sig.name)) == 1, err[-4000:]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # a launch stopped within seconds: the slow tier (README)
def test_a_stop_while_the_ranks_start_gets_the_launchers_one_line(tmp_path):
    proc = start(train_cmd(*NEW_RUN), tmp_path)
    (child,) = _wait_for(lambda: _torchrun_of(proc.pid), proc)
    _wait_for(lambda: _ranks_started(child), proc)
    code, err = _stopped(proc, signal.SIGINT)
    assert code == 130, err[-4000:]
    assert "Traceback" not in err and "Fatal Python error" not in err, err[-4000:]
    assert err.count("proxima: stopped by SIGINT;") == 1 and LINE.format("SIGINT") in err, err[-4000:]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # a 2-process job stopped after its first iteration: the slow tier (README)
def test_a_stop_in_training_gets_the_ranks_lines_and_none_from_the_launcher(tmp_path):
    proc = start(train_cmd(*NEW_RUN), tmp_path)
    wait_for_rows(tmp_path / "run" / "metrics.csv", 1, proc)
    code, err = _stopped(proc, signal.SIGINT)
    assert code == 130, err[-4000:]
    assert err.count("proxima: stopped by SIGINT; checkpoint: run/checkpoints/step_") == 1, err[-4000:]  # rank 0's
    assert "before training started" not in err, err[-4000:]  # the ranks said where they stopped
