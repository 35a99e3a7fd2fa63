"""One action convention: every BatchedEnv's ``step`` takes actions as the env's action space
defines them (a Discrete's and MultiDiscrete's values from their ``start``), which is what
``Policy.act`` returns; Proxima's own loops (rollout, evaluation, bench) hold the agent's indices
from 0 and add ``env.action_offset``. The envs below record every action they receive and raise on
one outside their space."""

from __future__ import annotations

import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima import ppo
from proxima.agent import Agent, action_dtype, action_shape
from proxima.checkpoint import Policy
from proxima.envs import EnvError, make_env
from proxima.rollout import Rollout
from cli_helpers import run_main

MODULE = "convention_envs"
SOURCE = textwrap.dedent('''
    import numpy as np
    import gymnasium as gym
    from gymnasium import spaces


    class Recorder(gym.Env):
        """Episodes of 4 steps; every action received goes to the class's ``seen``; one outside the space raises."""
        observation_space = spaces.Box(-1, 1, (2,), np.float32)
        seen = []

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

        def step(self, a):
            if not self.action_space.contains(a):
                raise AssertionError(f"action {a!r} outside {self.action_space}")
            type(self).seen.append(np.array(a))
            self.t += 1
            return self.np_random.uniform(-1, 1, 2).astype(np.float32), self.reward(a), self.t >= 4, False, {}


    class DiscFrom1(Recorder):
        action_space = spaces.Discrete(3, start=1)

        def reward(self, a):
            return float(a)


    class DiscFromMinus1(Recorder):
        action_space = spaces.Discrete(3, start=-1)

        def reward(self, a):
            return float(a)


    class MultiStarts(Recorder):
        action_space = spaces.MultiDiscrete([[2, 3], [4, 2]], start=[[5, -1], [0, 10]])

        def reward(self, a):
            return float(a.sum())
''')
CLASSES = ["DiscFrom1", "DiscFromMinus1", "MultiStarts"]


@pytest.fixture(scope="module")
def envs_module(tmp_path_factory):
    folder = tmp_path_factory.mktemp("convention")
    (folder / f"{MODULE}.py").write_text(SOURCE)
    sys.path.insert(0, str(folder))
    try:
        import convention_envs

        yield convention_envs
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(MODULE, None)


def _cls(module, name: str):
    cls = getattr(module, name)
    cls.seen = []  # each class its own record
    return cls


def _policy(env) -> Policy:
    torch.manual_seed(0)
    agent = Agent(env.single_observation_space, env.single_action_space)
    return Policy(agent, None, {"env_id": env.env_id}, env.single_observation_space, env.single_action_space, "cpu")


def _in_space(space, a) -> bool:
    return space.contains(np.asarray(a, dtype=space.dtype).reshape(space.shape))


@pytest.mark.parametrize("name", CLASSES)
@pytest.mark.parametrize("as_numpy", [False, True], ids=["tensor", "numpy"])
def test_policy_act_stepped_through_make_env_reaches_the_env_unchanged(envs_module, name, as_numpy):
    """docs/python_api.md (the README's Python API): policy.act(obs) on a make_env env, then env.step(actions): the env gets the
    very values policy.act returned, inside its space (it got them with the start added twice)."""
    cls = _cls(envs_module, name)
    env = make_env(f"{MODULE}:{name}", 32, device="cpu", backend="gymnasium", seed=0)
    try:
        policy = _policy(env)
        obs = env.reset(seed=0)
        for _ in range(3):
            actions = policy.act(obs.numpy() if as_numpy else obs, deterministic=False)
            assert isinstance(actions, np.ndarray) == as_numpy
            obs = env.step(actions)[0]
            got = np.stack(cls.seen[-32:])
            assert got.tolist() == np.asarray(actions).tolist()
        space = cls.action_space
        assert all(space.contains(a) for a in cls.seen)
        every = {tuple(np.asarray(a).reshape(-1).tolist()) for a in cls.seen}
        assert len(every) > 1  # sampled actions, not one repeated
    finally:
        env.close()


@pytest.mark.parametrize("name", CLASSES)
def test_training_rollout_sends_the_space_s_values_and_records_their_rewards(envs_module, name):
    """collect_rollout keeps the agent's indices (from 0) and steps the env with index + start: every
    action reaches the env inside its space, and the rewards and episode returns recorded are the
    env's (reward = the action's value, or the sum of its entries)."""
    cls = _cls(envs_module, name)
    env = make_env(f"{MODULE}:{name}", 4, device="cpu", backend="gymnasium", seed=0)
    try:
        torch.manual_seed(0)
        space = env.single_action_space
        agent = Agent(env.single_observation_space, space)
        rollout = Rollout(8, 4, env.obs_shape, action_shape(space), action_dtype(space), "cpu")
        ppo.collect_rollout(env, agent.policy_step, rollout, env.reset(seed=0))
        seen = np.stack(cls.seen).reshape(8, 4, -1)  # (T, N, entries), the env's own values
        start = np.asarray(space.start).reshape(-1)
        stored = rollout.actions.reshape(8, 4, -1).numpy()
        assert stored.min() >= 0  # the rollout holds the agent's indices, for its log-probs
        assert (seen == stored + start).all()
        assert all(space.contains(a) for a in cls.seen)
        np.testing.assert_array_equal(rollout.raw_rewards.numpy(), seen.sum(-1).astype(np.float32))
        # 8 steps of 4-step episodes: 2 episodes per env, each return the sum of its 4 rewards
        assert int(rollout.ep_count) == 8
        assert float(rollout.ep_return_sum) == pytest.approx(float(seen.sum()))
    finally:
        env.close()


@pytest.mark.parametrize("name", ["DiscFromMinus1", "MultiStarts"])
def test_a_tiny_training_run_with_debug_checks_and_its_evaluation(envs_module, name, tmp_path):
    """train() (rollouts checked by --debug-checks against the space's values) and its end-of-run
    evaluation (Policy.batched_act's indices + the env's offset) step the env inside its space."""
    from proxima.config import PPOConfig
    from proxima.trainer import train

    cls = _cls(envs_module, name)
    cfg = PPOConfig(env_id=f"{MODULE}:{name}", backend="gymnasium", num_envs=2, num_steps=8, num_minibatches=2,
                    total_timesteps=32, eval_episodes=2, debug_checks=True, progress=False, checkpoint_every=0, threads=1)
    train(cfg, run_dir=tmp_path / "run", quiet=True)
    assert len(cls.seen) > 32 and all(cls.action_space.contains(a) for a in cls.seen)
    import json

    result = json.loads((tmp_path / "run" / "eval.json").read_text())
    low = float(np.sum(np.asarray(cls.action_space.start))) * 4  # 4 steps, each at least the lowest action's reward
    assert result["episodes"] == 2 and all(r >= low for r in result["returns"]), result


def test_step_refuses_an_index_from_0_where_the_space_starts_elsewhere(envs_module):
    """The old convention (indices from 0, the start added by the adapter) is one line, not an action
    the env takes for another one: 0 is no value of Discrete(3, start=1)."""
    cls = _cls(envs_module, "DiscFrom1")
    env = make_env(f"{MODULE}:DiscFrom1", 3, device="cpu", backend="gymnasium", seed=0)
    try:
        env.reset(seed=0)
        with pytest.raises(EnvError) as e:
            env.step(torch.tensor([1, 0, 2]))
        assert str(e.value).startswith(f"env '{MODULE}:DiscFrom1': action 0 for env 1 at vector step 1 is outside its "
                                       "action space Discrete(3, start=1): step() takes the space's values")
        assert cls.seen == []  # no env was stepped
    finally:
        env.close()


def test_action_offset_is_none_for_native_envs_and_the_starts_elsewhere(envs_module):
    """The native envs' rollout (captured by CUDA graphs) gets no extra op: no offset where every start is 0."""
    for env_id in ("CartPole-v1", "Acrobot-v1", "Pendulum-v1"):
        env = make_env(env_id, 2, device="cpu", backend="native")
        assert env.action_offset is None, env_id
    env = make_env(f"{MODULE}:MultiStarts", 2, device="cpu", backend="gymnasium")
    try:
        offset = env.action_offset
        assert offset.dtype == torch.int64 and offset.tolist() == [5, -1, 0, 10]
        assert env.action_offset is offset  # built once
    finally:
        env.close()
    env = make_env(f"{MODULE}:DiscFromMinus1", 2, device="cpu", backend="gymnasium")
    try:
        assert env.action_offset.shape == () and int(env.action_offset) == -1
    finally:
        env.close()


def test_bench_random_actions_are_the_space_s_values():
    from proxima.bench import random_actions

    for space in (gym.spaces.Discrete(3, start=-1), gym.spaces.MultiDiscrete([[2, 3], [4, 2]], start=[[5, -1], [0, 10]])):
        actions = random_actions(space, 64, "cpu", count=4).reshape(4 * 64, -1)
        assert all(_in_space(space, a) for a in actions.numpy()), space


@pytest.mark.parametrize("name", ["DiscFromMinus1", "MultiStarts"])
def test_proxima_bench_on_an_env_with_starts(envs_module, name, tmp_path, capsys):
    cls = _cls(envs_module, name)
    code, out, err = run_main(["bench", f"{MODULE}:{name}", "--backend", "gymnasium", "--num-envs", "2", "--num-steps", "8",
                               "--seconds", "0.01", "--repeats", "1", "--out", str(tmp_path / "b.md")], capsys)
    assert code == 0, err
    assert cls.seen and all(cls.action_space.contains(a) for a in cls.seen)
