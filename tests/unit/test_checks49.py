"""Review of today's new checks: make_env's native envs check a caller's actions in the action's own range
(uint8/int8 and bool actions too), say 'clipped' only where an env clips, print a 2-D space on one line
and take a one-env env's lone action."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from proxima import EnvError, make_env
from tests.cli_helpers import module_written_in

MODULE = '''
import gymnasium as gym, numpy as np, torch
from proxima.envs import NativeEnv


class Base(NativeEnv):
    """One number of state; _dynamics keeps the action it was given (self.last) and ends nothing."""
    max_episode_steps = 5
    ACT = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
        self.single_action_space = self.ACT

    def _sample_initial_state(self, n):
        return {"x": self._uniform((n,), -1.0, 1.0)}

    def _dynamics(self, action):
        self.last = action
        n = self.num_envs
        return torch.zeros(n, device=self.device), torch.zeros(n, dtype=torch.bool, device=self.device)

    def _observe(self):
        return self.state["x"].unsqueeze(1).clone()


class Box2(Base):
    pass


class D300(Base):
    ACT = gym.spaces.Discrete(300)


class FromMinus1(Base):
    ACT = gym.spaces.Discrete(3, start=-1)


class From5(Base):
    ACT = gym.spaces.Discrete(2, start=5)


class MD2(Base):
    ACT = gym.spaces.MultiDiscrete([[2, 3], [4, 5]])
'''


@pytest.fixture
def envs_module(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "checks49_envs", MODULE)


def stepped(env_id: str, num_envs: int, action):
    """The action the env's _dynamics got from make_env's env stepped with ``action``."""
    env = make_env(env_id, num_envs, seed=0)
    env.reset()
    env.step(action)
    return env.last


# --- 1: a narrow integer or bool action is checked against the space's own numbers -----------------------------------
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int64])
def test_a_narrow_integer_action_inside_discrete_300_is_taken(envs_module, dtype):
    assert stepped("checks49_envs:D300", 2, torch.tensor([5, 100], dtype=dtype)).tolist() == [5, 100]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int64])
def test_a_narrow_integer_action_of_a_space_from_minus_1_is_taken(envs_module, dtype):
    assert stepped("checks49_envs:FromMinus1", 2, torch.tensor([0, 1], dtype=dtype)).tolist() == [0, 1]


def test_a_uint8_action_out_of_range_is_refused_naming_its_value(envs_module):
    env = make_env("checks49_envs:FromMinus1", 2, seed=0)
    env.reset()
    with pytest.raises(EnvError) as e:
        env.step(torch.tensor([0, 2], dtype=torch.uint8))
    assert str(e.value) == ("env 'checks49_envs:FromMinus1': env 1 was given action 2; Discrete(3, start=-1) takes a "
                            "whole number from -1 to 1")


def test_a_bool_action_outside_a_discrete_from_5_is_refused(envs_module):
    env = make_env("checks49_envs:From5", 2, seed=0)
    env.reset()
    with pytest.raises(EnvError) as e:
        env.step(torch.tensor([True, False]))
    assert str(e.value) == ("env 'checks49_envs:From5': env 0 was given action True; Discrete(2, start=5) takes a whole "
                            "number from 5 to 6")


def test_a_bool_action_of_cartpole_is_its_0_or_1():
    env = make_env("CartPole-v1", 2, seed=0)
    env.reset()
    as_bool = env.step(torch.tensor([True, False]))[0]
    env.reset(seed=0)
    assert torch.equal(as_bool, env.step(torch.tensor([1, 0]))[0])


# --- 4: 'clipped' only where the env clips; the space on one line -----------------------------------------------------
def test_a_user_box_env_is_not_said_to_clip_and_gets_a_finite_action_as_given(envs_module):
    env = make_env("checks49_envs:Box2", 2, seed=0)
    env.reset()
    env.step(torch.full((2, 2), 5.0))
    assert env.last.tolist() == [[5.0, 5.0], [5.0, 5.0]]
    with pytest.raises(EnvError) as e:
        env.step(torch.tensor([[0.0, 0.0], [0.0, float("nan")]]))
    assert str(e.value) == ("env 'checks49_envs:Box2': env 1 was given action nan (position 1); Box(-1.0, 1.0, (2,), "
                            "float32) takes a finite number (its bounds are [-1, 1])")


def test_a_builtin_box_env_still_says_it_clips():
    env = make_env("MountainCarContinuous-v0", 2, seed=0)
    env.reset()
    with pytest.raises(EnvError, match=r"takes a finite number \(out of \[-1, 1\] is clipped\)$"):
        env.step(torch.tensor([[0.0], [float("inf")]]))


def test_a_2d_multidiscrete_refusal_is_one_line(envs_module):
    env = make_env("checks49_envs:MD2", 2, seed=0)
    env.reset()
    with pytest.raises(EnvError) as e:
        env.step(torch.tensor([[[1, 2], [3, 4]], [[0, 0], [0, 5]]]))
    assert str(e.value) == ("env 'checks49_envs:MD2': env 1 was given action 5; MultiDiscrete([[2 3] [4 5]]) takes a whole "
                            "number from 0 to 4 at position 3")


# --- 6: a one-env env takes its env's lone action, as before the check ------------------------------------------------
def test_one_cartpole_env_takes_a_0d_action_as_a_batch_of_one():
    env = make_env("CartPole-v1", 1, seed=0)
    env.reset()
    lone = env.step(torch.tensor(1))
    env.reset(seed=0)
    batch = env.step(torch.tensor([1]))
    assert torch.equal(lone[0], batch[0]) and lone[0].shape == (1, 4) and lone[1].shape == (1,)


def test_one_user_env_gets_its_lone_box_action_with_the_env_dimension(envs_module):
    assert stepped("checks49_envs:Box2", 1, torch.tensor([0.5, -0.5])).tolist() == [[0.5, -0.5]]


def test_a_lone_action_out_of_range_is_still_refused():
    env = make_env("CartPole-v1", 1, seed=0)
    env.reset()
    with pytest.raises(EnvError, match=r"^env 'CartPole-v1': env 0 was given action 5; Discrete\(2\) takes a whole "
                                       r"number from 0 to 1$"):
        env.step(torch.tensor(5))


def test_two_envs_given_one_0d_action_are_still_refused():
    env = make_env("CartPole-v1", 2, seed=0)
    env.reset()
    with pytest.raises(EnvError, match=r"step\(\) got actions of shape \(\); it takes one action for each of its 2 envs, "
                                       r"shape \(2,\)$"):
        env.step(torch.tensor(1))


# --- 2: a population's batched evaluation reads no action back a step --------------------------------------------------
def test_a_populations_batched_evaluation_never_runs_the_action_check(monkeypatch):
    from proxima import PPOConfig
    from proxima.envs.base import NativeEnv
    from proxima.population import Population, member_configs

    def refuse(self, action):
        raise AssertionError("the population's eval env checked its actions")

    cfg = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1,
                    total_timesteps=64, eval_episodes=0, progress=False, threads=1)
    pop = Population(member_configs(cfg, [0, 1]))  # its build probes its env once with actions of its own: not checked here
    monkeypatch.setattr(NativeEnv, "_check_actions", refuse)
    try:
        results = pop.evaluate_members(episodes=2, seeds=[10, 11], max_steps=30)
    finally:
        pop.close()
    assert results is not None and [len(r["returns"]) for r in results] == [2, 2]


# --- 3: a switch takes what PPOConfig's switches take ---------------------------------------------------------------
@pytest.mark.parametrize("value, expected", [(True, True), (0, False), (1, True), (np.bool_(False), False),
                                             (np.int64(1), True), (torch.tensor(True), True), (torch.tensor([False]), False),
                                             (np.array([True]), True)])
def test_a_switch_takes_0_1_and_a_one_element_bool_tensor(value, expected):
    from proxima.config import check_switch

    assert check_switch(value, "train", "quiet") is expected


@pytest.mark.parametrize("value", [2, -1, 1.0, "False", "1", None, torch.tensor([True, False]), torch.tensor(0.0),
                                   np.float64(1.0)])
def test_a_switch_still_refuses_strings_floats_and_other_numbers(value):
    from proxima.config import ConfigError, check_switch

    with pytest.raises(ConfigError) as e:
        check_switch(value, "train", "quiet")
    assert str(e.value) == f"train: quiet={value!r}: must be True or False"


def test_policy_act_takes_deterministic_as_a_tensor_and_load_takes_trust_env_0():
    import gymnasium as gym

    import proxima
    from proxima.agent import Agent
    from proxima.checkpoint import Policy

    obs_space, act_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2)
    policy = Policy(Agent(obs_space, act_space), None, {"env_id": "CartPole-v1"}, obs_space, act_space, "cpu")
    obs = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    assert np.array_equal(policy.act(obs, deterministic=torch.tensor(True)), policy.act(obs, deterministic=True))
    with pytest.raises(proxima.CheckpointError):  # past the switch: the missing path is what it says
        proxima.load("/nonexistent/checks49", trust_env=0)


def test_train_takes_quiet_1(tmp_path):
    import proxima

    cfg = proxima.PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1,
                            total_timesteps=64, eval_episodes=0, progress=False, threads=1)
    proxima.train(cfg, run_dir=tmp_path / "run", quiet=1, evaluate_at_end=0)
    assert (tmp_path / "run" / "checkpoints").is_dir()


# --- 5: a seed past torch's 64 bits is refused in one line -------------------------------------------------------------
@pytest.mark.parametrize("backend", ["native", "gymnasium"])
def test_make_env_refuses_a_seed_past_2_to_the_64_stating_the_range(backend):
    from proxima import ConfigError

    with pytest.raises(ConfigError) as e:
        make_env("CartPole-v1", 2, backend=backend, seed=2**64)
    assert str(e.value) == "make_env(seed=18446744073709551616): must be None or an integer from 0 to 2**64 - 1"


def test_a_native_envs_reset_refuses_a_seed_past_2_to_the_64_and_takes_the_largest():
    from proxima import ConfigError

    env = make_env("CartPole-v1", 2, seed=0)
    with pytest.raises(ConfigError) as e:
        env.reset(seed=2**64)
    assert str(e.value) == ("env 'CartPole-v1': reset(seed=18446744073709551616): must be None or an integer from 0 "
                            "to 2**64 - 1")
    largest = env.reset(seed=2**64 - 1)
    assert torch.equal(largest, make_env("CartPole-v1", 2, seed=2**64 - 1).reset())
