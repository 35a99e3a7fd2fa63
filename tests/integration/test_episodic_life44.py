"""A life-loss wrapper outside Gymnasium's RecordEpisodeStatistics (CleanRL's Atari make_env): only the
ends the wrapper reports (whole games, at the game's score) are episodes in the statistics and in
evaluation; a lost life still ends the agent's episode. Without the wrapper every end is an episode."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from proxima.envs import make_env
from proxima.evaluate import first_episodes
from tests.cli_helpers import TINY_RUN, module_written_in, run_main

#: a 3-life game paying 5 a step: a life lost every 10 game steps, over at 30 (score 150). EpisodicLife
#: (CleanRL's/SB3's) ends the agent's episode at a lost life and resets with a no-op step (a game step the
#: agent does not take): lives of 10, 9 and 9 agent steps, clipped sums 10, 9, 9
LIVES_ENV = '''
import gymnasium as gym
import numpy as np


class Game(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {"lives": 3}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 5.0, self.t >= 30, False, {"lives": 3 - self.t // 10}


class EpisodicLife(gym.Wrapper):
    def reset(self, **kwargs):
        if getattr(self, "real_done", True):
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, _, _, info = self.env.step(0)
        self.lives = info["lives"]
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.real_done = terminated or truncated
        if info["lives"] < self.lives:
            terminated = True
        self.lives = info["lives"]
        return obs, reward, terminated, truncated, info


class Clip(gym.RewardWrapper):
    def reward(self, reward):
        return float(np.sign(reward))


def lives(**kwargs):
    return Clip(EpisodicLife(gym.wrappers.RecordEpisodeStatistics(Game())))


def unrecorded(**kwargs):
    return Clip(EpisodicLife(Game()))
'''


@pytest.fixture
def lives_module(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "livesmod44", LIVES_ENV)


def ends(env_id: str, steps: int) -> list:
    """(agent step, logged return, logged length) at each step that ends the agent's episode."""
    env = make_env(env_id, 1, backend="gymnasium")
    try:
        env.reset(seed=0)
        out = []
        for t in range(1, steps + 1):
            _, _, terminated, truncated, info = env.step(torch.zeros(1, dtype=torch.int64))
            if bool((terminated | truncated)[0]):
                out.append((t, info["episode_return"].item(), info["episode_length"].item()))
    finally:
        env.close()
    return out


def test_only_the_games_the_wrapper_reports_are_logged_at_their_score(lives_module):
    # every lost life still ends the agent's episode (10, 19, 28, ...), but logs no episode (length 0)
    assert ends("livesmod44:lives", 56) == [(10, 0.0, 0), (19, 0.0, 0), (28, 150.0, 30),
                                            (38, 0.0, 0), (47, 0.0, 0), (56, 150.0, 30)]


def test_without_the_wrapper_each_life_is_an_episode_of_its_clipped_sum(lives_module):
    assert ends("livesmod44:unrecorded", 56) == [(10, 10.0, 10), (19, 9.0, 9), (28, 9.0, 9),
                                                 (38, 10.0, 10), (47, 9.0, 9), (56, 9.0, 9)]


def train(run_dir, factory: str, capsys, *extra: str) -> None:
    args = [a for a in TINY_RUN if a not in ("--eval-episodes", "0")] if extra else TINY_RUN
    code, _, err = run_main(["train", f"livesmod44:{factory}", *args, "--total-timesteps", "256",
                             "--run-dir", str(run_dir), *extra], capsys)
    assert code == 0, err


def logged_returns(run_dir) -> list:
    return [row["charts/episodic_return"] for row in csv.DictReader(open(run_dir / "metrics.csv"))]


def test_metrics_hold_only_game_scores(lives_module, tmp_path, capsys):
    """4 envs x 16 steps an iteration: each env's games end at agent steps 28 and 56 (iterations 2 and 4);
    iterations 1 and 3 lose lives and end no game: no episode, where the clipped per-life sums were logged."""
    train(tmp_path / "run", "lives", capsys)
    returns = [float(r or "nan") for r in logged_returns(tmp_path / "run")]
    assert len(returns) == 4
    assert math.isnan(returns[0]) and math.isnan(returns[2])
    assert (returns[1], returns[3]) == (150.0, 150.0)
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    assert [int(row["episodes"]) for row in rows] == [0, 4, 0, 4]  # games, not lives
    assert float(rows[-1]["charts/episodic_return_100"]) == 150.0
    assert float(rows[-1]["charts/episodic_length"]) == 30.0


def test_metrics_without_the_wrapper_hold_the_clipped_sums_of_lives(lives_module, tmp_path, capsys):
    train(tmp_path / "run", "unrecorded", capsys)
    # iteration 1: each env's first life (10) ends at step 10
    assert float(logged_returns(tmp_path / "run")[0]) == 10.0


def test_eval_plays_each_game_to_its_end_and_records_its_score(lives_module, tmp_path, capsys):
    train(tmp_path / "run", "lives", capsys, "--eval-episodes", "2")
    result = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert (result["returns"], result["lengths"]) == ([150.0, 150.0], [30, 30])


def test_eval_without_the_wrapper_ends_at_the_first_life(lives_module, tmp_path, capsys):
    train(tmp_path / "run", "unrecorded", capsys, "--eval-episodes", "2")
    result = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert (result["returns"], result["lengths"]) == ([10.0, 10.0], [10, 10])


def test_a_game_unfinished_at_the_step_cap_sums_its_clipped_rewards_over_its_lives(lives_module):
    env = make_env("livesmod44:lives", 1, backend="gymnasium", training=False)
    try:
        obs = env.reset(seed=0)
        returns, lengths, finished = first_episodes(env, obs, lambda o: torch.zeros(1, dtype=torch.int64), 25)
    finally:
        env.close()
    # past two lost lives (agent steps 10 and 19), the game not over: 25 steps of clipped reward 1
    assert (returns.tolist(), lengths.tolist(), finished.tolist()) == ([25.0], [25], [False])
