"""A population's probe of a native env (population.refuse_shared_env_stream) refuses an env whose
_dynamics or _sample_initial_state draws from torch's global RNG: reset(seed) seeds none of it and every
--seeds member shares it, so members would silently differ from their single runs. One line, exit 2, no
run directory; an env drawing through self._uniform trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from proxima import population
from proxima.config import PPOConfig
from proxima.envs import EnvError
from tests.cli_helpers import TINY_POP, error_line, module_written_in, run_main

MODULE = '''
import gymnasium as gym, numpy as np, torch
from proxima.envs import NativeEnv


class Drift(NativeEnv):
    """A 1-D drift: start uniform in [-1, 1), push left/right; every draw through self._uniform."""
    max_episode_steps = 20

    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(-10, 10, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)

    def _sample_initial_state(self, n):
        return {"x": self._uniform((n,), -1.0, 1.0)}

    def _dynamics(self, action):
        x = self.state["x"] + 0.2 * (action.float() - 0.5) + self._uniform((self.num_envs,), -0.01, 0.01)
        self.state["x"] = x
        return -x.abs(), x.abs() > 5

    def _observe(self):
        return self.state["x"].unsqueeze(1).clone()


class GlobalNoise(Drift):
    """The same drift, its step noise from torch's global RNG."""
    def _dynamics(self, action):
        x = self.state["x"] + 0.2 * (action.float() - 0.5) + 0.01 * torch.randn(self.num_envs)
        self.state["x"] = x
        return -x.abs(), x.abs() > 5


class GlobalStart(Drift):
    """The same drift, its start from torch's global RNG."""
    def _sample_initial_state(self, n):
        return {"x": torch.rand(n) * 2 - 1}
'''

LINE = ("env 'rp47:{cls}' draws from torch's global random stream in _dynamics/_sample_initial_state: members of a "
        "population would not equal their single runs; draw through self._uniform / self._normal / self._randint "
        "(docs/native_envs.md)")


@pytest.fixture
def user(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "rp47", MODULE)


@pytest.mark.parametrize("cls", ["GlobalNoise", "GlobalStart"])
def test_a_population_refuses_an_env_drawing_from_the_global_rng_before_its_run_dir(user, capsys, cls):
    code, _, err = run_main(["train", f"rp47:{cls}", "--seeds", "1-2", *TINY_POP, "--total-timesteps", "64",
                             "--run-dir", "pop"], capsys)
    # was: trained, member seed 2 stepping through other noise than `--seed 2` alone, and nothing said
    line = error_line(code, err, LINE.format(cls=cls))
    assert line.endswith(LINE.format(cls=cls)), line
    assert not Path("pop").exists()


def test_the_probe_refuses_and_still_puts_the_global_rng_back(user):
    torch.manual_seed(3)
    before = torch.get_rng_state()
    with pytest.raises(EnvError) as e:
        population.refuse_shared_env_stream(PPOConfig(env_id="rp47:GlobalNoise"), [1, 2], torch.device("cpu"))
    assert str(e.value) == LINE.format(cls="GlobalNoise")
    assert torch.equal(torch.get_rng_state(), before)  # the members draw what they would have without the probe


def test_a_population_trains_an_env_drawing_through_uniform(user, capsys):
    population.refuse_shared_env_stream(PPOConfig(env_id="rp47:Drift"), [1, 2], torch.device("cpu"))  # no refusal
    code, _, err = run_main(["train", "rp47:Drift", "--seeds", "1-2", *TINY_POP, "--total-timesteps", "64",
                             "--run-dir", "pop", "--eval-episodes", "0"], capsys)
    assert code == 0, err
    assert "global random stream" not in err and "not the run `--seed k` trains alone" not in err, err
    assert sorted(p.name for p in Path("pop").iterdir() if p.name.startswith("m0")) == ["m000-seed1", "m001-seed2"]
    assert json.loads(Path("pop/population.json").read_text())["members_equal_single_runs"] is True
