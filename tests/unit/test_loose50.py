"""Review loose50: a resume from a loose checkpoint file (`proxima resume loose/b.pt --run-dir NEW`) that stops
before NEW's first checkpoint names no folder of the loose file's, and the directory it leaves says how to go on
from the loose file; a resumed population stopped twice keeps no lock."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from proxima.rundir import LOCK_NAME

PROXIMA = str(Path(sys.executable).with_name("proxima"))

ENV_MODULE = '''
import os
import signal

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.wrappers import TimeLimit

steps = [0]


class Interrupts(gym.Wrapper):
    """CartPole that sends its process a SIGINT at each step number in LOOSE50_INTERRUPT_AT (comma-separated,
    counted over every instance in the process: the evaluation's envs too); with LOOSE50_TWICE=1, two."""

    def __init__(self):
        super().__init__(TimeLimit(CartPoleEnv(), 50))

    def step(self, action):
        steps[0] += 1
        if str(steps[0]) in os.environ.get("LOOSE50_INTERRUPT_AT", "").split(","):
            for _ in range(2 if os.environ.get("LOOSE50_TWICE") == "1" else 1):
                os.kill(os.getpid(), signal.SIGINT)
        return self.env.step(action)
'''

ENV = "loose50_env:Interrupts"
SMALL = ["--num-envs", "2", "--num-steps", "32"]


def _proxima(args, cwd, **extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(cwd), os.environ.get("PYTHONPATH", "")]),
               **extra)
    return subprocess.run([PROXIMA, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def stuck(tmp_path_factory):
    """loose/b.pt: a checkpoint at step 64 whose --eval-every evaluation was left due by a stop; NEW: its resume,
    stopped (one Ctrl-C) during that evaluation, before NEW's first checkpoint. Returns (folder, that resume)."""
    cwd = tmp_path_factory.mktemp("loose50")
    (cwd / "loose50_env.py").write_text(textwrap.dedent(ENV_MODULE))
    evals = ["--eval-every", "1", "--eval-episodes", "2"]
    first = _proxima(["train", ENV, *SMALL, *evals, "--total-timesteps", "256", "--run-dir", "run1"], cwd,
                     LOOSE50_INTERRUPT_AT="10")
    assert first.returncode == 130, first.stderr[-3000:]
    (cwd / "loose").mkdir()
    shutil.copy(cwd / "run1" / "checkpoints" / "step_000000000064.pt", cwd / "loose" / "b.pt")
    # the resume runs the due evaluation first: its 5th env step is in it, before any training
    out = _proxima(["resume", "--env", ENV, "loose/b.pt", "--run-dir", "NEW"], cwd, LOOSE50_INTERRUPT_AT="5")
    return cwd, out


def test_a_stop_during_a_loose_resume_s_pending_evaluation_names_the_new_run_not_the_loose_file_s_folder(stuck):
    cwd, out = stuck
    assert out.returncode == 130, out.stderr[-3000:]
    # was: "stopped by SIGINT; checkpoint: loose/b.pt; continue with: proxima resume loose", which refuses
    assert out.stderr.splitlines()[-1] == ("proxima: stopped by SIGINT; during the --eval-every evaluation due at step 64; "
                                           "no checkpoint was written in NEW (loose/b.pt is unchanged)")
    assert "run directory:" not in out.stdout  # was: "run directory: loose"
    assert not list((cwd / "NEW" / "checkpoints").glob("*.pt"))
    assert not (cwd / "NEW" / LOCK_NAME).exists()


WAY_ON = ("it was started by a resume of loose/b.pt, which is unchanged: continue from it in another directory "
          f"(proxima resume --env {ENV} loose/b.pt --run-dir NEW), or move NEW aside first (mv NEW NEW.old) and resume "
          "into it again")


def test_resume_of_the_stuck_directory_names_the_loose_file_not_a_train_from_scratch(stuck):
    cwd, _ = stuck
    out = _proxima(["resume", "--env", ENV, "NEW"], cwd)
    assert out.returncode == 2
    line = out.stderr.strip().splitlines()[-1]
    # was: "train it again from the start: proxima train --config NEW/config.yaml --resume auto", losing loose/b.pt's steps
    assert line.startswith("proxima resume: error: NEW: the run stopped before its first checkpoint ")
    assert line.endswith(f"so there is nothing to evaluate or resume; {WAY_ON}")


def test_a_loose_resume_into_the_stuck_directory_is_refused_with_the_way_on_and_the_way_on_works(stuck):
    cwd, _ = stuck
    out = _proxima(["resume", "--env", ENV, "loose/b.pt", "--run-dir", "NEW"], cwd)
    assert out.returncode == 2
    # was: "choose another --run-dir, or continue that run with `proxima resume --env ... NEW`", which refuses
    assert out.stderr.strip().splitlines()[-1] == ("proxima resume: error: NEW is not empty: it holds a run that stopped "
                                                   f"before its first checkpoint; {WAY_ON}")
    (cwd / "NEW").rename(cwd / "NEW.old")
    again = _proxima(["resume", "--env", ENV, "loose/b.pt", "--run-dir", "NEW", "--total-timesteps", "128",
                      "--eval-every", "0"], cwd)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (cwd / "NEW" / "checkpoints" / "step_000000000128.pt").is_file()
    assert (cwd / "NEW.old" / "meta.json").is_file()  # nothing of the stopped resume was lost


def test_a_population_resumed_and_stopped_twice_before_its_next_checkpoint_leaves_no_lock(tmp_path):
    (tmp_path / "loose50_env.py").write_text(textwrap.dedent(ENV_MODULE))
    first = _proxima(["train", ENV, *SMALL, "--eval-episodes", "0", "--seeds", "0,1", "--total-timesteps", "64",
                      "--run-dir", "pop"], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    out = _proxima(["resume", "--env", ENV, "pop", "--total-timesteps", "1024"], tmp_path, LOOSE50_INTERRUPT_AT="10",
                   LOOSE50_TWICE="1")
    assert out.returncode == 130, out.stderr[-3000:]
    assert out.stderr.splitlines()[-1] == ("proxima: second interrupt, exiting now (last checkpoint kept); checkpoint: "
                                           f"pop/checkpoints/step_000000000064.pt; continue with: proxima resume --env {ENV} pop")
    assert out.stdout.splitlines()[-1] == "run directory: pop"
    assert not (tmp_path / "pop" / LOCK_NAME).exists()
