"""Behaviours of the envs that a review's mutations changed with every other test still passing:
member streams restored by load_state_dict, EpisodicLife's lives, the reward clip and the FIRE
press's reward of the Atari wrappers, GymnasiumEnv's constructor seed, episode statistics and start
range, the mp4 frame count check, and a native row that terminates on its time limit's step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from proxima import video
from proxima.envs import EnvError, make_env
from proxima.envs.atari import EpisodicLife, game_wrappers
from proxima.envs.gym_adapter import GymnasiumEnv

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def fixtures_on_path(monkeypatch):
    """tests/fixtures importable, as a user's env module is (``user_envs:DiscreteFrom1``)."""
    monkeypatch.syspath_prepend(str(FIXTURES))


@pytest.fixture
def fake_ale(fixtures_on_path):
    from pixel_edge_envs import FakeAle

    return FakeAle


# ------------------------------------------------------------------------------------- native envs
def test_load_state_dict_restores_the_member_streams_so_the_episodes_go_on_as_they_would():
    """A population's rows draw their new episodes from per-member generators: a resumed env that
    kept its own fresh streams would start other episodes than the run it continues."""
    def build():
        env = make_env("CartPole-v1", 4, device="cpu", backend="native", seed=1)
        assert env.use_member_streams([1, 2])
        env.reset(seed=1)
        return env

    actions = torch.tensor([0, 1, 0, 0])  # pushed one way, a pole falls within ~10 steps
    ran = build()
    ended = 0
    for _ in range(25):
        *_, terminated, truncated, _ = ran.step(actions)
        ended += int((terminated | truncated).sum())
    assert ended > 0  # past an autoreset: the streams have moved on from where reset left them
    resumed = build()
    resumed.load_state_dict(ran.state_dict())
    ended = 0
    for step in range(40):
        obs, _, terminated, truncated, _ = ran.step(actions)
        obs2, *_ = resumed.step(actions)
        ended += int((terminated | truncated).sum())
        assert torch.equal(obs, obs2), f"step {step} after load_state_dict"
    assert ended > 0  # the comparison covered new episodes, drawn from the member streams


def test_a_native_row_that_terminates_on_its_time_limits_step_is_not_truncated():
    """base.py's contract: a native env's step that ends an episode both ways sets only ``terminated``."""
    def run(limit=None):
        env = make_env("CartPole-v1", 1, device="cpu", backend="native", seed=7)
        if limit is not None:
            env.max_episode_steps = limit
        env.reset(seed=7)
        for step in range(1, 100):
            _, _, terminated, truncated, info = env.step(torch.zeros(1, dtype=torch.int64))
            if bool(terminated | truncated):
                return step, bool(terminated), bool(truncated), int(info["episode_length"][0])
        raise AssertionError("the pole never fell")

    length, terminated, truncated, _ = run()
    assert (terminated, truncated) == (True, False)
    # the same episode with the time limit on its last step: both ways at once
    assert run(limit=length) == (length, True, False, length)


# ------------------------------------------------------------------------------------- ALE wrappers
def test_episodic_life_ends_an_episode_on_each_lost_life_only(fake_ale):
    """Lives lost at env steps 5 and 12, stepped on without a reset: the steps after a lost life are
    no new loss (the lives it compares with move on each step)."""
    class LosesAt5And12(fake_ale):
        def step(self, action):
            obs, reward, _, truncated, info = super().step(action)
            if self.t in (5, 12):
                self.lives_left -= 1
            return obs, reward, self.lives_left == 0, truncated, info

    env = EpisodicLife(LosesAt5And12(per_life=10**9))
    env.reset(seed=0)
    ended = [t for t in range(1, 16) if env.step(0)[2]]
    assert ended == [5, 12]


def test_training_rewards_are_clipped_to_their_sign_while_the_game_counts_the_points(fake_ale):
    base = fake_ale(reward=4.0)
    env = game_wrappers(base, training=True)
    env.reset(seed=0)
    rewards, info = [], {}
    while "game_return" not in info:
        _, reward, terminated, truncated, info = env.step(0)
        rewards.append(reward)
        if (terminated or truncated) and "game_return" not in info:
            env.reset()
    assert set(rewards) == {1.0}, rewards
    assert info["game_return"] == 4.0 * base.t == 60.0  # 15 env steps: the agent's, the FIRE presses, the no-ops


def test_evaluations_fire_press_after_a_lost_life_adds_its_reward_to_the_step(fake_ale):
    """Evaluation presses FIRE inside the step that lost a life (FireAfterLifeLoss): that press's
    points are the step's, so the steps' rewards and FireReset's presses add up to the game's score."""
    base = fake_ale(reward=5.0)  # a life lost every 5 env steps, 5 points on every env step
    env = game_wrappers(base, training=False)
    env.reset(seed=0)  # FireReset's FIRE and RIGHT: env steps 1 and 2
    rewards, info = [], {}
    while "game_return" not in info:
        _, reward, *_, info = env.step(0)
        rewards.append(float(reward))
    # env steps 5 and 10 lose a life: FIRE at 6 and 11, inside those agent steps
    assert rewards == [5.0, 5.0, 10.0, 5.0, 5.0, 5.0, 10.0, 5.0, 5.0, 5.0, 5.0]
    assert sum(rewards) + 2 * 5.0 == info["game_return"] == 75.0


# ------------------------------------------------------------------------------------- Gymnasium adapter
def test_the_constructors_seed_seeds_the_first_reset():
    def first_obs(seed):
        env = GymnasiumEnv("CartPole-v1", 2, device="cpu", seed=seed)
        try:
            return env.reset()
        finally:
            env.close()

    a, b, c = first_obs(3), first_obs(3), first_obs(4)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_a_reset_starts_the_episode_statistics_anew():
    """Steps taken before a reset are no part of the next episode's length or return."""
    env = GymnasiumEnv("CartPole-v1", 1, device="cpu", seed=0)
    left = torch.zeros(1, dtype=torch.int64)
    try:
        env.reset()
        for _ in range(3):
            *_, terminated, truncated, _ = env.step(left)
            assert not bool(terminated | truncated)
        env.reset()
        for steps in range(1, 100):
            _, _, terminated, truncated, info = env.step(left)
            if bool(terminated | truncated):
                break
        assert int(info["episode_length"][0]) == steps
        assert float(info["episode_return"][0]) == float(steps)  # CartPole: 1 a step
    finally:
        env.close()


def test_an_action_above_a_started_discretes_top_is_refused_before_the_env_sees_it(fixtures_on_path, monkeypatch):
    """Discrete(3, start=1) takes 1..3: 4 (an index from 1 where the agent's count from 0, or off by
    one) is one line naming the env, not an action passed on to the env."""
    from user_envs import DiscreteFrom1

    monkeypatch.setattr(DiscreteFrom1, "seen", [])
    env = GymnasiumEnv("user_envs:DiscreteFrom1", 2, device="cpu", seed=0)
    try:
        env.reset()
        env.step(torch.tensor([1, 3]))  # both ends of the space
        with pytest.raises(EnvError) as e:
            env.step(torch.tensor([3, 4]))
        assert str(e.value).startswith("env 'user_envs:DiscreteFrom1': action 4 for env 1 at vector step 2 is "
                                       "outside its action space Discrete(3, start=1)"), str(e.value)
        assert [int(a) for a in DiscreteFrom1.seen] == [1, 3]  # the refused step reached no env
    finally:
        env.close()


# ------------------------------------------------------------------------------------- video
@pytest.mark.skipif(not video.has_mp4_encoder(), reason="needs imageio-ffmpeg")
def test_an_mp4_that_reads_back_short_of_frames_is_an_error_and_not_kept(tmp_path, monkeypatch):
    """ffmpeg can end quietly on a full disk: the count read back is what tells."""
    import imageio_ffmpeg

    real = imageio_ffmpeg.count_frames_and_secs
    monkeypatch.setattr(imageio_ffmpeg, "count_frames_and_secs", lambda p: (real(p)[0] - 1, 0.0))
    target = tmp_path / "ep.mp4"
    frames = [np.full((16, 16, 3), 40 * i, np.uint8) for i in range(5)]
    with pytest.raises(video.VideoError) as e:
        video.write_video(frames, target, fps=10)
    assert str(e.value).startswith(f"{target}: could not write the video (holds 4 of 5 frames after writing"), str(e.value)
    assert list(tmp_path.iterdir()) == []  # neither the video nor its temp file
