"""Pixel observations a CleanRL/SB3 user meets (review 42): a float [0, 1] image returning 0..255, flipped
(negative-stride) frames in Policy.act, and the hints for an int32 image and a last-axis frame stack."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from proxima.checkpoint import Policy
from proxima.envs import EnvError
from proxima.envs.gym_adapter import EnvCalls
from proxima.envs.spaces import image_note, obs_layout
from proxima.agent import Agent
from tests.cli_helpers import error_line, module_written_in, run_main

FLOAT_IMAGE = (40, 40, 3)


class FloatImage(gym.Env):
    """Box(0, 1, (40, 40, 3), float32) whose pixels stay in [0, 1] up to step ``bad_at``, then are ``value``."""

    def __init__(self, bad_at=3, value=200.0):
        self.observation_space = spaces.Box(0.0, 1.0, FLOAT_IMAGE, np.float32)
        self.action_space = spaces.Discrete(2)
        self.bad_at, self.value, self.t = bad_at, value, 0

    def _obs(self):
        obs = np.full(FLOAT_IMAGE, 0.5, np.float32)
        if self.t >= self.bad_at:
            obs[1, 2, 0] = self.value
        return obs

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 0.0, False, False, {}


def checked(env):
    return EnvCalls(env, 0, obs_layout(env.observation_space, "FloatImage"), "FloatImage")


@pytest.mark.parametrize("value, words", [(200.0, "an image value 200, above its declared high 1 at env step 3"),
                                          (-0.5, "an image value -0.5, below its declared low 0 at env step 3")])
def test_float_unit_image_out_of_its_range_is_refused_at_its_step(value, words):
    env = checked(FloatImage(bad_at=3, value=value))
    env.reset(seed=0)
    env.step(0), env.step(1)  # in [0, 1]: no word
    with pytest.raises(EnvError) as e:
        env.step(0)
    line = str(e.value)
    assert "\n" not in line
    assert words in line, line
    assert "env 0 returned" in line and "return obs / 255 for 0..255 pixels" in line, line
    assert "declare Box(0, 255, (40, 40, 3), np.uint8) and return obs.astype(np.uint8)" in line, line


def test_float_unit_image_within_its_range_goes_on():
    env = checked(FloatImage(bad_at=10**9))
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        obs, *_ = env.step(0)
    assert obs.dtype == np.float32 and float(obs.max()) == 0.5


ZERO_255_ENV = '''
import gymnasium as gym, numpy as np
from gymnasium import spaces

class FloatImg(gym.Env):
    def __init__(self):
        self.observation_space = spaces.Box(0, 1, (40, 40, 3), np.float32)
        self.action_space = spaces.Discrete(2)
    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.full((40, 40, 3), 254.5, np.float32), {}
    def step(self, a):
        return np.full((40, 40, 3), 254.5, np.float32), 0.0, False, False, {}
'''


@pytest.fixture
def zero_255_env(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "floatimg42", ZERO_255_ENV)


def test_train_cnn_refuses_a_float_unit_image_of_0_255_pixels(zero_255_env, tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = run_main(["train", "floatimg42:FloatImg", "--encoder", "cnn", "--num-envs", "2", "--num-steps", "8",
                             "--total-timesteps", "16", "--run-dir", str(run)], capsys)
    error_line(code, err, "env 0 returned an image value 254.5, above its declared high 1 at reset",
               "observation_space declares pixels in [0, 1]", "return obs / 255 for 0..255 pixels")
    assert not run.exists()


def uint8_policy(shape):
    space, act = spaces.Box(0, 255, shape, np.uint8), spaces.Discrete(3)
    return Policy(Agent(space, act, encoder="cnn"), None, {"env_id": "Pix"}, space, act, "cpu")


@pytest.mark.parametrize("batched", [False, True])
def test_policy_act_takes_a_flipped_frame_as_its_copy(batched):
    policy = uint8_policy((36, 36, 3))
    frames = np.random.default_rng(0).integers(0, 256, (2, 36, 36, 3), dtype=np.uint8)
    obs = frames if batched else frames[0]
    flipped = obs[..., ::-1]  # BGR -> RGB, a negative-stride view
    assert any(s < 0 for s in flipped.strides)
    got = policy.act(flipped)
    assert np.array_equal(got, policy.act(np.ascontiguousarray(flipped)))
    assert np.shape(got) == ((2,) if batched else ())


def test_int32_image_hint_is_a_cast_not_a_scaling():
    _, fix = image_note(spaces.Box(0, 255, (40, 40, 3), np.int32))
    assert fix.endswith("make it uint8: declare Box(0, 255, (40, 40, 3), np.uint8) and return np.uint8 pixels 0..255 "
                        "as obs.astype(np.uint8)"), fix
    assert "* 255" not in fix


def test_last_axis_frame_stack_hint_moves_the_stack_first():
    _, fix = image_note(spaces.Box(0, 255, (64, 64, 3, 4), np.uint8))
    assert fix.endswith("put the stack axis first: declare Box(0, 255, (4, 64, 64, 3), np.uint8) and "
                        "return np.moveaxis(obs, -1, 0)"), fix
    # what the hint says is what Proxima then reads as a stack of 4 RGB frames
    assert obs_layout(spaces.Box(0, 255, (4, 64, 64, 3), np.uint8)).parts[0].layout == "nhwc"
    assert np.moveaxis(np.zeros((64, 64, 3, 4)), -1, 0).shape == (4, 64, 64, 3)
    # a 2-channel (N, H, W, 2) stack keeps its merge into channels
    _, two = image_note(spaces.Box(0, 255, (4, 84, 84, 2), np.uint8))
    assert "merge the frame stack into channels" in two and "moveaxis" not in two
