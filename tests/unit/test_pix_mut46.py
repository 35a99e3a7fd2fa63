"""Mutation-testing review of the image-observation fixes (review 46): the CNN's activation figures for a
float [0, 1] image, cnn_size_note's exact 10x threshold, its Dict of two images and its --keep-checkpoints
words, no note for an MLP, cnn_refusal's row advice, --debug-checks' pixel coordinates (a grayscale image,
pixels below low, an image key after another key, a vector key after an image) and bench's Atari line
under --backend auto."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima import sizing
from proxima.config import PPOConfig
from proxima.diskspace import human_bytes
from proxima.envs.spaces import obs_layout, tensor_space
from tests.cli_helpers import error_line, module_written_in, run_main

ENVS = '''
import gymnasium as gym, numpy as np
from gymnasium import spaces


class Img(gym.Env):
    """A float [0, 1] image whose second half holds ``value`` (out of bounds when outside [0, 1])."""
    def __init__(self, shape=(40, 40, 3), value=0.5):
        self.shape, self.value = tuple(shape), value
        self.observation_space = spaces.Box(0.0, 1.0, self.shape, np.float32)
        self.action_space = spaces.Discrete(2)
    def _obs(self):
        obs = np.zeros(self.shape, np.float32)
        obs.reshape(-1)[obs.size // 2:] = self.value
        return obs
    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}
    def step(self, a):
        self.t += 1
        return self._obs(), float(a), False, self.t >= 8, {}


class Keys(Img):
    """Dict of 'arm' (3,), 'cam' (40, 40, 3) float [0, 1] and 'vec' (3,): each key's value given."""
    def __init__(self, arm=0.0, cam=0.5, vec=0.0):
        super().__init__(value=cam)
        self.arm, self.vec = arm, vec
        self.observation_space = spaces.Dict({"arm": spaces.Box(-1, 1, (3,), np.float32),
                                              "cam": spaces.Box(0.0, 1.0, self.shape, np.float32),
                                              "vec": spaces.Box(-1, 1, (3,), np.float32)})
    def _obs(self):
        return {"arm": np.full(3, self.arm, np.float32), "cam": super()._obs(), "vec": np.full(3, self.vec, np.float32)}


class Ints(Img):
    """Declares a uint8 image, returns int64 pixels of which the second half holds ``value``."""
    def __init__(self, value=300):
        super().__init__(value=value)
        self.observation_space = spaces.Box(0, 255, self.shape, np.uint8)
    def _obs(self):
        return super()._obs().astype(np.int64)
'''

HEAD = "--debug-checks: observation of env 0 at reset (global step 0) is outside the observation space"


@pytest.fixture
def mut46(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "mut46", ENVS)


def _layout(space):
    """The layout the sizing reads of a Gymnasium env of ``space`` (its tensor's space, as env_sizes)."""
    return obs_layout(tensor_space(space, obs_layout(space)))


def _convs(c, h, w):
    """(conv parameters, flattened features) of the Nature CNN on a c x h x w image, by hand."""
    params, shape = 0, (h, w)
    for c_in, c_out, k, s in ((c, 32, 8, 4), (32, 64, 4, 2), (64, 64, 3, 1)):
        shape = tuple((d - k) // s + 1 for d in shape)
        params += c_in * c_out * k * k + c_out
    return params, 64 * shape[0] * shape[1]


def test_the_cnn_of_a_float_image_counts_its_feature_maps_in_the_bootstrap_pass_as_a_uint8_ones():
    # (84, 84, 4): input 28,224 + 32x20x20 + 64x9x9 + 64x7x7 + the 512 features = 49,856 floats a row
    cfg = PPOConfig(env_id="x", encoder="cnn", num_envs=8, num_steps=1, num_minibatches=8)
    cpu = torch.device("cpu")
    per_row = 84 * 84 * 4 + 32 * 20 * 20 + 64 * 9 * 9 + 64 * 7 * 7 + 512
    for space in (gym.spaces.Box(0.0, 1.0, (84, 84, 4), np.float32), gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)):
        layout = _layout(space)
        # 8 rows of the bootstrap pass, less the 1-row minibatch whose memory it reuses
        assert sizing.bootstrap_bytes(cfg, layout, cpu) == 7 * per_row * 4, space
        assert sizing.network_terms(cfg, 84 * 84 * 4, 2, layout)[1] == 1 * per_row * 4, space


def test_the_size_note_speaks_above_ten_times_natures_linear_layer_not_at_it():
    # (140, 308): feature maps 14 x 35, a linear layer of 64 x 14 x 35 = 31,360 inputs, exactly 10 x 3,136
    cfg = PPOConfig(env_id="x")
    assert _convs(1, 140, 308)[1] == 31360
    assert sizing.cnn_size_note(cfg, obs_layout(gym.spaces.Box(0, 255, (140, 308, 1), np.uint8))) is None
    note = sizing.cnn_size_note(cfg, obs_layout(gym.spaces.Box(0, 255, (140, 316, 1), np.uint8)))
    assert note is not None and note.startswith("(140, 316, 1) images through the Nature CNN: its linear layer is 32,256 x 512 ")


def test_the_size_note_of_two_images_names_both_the_largest_layer_and_all_parameters():
    space = gym.spaces.Dict({"a": gym.spaces.Box(0, 255, (220, 220, 1), np.uint8),
                             "b": gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)})
    note = sizing.cnn_size_note(PPOConfig(env_id="x", encoder="cnn"), obs_layout(space))
    (pa, fa), (pb, fb) = _convs(1, 220, 220), _convs(4, 84, 84)
    assert (fa, fb) == (36864, 3136)
    params = pa + fa * 512 + 512 + pb + fb * 512 + 512
    assert note is not None and note.startswith(
        f"(220, 220, 1), (84, 84, 4) images through the Nature CNN: its linear layer is 36,864 x 512 (12x the 3,136 x 512 "
        f"of an 84x84 frame), ~{params / 1e6:.0f}M parameters, ~{human_bytes(12 * params)} a checkpoint (--keep-checkpoints 3: "
        f"~{human_bytes(36 * params)}), and slow steps; "), note
    assert (round(params / 1e6), round((pa + fa * 512 + 512) / 1e6)) == (21, 19)  # both CNNs' parameters, not the first's


@pytest.mark.parametrize("keep, words", [(1, " a checkpoint, and slow steps"),
                                         (0, " a checkpoint (--keep-checkpoints 0 keeps every one), and slow steps")])
def test_the_size_note_names_the_kept_checkpoints_only_where_more_than_one_is_kept(keep, words):
    layout = obs_layout(gym.spaces.Box(0, 255, (220, 220, 1), np.uint8))
    note = sizing.cnn_size_note(PPOConfig(env_id="x", keep_checkpoints=keep), layout)
    assert note is not None and words in note, note
    assert note.count("--keep-checkpoints") == (keep == 0)


def test_an_mlp_on_large_images_gets_no_cnn_size_note():
    layout = obs_layout(gym.spaces.Box(0, 255, (220, 220, 1), np.uint8))
    assert sizing.cnn_size_note(PPOConfig(env_id="x", encoder="mlp"), layout) is None
    assert sizing.cnn_size_note(PPOConfig(env_id="x"), layout, "mlp") is None
    assert sizing.cnn_size_note(PPOConfig(env_id="x"), layout, "cnn") is not None


@pytest.mark.parametrize("steps, weights, fix", [
    (8, 1 << 30, "downscale the env's images (the Nature CNN was made for 84x84), or lower --num-envs or --num-steps"),
    (1, 1 << 30, "downscale the env's images (the Nature CNN was made for 84x84), or lower --num-envs"),
    (8, 16 << 30, "downscale the env's images (the Nature CNN was made for 84x84)")])
def test_the_cnn_refusal_offers_fewer_rows_only_where_the_weights_alone_fit(steps, weights, fix):
    cfg = PPOConfig(env_id="x", encoder="cnn", num_envs=8, num_steps=steps, num_minibatches=1)
    layout = _layout(gym.spaces.Box(0.0, 1.0, (600, 400, 3), np.float32))  # a float image reaches the agent flat
    line = sizing.cnn_refusal(cfg, layout, torch.device("cpu"), weights, 20 << 30, 8 << 30)
    assert line.startswith("(600, 400, 3) images through the Nature CNN: ")
    assert line.endswith(f"8.0 GiB free; {fix}"), line


def _debug(env, capsys, tmp_path, *kwargs):
    return run_main(["train", env, "--encoder", "mlp", "--debug-checks", "--num-envs", "1", "--num-steps", "8", "--num-minibatches",
                     "1", "--total-timesteps", "8", "--run-dir", str(tmp_path / "run"), *kwargs], capsys)


def test_debug_checks_name_a_grayscale_pixel_below_low_by_its_coordinates(mut46, tmp_path, capsys):
    code, _, err = _debug("mut46:Img", capsys, tmp_path, "--env-kwargs", '{"shape": [40, 40], "value": -1.0}')
    line = error_line(code, err, HEAD, "(obs[20, 0] = -1 < low 0; 800 of its 1,600 entries out of bounds)")
    assert "component" not in line


def test_debug_checks_name_an_image_key_after_another_key_by_its_own_coordinates_and_count(mut46, tmp_path, capsys):
    # 'arm' packs first (3 columns): the bad pixel is cam's (20, 0, 0), and vec's bad entries are not cam's count
    code, _, err = _debug("mut46:Keys", capsys, tmp_path, "--env-kwargs", '{"cam": 255.0, "vec": 5.0}')
    error_line(code, err, HEAD, "(obs['cam'][20, 0, 0] = 255 > high 1; 2,400 of its 4,800 entries out of bounds)")


def test_debug_checks_name_a_vector_key_after_an_image_by_its_entry(mut46, tmp_path, capsys):
    code, _, err = _debug("mut46:Keys", capsys, tmp_path, "--env-kwargs", '{"vec": 5.0}')
    line = error_line(code, err, "--debug-checks: observation [5, 5, 5] of env 0 at reset (global step 0) is outside the observation "
                      "space (obs['vec'] entry 0 = 5 > high 1)")
    assert "of its" not in line and "obs['cam']" not in line


def test_bench_auto_of_an_atari_game_without_its_packages_names_envpool(monkeypatch, capsys):
    from proxima.envs import atari

    monkeypatch.setattr(atari, "has_ale", lambda: False)
    monkeypatch.setattr(atari, "has_envpool", lambda: False)
    code, _, err = run_main(["bench", "Pong-v5", "--backend", "auto"], capsys)
    error_line(code, err, "env 'Pong-v5' needs ale-py and opencv (or EnvPool); install it")


@pytest.mark.parametrize("ale, envpool", [(False, True), (True, False), (True, True)])
def test_bench_leaves_an_atari_game_to_its_backend_when_either_package_is_installed(monkeypatch, ale, envpool):
    from proxima import bench
    from proxima.envs import EnvError, atari

    monkeypatch.setattr(atari, "has_ale", lambda: ale)
    monkeypatch.setattr(atari, "has_envpool", lambda: envpool)
    assert bench._atari_needs("Pong-v5") is None  # EnvPool alone runs the game: no 'needs ale-py' refusal
    monkeypatch.setattr(atari, "has_ale", lambda: False)
    monkeypatch.setattr(atari, "has_envpool", lambda: False)
    with pytest.raises(EnvError, match=r"needs ale-py and opencv \(or EnvPool\)"):
        bench._atari_needs("Pong-v5")
    assert bench._atari_needs("CartPole-v1") is None  # not an Atari game: nothing to install


def test_check_env_names_an_int_pixel_that_would_wrap_rather_than_the_float_cast(mut46, capsys):
    code, out, err = run_main(["check-env", "mut46:Ints"], capsys)
    fail = [line for line in out.splitlines() if line.startswith("FAIL obs dtype")]
    assert code != 0 and len(fail) == 1, out + err
    assert ("got dtype int64 at reset(seed=0) (does not cast safely to uint8; obs[20, 0, 0] = 300 is outside its range "
            "[0, 255] (astype would make it 44)") in fail[0]
    assert "np.uint8 pixels 0..255" not in fail[0]
    # an image stays uint8: a uint16 Box would be no image but an MLP over flattened pixels
    assert "wider dtype" not in fail[0] and "np.clip(obs, 0, 255).astype(np.uint8)" in fail[0], fail[0]


def test_check_env_tells_a_whole_float_unit_image_to_train_with_the_cnn(mut46, capsys):
    code, out, err = run_main(["check-env", "mut46:Img"], capsys)
    note = [line for line in (out + err).splitlines() if line.startswith("NOTE observation_space:")]
    assert code == 0, out + err
    assert note == ["NOTE observation_space: float32 Box (40, 40, 3) declares pixels in [0, 1]: --encoder cnn reads it as an image "
                    "as it is, but --encoder auto takes the CNN for uint8 images only, so it trains an MLP on its 4800 values "
                    "flattened as they are; train with --encoder cnn, or (4x less memory, and --encoder auto takes the CNN from "
                    "36x36) make it uint8: declare Box(0, 255, (40, 40, 3), np.uint8) and return np.uint8 pixels 0..255 as "
                    "(obs * 255).astype(np.uint8)"], out + err
