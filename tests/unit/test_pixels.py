"""Image and Dict observations: layouts, uint8 kept end to end, the Nature CNN, Dict encoders, errors."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima import checkpoint as ckpt
from proxima.agent import Agent, NatureCNN
from proxima.config import ConfigError
from proxima.envs import EnvError, make_env
from proxima.envs.spaces import image_note, obs_layout, pack_numpy, tensor_space

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
IMG_HWC = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
IMG_CHW = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


@pytest.fixture
def fixtures_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


# ------------------------------------------------------------------------------------ layouts
def test_image_boxes_stay_uint8_with_their_shape_and_vectors_flatten_to_float32():
    assert (obs_layout(IMG_HWC).shape, obs_layout(IMG_HWC).dtype, obs_layout(IMG_HWC).parts[0].layout) == ((84, 84, 3), torch.uint8, "hwc")
    assert (obs_layout(IMG_CHW).shape, obs_layout(IMG_CHW).parts[0].layout) == ((4, 84, 84), "chw")
    ram = gym.spaces.Box(0, 255, (128,), np.uint8)  # uint8 but not an image: a vector
    assert (obs_layout(ram).shape, obs_layout(ram).dtype, obs_layout(ram).is_image) == ((128,), torch.float32, False)
    cube = gym.spaces.Box(0, 255, (8, 8, 8), np.uint8)  # no channel end: not an image
    assert obs_layout(cube).shape == (512,) and not obs_layout(cube).has_image


def test_dict_keys_are_packed_side_by_side_in_key_order():
    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (2, 3, 1), np.uint8), "vec": gym.spaces.Box(-1, 1, (2,), np.float32)})
    layout = obs_layout(space)
    assert layout.is_dict and layout.shape == (8,) and layout.dtype == torch.float32
    assert [(p.key, p.offset, p.size) for p in layout.parts] == [("image", 0, 6), ("vec", 6, 2)]
    obs = {"image": np.arange(12, dtype=np.uint8).reshape(2, 2, 3, 1), "vec": np.array([[0.5, -0.5], [1.0, 0.0]], np.float32)}
    packed = pack_numpy(obs, layout, 2)
    np.testing.assert_array_equal(packed[1], [6, 7, 8, 9, 10, 11, 1.0, 0.0])
    all_u8 = gym.spaces.Dict({"a": IMG_CHW, "b": gym.spaces.Box(0, 255, (3,), np.uint8)})
    assert obs_layout(all_u8).dtype == torch.uint8


@pytest.mark.parametrize("space, named", [
    (gym.spaces.Text(5), "Text observation space"),
    (gym.spaces.Graph(gym.spaces.Box(0, 1, (2,)), None), "Graph observation space"),
    (gym.spaces.Sequence(gym.spaces.Box(0, 1, (2,))), "Sequence observation space"),
    (gym.spaces.Dict({"pos": gym.spaces.Box(0, 1, (2,)), "msg": gym.spaces.Text(5)}), "Text observation space Text(1, 5, "),
    (gym.spaces.Dict({"inner": gym.spaces.Dict({"x": gym.spaces.Box(0, 1, (2,))})}), "nested Dict observation space at key 'inner'"),
    # a checkpoint records keys as strings and the agent names a module per key: 0 would come back as
    # '0' (KeyError mid-run), 'a.b' cannot name a module
    (gym.spaces.Dict({0: gym.spaces.Box(0, 1, (5,)), 1: gym.spaces.Box(0, 1, (2,))}),
     "Dict observation key 0 (int); Proxima takes string keys: use '0' in observation_space and in the obs reset() and step() return"),
    (gym.spaces.Dict({"arm.pos": gym.spaces.Box(0, 1, (2,))}),
     "Dict observation key 'arm.pos'; a key names a network module, which cannot be empty or hold '.': rename it (e.g. 'arm_pos')"),
])
def test_unsupported_spaces_get_one_line_naming_the_space_and_key(space, named):
    with pytest.raises(EnvError) as err:
        obs_layout(space, "MyEnv-v0")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("env 'MyEnv-v0': not supported: ") and named in msg
    if isinstance(space, gym.spaces.Dict) and "msg" in space.spaces:
        assert msg.endswith("at key 'msg' (supported: Box, images as uint8 Box, and Dict of Box)")


# ------------------------------------------------------------------------------------ encoders
def test_flat_box_agent_keeps_the_mlp_parameter_names_of_older_checkpoints():
    agent = Agent(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2))
    assert agent.encoder_kind == "mlp" and agent.encoder is None
    assert list(agent.state_dict()) == [f"{net}.{i}.{p}" for net in ("critic", "actor") for i in (0, 2, 4) for p in ("weight", "bias")]


def test_nature_cnn_has_cleanrl_atari_sizes_and_heads():
    torch.manual_seed(0)
    agent = Agent(IMG_CHW, gym.spaces.Discrete(6), encoder="cnn")
    trunk = sum(p.numel() for p in agent.encoder.parameters())
    # conv 8x8x4->32, 4x4x32->64, 3x3x64->64, linear 3136->512 (CleanRL ppo_atari)
    assert trunk == (8 * 8 * 4 * 32 + 32) + (4 * 4 * 32 * 64 + 64) + (3 * 3 * 64 * 64 + 64) + (3136 * 512 + 512) == 1_684_128
    assert sum(p.numel() for p in agent.actor.parameters()) == 512 * 6 + 6
    assert sum(p.numel() for p in agent.critic.parameters()) == 513
    obs = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    action, logprob, entropy, value = agent.get_action_and_value(obs)
    assert action.shape == logprob.shape == value.shape == (5,)
    # the policy head starts near uniform (std 0.01): entropy ~ log 6
    assert torch.allclose(entropy, torch.full((5,), float(np.log(6))), atol=1e-2)


def test_hwc_and_chw_images_give_the_same_features():
    torch.manual_seed(0)
    part_hwc = obs_layout(gym.spaces.Box(0, 255, (40, 44, 3), np.uint8)).parts[0]
    part_chw = obs_layout(gym.spaces.Box(0, 255, (3, 40, 44), np.uint8)).parts[0]
    a, b = NatureCNN(part_hwc), NatureCNN(part_chw)
    b.load_state_dict(a.state_dict())
    x = torch.randint(0, 256, (2, 3, 40, 44), dtype=torch.uint8)
    torch.testing.assert_close(a(x.permute(0, 2, 3, 1)), b(x))


def test_pixels_are_scaled_to_unit_range_inside_the_network():
    agent = Agent(gym.spaces.Box(0, 255, (2, 2, 1), np.uint8), gym.spaces.Discrete(2), encoder="mlp")
    feats = agent.features(torch.tensor([[[[255], [0]], [[51], [102]]]], dtype=torch.uint8))
    torch.testing.assert_close(feats, torch.tensor([[1.0, 0.0, 0.2, 0.4]]))


def test_dict_agent_runs_one_encoder_per_key_and_concatenates():
    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (36, 36, 3), np.uint8), "vec": gym.spaces.Box(-1, 1, (2,), np.float32)})
    agent = Agent(space, gym.spaces.Discrete(2), encoder="auto")
    assert agent.encoder_kind == "cnn" and type(agent.encoder.encoders["image"]).__name__ == "NatureCNN"
    assert agent.encoder.out_dim == 512 + 2 and agent.actor[0].in_features == 514
    packed = torch.zeros(3, 36 * 36 * 3 + 2)
    packed[:, -2:] = torch.tensor([0.25, -0.75])
    feats = agent.features(packed)
    assert feats.shape == (3, 514)
    torch.testing.assert_close(feats[:, -2:], torch.tensor([[0.25, -0.75]] * 3))


def test_encoder_errors_name_the_flag_and_what_to_do():
    with pytest.raises(ConfigError, match=r"^--encoder cnn needs an image observation .*use --encoder mlp$"):
        Agent(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2), encoder="cnn")
    gray = gym.spaces.Box(0, 255, (84, 84), np.uint8)  # the agent gets it flattened, (7056,), as the trainer does
    with pytest.raises(ConfigError) as err:
        Agent(tensor_space(gray, obs_layout(gray)), gym.spaces.Discrete(2), encoder="cnn")
    assert str(err.value) == (
        "--encoder cnn needs an image observation (uint8 Box (H, W, C) or (C, H, W)); this env's observation has shape (84, 84); "
        "to have it read as an image (pixels scaled to [0, 1], the CNN from 36x36), add a channel axis: declare "
        "Box(0, 255, (84, 84, 1), np.uint8) and return obs[..., None] (if it comes from Gymnasium's GrayscaleObservation, "
        "wrap it as GrayscaleObservation(env, keep_dim=True) instead); or use --encoder mlp")
    # frames of 2 channels: a stack of RGB frames (4, 84, 84, 3) is an image since review 34
    stack = gym.spaces.Dict({"frames": gym.spaces.Box(0, 255, (4, 84, 84, 2), np.uint8), "vec": gym.spaces.Box(-1, 1, (2,), np.float32)})
    with pytest.raises(ConfigError) as err:
        Agent(stack, gym.spaces.Discrete(2), encoder="cnn")
    assert str(err.value).endswith(
        "observation has shape [(4, 84, 84, 2), (2,)]; at key 'frames': to have it read as an image (pixels scaled to [0, 1], the CNN "
        "from 36x36), merge the frame stack into channels: declare Box(0, 255, (84, 84, 8), np.uint8) and return "
        "obs['frames'].transpose(1, 2, 0, 3).reshape(84, 84, 8); or use --encoder mlp")
    with pytest.raises(ConfigError, match=r"^--encoder cnn: image is 20x20, smaller than the Nature CNN's 36x36 minimum"):
        Agent(gym.spaces.Box(0, 255, (20, 20, 3), np.uint8), gym.spaces.Discrete(2), encoder="cnn")


# ------------------------------------------------------------------------------------ pixel ranges
@pytest.mark.parametrize("low, high, shape, encoder", [
    (0, 1, (8, 8, 2), "mlp"),  # a 0/1 board, flattened: 0 and 1, not 0 and 1/255
    (0, 1, (40, 40, 2), "auto"),  # the same board through the CNN
    (10, 20, (4, 4, 3), "mlp"),  # (x - low) / (high - low)
    (0, 255, (40, 40, 3), "auto"),  # the common case: / 255
])
def test_pixels_are_scaled_to_unit_range_by_the_range_their_box_declares(low, high, shape, encoder):
    space = gym.spaces.Box(low, high, shape, np.uint8)
    agent = Agent(space, gym.spaces.Discrete(2), encoder=encoder)
    x = torch.randint(low, high + 1, (3, *shape), dtype=torch.uint8)
    x[0] = low
    x[1] = high
    want = (x.float() - low) / (high - low) if low else x.float() * (1.0 / high)
    if encoder == "mlp":
        got = agent.features(x)
        want = want.reshape(3, -1)
    else:
        assert type(agent.encoder).__name__ == "NatureCNN"
        got = agent.encoder.pixels(x)
        want = want.permute(0, 3, 1, 2)
    assert float(got.min()) == 0.0 and float(got.max()) == 1.0
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    if (low, high) == (0, 255):  # bit for bit as every image was scaled before the range was read
        assert torch.equal(got, x.permute(0, 3, 1, 2).float() * (1.0 / 255.0))


def test_only_a_range_other_than_0_255_is_recorded_in_the_weights():
    """0..255 images keep the parameter names of older checkpoints; another range is recorded
    (``pixel_range``), so a checkpoint written when every image was divided by 255 lacks it and
    fails to load instead of acting on inputs scaled otherwise than it was trained on."""
    cnn_keys = [f"encoder.{name}.{p}" for name in ("convs.0", "convs.2", "convs.4", "fc.0") for p in ("weight", "bias")]
    heads = [f"{net}.0.{p}" for net in ("critic", "actor") for p in ("weight", "bias")]
    assert list(Agent(IMG_HWC, gym.spaces.Discrete(2), encoder="cnn").state_dict()) == cnn_keys + heads
    board = gym.spaces.Box(0, 1, (40, 40, 2), np.uint8)
    state = Agent(board, gym.spaces.Discrete(2), encoder="cnn").state_dict()
    assert list(state) == ["encoder.pixels.pixel_range"] + cnn_keys + heads
    assert state["encoder.pixels.pixel_range"].tolist() == [0.0, 1.0]
    assert list(Agent(board, gym.spaces.Discrete(2), encoder="mlp").state_dict())[0] == "encoder.pixel_range"
    space = gym.spaces.Dict({"image": IMG_HWC, "board": gym.spaces.Box(0, 1, (8, 8, 2), np.uint8),
                             "vec": gym.spaces.Box(-1, 1, (2,), np.float32)})
    keys = [k for k in Agent(space, gym.spaces.Discrete(2), encoder="cnn").state_dict() if "pixel_range" in k]
    assert keys == ["encoder.encoders.board.pixel_range"]


# ------------------------------------------------------------------------------------ per-key encoders
CAM_AND_MINIMAP = gym.spaces.Dict({"camera": gym.spaces.Box(0, 255, (64, 64, 3), np.uint8),
                                   "minimap": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8),
                                   "vec": gym.spaces.Box(-1, 1, (2,), np.float32)})


@pytest.mark.parametrize("encoder", ["auto", "cnn"])
def test_a_dict_takes_the_cnn_for_its_large_image_keys_and_flattens_the_small_ones(encoder):
    agent = Agent(CAM_AND_MINIMAP, gym.spaces.Discrete(2), encoder=encoder)
    assert agent.encoder_kind == "cnn"
    assert {k: type(m).__name__ for k, m in agent.encoder.encoders.items()} == {
        "camera": "NatureCNN", "minimap": "FlatInput", "vec": "FlatInput"}
    assert agent.encoder.out_dim == 512 + 16 * 16 * 3 + 2
    packed = torch.zeros(2, 64 * 64 * 3 + 16 * 16 * 3 + 2)
    packed[:, 64 * 64 * 3:64 * 64 * 3 + 3] = torch.tensor([255.0, 51.0, 0.0])  # the minimap's first pixel
    feats = agent.features(packed)
    torch.testing.assert_close(feats[:, 512:515], torch.tensor([[1.0, 0.2, 0.0]] * 2))
    mlp = Agent(CAM_AND_MINIMAP, gym.spaces.Discrete(2), encoder="mlp")
    assert {type(m).__name__ for m in mlp.encoder.encoders.values()} == {"FlatInput"}


def test_dicts_of_all_large_or_all_small_images_build_the_modules_they_built_before():
    large = gym.spaces.Dict({"a": gym.spaces.Box(0, 255, (36, 36, 3), np.uint8), "b": gym.spaces.Box(0, 255, (4, 40, 40), np.uint8)})
    agent = Agent(large, gym.spaces.Discrete(2), encoder="auto")
    assert agent.encoder_kind == "cnn" and {type(m).__name__ for m in agent.encoder.encoders.values()} == {"NatureCNN"}
    small = gym.spaces.Dict({"a": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8), "b": gym.spaces.Box(0, 255, (3, 20, 20), np.uint8)})
    agent = Agent(small, gym.spaces.Discrete(2), encoder="auto")
    assert agent.encoder_kind == "mlp" and {type(m).__name__ for m in agent.encoder.encoders.values()} == {"FlatInput"}
    with pytest.raises(ConfigError) as err:
        Agent(small, gym.spaces.Discrete(2), encoder="cnn")
    assert str(err.value) == ("--encoder cnn: every image is smaller than the Nature CNN's 36x36 minimum (at key 'a' 16x16, "
                              "at key 'b' 20x20); use --encoder mlp or larger frames")
    one = gym.spaces.Dict({"a": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8), "v": gym.spaces.Box(-1, 1, (2,), np.float32)})
    with pytest.raises(ConfigError, match=r"^--encoder cnn: image at key 'a' is 16x16, smaller than the Nature CNN's 36x36 minimum"):
        Agent(one, gym.spaces.Discrete(2), encoder="cnn")


def test_the_memory_estimate_counts_a_cnn_only_for_the_image_keys_that_get_one(small_config):
    from proxima import sizing

    cfg = small_config(env_id="x", encoder="auto", hidden_sizes=[16])
    layout = obs_layout(CAM_AND_MINIMAP)
    agent = Agent(CAM_AND_MINIMAP, gym.spaces.Discrete(2), cfg.hidden_sizes, encoder=cfg.encoder)
    assert agent.encoder_kind == "cnn"
    weights, _ = sizing.network_terms(cfg, layout.shape[0], 2, layout)
    assert weights == 16 * sum(p.numel() for p in agent.parameters())  # float32 weights, grads, Adam's 2 moments
    camera = sum(p.numel() for p in agent.encoder.encoders["camera"].parameters())
    assert sizing.cnn_weight_bytes(cfg, layout) == 16 * camera


# ------------------------------------------------------------------------------------ float pixels' advice
UNBOUNDED = gym.spaces.Box(-np.inf, np.inf, (40, 40, 3), np.float32)


def test_the_advice_for_float_pixels_of_unknown_scale_scales_them_first():
    """Box(-inf, inf) does not say whether its pixels are in [0, 1] or 0..255: a bare cast of [0, 1]
    pixels makes every one 0, so the scaling comes first (the observed values decide when given)."""
    both = ("return np.uint8 pixels 0..255 as (obs * 255).astype(np.uint8) if obs is in [0, 1], "
            "or obs.astype(np.uint8) if it is 0..255")
    assert image_note(UNBOUNDED)[1].endswith("declare Box(0, 255, (40, 40, 3), np.uint8) and " + both)
    assert image_note(UNBOUNDED, values=np.full((40, 40, 3), 0.5))[1].endswith(" as (obs * 255).astype(np.uint8)")
    assert image_note(UNBOUNDED, values=np.full((40, 40, 3), 200.0))[1].endswith(" as obs.astype(np.uint8)")
    assert image_note(gym.spaces.Box(0, 255, (40, 40, 3), np.float32))[1].endswith(" as obs.astype(np.uint8)")
    stack = gym.spaces.Box(-np.inf, np.inf, (4, 40, 40, 1), np.float32)  # a uint8 stack of that shape is an image
    assert image_note(stack)[1].endswith("declare Box(0, 255, (4, 40, 40, 1), np.uint8) and " + both)
    stack = gym.spaces.Box(-np.inf, np.inf, (4, 40, 40, 2), np.float32)  # 2-channel frames: merged into channels
    assert image_note(stack)[1].endswith("as (obs.transpose(1, 2, 0, 3).reshape(40, 40, 8) * 255).astype(np.uint8) if obs "
                                         "is in [0, 1], or obs.transpose(1, 2, 0, 3).reshape(40, 40, 8).astype(np.uint8) if it is 0..255")
    with pytest.raises(ConfigError) as err:  # --encoder cnn repeats the advice
        Agent(tensor_space(UNBOUNDED, obs_layout(UNBOUNDED)), gym.spaces.Discrete(2), encoder="cnn")
    assert str(err.value).endswith("declare Box(0, 255, (40, 40, 3), np.uint8) and " + both + "; or use --encoder mlp")


# ------------------------------------------------------------------------------------ envs and buffers
def test_native_image_env_and_rollout_buffer_keep_uint8(small_config):
    from proxima.trainer import Trainer

    trainer = Trainer(small_config(env_id="PixelQuadrant-v0", num_envs=4, num_steps=4, total_timesteps=16, num_minibatches=2))
    try:
        assert trainer.next_obs.dtype == torch.uint8 and trainer.next_obs.shape == (4, 36, 36, 3)
        assert trainer.rollout.obs.dtype == trainer.rollout.final_obs.dtype == torch.uint8
        assert trainer.rollout.obs.element_size() == 1  # 4x less than float32
        assert trainer.cfg.encoder == "cnn"  # auto resolved and recorded
        trainer.train_iteration()
        assert int(trainer.rollout.obs.max()) == 255  # the bright square was stored as raw pixels
    finally:
        trainer.close()


def test_norm_obs_is_refused_for_images(small_config):
    from proxima.trainer import Trainer

    with pytest.raises(ConfigError, match="^--norm-obs: this env's observations hold an image"):
        Trainer(small_config(env_id="PixelQuadrant-v0", norm_obs=True))


def test_gymnasium_image_env_returns_uint8_tensors(fixtures_on_path):
    env = make_env("bad_envs:ImageObs", 3, backend="gymnasium", seed=0)
    try:
        obs = env.reset(seed=0)
        assert obs.dtype == torch.uint8 and obs.shape == (3, 36, 36, 3)
        for _ in range(10):  # episodes of 10 steps: the 10th step ends them
            obs, _, terminated, _, info = env.step(torch.zeros(3, dtype=torch.int64))
        assert bool(terminated.all()) and info["final_obs"].dtype == torch.uint8
        assert int(info["final_obs"][0, 0, 0, 0]) == 70 and int(obs[0, 0, 0, 0]) == 0  # last frame of the episode / first of the next
    finally:
        env.close()


def test_float_pixels_from_an_env_name_the_env_index_and_step(fixtures_on_path):
    env = make_env("bad_envs:FloatPixelsAtStep3", 2, backend="gymnasium", seed=0)
    try:
        env.reset(seed=0)
        env.step(torch.zeros(2, dtype=torch.int64))
        env.step(torch.zeros(2, dtype=torch.int64))
        with pytest.raises(EnvError) as err:
            env.step(torch.zeros(2, dtype=torch.int64))
    finally:
        env.close()
    msg = str(err.value)
    assert msg.startswith("env 'bad_envs:FloatPixelsAtStep3': env 0 returned an image of dtype float32 shape (36, 36, 3) at env step 3;")
    assert "declares uint8 (36, 36, 3)" in msg and "\n" not in msg


def test_dict_env_is_packed_and_its_space_survives_a_checkpoint(fixtures_on_path):
    env = make_env("bad_envs:ImageDictObs", 2, backend="gymnasium", seed=0)
    try:
        obs = env.reset(seed=0)
        assert obs.shape == (2, 36 * 36 * 3 + 2) and obs.dtype == torch.float32
        assert float(obs[:, -2:].abs().max()) <= 1.0 and float(obs[:, -2:].abs().sum()) > 0
        space = env.single_observation_space
    finally:
        env.close()
    restored = ckpt.space_from_dict(ckpt.space_to_dict(space))
    assert list(restored.spaces) == ["image", "vec"] and restored["image"] == space["image"]


def test_a_flattened_box_remembers_its_declared_shape_yet_compares_as_a_plain_box():
    gray = gym.spaces.Box(0, 255, (84, 84), np.uint8)
    flat = tensor_space(gray, obs_layout(gray))
    plain = gym.spaces.Box(0, 255, (7056,), np.float32)
    assert flat == plain and obs_layout(flat) == obs_layout(plain) and obs_layout(flat).parts[0].source is gray
    restored = ckpt.space_from_dict(ckpt.space_to_dict(flat))  # the declared shape recorded too (Policy.act reads it)
    assert restored == plain and obs_layout(restored) == obs_layout(plain) and restored.declared.shape == (84, 84)
    assert type(ckpt.space_from_dict(ckpt.space_to_dict(plain))) is gym.spaces.Box


@pytest.mark.parametrize("shape, dtype, image, fix", [
    ((84, 84), np.uint8, (84, 84, 1), "add a channel axis: declare Box(0, 255, (84, 84, 1), np.uint8) and return obs[..., None] "
                                      "(if it comes from Gymnasium's GrayscaleObservation, wrap it as "
                                      "GrayscaleObservation(env, keep_dim=True) instead)"),
    # stacks of 1, 3 or 4-channel frames are images since review 34; of 2-channel frames not
    ((4, 40, 40, 2), np.uint8, (40, 40, 8), "merge the frame stack into channels: declare Box(0, 255, (40, 40, 8), np.uint8) and return obs.transpose(1, 2, 0, 3).reshape(40, 40, 8)"),
    ((4, 2, 84, 84), np.uint8, (8, 84, 84), "merge the frame stack into channels: declare Box(0, 255, (8, 84, 84), np.uint8) and return obs.reshape(8, 84, 84)"),
    ((4, 40, 40, 1), np.uint8, None, None), ((4, 3, 84, 84), np.uint8, None, None),
    ((40, 40, 3), np.float32, (40, 40, 3), "make it uint8: declare Box(0, 255, (40, 40, 3), np.uint8) and return np.uint8 pixels 0..255 as (obs * 255).astype(np.uint8)"),
    ((8, 8, 8), np.uint8, None, "if it is an image, put its channels on an axis at one end, smaller than the other two"),
    ((128,), np.uint8, None, None), ((1, 128), np.uint8, None, None), ((5, 5), np.float32, None, None), ((84, 84, 3), np.uint8, None, None),
])
def test_image_note_is_given_exactly_to_pixels_that_image_layout_does_not_take(shape, dtype, image, fix):
    space = gym.spaces.Box(0, 255 if dtype == np.uint8 else 1.0, shape, dtype)
    note = image_note(space)
    assert (note is None) == (fix is None), note
    if fix is not None:
        assert obs_layout(space).parts[0].layout is None  # the note is true: Proxima reads it as a flat vector
        assert note[1].endswith(fix), note
    if image is not None:  # and the space it suggests is an image to Proxima
        assert obs_layout(gym.spaces.Box(0, 255, image, np.uint8)).parts[0].layout is not None


def test_policy_act_takes_images_and_dicts_of_arrays():
    img_agent = Agent(IMG_HWC, gym.spaces.Discrete(3))
    policy = ckpt.Policy(img_agent, None, {"env_id": "x"}, IMG_HWC, gym.spaces.Discrete(3), "cpu")
    one = np.zeros((84, 84, 3), np.uint8)
    assert policy.act(one).shape == () and policy.act(np.stack([one, one])).shape == (2,)
    with pytest.raises(ValueError, match=r"obs of shape \(84, 84\) does not hold \(B, \*\(84, 84, 3\)\) observations of x"):
        policy.act(np.zeros((84, 84), np.uint8))
    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (36, 36, 3), np.uint8), "vec": gym.spaces.Box(-1, 1, (2,), np.float32)})
    policy = ckpt.Policy(Agent(space, gym.spaces.Discrete(2)), None, {"env_id": "x"}, space, gym.spaces.Discrete(2), "cpu")
    single = {"image": np.zeros((36, 36, 3), np.uint8), "vec": np.zeros(2, np.float32)}
    batch = {"image": np.zeros((5, 36, 36, 3), np.uint8), "vec": np.zeros((5, 2), np.float32)}
    assert policy.act(single).shape == () and policy.act(batch).shape == (5,)
    # a key missing, or keys of different batch sizes: one line naming the key (was KeyError 'vec', numpy's reshape)
    with pytest.raises(ValueError, match=r"^Policy.act: obs lacks the key 'vec' \(the policy's observations have 'image', 'vec'\)$"):
        policy.act({"image": single["image"]})
    with pytest.raises(ValueError, match=r"obs\['vec'\] of shape \(2,\) is not a batch of 5 like obs\['image'\] of shape \(5, 36, 36, 3\)"):
        policy.act({"image": batch["image"], "vec": single["vec"]})
    with pytest.raises(ValueError, match=r"obs\['vec'\] of shape \(3, 2\) is not a batch of 5"):
        policy.act({"image": batch["image"], "vec": np.zeros((3, 2), np.float32)})
    # a key of one value may come as (B,) in a batch, or (1,) in a batch of one, as before the checks
    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,), np.float32), "t": gym.spaces.Box(0, 1, (1,), np.float32)})
    policy = ckpt.Policy(Agent(space, gym.spaces.Discrete(2)), None, {"env_id": "x"}, space, gym.spaces.Discrete(2), "cpu")
    assert policy.act({"pos": np.zeros((4, 2), np.float32), "t": np.zeros(4, np.float32)}).shape == (4,)
    assert policy.act({"pos": np.zeros((1, 2), np.float32), "t": np.zeros(1, np.float32)}).shape == (1,)
    with pytest.raises(ValueError, match=r"^Policy.act: obs\['pos'\] of shape \(3,\) is neither one observation of shape "
                                         r"\(2,\) nor a batch \(B, \*\(2,\)\)$"):
        policy.act({"pos": np.zeros(3, np.float32), "t": [0.1]})


def test_debug_checks_accept_uint8_images(small_config):
    from proxima.trainer import Trainer

    trainer = Trainer(small_config(env_id="PixelQuadrant-v0", num_envs=4, num_steps=4, total_timesteps=16,
                                   num_minibatches=2, debug_checks=True))
    try:
        out = trainer.train_iteration()  # --debug-checks checks every obs against the uint8 space
        assert not bool(out["nonfinite"]) and int(out["ep_count"]) == 16  # one-step episodes
    finally:
        trainer.close()


@pytest.mark.parametrize("env_id", ["Pong-v5", "Breakout-v5"])
def test_atari_presets_are_cleanrl_ppo_atari_envpool(env_id):
    from proxima.config import validate
    from proxima.presets import resolve

    cfg = resolve(env_id)
    validate(cfg)
    got = (cfg.num_envs, cfg.num_steps, cfg.lr, cfg.anneal_lr, cfg.update_epochs, cfg.num_minibatches, cfg.clip_coef,
           cfg.ent_coef, cfg.vf_coef, cfg.max_grad_norm, cfg.gamma, cfg.gae_lambda, cfg.total_timesteps, cfg.encoder)
    assert got == (8, 128, 2.5e-4, True, 4, 4, 0.1, 0.01, 0.5, 0.5, 0.99, 0.95, 10_000_000, "cnn")


def test_a_checkpoint_from_before_the_encoder_field_loads(small_config, tmp_path):
    from proxima.trainer import train

    run_dir, agent = train(small_config(), run_dir=tmp_path / "run", quiet=True, evaluate_at_end=False)
    state = ckpt.load_checkpoint(run_dir)
    assert state["config"].pop("encoder") == "mlp"  # as written before the field existed
    old, _, _, _ = ckpt.build_agent(state)
    obs = torch.randn(6, 4)
    torch.testing.assert_close(old.act(obs), agent.act(obs))


def test_a_dict_space_whose_keys_are_not_sorted_comes_back_in_its_own_order():
    # gym.spaces.Dict sorts a plain dict's keys but keeps a list of pairs' order: the policy's input is
    # packed in the env's order, so a checkpoint read back sorted would pack eval observations wrongly
    space = gym.spaces.Dict([("z", gym.spaces.Box(-1, 1, (5,), np.float32)), ("a", gym.spaces.Box(-1, 1, (2,), np.float32))])
    restored = ckpt.space_from_dict(ckpt.space_to_dict(space))
    assert list(restored.spaces) == ["z", "a"]
    assert obs_layout(restored) == obs_layout(space)
