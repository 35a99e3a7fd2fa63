"""A user's NativeEnv from the CLI: --device cpu:0 trains, evaluates and resumes (torch's CPU tensors
name no index); a scalar Box(()) observation passes check-env and trains; a population refuses, in
one line and before any file is written, an env that draws from self.generator while it says its
rows can take per-member streams (its members would silently share one stream)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.cli_helpers import TINY_POP, TINY_RUN, error_line, module_written_in, run_main

ENVS = '''
import gymnasium as gym
import numpy as np
import torch
from proxima.envs import NativeEnv


class Walk(NativeEnv):
    """A 1-D walk on 0..4, the goal at 4, its starts drawn through self._uniform."""

    max_episode_steps = 8

    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)

    def _sample_initial_state(self, n):
        return {"pos": self._uniform((n,), 0, 4).floor().long()}

    def _dynamics(self, action):
        pos = (self.state["pos"] + action.reshape(self.num_envs) * 2 - 1).clamp(0, 4)
        self.state["pos"] = pos
        return (pos == 4).float(), pos == 4

    def _observe(self):
        return self.state["pos"].float()[:, None] / 4


class Drawn(Walk):
    """Its starts drawn from self.generator directly, supports_member_streams left True."""

    def _sample_initial_state(self, n):
        return {"pos": torch.randint(0, 4, (n,), generator=self.generator, device=self.device)}


class Flagged(Drawn):
    supports_member_streams = False


class Scalar(NativeEnv):
    """A point on a line observed as a scalar Box(()): _observe() returns (N,)."""

    max_episode_steps = 8

    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (), np.float32)
        self.single_action_space = gym.spaces.Box(-0.5, 0.5, (), np.float32)

    def _sample_initial_state(self, n):
        return {"p": self._uniform((n,), -2, 2)}

    def _dynamics(self, action):
        self.state["p"] = self.state["p"] + action.reshape(self.num_envs)
        return -self.state["p"].abs(), self.state["p"].abs() < 0.1

    def _observe(self):
        return self.state["p"].clone()
'''


@pytest.fixture
def envs(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "state45envs", ENVS)


def test_device_cpu_0_trains_evaluates_and_resumes_cartpole(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["train", "CartPole-v1", "--device", "cpu:0", *TINY_RUN, "--total-timesteps", "64",
                               "--run-dir", "run"], capsys)
    assert code == 0, err
    assert yaml.safe_load((tmp_path / "run/config.yaml").read_text())["device"] == "cpu:0"  # as typed; resolved at use
    code, out, err = run_main(["eval", "run", "--device", "cpu:0", "--episodes", "2"], capsys)
    assert code == 0 and "over 2 episodes" in out, out + err
    code, out, err = run_main(["resume", "run", "--total-timesteps", "128"], capsys)
    assert code == 0 and "global step 64" in out + err, out + err


def test_a_user_native_env_trains_on_cpu_0(envs, capsys):
    code, out, err = run_main(["train", "state45envs:Walk", "--device", "cpu:0", *TINY_RUN, "--total-timesteps", "64",
                               "--run-dir", "walk"], capsys)
    assert code == 0, err


def test_a_scalar_box_observation_passes_check_env_and_trains(envs, capsys):
    code, out, err = run_main(["check-env", "state45envs:Scalar"], capsys)
    assert code == 0 and "OK: state45envs:Scalar passes" in out, out + err
    code, out, err = run_main(["train", "state45envs:Scalar", *TINY_RUN, "--total-timesteps", "64", "--run-dir", "s"], capsys)
    assert code == 0, err


def test_a_population_refuses_an_env_drawing_from_its_generator_with_member_streams_on(envs, capsys):
    code, out, err = run_main(["train", "state45envs:Drawn", "--seeds", "1-2", *TINY_POP, "--total-timesteps", "64",
                               "--run-dir", "pop"], capsys)
    error_line(code, err, "env 'state45envs:Drawn': with --seeds its reset() or step() drew from self.generator",
               "every member would share one random stream", "draw through self._uniform",
               "or set supports_member_streams = False on Drawn", "proxima check-env state45envs:Drawn")
    assert not Path("pop").exists()  # refused before the run directory is made


def test_a_population_trains_an_env_that_says_it_draws_from_its_generator(envs, capsys):
    code, out, err = run_main(["train", "state45envs:Flagged", "--seeds", "1-2", *TINY_POP, "--total-timesteps", "64",
                               "--run-dir", "pop"], capsys)
    assert code == 0, err
    assert "draws every member's env randomness from one generator" in err, err
    code, out, err = run_main(["train", "state45envs:Walk", "--seeds", "1-2", *TINY_POP, "--total-timesteps", "64",
                               "--run-dir", "walk"], capsys)
    assert code == 0 and "not the run `--seed k` trains alone" not in err, err
