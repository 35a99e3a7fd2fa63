"""Image observations, review 46: a float [0, 1] image under --encoder cnn is sized as the CNN it builds
(and refused, and noted, as a uint8 one); a Dict's float image key is told to become uint8, not to use
--encoder cnn (which reads no float key); a CNN far beyond the 84x84 it was made for gets a note naming
its parameters, its checkpoints and ResizeObservation; check-env's cast for float pixels in a uint8 image
Box; --debug-checks names a bad pixel by its coordinates; bench names EnvPool as train does."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from proxima import sizing
from proxima.agent import Agent
from proxima.config import PPOConfig
from proxima.diskspace import human_bytes
from proxima.envs.spaces import obs_layout, tensor_space
from tests.cli_helpers import error_line, module_written_in, run_main

ENVS = '''
import gymnasium as gym, numpy as np
from gymnasium import spaces


class Img(gym.Env):
    """Which half is bright; ``value`` is what a bright pixel holds (255 in a [0, 1] Box: out of bounds)."""
    def __init__(self, shape=(40, 40, 3), dtype="uint8", low=0, high=255, value=None, ret_dtype=None):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.observation_space = spaces.Box(low, high, self.shape, self.dtype)
        self.action_space = spaces.Discrete(2)
        self.value = high if value is None else value
        self.ret_dtype = np.dtype(ret_dtype or dtype)
    def _obs(self):
        obs = np.zeros(self.shape, self.ret_dtype)
        obs.reshape(-1)[obs.size // 2:] = self.value
        return obs
    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}
    def step(self, a):
        self.t += 1
        return self._obs(), float(a), False, self.t >= 8, {}


def fshp(shape=(40, 40, 3)):
    return Img(tuple(shape), "float32", 0.0, 1.0)

def floatret():  # declares a uint8 image, returns float32 0..255
    return Img(ret_dtype="float32")

def floatbad():  # a float [0, 1] image whose env returns 255 from obs[20, 0, 0] on
    return Img(dtype="float32", low=0.0, high=1.0, value=255.0)


class DictFloat(Img):
    def __init__(self, value=None):
        super().__init__(dtype="float32", low=0.0, high=1.0, value=value)
        self.observation_space = spaces.Dict({"cam": spaces.Box(0.0, 1.0, self.shape, np.float32),
                                              "vec": spaces.Box(-1, 1, (3,), np.float32)})
    def _obs(self):
        return {"cam": super()._obs(), "vec": np.zeros(3, np.float32)}

def dictbad():
    return DictFloat(value=255.0)
'''

DRY = ["--num-envs", "1", "--num-steps", "8", "--num-minibatches", "1", "--dry-run"]


@pytest.fixture
def envs46(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "pix46", ENVS)


def _sizes(space: gym.spaces.Box) -> sizing.EnvSizes:
    """What check_fits reads of an env of ``space`` (a Gymnasium env: its tensor's space, as env_sizes)."""
    layout = obs_layout(tensor_space(space, obs_layout(space)))
    return sizing.EnvSizes(int(np.prod(space.shape)), 1, False, layout)


def test_a_float_image_under_the_cnn_costs_the_cnn_it_builds_with_float32_buffers():
    shape = (300, 400, 3)
    u8 = _sizes(gym.spaces.Box(0, 255, shape, np.uint8))
    f32 = _sizes(gym.spaces.Box(0.0, 1.0, shape, np.float32))
    cnn = PPOConfig(env_id="x", encoder="cnn", num_envs=1, num_steps=8, num_minibatches=1)
    mlp = PPOConfig(env_id="x", encoder="mlp", num_envs=1, num_steps=8, num_minibatches=1)
    # the same network as the uint8 image's: the Nature CNN and linear heads (no --hidden-sizes MLP)
    assert sizing.network_terms(cnn, *f32[:2], f32.layout) == sizing.network_terms(cnn, *u8[:2], u8.layout)
    weights = sizing.network_terms(cnn, *f32[:2], f32.layout)[0]
    agent = Agent(gym.spaces.Box(0.0, 1.0, shape, np.float32), gym.spaces.Discrete(1), encoder="cnn")
    assert weights == 16 * sum(p.numel() for p in agent.parameters())  # weights, gradients, Adam's two moments
    assert weights != sizing.network_terms(mlp, *f32[:2], f32.layout)[0]
    # its observations stay float32 in the buffers: 4 bytes a pixel where uint8 takes 1
    per_obs = cnn.num_steps * 2 * 300 * 400 * 3  # obs and final_obs
    assert sizing.rollout_bytes(cnn, *f32[:2], f32.layout) - sizing.rollout_bytes(cnn, *u8[:2], u8.layout) == 3 * per_obs


def test_a_float_image_too_large_for_the_cnn_is_refused_by_the_image_size_not_hidden_sizes(envs46, monkeypatch, capsys):
    monkeypatch.setattr(sizing, "free_memory", lambda device: 8 << 30)
    code, _, err = run_main(["train", "pix46:fshp", "--encoder", "cnn", "--env-kwargs", '{"shape": [2000, 2000, 3]}', *DRY], capsys)
    line = error_line(code, err, "(2000, 2000, 3) images through the Nature CNN", "8.0 GiB free",
                      "downscale the env's images (the Nature CNN was made for 84x84)")
    assert "--hidden-sizes" not in line


def test_hidden_sizes_under_the_cnn_of_a_float_image_get_the_no_effect_note(envs46, capsys):
    code, _, err = run_main(["train", "pix46:fshp", "--encoder", "cnn", "--hidden-sizes", "32", "--activation", "relu", *DRY], capsys)
    assert code == 0, err
    assert ("proxima: note: --hidden-sizes 32 and --activation relu have no effect with the CNN encoder of a single image: "
            "its actor and critic are linear heads on the CNN's 512 features") in err.splitlines()


def test_a_dicts_float_image_key_is_told_to_become_uint8_not_to_use_the_cnn(envs46, capsys):
    fix = ("make it uint8: declare Box(0, 255, (40, 40, 3), np.uint8) and return np.uint8 pixels 0..255 as "
           "(obs['cam'] * 255).astype(np.uint8)")
    code, out, err = run_main(["check-env", "pix46:DictFloat"], capsys)
    note = [line for line in (out + err).splitlines() if line.startswith("NOTE observation_space['cam']")]
    assert len(note) == 1 and note[0].endswith(fix), out + err
    assert "--encoder cnn reads a float image only as the whole observation" in note[0]
    assert "train with --encoder cnn" not in note[0]
    code, _, err = run_main(["train", "pix46:DictFloat", "--encoder", "cnn", *DRY], capsys)
    line = error_line(code, err, "--encoder cnn needs an image observation", "at key 'cam': to have it read as an image")
    assert fix in line and "train with --encoder cnn" not in line


def test_check_env_casts_float_pixels_of_a_uint8_image_to_uint8_never_to_a_float_box(envs46, capsys):
    code, out, err = run_main(["check-env", "pix46:floatret"], capsys)
    fail = [line for line in out.splitlines() if line.startswith("FAIL obs dtype")]
    assert len(fail) == 1, out
    assert ("got dtype float32 at reset(seed=0) (does not cast safely to uint8: return np.uint8 pixels 0..255 as "
            "obs.astype(np.uint8))") in fail[0]
    assert "declare a float Box" not in fail[0]


@pytest.mark.parametrize("env, where", [("floatbad", "obs[20, 0, 0]"), ("dictbad", "obs['cam'][20, 0, 0]")])
def test_debug_checks_name_a_bad_pixel_by_its_coordinates(envs46, tmp_path, capsys, env, where):
    encoder = "cnn" if env == "floatbad" else "mlp"
    code, _, err = run_main(["train", f"pix46:{env}", "--encoder", encoder, "--debug-checks", "--num-envs", "1", "--num-steps", "8",
                             "--num-minibatches", "1", "--total-timesteps", "8", "--run-dir", str(tmp_path / "run")], capsys)
    line = error_line(code, err, "--debug-checks: observation of env 0 at reset (global step 0) is outside the observation space",
                      f"({where} = 255 > high 1; 2,400 of its 4,800 entries out of bounds)")
    assert "component" not in line and "[0, 0, 0" not in line


def test_a_cnn_far_beyond_84x84_gets_a_note_with_its_parameters_checkpoints_and_the_resize(envs46, monkeypatch, capsys):
    monkeypatch.setattr(sizing, "free_memory", lambda device: 64 << 30)  # it fits: the note, not the refusal
    shape = (4, 256, 256, 1)  # a frame stack of 256x256 grayscale renders: a linear layer of 50,176 x 512 (16x Nature's)
    code, _, err = run_main(["train", "pix46:Img", "--env-kwargs", f'{{"shape": {list(shape)}}}', *DRY], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "images through the Nature CNN" in line]
    agent = Agent(gym.spaces.Box(0, 255, shape, np.uint8), gym.spaces.Discrete(2), encoder="cnn")
    params = sum(p.numel() for p in agent.encoder.parameters())
    assert notes == [f"proxima: note: env 'pix46:Img': {shape} images through the Nature CNN: its linear layer is 50,176 x 512 "
                     f"(16x the 3,136 x 512 of an 84x84 frame), ~{params / 1e6:.0f}M parameters, ~{human_bytes(12 * params)} "
                     f"a checkpoint (--keep-checkpoints 3: ~{human_bytes(36 * params)}), and slow steps; downscale the env's images "
                     "(the Nature CNN was made for 84x84): wrap the env in gymnasium.wrappers.ResizeObservation(env, (84, 84)) "
                     "(it needs opencv) before any frame stack"]


@pytest.mark.parametrize("shape", [(84, 84, 4), (210, 160, 3)])
def test_atari_sized_frames_get_no_size_note(shape):
    # 84x84 is the CNN's own size; a full unresized Atari frame (210x160) is 7.2x its linear layer, below the 10x
    layout = obs_layout(gym.spaces.Box(0, 255, shape, np.uint8))
    assert sizing.cnn_size_note(PPOConfig(env_id="x"), layout) is None


def test_bench_of_an_atari_game_without_its_packages_names_envpool_as_train_does(monkeypatch, capsys):
    from proxima.envs import atari

    monkeypatch.setattr(atari, "has_ale", lambda: False)
    monkeypatch.setattr(atari, "has_envpool", lambda: False)
    for command in (["bench", "Pong-v5"], ["train", "Pong-v5", "--dry-run"]):
        code, _, err = run_main(command, capsys)
        error_line(code, err, "env 'Pong-v5' needs ale-py and opencv (or EnvPool); install it")
