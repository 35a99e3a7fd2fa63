"""Helpers for the 2-process (gloo, CPU) tests: run `proxima train --nproc 2` in a subprocess.

(A plain module with a unique name rather than a conftest.py: several test folders have a conftest,
and `from conftest import ...` would pick whichever was imported first.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import warm_python

#: 2 ranks x 8 envs x 32 steps = 512 steps an iteration; small enough for a shared 2-core machine
SMALL = ["--num-envs", "8", "--num-steps", "32", "--num-minibatches", "4", "--update-epochs", "2",
         "--eval-episodes", "0", "--checkpoint-every", "0", "--no-progress", "--quiet", "--threads", "1"]
STEPS_PER_ITER = 2 * 8 * 32
LIMIT = 240  # seconds: no test may hang the suite


def pythonpath(folder) -> str:
    """``folder`` ahead of the caller's PYTHONPATH (kept, not replaced): the subprocesses import the
    proxima tree under test, not the installed one. Empty entries are dropped: one would put the
    subprocess's current directory on its path."""
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([str(folder), *kept])


def env(**extra) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PROXIMA_TEST_", "PROXIMA_DEBUG_"))}
    e.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")  # a rank that aborts shows where
    e.update({k: str(v) for k, v in extra.items()})
    return e


def train_cmd(*args) -> list:
    return [sys.executable, "-m", "proxima", "train", "CartPole-v1", "--nproc", "2", *args]


def run(cmd, cwd: Path, timeout: float = LIMIT, **extra) -> subprocess.CompletedProcess:
    return warm_python.run(cmd, cwd=cwd, env=env(**extra), capture_output=True, text=True, timeout=timeout)


def two_ranks(script: str, folder: Path) -> Path:
    """Run ``script`` (Python text, given the output folder as argv[1]) as 2 ranks of torchrun --standalone
    in ``folder``; the output folder, once both exited 0 (an assertion with torchrun's stderr otherwise)."""
    import sys

    (folder / "ranks.py").write_text(script)
    out = folder / "out"
    out.mkdir()
    res = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(folder / "ranks.py"), str(out)], folder)
    assert res.returncode == 0, res.stderr[-4000:]
    return out


def start(cmd, cwd: Path, **extra) -> subprocess.Popen:
    return warm_python.Popen(cmd, cwd=cwd, env=env(**extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def csv_rows(path: Path) -> int:
    try:
        return max(0, len(path.read_text().splitlines()) - 1)
    except OSError:
        return 0


def wait_for_rows(path: Path, rows: int, proc: subprocess.Popen, timeout: float = LIMIT) -> None:
    end = time.monotonic() + timeout
    while csv_rows(path) < rows:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"run ended (rc {proc.returncode}) before {rows} iterations:\n{err[-3000:]}")
        if time.monotonic() > end:
            proc.kill()
            pytest.fail(f"no {rows} rows in {path} after {timeout} s")
        time.sleep(0.2)


def stop(proc: subprocess.Popen, sig=signal.SIGTERM, timeout: float = 120):
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"launcher still running {timeout} s after {sig.name}:\n{err[-3000:]}")
    return proc.returncode, out, err


def load_params(folder: Path, rank: int) -> dict:
    return torch.load(folder / f"params-rank{rank}.pt", weights_only=True)


def same_params(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class RecordingPopen:
    """launch's Popen in a test: records each command and 'exits' 0, so no rank really starts and a
    launch that the checks let through shows in ``started``."""
    started: list = []

    def __init__(self, cmd, **kwargs):
        self.pid = 0
        RecordingPopen.started.append(cmd)

    def wait(self):
        return 0

    def poll(self):
        return 0


def record_launches(monkeypatch) -> list:
    """Make proxima.launch start torchrun through RecordingPopen; returns the (emptied) list of the
    commands it starts."""
    from types import SimpleNamespace

    from proxima import launch

    RecordingPopen.started = []
    monkeypatch.setattr(launch, "subprocess", SimpleNamespace(Popen=RecordingPopen))
    return RecordingPopen.started
