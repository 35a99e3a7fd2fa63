"""Episode returns of a user's Gymnasium env with its own RecordEpisodeStatistics (CleanRL's
ClipReward(RecordEpisodeStatistics(env))): the logged return is the game's score, not the clipped sum."""

from __future__ import annotations

import csv

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima.envs.gym_adapter import GymnasiumEnv, recorded_episode
from tests.cli_helpers import TINY_RUN, error_line, module_written_in, run_main

#: pays 10 a step for 8 steps: the score is 80, its clipped sum 8
CLIPPED_ENV = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import ClipReward, RecordEpisodeStatistics


class Tens(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 10.0, False, self.t >= 8, {}


def clipped(**kw):
    return ClipReward(RecordEpisodeStatistics(Tens(**kw)), -1.0, 1.0)
'''


class Tens(gym.Env):
    """Pays 10 a step; episodes of ``length`` steps."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int):
        self.length = length

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 10.0, False, self.t >= self.length, {}


@pytest.fixture
def clipped_module(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "clipmod44", CLIPPED_ENV)


def test_metrics_log_the_recorded_score_not_the_clipped_sum(clipped_module, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, _, err = run_main(["train", "clipmod44:clipped", *TINY_RUN, "--total-timesteps", "128", "--run-dir", str(run_dir)], capsys)
    assert code == 0, err
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    assert len(rows) == 2
    for row in rows:
        assert float(row["charts/episodic_return"]) == 80.0
        assert float(row["charts/episodic_return_100"]) == 80.0
        assert float(row["charts/episodic_length"]) == 8.0


def test_each_env_logs_its_own_recorded_episode_at_the_step_it_ends():
    """Envs whose episodes end at different steps: each row's figures come from that env's final info."""
    lengths = iter([3, 3, 5])  # the probe's, env 0's, env 1's
    env = GymnasiumEnv("tens", 2, env_fn=lambda: gym.wrappers.ClipReward(gym.wrappers.RecordEpisodeStatistics(Tens(next(lengths))), -1.0, 1.0))
    try:
        env.reset(seed=0)
        got = []
        for _ in range(6):
            _, reward, _, _, info = env.step(torch.zeros(2, dtype=torch.int64))
            assert reward.tolist() == [1.0, 1.0]  # training still sees the clipped rewards
            got.append((info["episode_return"].tolist(), info["episode_length"].tolist()))
    finally:
        env.close()
    assert got == [([0.0, 0.0], [0, 0]), ([0.0, 0.0], [0, 0]), ([30.0, 0.0], [3, 0]),
                   ([0.0, 0.0], [0, 0]), ([0.0, 50.0], [0, 5]), ([30.0, 0.0], [3, 0])]


def test_without_the_wrapper_the_summed_rewards_are_logged():
    env = GymnasiumEnv("tens", 1, env_fn=lambda: gym.wrappers.ClipReward(Tens(2), -1.0, 1.0))
    try:
        env.reset(seed=0)
        env.step(torch.zeros(1, dtype=torch.int64))
        info = env.step(torch.zeros(1, dtype=torch.int64))[4]
    finally:
        env.close()
    assert (info["episode_return"].tolist(), info["episode_length"].tolist()) == ([2.0], [2])


@pytest.mark.parametrize("stats", [None, "80", {"r": float("nan"), "l": 8}, {"r": True, "l": 8}, {"r": 80.0, "l": 0},
                                   {"r": 80.0, "l": 2.5}, {"r": 1e39, "l": 8}, {"l": 8}])
def test_what_is_no_recorded_episode_leaves_the_summed_rewards(stats):
    assert recorded_episode(stats) is None


def test_a_recorded_episode_of_numpy_numbers_reads_as_python_numbers():
    assert recorded_episode({"r": np.float32(80.0), "l": np.int64(8), "t": 0.1}) == (80.0, 8)
    assert recorded_episode({"r": np.array([80.0]), "l": np.array(8)}) == (80.0, 8)


@pytest.mark.parametrize("backend, line", [
    ("gymnasium", "env 'Pong-v5' needs ale-py and opencv; install it"),  # EnvPool is no alternative under --backend gymnasium
    ("auto", "env 'Pong-v5' needs ale-py and opencv (or EnvPool); install it"),
    ("envpool", "--backend envpool needs EnvPool, which is not installed; install it")])
def test_a_missing_atari_package_names_envpool_only_where_it_would_do(backend, line, monkeypatch, tmp_path, capsys):
    from proxima.envs import atari

    monkeypatch.setattr(atari, "has_envpool", lambda: False)
    monkeypatch.setattr(atari, "has_ale", lambda: False)
    code, _, err = run_main(["train", "Pong-v5", "--backend", backend, "--dry-run", "--run-dir", str(tmp_path / "run")], capsys)
    assert error_line(code, err, line).startswith(f"proxima train: error: {line}")


def test_pixel_quadrant_renders_its_observation_four_times_larger():
    from proxima.envs.synthetic import PixelQuadrant

    env = PixelQuadrant(3, seed=0)
    obs = env.reset()
    frames = [env.render(i) for i in range(3)]
    for i, frame in enumerate(frames):
        assert frame.shape == (144, 144, 3) and frame.dtype == np.uint8
        assert np.array_equal(frame[::4, ::4], obs[i].numpy())  # each pixel a 4x4 block
        assert np.array_equal(frame[3::4, 3::4], obs[i].numpy())


def test_a_gray_image_frame_repeats_its_channel_to_three():
    from proxima.envs.synthetic import image_frame

    gray = torch.arange(48 * 50, dtype=torch.int64).remainder(256).to(torch.uint8).reshape(48, 50)
    frame = image_frame(gray)
    assert frame.shape == (144, 150, 3)  # 3x: the smaller side reaches 144
    assert all(np.array_equal(frame[::3, ::3, c], gray.numpy()) for c in range(3))
    assert np.array_equal(image_frame(gray.unsqueeze(-1)), frame)


def test_eval_of_pixel_quadrant_writes_its_video(tmp_path, capsys):
    """Was 'renders no frames': a one-step episode is two frames, the picture before and after the answer."""
    from proxima.video import has_mp4_encoder

    if not has_mp4_encoder():
        pytest.skip("imageio-ffmpeg is not installed")
    import imageio_ffmpeg

    run_dir = tmp_path / "run"
    code, _, err = run_main(["train", "PixelQuadrant-v0", "--num-envs", "2", "--num-steps", "4", "--num-minibatches", "1", "--update-epochs", "1", "--threads", "1",
                             "--total-timesteps", "8", "--eval-episodes", "0", "--quiet", "--run-dir", str(run_dir)], capsys)
    assert code == 0, err
    code, out, err = run_main(["eval", str(run_dir), "--episodes", "1", "--video", str(tmp_path / "pq.mp4")], capsys)
    assert code == 0, err
    assert imageio_ffmpeg.count_frames_and_secs(str(tmp_path / "pq.mp4")) == (2, 0.5)  # 2 frames at render_fps 4


def test_eval_json_holds_the_recorded_score_not_the_clipped_sum(clipped_module, tmp_path, capsys):
    """eval.json holds the recorded score (the game's) as metrics.csv does: evaluate.first_episodes reads records_episodes' figures."""
    import json

    run_dir = tmp_path / "run"
    args = [a for a in TINY_RUN if a not in ("--eval-episodes", "0")]
    code, _, err = run_main(["train", "clipmod44:clipped", *args, "--eval-episodes", "2", "--total-timesteps", "64",
                             "--run-dir", str(run_dir)], capsys)
    assert code == 0, err
    result = json.loads((run_dir / "eval.json").read_text())
    assert (result["mean_return"], result["returns"], result["lengths"]) == (80.0, [80.0, 80.0], [8, 8])
