"""Pixel observations a CleanRL/SB3 user meets (review 42): a float Box(0, 1) of an image's shape still
trains as a vector, flipped (negative-stride) frames in Policy.act, and the hints for an int32 image and
a last-axis frame stack."""

import numpy as np
import pytest
from gymnasium import spaces

from proxima.checkpoint import Policy
from proxima.envs.spaces import image_note, obs_layout
from proxima.agent import Agent
from tests.cli_helpers import module_written_in, run_main

GRID_ENV = '''
import gymnasium as gym, numpy as np
from gymnasium import spaces

class Grid(gym.Env):
    """A float Box(0, 1) of an image's shape that is no image: occupancies, one a rounding above 1."""
    def __init__(self):
        self.observation_space = spaces.Box(0, 1, (4, 10, 10), np.float32)
        self.action_space = spaces.Discrete(2)
    def _obs(self):
        obs = np.full((4, 10, 10), 0.5, np.float32)
        obs[0, 0, 0] = np.float32(1 + 1e-6)
        return obs
    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}
    def step(self, a):
        return self._obs(), 1.0, False, False, {}
'''


@pytest.fixture
def grid_env(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "grid42", GRID_ENV)


def test_a_float_unit_box_of_an_images_shape_trains_as_the_vector_it_is(grid_env, tmp_path, capsys):
    """A float Box(0, 1) is an image only under --encoder cnn (chosen after the env is built): the
    adapter does not range-check it as pixels, so a grid of probabilities with a rounding above 1
    trains under the MLP as it did (a check during review 42 refused it)."""
    run = tmp_path / "run"
    code, _, err = run_main(["train", "grid42:Grid", "--num-envs", "2", "--num-steps", "8", "--total-timesteps", "16",
                             "--eval-episodes", "0", "--no-progress", "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert (run / "metrics.csv").read_text().count("\n") == 2  # header and the one iteration


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
