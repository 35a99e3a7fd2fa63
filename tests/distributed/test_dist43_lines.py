"""Review 43: a rank's failure is printed once. A refusal of rank 1 printed both `proxima: rank 1 failed: ...`
and the command's `proxima train: error: ...` with the same text, and rank 0 followed its lost-contact line
with ~30 lines of gloo traceback (exit_process)."""

from __future__ import annotations

import sys

import pytest

from proxima import distributed
from proxima.envs import EnvError

PEER_LOSS = "[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:18102"

#: the reviewer's env: its constructor raises on rank 1 only
RANK1_ENV = '''
import os
import gymnasium as gym

class R(gym.Wrapper):
    def __init__(self, **kw):
        if os.environ.get("RANK") == "1":
            raise RuntimeError("cannot build on rank 1")
        super().__init__(gym.make("CartPole-v1"))
'''


@pytest.mark.slow  # 15-35 s on a shared 2-core machine (2 processes)
def test_a_refusal_of_rank_1_prints_once_and_rank_0_adds_only_its_lost_contact_line(tmp_path):
    """The reviewer's repro (~15 s, 2 processes): the env refusal is one line, the command's; no traceback."""
    from distributed_helpers import pythonpath, run

    (tmp_path / "renv.py").write_text(RANK1_ENV)
    res = run([sys.executable, "-m", "proxima", "train", "renv:R", "--nproc", "2", "--num-envs", "2", "--num-steps",
               "64", "--total-timesteps", "2048", "--threads", "1", "--no-progress", "--eval-episodes", "0"],
              tmp_path, timeout=120, PYTHONPATH=pythonpath(tmp_path), PROXIMA_DIST_TIMEOUT=60)
    err = res.stderr
    assert res.returncode == 1, err[-3000:]
    assert err.count("raised RuntimeError: cannot build on rank 1 (renv.py:") == 1, err
    assert "proxima train: error: building env 'renv:R' raised RuntimeError: cannot build on rank 1 (renv.py:" in err
    assert "proxima: rank 1 failed" not in err, err
    assert not any(line.startswith("Traceback") for line in err.splitlines()), err
    lines = [line for line in err.splitlines() if line.startswith("proxima: ")]
    assert len(lines) == 2, lines
    # "(rank 1 failed, and torchrun is ending the job; ...)" when torchrun's SIGTERM came first: a race
    assert lines[0].startswith("proxima: rank 0 stopped: lost contact with another rank ("), lines
    assert "; its error is above): RuntimeError: " in lines[0], lines
    assert lines[1] == "proxima: the job failed: rank 1 (first) exited 2; rank 0 exited 1; each rank's own lines above say why"


def test_a_refusal_of_any_rank_is_left_to_the_commands_line_under_exit_process(capsys, monkeypatch):
    """The command prints `proxima train: error: ...` itself; a `rank 1 failed` line would repeat it. A bug
    (not a refusal) keeps its line, and outside exit_process (a script's ranks) a refusal of rank 1 does too."""
    ctx = distributed.DistContext(rank=1, world_size=2)
    monkeypatch.setattr(distributed, "_ENDS_WITH_COMMAND", False)
    ctx.report_failure(EnvError("env 0 raised ValueError: x"))
    assert capsys.readouterr().err == "proxima: rank 1 failed: EnvError: env 0 raised ValueError: x\n"
    monkeypatch.setattr(distributed, "_ENDS_WITH_COMMAND", True)
    ctx.report_failure(EnvError("env 0 raised ValueError: x"))
    assert capsys.readouterr().err == ""
    ctx.report_failure(KeyError("bug"))
    assert capsys.readouterr().err == "proxima: rank 1 failed: KeyError: 'bug'\n"


class _Exited(Exception):
    pass


def _exit_process(monkeypatch, error: BaseException) -> int:
    """exit_process(main) for a torchrun rank whose main raises ``error``: the status it would _exit with."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(distributed, "_ENDS_WITH_COMMAND", False)  # put back after the test
    monkeypatch.setattr(distributed, "stop_with_parent", lambda: None)

    def exit_(code):
        raise _Exited(code)

    monkeypatch.setattr(distributed.os, "_exit", exit_)

    def main():
        raise error

    with pytest.raises(_Exited) as ended:
        distributed.exit_process(main)
    return ended.value.args[0]


def test_a_lost_peer_reported_by_its_line_prints_no_traceback(capsys, monkeypatch):
    ctx = distributed.DistContext(rank=0, world_size=2)
    lost = RuntimeError(PEER_LOSS)
    ctx.report_failure(lost)
    assert _exit_process(monkeypatch, lost) == 1
    err = capsys.readouterr().err
    assert err.startswith("proxima: rank 0 stopped: lost contact with another rank") and err.count("\n") == 1, err


def test_an_unreported_error_still_prints_its_traceback_once(capsys, monkeypatch):
    """A bug, and a lost peer no line named (raised outside train): the traceback is the only account of it."""
    for error in (KeyError("bug"), RuntimeError(PEER_LOSS)):
        assert _exit_process(monkeypatch, error) == 1
        err = capsys.readouterr().err
        assert err.count("Traceback (most recent call last):") == 1, err
        assert err.rstrip().splitlines()[-1] == f"{type(error).__name__}: {error}", err
