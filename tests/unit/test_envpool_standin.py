"""EnvPoolAtari (proxima/envs/atari.py) through a stand-in for EnvPool (tests/fixtures/envpool_standin,
whose docstring says which of EnvPool's conventions it keeps): its reset-step splicing, rows put in
env id order, full-game statistics, the evaluation mode's terminated mask, and a training run, all
of which ran in no test without EnvPool installed."""

from __future__ import annotations

import csv
import importlib
import sys
from pathlib import Path

import pytest
import torch

from cli_helpers import run_main
from proxima.envs import atari, make_env

STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "envpool_standin"
LIVES, POINTS = 3, 2.0  # the stand-in's game: env i loses a life every 3 + i % 3 agent steps


def _envpool_modules() -> dict:
    return {k: m for k, m in sys.modules.items() if k == "envpool" or k.startswith("envpool.")}


@pytest.fixture
def envpool(monkeypatch):
    """The stand-in as ``envpool`` for this test only: a real EnvPool imported before is put back after."""
    before = _envpool_modules()
    for k in before:
        del sys.modules[k]
    monkeypatch.syspath_prepend(str(STANDIN))
    importlib.invalidate_caches()
    try:
        import envpool as standin

        assert atari.has_envpool() and Path(standin.__file__).parent.parent == STANDIN
        yield standin
    finally:
        for k in _envpool_modules():
            del sys.modules[k]
        sys.modules.update(before)


def _zeros(env) -> torch.Tensor:
    return torch.zeros(env.num_envs, dtype=torch.int64)


def _shown(frames: torch.Tensor) -> list:
    """(env id, game, lives lost, steps into the life) of each frame of a (4, 84, 84) stack."""
    return [tuple(int(v) for v in f[0, :4]) for f in frames]


def test_a_lost_life_is_reset_in_the_same_step_and_rows_stay_in_env_order(envpool):
    env = make_env("Pong-v5", 3, backend="envpool", seed=0)
    try:
        assert (env.backend, env.single_action_space.n, env.obs_dtype) == ("envpool", 6, torch.uint8)
        first = env.reset()
        assert [_shown(first[i]) for i in range(3)] == [[(i, 0, 0, 0)] * 4 for i in range(3)]
        for _ in range(2):
            env.step(_zeros(env))
        obs, reward, terminated, truncated, info = env.step(_zeros(env))  # env 0 loses its first life
    finally:
        env.close()
    assert terminated.tolist() == [True, False, False] and not truncated.any()
    assert reward.tolist() == [1.0, 1.0, 1.0]  # POINTS clipped to their sign while training
    # the episode's last stack, then EnvPool's reset of the next life: it keeps 3 frames of the lost one
    assert _shown(info["final_obs"][0]) == [(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 1, 3)]
    assert _shown(obs[0]) == [(0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 1, 3), (0, 0, 1, 0)]
    for i in (1, 2):  # rows EnvPool returned in reverse order, in env order again; the others untouched
        assert _shown(obs[i]) == _shown(info["final_obs"][i]) == [(i, 0, 0, 0), (i, 0, 0, 1), (i, 0, 0, 2), (i, 0, 0, 3)]
    assert info["episode_length"].tolist() == [0, 0, 0]  # a life, no game


def _games(env, steps: int) -> tuple:
    """Per env, (step, return, length) of each game reported, and the steps that were episode ends;
    checks that each row shows its own env and, after a lost life, EnvPool's reset (in training and
    evaluation alike), several envs' at once (steps 12, 15, 20, 24, 30 with 3 envs)."""
    env.reset()
    games, ends = [[] for _ in range(env.num_envs)], [[] for _ in range(env.num_envs)]
    for step in range(1, steps + 1):
        obs, _, terminated, truncated, info = env.step(_zeros(env))
        for i in range(env.num_envs):
            assert {int(v) for v in obs[i, :, 0, 0]} == {i}
            assert (int(obs[i, -1, 0, 3]) == 0) == (step % (3 + i) == 0 or step >= atari.MAX_STEPS), (step, i)
            if bool(terminated[i] | truncated[i]):
                ends[i].append(step)
            if int(info["episode_length"][i]) > 0:
                games[i].append((step, float(info["episode_return"][i]), int(info["episode_length"][i])))
    return games, ends


@pytest.mark.parametrize("training", [True, False])
def test_full_games_are_reported_with_unclipped_points_and_evaluation_ends_only_games(envpool, training):
    env = make_env("Breakout-v5", 3, backend="envpool", seed=0, training=training)
    try:
        games, ends = _games(env, 31)
    finally:
        env.close()
    for i in range(3):
        length = LIVES * (3 + i)  # the steps EnvPool spends resetting are in no game's length
        # the step after a game's last is EnvPool's reset: done in the same step, so games follow back to back
        assert games[i] == [(length * k, POINTS * length, length) for k in range(1, 31 // length + 1)]
        lives = [(3 + i) * k for k in range(1, 31 // (3 + i) + 1)]
        # training: every lost life ends an episode; evaluation: only the game's last
        assert ends[i] == (lives if training else [s for s in lives if s % length == 0])


def test_the_time_limit_truncates_a_game_and_a_new_one_starts(envpool, monkeypatch):
    monkeypatch.setattr(atari, "MAX_STEPS", 7)  # 7 agent steps per game: env 0's third life is cut
    env = make_env("Pong-v5", 1, backend="envpool", seed=0)
    try:
        games, ends = _games(env, 7)
        obs = env.step(_zeros(env))[0]
    finally:
        env.close()
    assert ends == [[3, 6, 7]] and games == [[(7, 7 * POINTS, 7)]]
    assert _shown(obs[0]) == [(0, 1, 0, 0)] * 3 + [(0, 1, 0, 1)]  # game 1, its stack filled at its reset


def test_terminated_and_truncated_at_the_time_limit_step(envpool, monkeypatch):
    monkeypatch.setattr(atari, "MAX_STEPS", 9)  # env 0's last life ends on the limit's step: truncated, a game
    env = make_env("Pong-v5", 1, backend="envpool", seed=0, training=False)
    try:
        env.reset()
        for step in range(1, 10):
            _, _, terminated, truncated, info = env.step(_zeros(env))
    finally:
        env.close()
    assert (terminated.tolist(), truncated.tolist()) == ([False], [True])
    assert (float(info["episode_return"][0]), int(info["episode_length"][0])) == (9 * POINTS, 9)


def test_a_seeded_reset_rebuilds_the_pool_with_that_seed(envpool):
    env = make_env("Pong-v5", 2, backend="envpool", seed=3)
    try:
        assert [int(env.reset()[i, 0, 0, 4]) for i in range(2)] == [3, 4]  # EnvPool seeds env i with seed + i
        assert [int(env.reset(seed=10)[i, 0, 0, 4]) for i in range(2)] == [10, 11]
    finally:
        env.close()


def test_proxima_train_runs_on_the_envpool_backend(envpool, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "Pong-v5", "--backend", "envpool", "--seed", "1", "--num-envs", "2",
                             "--num-steps", "12", "--num-minibatches", "2", "--update-epochs", "1",
                             "--total-timesteps", "24", "--eval-episodes", "0", "--checkpoint-every", "0",
                             "--run-dir", "D", "--no-progress"], capsys)
    assert code == 0, err
    rows = list(csv.DictReader(open(tmp_path / "D" / "metrics.csv")))
    assert len(rows) == 1 and int(float(rows[0]["global_step"])) == 24
    # env 0's games last 9 steps, env 1's 12: one each in 12 steps, scored with Pong's 2 points a step unclipped
    assert float(rows[0]["episodes"]) == 2
    assert float(rows[0]["charts/episodic_return"]) == POINTS * (9 + 12) / 2
    assert float(rows[0]["charts/episodic_length"]) == (9 + 12) / 2
    assert "backend: envpool" in (tmp_path / "D" / "config.yaml").read_text()


def _first_games(env, steps: int) -> list:
    """Per env, (return, length) of the first game reported within ``steps`` steps of zeros."""
    first = [None] * env.num_envs
    for _ in range(steps):
        info = env.step(_zeros(env))[4]
        for i in range(env.num_envs):
            if first[i] is None and int(info["episode_length"][i]) > 0:
                first[i] = (float(info["episode_return"][i]), int(info["episode_length"][i]))
    return first


@pytest.mark.parametrize("training", [True, False])
def test_an_unseeded_reset_starts_new_games_and_their_statistics_start_with_them(envpool, training):
    """EnvPool 1.2.5's reset restarts a game in progress (force_reset): the adapter kept the abandoned
    game's points and steps, so the next game was reported longer than it was (Breakout: 305 steps
    where 245 had been played since the reset)."""
    env = make_env("Breakout-v5", 3, backend="envpool", seed=0, training=training)
    try:
        env.reset()
        for _ in range(2):
            env.step(_zeros(env))
        env.reset()  # a new game in each env (none was over): its 2 steps are no game's
        env.step(_zeros(env))
        obs = env.reset()  # and again, one step later
        assert [_shown(obs[i]) for i in range(3)] == [[(i, 2, 0, 0)] * 4 for i in range(3)]  # game 2, a fresh stack
        games = _first_games(env, 15)
    finally:
        env.close()
    assert games == [(POINTS * LIVES * (3 + i), LIVES * (3 + i)) for i in range(3)]


@pytest.mark.parametrize("seed", [0, 7])
def test_a_seeded_reset_starts_new_games_and_their_statistics_start_with_them(envpool, seed):
    env = make_env("Breakout-v5", 3, backend="envpool", seed=0)
    try:
        first = env.reset(seed=seed)
        for _ in range(5):
            env.step(_zeros(env))
        again = env.reset(seed=seed)  # the same seed as the pool's too: new games, the same observations
        assert torch.equal(again, first)
        assert [_shown(again[i]) for i in range(3)] == [[(i, 0, 0, 0)] * 4 for i in range(3)]
        games = _first_games(env, 15)
    finally:
        env.close()
    assert games == [(POINTS * LIVES * (3 + i), LIVES * (3 + i)) for i in range(3)]
