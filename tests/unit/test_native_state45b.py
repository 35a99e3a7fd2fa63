"""A NativeEnv's state and observation checks at their edges: an empty start, a 0-d state tensor,
one on another device, a self.state replaced by a tensor, a scalar Box observation whose shape changes
from the first reset to the first step: each one EnvError line naming the hook, never a torch error
(IndexError, a reshape's RuntimeError, an AttributeError) from the code after it. The member-stream
probe of a population (refuse_shared_env_stream) leaves the global random, numpy and torch streams
where it found them, so the members draw what they would have without it."""

from __future__ import annotations

import random
import re

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima.envs import EnvError, NativeEnv
from tests.unit.test_native_state45 import Walk  # the same 1-D walk, its states mistaken below


class EmptyStart(Walk):
    def _sample_initial_state(self, n):
        return {}

    def _observe(self):
        return torch.zeros(self.num_envs, 1)


class ZeroDimState(Walk):
    def _sample_initial_state(self, n):
        return {**super()._sample_initial_state(n), "t": torch.tensor(0.0)}


class MetaDeviceState(Walk):
    def _sample_initial_state(self, n):
        return {**super()._sample_initial_state(n), "m": torch.empty(n, device="meta")}


class StateSetToTensor(Walk):
    def _dynamics(self, action):
        out = super()._dynamics(action)
        self.state = self.state["pos"]
        return out


class OneEnvExpanded(Walk):
    def _sample_initial_state(self, n):
        return {"pos": torch.tensor(0).expand(n, 1)}  # stride (0, 0)

    def _observe(self):
        return self.state["pos"][:, :1].float()

    def _dynamics(self, action):
        return torch.zeros(self.num_envs), torch.zeros(self.num_envs, dtype=torch.bool)


def _step(env):
    env.reset()
    return env.step(torch.ones(env.num_envs, dtype=torch.int64))


def test_an_empty_start_state_is_named_at_the_first_reset():
    with pytest.raises(EnvError, match=re.escape("env 'EmptyStart': _sample_initial_state() returned an empty dict")):
        EmptyStart(2, seed=0).reset()


def test_a_0_d_state_tensor_is_named_with_its_shape_never_an_index_error():
    with pytest.raises(EnvError) as e:
        ZeroDimState(2, seed=0).reset()
    assert str(e.value) == ("env 'ZeroDimState': state['t'] of _sample_initial_state(): shape (), expected (2, ...) "
                            "(num_envs first); return one row per env: _sample_initial_state(n) draws n rows")


def test_a_start_state_on_another_device_is_named_at_the_first_reset():
    with pytest.raises(EnvError) as e:
        MetaDeviceState(2, seed=0).reset()
    assert str(e.value) == ("env 'MetaDeviceState': state['m'] of _sample_initial_state(): on meta, expected the env's "
                            "device cpu; create it on self.device")


def test_an_expand_of_one_row_for_one_env_is_taken():
    # stride 0 in a dim of size 1 shares no memory between rows: only an expand to 2+ rows is refused
    obs, reward, *_ = _step(OneEnvExpanded(1, seed=0))
    assert obs.shape == (1, 1) and float(reward) == 0.0
    with pytest.raises(EnvError, match=re.escape("state['pos'] of _sample_initial_state(): an expanded tensor (stride 0 in dim 0)")):
        OneEnvExpanded(2, seed=0).reset()


def test_self_state_set_to_a_tensor_in_dynamics_is_named():
    env = StateSetToTensor(2, seed=0)
    with pytest.raises(EnvError) as e:
        _step(env)
    assert isinstance(env.state, dict) and env.state  # the failed step put the state dict back (b68bdc1 raised on it)
    assert str(e.value).startswith("env 'StateSetToTensor': _dynamics() set self.state to a Tensor, expected the dict "
                                   "of _sample_initial_state(); assign its keys (self.state['name'] = ...)")


class Scalar(NativeEnv):
    """A point on a line observed as a scalar Box(()): (N,) or (N, 1) at the first reset (``at_reset``),
    ``at_step`` after it."""

    max_episode_steps = 5

    def __init__(self, num_envs=2, device="cpu", seed=None, at_reset=(), at_step=()):
        super().__init__(num_envs, device=device, seed=seed)
        self.at_reset, self.at_step = at_reset, at_step
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (), np.float32)
        self.single_action_space = gym.spaces.Box(-0.5, 0.5, (), np.float32)

    def _sample_initial_state(self, n):
        return {"p": self._uniform((n,), -2, 2)}

    def _dynamics(self, action):
        self.state["p"] = self.state["p"] + action.reshape(self.num_envs)
        return -self.state["p"].abs(), self.state["p"].abs() > 10

    def _observe(self):
        tail = self.at_step if self._reset_checked else self.at_reset
        p = self.state["p"]
        return p[:, None].repeat(1, tail[0]) if tail else p.clone()


def test_a_scalar_box_taken_as_n_at_reset_then_two_columns_at_step_is_one_line():
    env = Scalar(at_reset=(), at_step=(2,))
    env.reset()
    with pytest.raises(EnvError) as e:  # was torch's RuntimeError from reshaping (2, 2) to (2, 1)
        env.step(torch.zeros(2, 1))
    assert str(e.value).startswith("env 'Scalar': the observations of _observe() (first step): shape (2, 2), "
                                   "expected (2, 1) (num_envs first)")


def test_a_scalar_box_taken_as_n_by_1_at_reset_then_n_at_step_is_refused():
    env = Scalar(at_reset=(1,), at_step=())
    assert env.reset().shape == (2, 1)
    # the first reset read its rows as they came: a later (N,) is not the declared shape it took
    with pytest.raises(EnvError, match=r"_observe\(\) \(first step\): shape \(2,\), expected \(2, 1\)"):
        env.step(torch.zeros(2, 1))


class GlobalDraws(Walk):
    """Draws from the global random, numpy and torch streams in its hooks (not from self.generator)."""

    calls = 0

    def _sample_initial_state(self, n):
        random.random(), np.random.rand()
        return {"pos": torch.randint(0, 4, (n,))}

    def _dynamics(self, action):
        random.random(), np.random.rand(), torch.rand(1)
        GlobalDraws.calls += 1
        return super()._dynamics(action)


def test_the_member_stream_probe_leaves_the_global_rngs_as_they_were(monkeypatch):
    from proxima import population
    from proxima.config import PPOConfig

    monkeypatch.setattr(population, "make_env", lambda *args, **kwargs: GlobalDraws(2, seed=kwargs.get("seed")))
    random.seed(7), np.random.seed(7), torch.manual_seed(7)
    python_state, numpy_state, torch_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    with pytest.raises(EnvError, match="draws from torch's global random stream"):  # refused (test_rngprobe47.py)
        population.refuse_shared_env_stream(PPOConfig(env_id="globaldraws:GlobalDraws"), [1, 2], torch.device("cpu"))
    assert GlobalDraws.calls == 1  # the probe stepped it: its hooks drew from all three
    assert random.getstate() == python_state
    after = np.random.get_state()
    assert after[0] == numpy_state[0] and np.array_equal(after[1], numpy_state[1]) and after[2:] == numpy_state[2:]
    assert torch.equal(torch.get_rng_state(), torch_state)
