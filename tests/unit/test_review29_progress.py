"""Review 29, progress output: --no-progress quiets a population's per-iteration lines as it drops a
single run's bar (the end's summary stays), and a terminal that reports 0 columns gets whole lines
instead of tqdm's frames, which it would draw as a bare '\\r'."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import termios

import pytest
import yaml

from cli_helpers import run_main
from proxima import logger as run_logging
from proxima.logger import RunLogger

POP = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
       "--eval-episodes", "1"]


def progress_lines(err: str) -> list:
    return [ln for ln in err.splitlines() if ln.startswith("population 2 members | step ")]


# ------------------------------------------------------------------------------ population --no-progress
def test_population_no_progress_drops_the_per_iteration_lines_and_keeps_the_summary(tmp_path, capsys):
    run = tmp_path / "p2"
    code, out, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), "--total-timesteps", "64",
                               *POP, "--no-progress"], capsys)
    assert code == 0, err
    assert progress_lines(err) == [], err
    assert re.search(r"^eval CartPole-v1: 2 members, mean of means [\d.]+ .*s of training$", out, re.M), out
    assert yaml.safe_load((run / "m000-seed1" / "config.yaml").read_text())["progress"] is False

    # the same population with progress (the default) prints a line each iteration here (2 of them)
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(tmp_path / "shown"),
                             "--total-timesteps", "64", *POP], capsys)
    assert code == 0, err
    assert [ln.split(" | ")[1] for ln in progress_lines(err)] == ["step 32/member", "step 64/member"], err


def test_population_resumed_with_no_progress_says_it_resumes_but_prints_no_iteration_lines(tmp_path, capsys):
    run = tmp_path / "p2"
    assert run_main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), "--total-timesteps", "32", *POP,
                     "--quiet"], capsys)[0] == 0
    code, out, err = run_main(["resume", str(run), "--total-timesteps", "64", "--no-progress"], capsys)
    assert code == 0, err
    assert f"proxima: resuming population {run} (2 members) at step 32 per member (iteration 1)" in err
    assert progress_lines(err) == [], err
    assert "eval CartPole-v1: 2 members" in out


# ------------------------------------------------------------------------------ a terminal of 0 columns
@pytest.fixture
def pty_stderr():
    """The follower end of a fresh pty (no size given: 0 columns, 0 lines), for a test to make its
    sys.stderr (in the test: pytest puts its own capture back on sys.stderr after the fixtures);
    yields (stream, read) where read() returns what reached the pty so far, '\\r\\n' read back as '\\n'."""
    leader, follower = pty.openpty()
    stream = os.fdopen(follower, "w", buffering=1)
    os.set_blocking(leader, False)

    def read() -> str:
        stream.flush()
        data = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        return data.decode().replace("\r\n", "\n")

    yield stream, read
    stream.close()
    os.close(leader)


def log_steps(logger, steps):
    for i, step in enumerate(steps, 1):
        logger.log(i, step, {"charts/SPS": float(step), "charts/episodic_return": float(i)})


def test_a_pty_of_zero_columns_gets_whole_progress_lines(pty_stderr, monkeypatch, tmp_path):
    stream, read = pty_stderr
    monkeypatch.setattr("sys.stderr", stream)
    assert os.get_terminal_size(stream.fileno()).columns == 0 and stream.isatty()
    monkeypatch.setattr("proxima.logger.LINE_SECONDS", 0.0)  # a line per update
    logger = RunLogger(tmp_path, total_steps=200, progress=True)
    try:
        log_steps(logger, range(20, 201, 20))
    finally:
        logger.close()
    assert isinstance(logger.bar, run_logging.LineProgress)
    lines = read().splitlines()
    assert len(lines) == 10, lines
    assert re.fullmatch(r"step 200/200 \(100%\) 0:00:0\d \| SPS 200 \| return 10\.0", lines[-1]), lines
    assert not run_logging._is_terminal(stream)


def test_a_pty_with_a_size_keeps_the_bar(pty_stderr, monkeypatch, tmp_path):
    stream, read = pty_stderr
    monkeypatch.setattr("sys.stderr", stream)
    fcntl.ioctl(stream.fileno(), termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    logger = RunLogger(tmp_path, total_steps=200, progress=True)
    from tqdm import tqdm

    try:
        assert isinstance(logger.bar, tqdm)
        log_steps(logger, range(20, 201, 20))
    finally:
        logger.close()
    assert "200/200" in read()


def test_a_stop_on_a_zero_column_pty_starts_no_blank_line(pty_stderr, monkeypatch):
    from proxima.signals import SignalGuard

    monkeypatch.setattr("sys.stderr", pty_stderr[0])

    assert SignalGuard(lambda: None)._lead() == ""  # LineProgress's lines are whole: a "\n" first would only leave a blank line
