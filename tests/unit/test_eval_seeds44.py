"""Evaluation episode seeds (evaluate.episode_seeds): a Gymnasium evaluation plays episode i from
env seed ``episode_seeds(seed, episodes)[i]``, drawn from numpy's SeedSequence, so that evaluations of
consecutive seeds (a population's members 1 and 2) share no start state; with ``seed + i`` they shared
9 of 10, and the population's bootstrap intervals treated correlated scores as independent."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from proxima import evaluate as ev
from proxima.checkpoint import load_policy
from tests.cli_helpers import run_main, tiny_cartpole_run
from tests.unit import test_envpool_standin as standin

SEED = 1_000_001  # a run of --seed 1's evaluation seed (evaluate.default_seed)

envpool = standin.envpool  # the fixture: the stand-in as ``envpool``, for one test at a time


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return load_policy(tiny_cartpole_run(tmp_path_factory, "seeds44"))


def start_states(policy, seed: int, backend: str, episodes: int = 10) -> torch.Tensor:
    """(episodes, 4): the observations evaluate() starts its episodes from (its first batched_act call's)."""
    seen = []
    act = policy.batched_act

    def spy(obs, deterministic=True):
        if not seen:
            seen.append(obs.clone())
        return act(obs, deterministic=deterministic)

    policy.batched_act = spy
    try:
        ev.evaluate(policy, episodes=episodes, seed=seed, backend=backend)
    finally:
        del policy.batched_act
    return seen[0]


def shared_rows(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many rows of ``a`` equal some row of ``b``."""
    return int((a[:, None, :] == b[None, :, :]).all(-1).any(1).sum())


@pytest.mark.parametrize("backend", ["gymnasium", "native"])
def test_consecutive_evaluation_seeds_share_no_start_state(policy, backend):
    first, second = start_states(policy, SEED, backend), start_states(policy, SEED + 1, backend)
    assert shared_rows(first, first) == 10  # the rows can be compared: each equals itself
    assert shared_rows(first, second) == 0


def test_a_plain_gymnasium_loop_with_episode_seeds_replays_evaluate(policy):
    result = ev.evaluate(policy, episodes=3, seed=SEED, backend="gymnasium")
    returns, lengths = [], []
    env = gym.make("CartPole-v1")
    for episode_seed in ev.episode_seeds(SEED, 3):
        obs, _ = env.reset(seed=episode_seed)
        total, steps, done = 0.0, 0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(int(policy.act(obs)))
            total, steps, done = total + float(reward), steps + 1, terminated or truncated
        returns.append(total)
        lengths.append(steps)
    env.close()
    assert result["seed"] == SEED  # eval.json records the evaluation's seed, not the episodes'
    assert (result["returns"], result["lengths"]) == (returns, lengths)


def test_episode_seeds_of_more_episodes_begin_with_those_of_fewer():
    twenty = ev.episode_seeds(SEED, 20)
    assert ev.episode_seeds(SEED, 10) == twenty[:10]
    assert len(set(twenty)) == 20 and all(0 <= s < 2**31 for s in twenty)  # each a valid --seed (MAX_SEED)
    assert not set(twenty) & set(ev.episode_seeds(SEED + 1, 20))


def test_an_evaluation_of_more_episodes_contains_the_fewer(policy):
    few = ev.evaluate(policy, episodes=2, seed=SEED, backend="gymnasium")
    more = ev.evaluate(policy, episodes=4, seed=SEED, backend="gymnasium")
    assert more["returns"][:2] == few["returns"] and more["lengths"][:2] == few["lengths"]


@pytest.mark.parametrize("seed, episodes, field", [(-1, 3, "seed=-1"), (1.5, 3, "seed=1.5"), (True, 3, "seed=True"),
                                                   (1, -2, "episodes=-2"), (1, "3", "episodes='3'")])
def test_episode_seeds_refuses_what_is_no_count_or_seed(seed, episodes, field):
    with pytest.raises(ValueError) as e:
        ev.episode_seeds(seed, episodes)
    assert str(e.value).startswith(f"episode_seeds: {field}: must be an integer of at least 0")


def test_envpool_evaluation_builds_one_pool_from_a_derived_seed(envpool, tmp_path, monkeypatch, capsys):
    """EnvPool seeds its env i with the pool's seed + i: an evaluation's pool seeded with the evaluation's
    seed gave seeds s and s + 1 all but one start state in common."""
    run = tmp_path / "D"
    code, _, err = run_main(["train", "Pong-v5", "--backend", "envpool", "--num-envs", "2", "--num-steps", "12",
                             "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "24", "--eval-episodes",
                             "0", "--run-dir", str(run), "--no-progress"], capsys)
    assert code == 0, err
    policy = load_policy(run)
    built, make = [], envpool.make
    monkeypatch.setattr(envpool, "make", lambda *a, **kw: built.append(kw["seed"]) or make(*a, **kw))
    for seed in (SEED, SEED + 1):
        ev.evaluate(policy, episodes=3, seed=seed, max_steps=5)
    assert built == [ev.pool_seed(SEED), ev.pool_seed(SEED + 1)]  # one pool each, built with its reset's seed
    assert abs(built[0] - built[1]) >= 3  # env i's seeds, pool seed + i for i < 3, do not meet


LATE_BREAK = '''
import gymnasium as gym
import numpy as np


class LateBreak(gym.Env):
    """CartPole's spaces; a 3-vector observation at step 250, past check-env's default 200 steps."""
    observation_space = gym.spaces.Box(-5.0, 5.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(3 if self.t == 250 else 4, np.float32), 1.0, False, False, {}
'''


def test_an_evaluation_env_error_names_the_episode_seed_check_env_replays(policy, tmp_path, monkeypatch):
    (tmp_path / "latebreak44.py").write_text(LATE_BREAK)
    monkeypatch.syspath_prepend(str(tmp_path))
    other = load_policy(policy.path, env_id="latebreak44:LateBreak")
    with pytest.raises(ev.EnvError) as e:
        ev.evaluate(other, episodes=2, seed=SEED)
    assert str(e.value).endswith(f"(check with: proxima check-env latebreak44:LateBreak --steps 250 "
                                 f"--seed {ev.episode_seeds(SEED, 2)[0]})")


SECOND_BREAKS = '''
import gymnasium as gym
import numpy as np

BAD_SEED = {bad}


class SecondBreaks(gym.Env):
    """CartPole's spaces; a 3-vector observation at step 250, only in an episode reset with BAD_SEED."""
    observation_space = gym.spaces.Box(-5.0, 5.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.bad = 0, seed == BAD_SEED
        return np.zeros(4, np.float32), {{}}

    def step(self, action):
        self.t += 1
        return np.zeros(3 if self.bad and self.t == 250 else 4, np.float32), 1.0, False, False, {{}}
'''


def test_an_error_in_the_second_episode_names_that_episodes_seed(policy, tmp_path, monkeypatch):
    """Env 1's hint is its own reset seed: not env 0's, nor its seed plus its index (the vector env's rule)."""
    second = ev.episode_seeds(SEED, 2)[1]
    (tmp_path / "secondbreaks44.py").write_text(SECOND_BREAKS.format(bad=second))
    monkeypatch.syspath_prepend(str(tmp_path))
    other = load_policy(policy.path, env_id="secondbreaks44:SecondBreaks")
    with pytest.raises(ev.EnvError) as e:
        ev.evaluate(other, episodes=2, seed=SEED)
    assert " env 1 " in str(e.value)
    assert str(e.value).endswith(f"(check with: proxima check-env secondbreaks44:SecondBreaks --steps 250 "
                                 f"--seed {second})")


def test_a_native_evaluation_starts_from_the_native_env_reset_with_the_evaluation_seed(policy):
    from proxima.envs import make_env

    env = make_env("CartPole-v1", 10, backend="native")
    try:
        first = env.reset(seed=SEED)
    finally:
        env.close()
    assert torch.equal(start_states(policy, SEED, "native"), first)
    assert not torch.equal(start_states(policy, SEED + 1, "native"), first)
