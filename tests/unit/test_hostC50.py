"""Hostile-input review 50 (C): a second Ctrl-C during a resume from a loose checkpoint names this run's
directory (or none) and removes its lock; the distributed settings warning takes NaN for NaN and a tuple
for the same list."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from proxima import distributed
from proxima.rundir import LOCK_NAME
from proxima.signals import SignalGuard
from tests.unit.test_signals43 import _Exited, exits  # noqa: F401

PROXIMA = str(Path(sys.executable).with_name("proxima"))


@pytest.fixture
def rank0(monkeypatch):
    """This process as a single run's (no RANK), whatever the shell exported; with test_signals43's ``exits``,
    os._exit raises _Exited(code) instead of ending pytest."""
    monkeypatch.delenv("RANK", raising=False)


def _locked_run(run: Path) -> Path:
    (run / "checkpoints").mkdir(parents=True)
    (run / LOCK_NAME).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": "x"}))
    return run


# --- 2: a second interrupt of `proxima resume FILE --run-dir NEW` ----------------------------------------------
def test_a_second_interrupt_before_the_first_checkpoint_of_a_loose_resume_removes_its_lock_and_names_no_folder(
        tmp_path, exits, rank0, capfd):
    loose = tmp_path / "loose" / "b.pt"
    loose.parent.mkdir()
    loose.write_bytes(b"x")
    run = _locked_run(tmp_path / "NEW3")
    guard = SignalGuard(lambda: loose, run_dir=run)
    guard._handle(signal.SIGINT, None)
    with pytest.raises(_Exited) as code:
        guard._handle(signal.SIGINT, None)
    assert code.value.args == (130,)
    assert not (run / LOCK_NAME).exists()  # was: left behind, naming the dead process
    out, err = capfd.readouterr()
    assert out == ""  # was: "run directory: .../loose", which `proxima resume` refuses; a first stop without one prints none
    assert err.splitlines()[-1] == "proxima: second interrupt, exiting now (no checkpoint was written)"
    assert loose.read_bytes() == b"x"


def test_a_second_interrupt_after_a_loose_resume_s_first_checkpoint_names_the_new_run(tmp_path, exits, rank0, capfd):
    run = _locked_run(tmp_path / "NEW3")
    last = run / "checkpoints" / "step_000000032768.pt"
    last.write_bytes(b"x")
    guard = SignalGuard(lambda: last, run_dir=run)
    guard._handle(signal.SIGINT, None)
    with pytest.raises(_Exited):
        guard._handle(signal.SIGINT, None)
    assert not (run / LOCK_NAME).exists()
    out, err = capfd.readouterr()
    assert out == f"run directory: {run}\n"
    assert err.splitlines()[-1].startswith(f"proxima: second interrupt, exiting now (last checkpoint kept); checkpoint: "
                                           f"{last}; continue with: proxima resume ")
    assert err.splitlines()[-1].endswith(str(run))


ENV_MODULE = '''
import os
import signal

from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.wrappers import TimeLimit
import gymnasium as gym

steps = [0]


class TwoInterrupts(gym.Wrapper):
    """CartPole that, with HOSTC50_INTERRUPT_AT=N, sends its process two SIGINTs at its N-th step (a user's
    Ctrl-C twice), at an exact moment: mid-iteration, before the run's next checkpoint."""

    def __init__(self):
        super().__init__(TimeLimit(CartPoleEnv(), 50))

    def step(self, action):
        steps[0] += 1
        if steps[0] == int(os.environ.get("HOSTC50_INTERRUPT_AT", "0")):
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        return self.env.step(action)
'''


def _proxima(args, cwd, **extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(cwd), os.environ.get("PYTHONPATH", "")]),
               **extra)
    return subprocess.run([PROXIMA, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_two_ctrl_cs_in_a_resume_from_a_loose_checkpoint_leave_no_lock_and_no_wrong_run_directory(tmp_path):
    (tmp_path / "hostc50_env.py").write_text(textwrap.dedent(ENV_MODULE))
    small = ["--num-envs", "2", "--num-steps", "32", "--eval-episodes", "0"]
    first = _proxima(["train", "hostc50_env:TwoInterrupts", *small, "--total-timesteps", "64", "--run-dir", "run1"],
                     tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    (tmp_path / "loose").mkdir()
    shutil.copy(sorted((tmp_path / "run1" / "checkpoints").glob("step_*.pt"))[-1], tmp_path / "loose" / "b.pt")
    # 10 env steps into the resume's first iteration (2 envs x 32 steps): before NEW3's first checkpoint
    out = _proxima(["resume", "--env", "hostc50_env:TwoInterrupts", "loose/b.pt", "--run-dir", "NEW3",
                    "--total-timesteps", "2048"], tmp_path, HOSTC50_INTERRUPT_AT="10")
    assert out.returncode == 130, out.stderr[-3000:]
    assert out.stderr.splitlines()[-1] == "proxima: second interrupt, exiting now (no checkpoint was written)"
    assert "run directory:" not in out.stdout  # was: "run directory: loose"
    assert not (tmp_path / "NEW3" / LOCK_NAME).exists()  # was: left naming the dead process
    assert (tmp_path / "loose" / "b.pt").is_file()


# --- 4: the distributed settings warning, NaN and tuples ----------------------------------------------------------
BASE = {"num_envs": 4, "hidden_sizes": [64, 64], "env_kwargs": {"sutton_barto_reward": float("nan")}}


def test_ranks_with_the_same_nan_setting_get_no_warning():
    # gather_object pickles each rank's config: rank 1's NaN is another object, and NaN != NaN
    assert distributed.settings_differ_line([BASE, pickle.loads(pickle.dumps(BASE))], python=False) is None
    assert distributed.settings_differ_line([{"clip_coef": float("nan")}, {"clip_coef": float("nan")}]) is None


def test_a_tuple_and_the_same_list_agree():
    assert distributed.settings_differ_line([BASE, dict(BASE, hidden_sizes=(64, 64))], python=True) is None


def test_nan_against_a_number_and_other_lists_still_warn():
    line = distributed.settings_differ_line([BASE, dict(BASE, env_kwargs={"sutton_barto_reward": 1.0},
                                                        hidden_sizes=(64, 32))], python=False)
    assert line == ("proxima: warning: the ranks were not started with the same settings: --env-kwargs is "
                    "{'sutton_barto_reward': nan} on rank 0 but {'sutton_barto_reward': 1.0} on rank 1; --hidden-sizes "
                    "is [64, 64] on rank 0 but (64, 32) on rank 1; every rank trains with rank 0's (start every rank "
                    "with the same command)")
