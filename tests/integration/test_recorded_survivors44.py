"""Mutation survivors of the Gymnasium adapter's RecordEpisodeStatistics figures (its own stats_key, the
innermost of two, unreadable or NaN figures falling back to the summed rewards), evaluation's first-game
rule for such an env, PixelQuadrant's render and image_frame's scale, and an eval.json of another
episode_seeds rule."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima import evaluate as ev
from proxima.envs import make_env
from proxima.envs.base import EnvError
from proxima.envs.gym_adapter import GymnasiumEnv
from proxima.evaluate import first_episodes
from tests.cli_helpers import module_written_in

#: Tens pays 10 a step for 3 steps (score 30); ClipReward outside makes the agent's sum 3
RECORDED_ENV = '''
import gymnasium as gym
import numpy as np
from gymnasium.wrappers import ClipReward, RecordEpisodeStatistics


class Tens(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 10.0, False, self.t >= 3, {}


class Garble(gym.Wrapper):
    """Puts ``what`` under info["episode"] where the wrapper inside put its figures."""

    what = None

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if "episode" in info:
            info = {**info, "episode": self.what}
        return obs, reward, terminated, truncated, info


class Text(Garble):
    what = "game over"


class NanScore(Garble):
    what = {"r": float("nan"), "l": 3, "t": 0.1}


def own_key(**kw):
    return ClipReward(RecordEpisodeStatistics(Tens(), stats_key="raw"), -1.0, 1.0)


def text(**kw):
    return ClipReward(Text(RecordEpisodeStatistics(Tens())), -1.0, 1.0)


def nan_score(**kw):
    return ClipReward(NanScore(RecordEpisodeStatistics(Tens())), -1.0, 1.0)


def stacked(**kw):
    # the inner one records the game's score (30), the outer one the clipped sum (3)
    return RecordEpisodeStatistics(ClipReward(RecordEpisodeStatistics(Tens(), stats_key="inner"), -1.0, 1.0),
                                   stats_key="outer")
'''


@pytest.fixture
def recorded_module(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "recmod44", RECORDED_ENV)


def first_game_end(factory: str) -> tuple:
    """(reward at step 3, episode_return, episode_length) at the end of the first game of recmod44:``factory``."""
    env = make_env(f"recmod44:{factory}", 1, backend="gymnasium")
    try:
        env.reset(seed=0)
        for t in range(1, 4):
            _, reward, terminated, truncated, info = env.step(torch.zeros(1, dtype=torch.int64))
            if t < 3:
                assert info["episode_length"].tolist() == [0]
    finally:
        env.close()
    assert bool((terminated | truncated)[0])
    return reward.item(), info["episode_return"].item(), info["episode_length"].item()


def test_a_wrapper_of_its_own_stats_key_is_read_under_that_key(recorded_module):
    # was (mutant): the adapter looked for "episode", found nothing, and logged no episode at all
    assert first_game_end("own_key") == (1.0, 30.0, 3)


@pytest.mark.parametrize("factory", ["text", "nan_score"])
def test_unreadable_recorded_figures_log_the_summed_rewards(recorded_module, factory):
    # text: not RecordEpisodeStatistics' figures (a mutant gave (0.0, 0): the episode dropped);
    # nan_score: a NaN return is not logged (a mutant logged NaN with length 0)
    assert first_game_end(factory) == (1.0, 3.0, 3)


def test_of_two_stacked_wrappers_the_innermost_figures_win(recorded_module):
    assert first_game_end("stacked") == (1.0, 30.0, 3)


class Games(gym.Env):
    """Games of ``length`` steps paying 10 x the game's number a step: each game scores differently."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int):
        self.length, self.games = length, 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.games = 0, self.games + 1
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 10.0 * self.games, False, self.t >= self.length, {}


def test_evaluation_keeps_each_envs_first_recorded_game():
    """Env 0's games last 2 steps, env 1's 5: env 0's second game (40 in 2) ends at step 4, before env 1's
    first; the figures kept are still its first game's (20 in 2), not overwritten by the next one's."""
    lengths = iter([2, 2, 5])  # the probe's, env 0's, env 1's
    env = GymnasiumEnv("games", 2, env_fn=lambda: gym.wrappers.ClipReward(
        gym.wrappers.RecordEpisodeStatistics(Games(next(lengths))), -1.0, 1.0))
    try:
        assert env.records_episodes
        obs = env.reset(seed=0)
        returns, lengths_, finished = first_episodes(env, obs, lambda o: torch.zeros(2, dtype=torch.int64), 20)
    finally:
        env.close()
    assert (returns.tolist(), lengths_.tolist(), finished.tolist()) == ([20.0, 50.0], [2, 5], [True, True])


def test_pixel_quadrant_render_before_reset_says_to_reset_first():
    from proxima.envs.synthetic import PixelQuadrant

    with pytest.raises(EnvError) as e:
        PixelQuadrant(2, seed=0).render(0)
    assert str(e.value) == "PixelQuadrant-v0: call reset() before render()"


@pytest.mark.parametrize("index", [3, -4])
def test_pixel_quadrant_render_of_a_row_it_has_not_is_refused(index):
    from proxima.envs.synthetic import PixelQuadrant

    env = PixelQuadrant(3, seed=0)
    obs = env.reset()
    assert np.array_equal(env.render(-3)[::4, ::4], obs[0].numpy())  # the edges it has
    assert np.array_equal(env.render(2)[::4, ::4], obs[2].numpy())
    with pytest.raises(IndexError) as e:
        env.render(index)
    assert str(e.value) == f"PixelQuadrant-v0: render index {index} out of range for 3 envs"


@pytest.mark.parametrize("shape, frame_shape, k", [((50, 84), (150, 252, 3), 3),  # 144/50 rounded up, by the smaller side
                                                   ((84, 84, 1), (168, 168, 3), 2),
                                                   ((84, 84, 3), (168, 168, 3), 2),
                                                   ((144, 200, 3), (144, 200, 3), 1),
                                                   ((84, 50), (252, 150, 3), 3)])  # the smaller side the width
def test_image_frame_scales_the_smaller_side_to_at_least_144(shape, frame_shape, k):
    from proxima.envs.synthetic import image_frame

    image = torch.arange(int(np.prod(shape)), dtype=torch.int64).remainder(251).to(torch.uint8).reshape(shape)
    frame = image_frame(image)
    assert frame.shape == frame_shape and frame.dtype == np.uint8
    pixels = image.numpy() if image.ndim == 3 else image.numpy()[..., None]
    assert np.array_equal(frame[::k, ::k], np.broadcast_to(pixels, (*shape[:2], 3)))
    assert np.array_equal(frame[k - 1::k, k - 1::k], np.broadcast_to(pixels, (*shape[:2], 3)))


def test_an_eval_json_of_another_episode_seeds_rule_is_evaluated_again(tmp_path):
    data = {"env_id": "CartPole-v1", "backend": "gymnasium", "global_step": 128, "episodes": 2, "deterministic": True,
            "returns": [10.0, 20.0], "lengths": [10, 20], "mean_return": 15.0, "std_return": 5.0, "seed": 1,
            "episode_seeds": "SeedSequence"}
    (tmp_path / "eval.json").write_text(json.dumps(data))
    assert ev.current_eval(tmp_path, 128, 2) == data  # today's rule: current
    (tmp_path / "eval.json").write_text(json.dumps({**data, "episode_seeds": "something-else"}))
    assert ev.current_eval(tmp_path, 128, 2) is None
    assert ev.old_episode_seeds({**data, "episode_seeds": "something-else"})
