"""Review 34 (unusual Gymnasium spaces): a policy given an env whose action start, Box bounds or dtype
differ from its checkpoint's is refused (load, eval, resume) instead of acting in the trained space;
wide-integer observations get float64's spread note; batched_act, bool Box actions and the nested
Dict refusal say what they do."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima.checkpoint import CheckpointError, Policy, env_spaces_mismatch, load_policy, space_from_dict, space_to_dict
from proxima.config import PPOConfig
from proxima.envs import EnvError
from proxima.envs.spaces import check_spaces, space_actions
from proxima.trainer import train
from tests.cli_helpers import error_line, run_main

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)

ENVS = '''
import numpy as np
import gymnasium as gym


class _Base(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.Discrete(3, start=5)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return np.zeros(3, np.float32)

    def step(self, a):
        self.t += 1
        return self._obs(), 0.0, False, self.t >= 8, {}


class Disc5(_Base):
    pass


class Disc3(_Base):
    action_space = gym.spaces.Discrete(3)


class BigInt(_Base):  # a timestamp-like int64 counter: float32 values there are 128 apart
    observation_space = gym.spaces.Box(0, 2**40, (2,), np.int64)

    def _obs(self):
        return np.array([1_700_000_000 + self.t + int(self.np_random.integers(0, 50)), self.t], np.int64)
'''


@pytest.fixture
def envs(tmp_path, monkeypatch):
    (tmp_path / "r34spaces.py").write_text(ENVS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _policy(act_space) -> Policy:
    """A policy of the recorded spaces only: check_env_spaces reads nothing else."""
    return Policy(torch.nn.Linear(3, 3), None, {"env_id": "m:Trained"}, OBS, act_space, "cpu", path="run")


class _Env:
    def __init__(self, act_space):
        self.observation_space, self.action_space = OBS, act_space


# ------------------------------------------------------------------ 1. start, Box bounds and dtype
@pytest.mark.parametrize("trained, env, words", [
    (gym.spaces.Discrete(3, start=5), gym.spaces.Discrete(3), "start 5 in training, 0 in the env"),
    (gym.spaces.MultiDiscrete([3, 4], start=[10, -2]), gym.spaces.MultiDiscrete([3, 4]), "start [10, -2]"),
    (gym.spaces.Box(-1, 1, (2, 2), np.float32), gym.spaces.Box(0.5, 2, (2, 2), np.float32), "bounds -1.0..1.0"),
    (gym.spaces.Box(-1, 1, (2, 2), np.float32), gym.spaces.Box(-1, 1, (2, 2), np.int64), "dtype float32 in training, int64"),
])
def test_eval_refuses_an_env_whose_actions_differ_in_start_bounds_or_dtype(trained, env, words):
    policy = _policy(trained)
    with pytest.raises(CheckpointError, match="take") as e:
        policy.check_env_spaces(_Env(env))
    assert words in str(e.value) and "\n" not in str(e.value)
    policy.check_env_spaces(_Env(trained))  # its own space passes


def test_resume_refuses_another_start_but_not_an_old_checkpoint_without_one():
    spaces = {"observation": space_to_dict(OBS), "action": space_to_dict(gym.spaces.Discrete(3, start=5))}
    line = env_spaces_mismatch("x.pt", "m:E", spaces, OBS, gym.spaces.Discrete(3))
    assert line and "Discrete(3, start=5)" in line and "start 5 in training, 0 in the env" in line
    old = {"observation": spaces["observation"], "action": {"type": "Discrete", "n": 3}}  # from before start was recorded
    assert env_spaces_mismatch("x.pt", "m:E", old, OBS, gym.spaces.Discrete(3, start=5)) is None
    _policy(space_from_dict(old["action"])).check_env_spaces(_Env(gym.spaces.Discrete(3, start=5)))


def test_load_and_eval_refuse_an_env_with_another_start_and_batched_act_names_a_raw_obs(envs, capsys):
    cfg = PPOConfig(env_id="r34spaces:Disc5", backend="gymnasium", num_envs=2, num_steps=16, total_timesteps=32,
                    eval_episodes=0, progress=False, checkpoint_every=0, threads=1)
    run, _ = train(cfg, run_dir=envs / "run", quiet=True)
    with pytest.raises(CheckpointError, match=r"Discrete\(3\), the run was trained on Discrete\(3, start=5\)"):
        load_policy(run, env_id="r34spaces:Disc3")
    code, _, err = run_main(["eval", str(run), "--env", "r34spaces:Disc3", "--episodes", "1"], capsys)
    error_line(code, err, "start 5 in training, 0 in the env")
    policy = load_policy(run, env_id="r34spaces:Disc5")
    assert policy.act(np.zeros(3, np.float32)) in (5, 6, 7)
    # 3. what act() takes, batched_act refuses in one line pointing to act(), not a torch dtype error
    with pytest.raises(ValueError, match=r"dtype torch.int64.*policy.act\(obs\)"):
        policy.batched_act(torch.zeros((2, 3), dtype=torch.int64))
    with pytest.raises(ValueError, match=r"a dict .*policy.act\(obs\)"):
        policy.batched_act({"a": torch.zeros((2, 3))})


# ------------------------------------------------------------------ 2. wide-integer observations
def test_int64_observations_on_a_large_offset_get_the_spread_note(envs):
    from proxima.envs.checker import check_env
    from proxima.envs.gym_adapter import GymnasiumEnv, built_env

    notes = check_env("r34spaces:BigInt", steps=40).notes
    assert any("obs[0] is int64 and varies" in n and "128 apart" in n for n in notes), notes
    env = GymnasiumEnv("r34spaces:BigInt", 4, seed=0)
    try:
        env.reset(seed=0)
    finally:
        env.close()
    spread = built_env("r34spaces:BigInt")["spread"]
    assert len(spread) == 1 and "obs[0] is int64" in spread[0], spread


# ------------------------------------------------------------------ 4. bool Box actions round
def test_a_bool_box_action_rounds_as_an_integer_box_does():
    got = space_actions(np.array([[0.3, 0.6, -0.7, 0.49]], np.float32), gym.spaces.Box(0, 1, (4,), np.bool_), 1)
    assert got.dtype == np.bool_ and got.tolist() == [[False, True, False, False]]


# ------------------------------------------------------------------ 5. nested Dict refusal gives a fix
def test_a_nested_dict_observation_is_refused_with_its_flatten_fix():
    box = gym.spaces.Box(-1, 1, (2,), np.float32)
    with pytest.raises(EnvError) as e:
        check_spaces("m:E", gym.spaces.Dict({"a": box, "inner": gym.spaces.Dict({"b": box})}), gym.spaces.Discrete(2))
    line = str(e.value)
    assert "at key 'inner'" in line and "declare key 'inner' as Box(-1.0, 1.0, (2,), float32)" in line
    assert "gymnasium.wrappers.FlattenObservation" in line and "\n" not in line
