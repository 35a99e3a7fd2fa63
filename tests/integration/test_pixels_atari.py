"""Atari through EnvPool and Gymnasium's ALE: CleanRL's settings, lives vs full games, evaluation
with video, and the install hint. Tests that need a backend skip when it is not installed
(``pip install 'proxima[atari]'``); the install-hint tests always run."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from cli_helpers import error_line, run_main
from proxima.envs import EnvError, atari, make_env

BACKENDS = [
    pytest.param("envpool", marks=pytest.mark.skipif(not atari.has_envpool(), reason="envpool not installed (proxima[atari])")),
    pytest.param("gymnasium", marks=pytest.mark.skipif(not atari.has_ale(), reason="ale-py/opencv not installed (proxima[atari])")),
]


def play(env, steps: int, seed: int = 0):
    """Random actions for env 0: per finished game (return, length, episodes that ended during it)."""
    g = torch.Generator().manual_seed(seed)
    env.reset()
    games, ends, max_reward = [], 0, 0.0
    for _ in range(steps):
        action = torch.randint(0, int(env.single_action_space.n), (env.num_envs,), generator=g)
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs.dtype == torch.uint8 and obs.shape == (env.num_envs, 4, 84, 84)
        max_reward = max(max_reward, float(reward.abs().max()))
        ends += int(terminated[0] | truncated[0])
        if int(info["episode_length"][0]) > 0:
            games.append((float(info["episode_return"][0]), int(info["episode_length"][0]), ends))
            ends = 0
    return games, max_reward


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_ends_an_episode_per_life_and_reports_full_games(backend):
    env = make_env("Breakout-v5", 1, backend=backend, seed=3)
    try:
        assert env.backend == backend and env.single_action_space.n == 4 and env.obs_dtype == torch.uint8
        games, max_reward = play(env, 800)  # random Breakout games last about 120-400 agent steps
    finally:
        env.close()
    assert len(games) >= 2
    assert all(ends == 5 for _, _, ends in games), games  # Breakout: 5 lives, one episode each
    assert max_reward <= 1.0  # training rewards are clipped to their sign


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_curves_average_full_games_of_agent_steps(backend):
    """The rollout's episode statistics (charts/episodic_return, --stop-return) count games, not the
    lives that end episodes while training, and a game's length is the agent's steps in it (not
    the FIRE presses the wrappers add)."""
    from proxima import ppo
    from proxima.rollout import Rollout

    env = make_env("Breakout-v5", 2, backend=backend, seed=0)
    games, steps, since = [], 0, [0, 0]
    step = env.step

    def counting_step(action):
        nonlocal steps
        out = step(action)
        steps += 1
        for i in range(env.num_envs):
            since[i] += 1
            if int(out[4]["episode_length"][i]) > 0:
                games.append((float(out[4]["episode_return"][i]), int(out[4]["episode_length"][i]), since[i]))
                since[i] = 0
        return out

    env.step = counting_step
    g = torch.Generator().manual_seed(0)

    def policy_step(obs):
        n = obs.shape[0]
        return torch.randint(0, 4, (n,), generator=g), torch.zeros(n), torch.zeros(n)

    try:
        ro = Rollout(700, 2, env.obs_shape, (), torch.int64, "cpu", obs_dtype=env.obs_dtype)
        ppo.collect_rollout(env, policy_step, ro, env.reset(seed=0))
    finally:
        env.close()
    assert len(games) >= 3 and int(ro.dones.sum()) >= 4 * len(games)  # Breakout: 5 lives, an episode each
    assert float(ro.ep_count) == len(games)
    assert float(ro.ep_return_sum) == pytest.approx(sum(r for r, _, _ in games))
    assert [length for _, length, _ in games] == [agent_steps for _, _, agent_steps in games]


@pytest.mark.parametrize("backend", BACKENDS)
def test_evaluation_plays_full_games_as_one_episode(backend):
    env = make_env("Breakout-v5", 1, backend=backend, seed=3, training=False)
    try:
        games, _ = play(env, 800)
    finally:
        env.close()
    assert len(games) >= 2 and all(ends == 1 for _, _, ends in games), games


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_step_autoreset_gives_the_next_episodes_first_obs(backend):
    env = make_env("Pong-v5", 1, backend=backend, seed=0)
    try:
        first = env.reset()
        # a fresh game's stack repeats its first frame 4 times
        assert torch.equal(first[:, 0], first[:, 3])
        done_seen = False
        for _ in range(1200):  # random Pong loses 21 points in about 800 agent steps
            obs, _, terminated, truncated, info = env.step(torch.zeros(1, dtype=torch.int64))
            done = terminated | truncated
            if bool(done[0]):
                done_seen = True
                assert torch.equal(obs[0, 0], obs[0, 3]) and not torch.equal(info["final_obs"][0], obs[0])
                break
    finally:
        env.close()
    assert done_seen


@pytest.mark.skipif(not (atari.has_envpool() or atari.has_ale()), reason="no Atari backend installed (proxima[atari])")
def test_eval_with_video_plays_a_full_pong_game(tmp_path):
    from proxima.agent import Agent
    from proxima.checkpoint import Policy
    from proxima.evaluate import evaluate

    env = make_env("Pong-v5", 1, seed=0)
    spaces = env.single_observation_space, env.single_action_space
    env.close()
    torch.manual_seed(0)
    policy = Policy(Agent(*spaces, encoder="cnn"), None, {"env_id": "Pong-v5"}, *spaces, "cpu")
    result = evaluate(policy, episodes=1, seed=5, video=str(tmp_path / "pong.gif"))
    # a game ends when a side has 21 points: an untrained policy loses it by 21 - its points
    assert -21.0 <= result["mean_return"] < 0 and result["lengths"][0] > 700
    assert result["video"] and (tmp_path / "pong.gif").stat().st_size > 0


def test_missing_atari_packages_say_what_to_install(monkeypatch):
    monkeypatch.setattr(atari, "has_envpool", lambda: False)
    monkeypatch.setattr(atari, "has_ale", lambda: False)
    # a Python call: its argument's words (the command line's --backend envpool: test_pixel_returns44)
    with pytest.raises(EnvError, match=r"^backend='envpool' needs EnvPool, which is not installed; install it from the repository root with: \.venv/bin/pip install -c requirements\.lock -e '\.\[atari\]'$"):
        make_env("Pong-v5", 2, backend="envpool")
    with pytest.raises(EnvError, match=r"^env 'Breakout-v5' needs ale-py and opencv \(or EnvPool\); install it from the repository root with: \.venv/bin/pip install -c requirements\.lock -e '\.\[atari\]'$"):
        make_env("Breakout-v5", 2)


def test_atari_ids_are_told_apart_from_other_v5_ids():
    assert atari.game_name("Pong-v5") == "Pong" and atari.game_name("ALE/Breakout-v5") == "Breakout"
    assert atari.game_name("HalfCheetah-v5") is None and atari.game_name("CartPole-v1") is None
    with pytest.raises(EnvError, match="backend='envpool' runs Atari games"):  # a Python call: its argument's words
        make_env("CartPole-v1", 2, backend="envpool")


def _first_game(env, pre_steps: int, seed: int = 11):
    """(return, length, agent steps) of the first game after ``pre_steps`` random steps of a game
    that a seeded reset then abandons; the same actions from there whatever came before."""
    n = int(env.single_action_space.n)
    env.reset(seed=seed)
    g = torch.Generator().manual_seed(1)
    for _ in range(pre_steps):
        env.step(torch.randint(0, n, (1,), generator=g))
    env.reset(seed=seed)
    g = torch.Generator().manual_seed(2)
    for step in range(1, 3000):
        info = env.step(torch.randint(0, n, (1,), generator=g))[4]
        if int(info["episode_length"][0]) > 0:
            return float(info["episode_return"][0]), int(info["episode_length"][0]), step
    raise AssertionError("no game ended")


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reset_mid_game_leaves_nothing_of_that_game_in_the_next_ones_numbers(backend, training):
    """GameStats (Gymnasium's ALE) had no reset: the abandoned game's score and steps went into the
    next game's (MsPacman: 360 over 948 steps, for the 310 over 798 a fresh game scores)."""
    env = make_env("Breakout-v5", 1, backend=backend, seed=11, training=training)
    try:
        fresh = _first_game(env, 0)
        assert fresh[1] == fresh[2]  # a game's length: the agent's steps in it
        assert _first_game(env, 60) == fresh
    finally:
        env.close()


@pytest.mark.skipif(not atari.has_ale(), reason="ale-py/opencv not installed (proxima[atari])")
def test_with_ale_py_older_ids_get_the_v5_line_and_typos_only_ids_proxima_trains(capsys, tmp_path, monkeypatch):
    """ale-py registers Pong-v0/-v4 and PongNoFrameskip-v0/-v4: they were offered for a typo, then
    refused as unknown ('did you mean Ant-v4?'); CleanRL's PongNoFrameskip-v4 was 'unknown'."""
    atari.game_name("Tennis-v5")  # registers ALE's ids, as any ALE env does
    assert "Pong-v4" in gym.registry and "Tennis-v4" in gym.registry
    for env_id, game in (("PongNoFrameskip-v4", "Pong"), ("Pong-v4", "Pong"), ("TennisNoFrameskip-v0", "Tennis")):
        with pytest.raises(EnvError, match=rf"^'{env_id}': Atari games are trained as {game}-v5 \(or ALE/{game}-v5\): "
                                           r"Proxima applies CleanRL's Atari wrappers itself \(no frame skip in the id, "):
            make_env(env_id, 1)
    for env_id in ("Pongg-v5", "Pongg-v4"):
        with pytest.raises(EnvError, match=rf"^unknown env id '{env_id}'; did you mean Pong-v5, ALE/Pong-v5\b") as e:
            make_env(env_id, 1)
        assert "-v4" not in str(e.value).replace(env_id, "") and "-v0" not in str(e.value)
    monkeypatch.chdir(tmp_path)
    for argv in (["check-env", "PongNoFrameskip-v4"], ["train", "Pong-v4", "--total-timesteps", "512"]):
        code, _, err = run_main(argv, capsys)
        error_line(code, err, "Atari games are trained as Pong-v5 (or ALE/Pong-v5)")


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.skipif(not atari.has_envpool(), reason="envpool not installed (proxima[atari])")
def test_an_unseeded_reset_on_envpool_starts_a_game_counted_from_it(training):
    """EnvPool 1.2.5's reset restarts a game in progress: the adapter kept the abandoned game's steps
    and points, so the next game was reported longer than played (305 for 245 agent steps)."""
    env = make_env("Breakout-v5", 1, backend="envpool", seed=11, training=training)
    try:
        env.reset(seed=11)
        g = torch.Generator().manual_seed(1)
        for _ in range(60):
            env.step(torch.randint(0, 4, (1,), generator=g))
        env.reset()
        for step in range(1, 3000):
            info = env.step(torch.randint(0, 4, (1,), generator=g))[4]
            if int(info["episode_length"][0]) > 0:
                break
    finally:
        env.close()
    assert int(info["episode_length"][0]) == step


@pytest.mark.skipif(not atari.has_envpool(), reason="envpool not installed (proxima[atari])")
def test_envpool_takes_any_seed_a_run_hands_it_folded_into_int32():
    """EnvPool asserts int32 seeds: --seed 2147483647's evaluation (+1,000,000) and resume (+iteration) crashed."""
    from proxima.config import MAX_SEED

    def trajectory(seed: int) -> list:
        env = make_env("Breakout-v5", 2, backend="envpool", seed=seed)
        try:
            obs = [env.reset(seed=seed)]
            g = torch.Generator().manual_seed(0)
            obs += [env.step(torch.randint(0, 4, (2,), generator=g))[0] for _ in range(40)]
        finally:
            env.close()
        return obs

    got, folded = trajectory(MAX_SEED + 1_000_000), trajectory(999_999)  # (2**31 - 1 + 10**6) % 2**31
    assert all(torch.equal(a, b) for a, b in zip(got, folded))


@pytest.mark.parametrize("env_id", ["ALE/TicTacToe3D-v5", "TicTacToe3D-v5", "TicTacToe3d-v5"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_either_spelling_of_tictactoe3d_builds_on_either_backend(backend, env_id):
    """EnvPool names it TicTacToe3d, ale-py TicTacToe3D: each backend refused the other's spelling."""
    env = make_env(env_id, 1, backend=backend, seed=0)
    try:
        assert env.backend == backend and env.reset().shape == (1, 4, 84, 84)
    finally:
        env.close()


@pytest.mark.skipif(not (atari.has_envpool() and atari.has_ale()), reason="needs both EnvPool and ale-py (proxima[atari])")
def test_a_run_trained_on_gymnasiums_ale_resumes_there_with_envpool_installed(tmp_path, monkeypatch, capsys):
    """--backend auto picked EnvPool on resume where the run had trained on Gymnasium's ALE: other
    resets, frame stacks and game statistics in the same metrics.csv."""
    from proxima import checkpoint as ckpt

    monkeypatch.chdir(tmp_path)
    argv = ["train", "Pong-v5", "--num-envs", "1", "--num-steps", "16", "--num-minibatches", "1", "--update-epochs", "1",
            "--total-timesteps", "16", "--eval-episodes", "0", "--checkpoint-every", "1", "--run-dir", "D", "--no-progress"]
    with monkeypatch.context() as m:
        m.setattr(atari, "has_envpool", lambda: False)  # a machine without EnvPool
        code, _, err = run_main(argv, capsys)
    assert code == 0, err
    code, _, err = run_main(["resume", "D", "--total-timesteps", "32", "--no-progress"], capsys)
    assert code == 0, err
    assert "--backend auto resumes on gymnasium, the backend the run trained on" in err
    assert ckpt.load_checkpoint(tmp_path / "D")["env_backend"] == "gymnasium"
    assert "backend: gymnasium" in (tmp_path / "D" / "config.yaml").read_text()
