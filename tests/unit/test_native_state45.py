"""A NativeEnv's state dict checked at the first reset and step (one line naming the hook, the key,
what was found and what is expected, never a torch error from the autoreset), and checked only
then; a scalar Box(()) observation returned as (N,) and read as (N, 1); the device cpu:0 taken as
the CPU it names."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima.device import resolve_device
from proxima.envs import EnvError, NativeEnv, make_env


class Walk(NativeEnv):
    """A 1-D walk on 0..4, the goal at 4: state {'pos': (N,) int64}."""

    max_episode_steps = 20

    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)

    def _sample_initial_state(self, n):
        return {"pos": self._uniform((n,), 0, 4).floor().long()}

    def _dynamics(self, action):
        pos = (self.state["pos"] + action.reshape(self.num_envs) * 2 - 1).clamp(0, 4)
        self.state["pos"] = pos
        terminated = pos == 4
        return terminated.float(), terminated

    def _observe(self):
        return self.state["pos"].float()[:, None] / 4


class KeyAddedInDynamics(Walk):
    def _dynamics(self, action):
        self.state["t"] = self.state.get("t", torch.zeros(self.num_envs)) + 1
        return super()._dynamics(action)


class DtypeChangedInDynamics(Walk):
    def _sample_initial_state(self, n):
        return {**super()._sample_initial_state(n), "t": torch.zeros(n, dtype=torch.int64)}

    def _dynamics(self, action):
        self.state["t"] = self.state["t"] + 0.5
        return super()._dynamics(action)


class ShapeChangedInDynamics(Walk):
    def _dynamics(self, action):
        out = super()._dynamics(action)
        self.state["pos"] = self.state["pos"][:, None]
        return out

    def _observe(self):
        return self.state["pos"].reshape(self.num_envs, 1).float() / 4


class KeyRemovedInDynamics(DtypeChangedInDynamics):
    def _dynamics(self, action):
        del self.state["t"]
        return Walk._dynamics(self, action)


class TensorNotDict(Walk):
    def _sample_initial_state(self, n):
        return self._uniform((n,), 0, 4).floor().long()


class ExpandedStart(Walk):
    def _sample_initial_state(self, n):
        return {"pos": torch.zeros(1, 2, dtype=torch.int64).expand(n, 2)}

    def _observe(self):
        return self.state["pos"][:, :1].float()


class OneRowStart(Walk):
    def _sample_initial_state(self, n):
        return {"pos": torch.zeros(1, dtype=torch.int64)}


class NumberInState(Walk):
    def _sample_initial_state(self, n):
        return {**super()._sample_initial_state(n), "t": 0}


def test_a_key_added_in_dynamics_is_named_at_the_first_step():
    env = KeyAddedInDynamics(2, seed=0)
    env.reset()
    with pytest.raises(EnvError) as e:
        env.step(torch.ones(2, dtype=torch.int64))
    assert str(e.value) == ("env 'KeyAddedInDynamics': _dynamics() added state['t'], a key _sample_initial_state() does "
                            "not return: the state's keys are fixed at reset, where each episode's start is drawn; "
                            "return 't' from _sample_initial_state(n) too, with its start value")


def test_a_dtype_changed_in_dynamics_is_named_with_both_dtypes():
    env = DtypeChangedInDynamics(2, seed=0)
    env.reset()
    with pytest.raises(EnvError) as e:
        env.step(torch.ones(2, dtype=torch.int64))
    assert str(e.value) == ("env 'DtypeChangedInDynamics': state['t'] after _dynamics(): dtype torch.float32, expected "
                            "torch.int64 as at reset (_sample_initial_state()); keep each key's dtype from reset to "
                            "step (cast back, or draw its start in the dtype _dynamics writes)")


def test_a_shape_changed_in_dynamics_is_named_before_any_resize_warning(recwarn):
    env = ShapeChangedInDynamics(2, seed=0)
    env.reset()
    with pytest.raises(EnvError) as e:
        env.step(torch.ones(2, dtype=torch.int64))
    assert str(e.value) == ("env 'ShapeChangedInDynamics': state['pos'] after _dynamics(): shape (2, 1), expected (2,) "
                            "as at reset (_sample_initial_state()); keep each key's shape from reset to step")
    assert not [w for w in recwarn if "resize" in str(w.message)]


def test_a_key_removed_in_dynamics_is_named():
    env = KeyRemovedInDynamics(2, seed=0)
    env.reset()
    with pytest.raises(EnvError, match=r"_dynamics\(\) removed state\['t'\]; keep every key of _sample_initial_state\(\)"):
        env.step(torch.ones(2, dtype=torch.int64))


def test_a_start_state_that_is_not_a_dict_is_named_at_the_first_reset():
    with pytest.raises(EnvError) as e:
        TensorNotDict(2, seed=0).reset()
    assert str(e.value) == ("env 'TensorNotDict': _sample_initial_state() returned a Tensor, expected a dict of "
                            "(num_envs, ...) tensors, one per state variable; return {'name': tensor, ...} "
                            "(docs/native_envs.md)")


def test_an_expanded_start_state_is_named_before_the_autoreset_writes_it():
    env = ExpandedStart(2, seed=0)
    with pytest.raises(EnvError) as e:
        env.reset()
    assert str(e.value) == ("env 'ExpandedStart': state['pos'] of _sample_initial_state(): an expanded tensor (stride 0 "
                            "in dim 0), whose rows share one memory location that the autoreset writes row by row; "
                            "return a tensor of its own (.expand(...).clone(), or .repeat(...))")


def test_a_start_state_without_one_row_per_env_or_not_a_tensor_is_named():
    with pytest.raises(EnvError, match=re.escape("state['pos'] of _sample_initial_state(): shape (1,), expected (3, ...) "
                                                 "(num_envs first)")):
        OneRowStart(3, seed=0).reset()
    with pytest.raises(EnvError, match=re.escape("state['t'] of _sample_initial_state(): a int, expected a (num_envs, "
                                                 "...) torch.Tensor")):
        NumberInState(3, seed=0).reset()


def test_a_good_state_passes_and_is_checked_only_at_the_first_reset_and_step(monkeypatch):
    env = Walk(4, seed=0)
    env.reset()
    env.step(torch.ones(4, dtype=torch.int64))

    def called(*args):
        raise AssertionError("a state check ran after the first step")

    # the hot loop pays nothing: the checks are behind the first reset's and step's flags
    monkeypatch.setattr(env, "_check_state_kept", called)
    monkeypatch.setattr(env, "_check_initial_state", called)
    for _ in range(30):  # through autoresets (goal reached or time limit)
        obs, reward, terminated, truncated, info = env.step(torch.ones(4, dtype=torch.int64))
    env.reset()
    assert obs.shape == (4, 1) and env.state["pos"].dtype == torch.int64


class Scalar(NativeEnv):
    """A point on a line, observed as a scalar Box(()): _observe() returns (N,)."""

    max_episode_steps = 5

    def __init__(self, num_envs=1, device="cpu", seed=None, rows=False):
        super().__init__(num_envs, device=device, seed=seed)
        self.rows = rows
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (), np.float32)
        self.single_action_space = gym.spaces.Box(-0.5, 0.5, (), np.float32)

    def _sample_initial_state(self, n):
        return {"p": self._uniform((n,), -2, 2)}

    def _dynamics(self, action):
        self.state["p"] = self.state["p"] + action.reshape(self.num_envs)
        return -self.state["p"].abs(), self.state["p"].abs() > 10  # off the line

    def _observe(self):
        p = self.state["p"].clone()
        return p[:, None] if self.rows else p


@pytest.mark.parametrize("rows", [False, True], ids=["(N,)", "(N, 1)"])
def test_a_scalar_box_observation_is_taken_as_n_or_n_by_1_and_read_as_rows(rows):
    env = Scalar(3, seed=0, rows=rows)
    obs = env.reset()
    start = env.state["p"].clone()
    assert obs.shape == (3, 1) and env.obs_shape == (1,)
    torch.testing.assert_close(obs[:, 0], start)
    for _ in range(5):  # standing still to the time limit: final_obs is the start, obs the next start
        obs, reward, terminated, truncated, info = env.step(torch.zeros(3, 1))
        assert obs.shape == (3, 1) and info["final_obs"].shape == (3, 1)
    assert truncated.all() and not terminated.any()
    torch.testing.assert_close(info["final_obs"][:, 0], start)
    torch.testing.assert_close(obs[:, 0], env.state["p"])


def test_a_scalar_box_observation_of_a_wrong_shape_says_both_shapes_it_takes():
    env = Scalar(2, seed=0)
    env._observe = lambda: torch.zeros(2, 3)
    with pytest.raises(EnvError) as e:
        env.reset()
    assert str(e.value) == ("env 'Scalar': the observations of _observe() (first reset): shape (2, 3), expected (2, 1) "
                            "(num_envs first); return one row per env, each of the shape () that "
                            "single_observation_space declares (or flat, (1,))")


def test_cpu_0_is_the_cpu_for_every_native_env():
    assert resolve_device("cpu:0") == torch.device("cpu")
    assert resolve_device("cpu:0", arg="device") == torch.device("cpu")
    env = make_env("CartPole-v1", 2, "cpu:0", seed=0)
    assert env.reset().shape == (2, 4)
    # built directly, as a user's own script may: its CPU tensors name no index, and are on its device
    walk = Walk(2, device="cpu:0", seed=0)
    walk.reset()
    obs, *_ = walk.step(torch.ones(2, dtype=torch.int64))
    assert obs.device == torch.device("cpu")

