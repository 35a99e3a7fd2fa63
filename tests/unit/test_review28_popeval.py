"""Population.evaluate_members decides "native env with per-member streams" before it builds an env:
a Gymnasium-backend population must not build P x E envs (P x E worker processes with --vector async)
only to throw them away and evaluate the members one by one anyway."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from proxima import population
from proxima.population import Population, member_configs

ENV_ID = "Review28PopEvalCount-v0"


class Counted(gym.Env):
    """Counts its constructions (the sync vector env builds them in this process)."""

    built = 0
    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        type(self).built += 1
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), 1.0, False, self.t % 5 == 0, {}


@pytest.fixture
def counted_env(monkeypatch):
    monkeypatch.setitem(gym.registry, ENV_ID, gym.envs.registration.EnvSpec(id=ENV_ID, entry_point=Counted))
    monkeypatch.setattr(Counted, "built", 0)
    return Counted


@pytest.fixture
def make_env_calls(monkeypatch):
    calls, real = [], population.make_env

    def counting(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(population, "make_env", counting)
    return calls


@pytest.mark.parametrize("env_id, backend", [(ENV_ID, "auto"), ("CartPole-v1", "gymnasium")])
def test_a_gymnasium_population_builds_no_env_to_evaluate_its_members(small_config, counted_env, make_env_calls,
                                                                       env_id, backend):
    pop = Population(member_configs(small_config(env_id=env_id, backend=backend, num_envs=2), [1, 2]))
    try:
        assert pop.env.backend == "gymnasium"
        counted_env.built, make_env_calls[:] = 0, []
        assert pop.evaluate_members(3, [1_000_001, 1_000_002]) is None  # the caller evaluates member by member
        assert make_env_calls == []
        assert counted_env.built == 0  # was 7: a probe env and 2 members x 3 episodes, all closed unused
    finally:
        pop.close()


def test_a_native_population_still_evaluates_its_members_in_one_batched_env(small_config, make_env_calls):
    pop = Population(member_configs(small_config(), [3, 5]))
    try:
        make_env_calls[:] = []
        together = pop.evaluate_members(3, [1_000_003, 1_000_005])
        assert together is not None and [len(r["returns"]) for r in together] == [3, 3]
        assert len(make_env_calls) == 1
        args, kwargs = make_env_calls[0]
        assert args[:2] == ("CartPole-v1", 2 * 3) and kwargs["training"] is False
    finally:
        pop.close()
