"""train, eval and resume from the CLI of the action spaces once refused (tests/unit/test_action_spaces45.py
has the units): CleanRL's ClipAction-wrapped Pendulum, an env with an unbounded Box, and a MultiBinary
env that learns its target bits. A checkpoint's infinite bounds are no damage; a NaN weight still is."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from cli_helpers import error_line, module_written_in, run_main

ENVS = '''
import gymnasium as gym
import numpy as np

TARGET = np.array([[1, 0, 1], [0, 0, 1]], np.int8)


def clipped_pendulum(**kw):
    """CleanRL's continuous make_env: the env in gymnasium.wrappers.ClipAction, which declares Box(-inf, inf)."""
    return gym.wrappers.ClipAction(gym.make("Pendulum-v1", **kw))


class Unbounded(gym.Env):
    """Box(-inf, inf) actions; the reward is highest at the action (3, 3): beyond a unit-scale bound."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), -float(np.square(action - 3.0).sum()), False, self.t >= 8, {}


class Bits(gym.Env):
    """MultiBinary((2, 3)): the reward is the number of bits that match TARGET; an episode is one step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.MultiBinary((2, 3))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if not (isinstance(action, np.ndarray) and action.dtype == np.int8 and action.shape == (2, 3)
                and set(np.unique(action).tolist()) <= {0, 1}):
            raise TypeError(f"Bits takes an int8 (2, 3) array of 0/1, got {action!r}")
        return np.zeros(2, np.float32), float((action == TARGET).sum()), True, False, {}


class Bits4(gym.Env):
    """MultiBinary(4), 1-D: it prints MultiBinary(4) where a checkpoint's record rebuilds MultiBinary((4,))."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.MultiBinary(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), float((action == TARGET[0, :1].repeat(4)).sum()), True, False, {}
'''

SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "2", "--no-progress",
         "--threads", "1", "--seed", "1"]


@pytest.fixture
def envs(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "act45_cli_envs", ENVS)


def eval_json(run: str) -> dict:
    return json.loads(Path(run, "eval.json").read_text())


def train_eval_resume(env: str, capsys, *flags: str) -> dict:
    """train 256 steps into R, eval R, resume R to 512 steps: each exits 0; the eval.json of the resume."""
    code, _, err = run_main(["train", env, *SMALL, *flags, "--total-timesteps", "256", "--run-dir", "R"], capsys)
    assert code == 0, err
    trained = eval_json("R")
    assert trained["episodes"] == 2 and all(math.isfinite(r) for r in trained["returns"]), trained
    code, out, err = run_main(["eval", "--env", env, "R", "--episodes", "2"], capsys)
    assert code == 0, err
    assert f"{env}: {trained['mean_return']:.2f}" in out + err  # the checkpoint's policy again, the same episodes
    code, _, err = run_main(["resume", "--env", env, "R", "--total-timesteps", "512"], capsys)
    assert code == 0, err
    assert sorted(p.name for p in Path("R/checkpoints").glob("*.pt"))[-1] == "step_000000000512.pt"
    return eval_json("R")


def test_a_clip_action_wrapped_pendulum_trains_evaluates_and_resumes(envs, capsys):
    resumed = train_eval_resume("act45_cli_envs:clipped_pendulum", capsys, "--eval-episodes", "2")
    assert resumed["episodes"] == 2 and all(math.isfinite(r) and -3300 < r <= 0 for r in resumed["returns"]), resumed
    recorded = torch.load("R/checkpoints/step_000000000512.pt", weights_only=True)["spaces"]["action"]
    assert recorded["type"] == "Box" and recorded["low"].tolist() == [-math.inf] and recorded["high"].tolist() == [math.inf]


def test_an_unbounded_box_env_trains_evaluates_and_resumes(envs, capsys):
    resumed = train_eval_resume("act45_cli_envs:Unbounded", capsys, "--eval-episodes", "2")
    assert all(math.isfinite(r) for r in resumed["returns"]), resumed


def test_a_nan_weight_in_an_unbounded_box_checkpoint_is_still_refused(envs, capsys):
    code, _, err = run_main(["train", "act45_cli_envs:Unbounded", *SMALL, "--total-timesteps", "64", "--eval-episodes", "0",
                             "--run-dir", "R"], capsys)
    assert code == 0, err
    state = torch.load("R/checkpoints/step_000000000064.pt", weights_only=True)
    state["agent"]["actor_logstd"][0, 1] = float("nan")
    torch.save(state, "bad.pt")
    code, _, err = run_main(["eval", "--env", "act45_cli_envs:Unbounded", "bad.pt", "--episodes", "1"], capsys)
    line = error_line(code, err, "bad.pt: agent.actor_logstd holds 1 non-finite value(s) (NaN or inf) of 2")
    assert "spaces" not in line  # the infinite bounds beside it are no damage


def test_a_multibinary_env_learns_its_target_bits_and_evaluates_and_resumes(envs, capsys):
    env = "act45_cli_envs:Bits"
    code, _, err = run_main(["train", env, *SMALL, "--num-envs", "8", "--learning-rate", "3e-3", "--total-timesteps", "1024",
                             "--eval-episodes", "10", "--run-dir", "R"], capsys)
    assert code == 0, err
    assert "action MultiBinary(2, 3) -> 6 categoricals over 0/1, as int8" in err
    assert eval_json("R")["mean_return"] >= 5.5  # of 6 bits: a random policy matches 3
    recorded = torch.load("R/checkpoints/step_000000001024.pt", weights_only=True)["spaces"]["action"]
    assert recorded == {"type": "MultiBinary", "shape": [2, 3]}
    code, out, err = run_main(["eval", "--env", env, "R", "--episodes", "5"], capsys)
    assert code == 0, err
    assert f"{env}: 6.00 +- 0.00" in out + err
    code, _, err = run_main(["resume", "--env", env, "R", "--total-timesteps", "1536"], capsys)
    assert code == 0, err
    assert eval_json("R")["mean_return"] >= 5.5


def test_a_one_dimensional_multibinary_run_evaluates_and_resumes(envs, capsys):
    """MultiBinary(4) trains, evaluates at its end (eval.json), and eval and resume take the run's own env:
    the space rebuilt from the checkpoint is the same MultiBinary, though it prints as MultiBinary((4,))."""
    resumed = train_eval_resume("act45_cli_envs:Bits4", capsys, "--eval-episodes", "2")
    assert all(0 <= r <= 4 for r in resumed["returns"]), resumed
