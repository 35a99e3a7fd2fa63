"""Review 34, finding 3: Gymnasium's FrameStackObservation of a colour image, (N, H, W, C) or (N, C, H, W) uint8,
is an image: --encoder auto gives it the Nature CNN on N * C channels (frame after frame, each frame's channels
together), scaled once, kept uint8 in the rollout; eval, Policy.act and resume read it. A float image declared
Box(0, 1) is read by --encoder cnn as it is (a float32 rollout), --encoder auto keeps the MLP for it; a float image
of any other bounds is refused by --encoder cnn as before. A checkpoint of an MLP that read a stack unscaled does
not load into a network that scales it."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from tests.cli_helpers import TINY_RUN, error_line, module_written_in, run_main

#: the quadrant task (which quadrant holds the bright square) as (36, 36, 3) HWC or (3, 36, 36) CHW frames, 36x36
#: being the smallest image the CNN takes (nets.CNN_MIN_SIZE); the stacks are FrameStackObservation's of them
ENVS = '''
import gymnasium as gym
import numpy as np


class Frames(gym.Env):
    action_space = gym.spaces.Discrete(4)

    def __init__(self, chw=False, dtype="uint8", high=255, size=36):
        self.chw, self.dtype, self.high, self.size, self.t, self.q = chw, np.dtype(dtype), high, size, 0, 0
        shape = (3, size, size) if chw else (size, size, 3)
        self.observation_space = gym.spaces.Box(0, high, shape, self.dtype)

    def _obs(self):
        img = np.zeros((self.size, self.size), np.float64)
        h = self.size // 2
        r, c = divmod(self.q, 2)
        img[r * h:(r + 1) * h, c * h:(c + 1) * h] = self.high
        img = np.stack([img] * 3, 0 if self.chw else -1)
        return img.astype(self.dtype)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.q = 0, int(self.np_random.integers(4))
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == self.q)
        self.t += 1
        self.q = int(self.np_random.integers(4))
        return self._obs(), reward, False, self.t >= 8, {}


def stack(**kw):
    return gym.wrappers.FrameStackObservation(Frames(**kw), 4)
'''
STACK = "rev34fs_envs:stack"
FRAMES = "rev34fs_envs:Frames"


@pytest.fixture(autouse=True)
def envs_module(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "rev34fs_envs", ENVS)


def train(capsys, env, *args, kwargs=None, run="run", total=256):
    argv = ["train", env, *TINY_RUN, "--total-timesteps", str(total), "--run-dir", run, "--overwrite", *args]
    if kwargs:
        argv += ["--env-kwargs", json.dumps(kwargs)]
    return run_main(argv, capsys)


def first_conv(agent):
    return agent.encoder.convs[0]


# ------------------------------------------------------------------------------- 1. frame stacks
@pytest.mark.parametrize("kwargs, shape", [({}, (4, 36, 36, 3)), ({"chw": True}, (4, 3, 36, 36))])
def test_a_frame_stack_trains_the_cnn_on_its_frames_channels_and_eval_act_and_resume_read_it(capsys, tmp_path, kwargs, shape):
    from proxima.checkpoint import load_policy

    code, out, err = train(capsys, STACK, "--dry-run", kwargs=kwargs)
    assert code == 0, err
    assert yaml.safe_load(out)["encoder"] == "cnn" and "note" not in err, err  # no MLP fallback, no note
    order = "channels-first" if kwargs else "channels-last"
    assert f"proxima: observation: image {shape} a stack of 4 {order} frames (12 channels), 0..255 scaled to [0, 1], CNN encoder" in err

    code, _, err = train(capsys, STACK, kwargs=kwargs)  # --encoder auto, 256 steps
    assert code == 0, err
    assert yaml.safe_load(open("run/config.yaml"))["encoder"] == "cnn"
    policy = load_policy("run", env_id=STACK, env_kwargs=kwargs, trust_env=True)
    conv = first_conv(policy.agent)
    assert (conv.in_channels, conv.out_channels) == (12, 32)

    one = np.zeros(shape, np.uint8)
    assert np.shape(policy.act(one)) == () and policy.act(np.zeros((5, *shape), np.uint8)).shape == (5,)
    swapped = (4, 36, 36, 3) if kwargs else (4, 3, 36, 36)  # the other layout: as many values, read scrambled
    with pytest.raises(ValueError, match=rf"^Policy.act: obs of shape {re_shape((2, *swapped))} does not hold"):
        policy.act(np.zeros((2, *swapped), np.uint8))

    code, out, err = run_main(["eval", "run", "--trust-run", "--episodes", "3", "--json"], capsys)
    assert code == 0 and json.loads(out)["episodes"] == 3, err
    code, _, err = run_main(["resume", "run", "--trust-run", "--total-timesteps", "384", "--no-progress"], capsys)
    assert code == 0, err
    assert (tmp_path / "run" / "checkpoints" / "step_000000000384.pt").is_file()
    assert first_conv(load_policy("run", env_id=STACK, env_kwargs=kwargs, trust_env=True).agent).in_channels == 12


def re_shape(shape) -> str:
    return "\\(" + ", ".join(map(str, shape)) + "\\)"


def test_the_rollout_keeps_a_stack_as_uint8_and_the_cnn_reads_it_frame_after_frame_scaled_once():
    from proxima.config import PPOConfig
    from proxima.trainer import Trainer

    cfg = PPOConfig(env_id=STACK, backend="gymnasium", num_envs=2, num_steps=4, total_timesteps=8, eval_episodes=0,
                    progress=False, checkpoint_every=0, threads=1)
    trainer = Trainer(cfg, quiet=True)
    try:
        assert trainer.rollout.obs.dtype == torch.uint8 and tuple(trainer.rollout.obs.shape) == (4, 2, 4, 36, 36, 3)
        assert trainer.agent.encoder_kind == "cnn"
        pixels = trainer.agent.encoder.pixels
        # frame f, channel c holds 10 * f + c: stack-major channels are 0, 1, 2, 10, 11, 12, ... (each frame's together)
        x = torch.zeros((1, 4, 36, 36, 3), dtype=torch.uint8)
        for f in range(4):
            for c in range(3):
                x[0, f, :, :, c] = 10 * f + c
        got = pixels(x)
        assert tuple(got.shape) == (1, 12, 36, 36)
        expected = torch.tensor([10 * f + c for f in range(4) for c in range(3)], dtype=torch.float32) / 255
        assert torch.allclose(got[0, :, 0, 0], expected)  # and scaled once: 32 / 255, not 32 or 32 / 255 / 255
    finally:
        trainer.close()


def test_a_stack_of_frames_with_another_channel_count_stays_an_mlp_with_its_note():
    from proxima.agent import Agent
    from proxima.envs.spaces import image_note, obs_layout

    odd = gym.spaces.Box(0, 255, (4, 36, 36, 2), np.uint8)  # 2 channels a frame: not FrameStackObservation of a picture
    assert obs_layout(odd).parts[0].layout is None and Agent(odd, gym.spaces.Discrete(2), encoder="auto").encoder_kind == "mlp"
    assert image_note(odd)[1].endswith("merge the frame stack into channels: declare Box(0, 255, (36, 36, 8), np.uint8) "
                                       "and return obs.transpose(1, 2, 0, 3).reshape(36, 36, 8)")
    gray = gym.spaces.Box(0, 255, (4, 36, 36), np.uint8)  # a grayscale stack: an image as before
    assert obs_layout(gray).parts[0].layout == "chw" and first_conv(Agent(gray, gym.spaces.Discrete(2), encoder="auto")).in_channels == 4


def test_an_mlp_checkpoint_of_a_stack_read_unscaled_does_not_load_into_the_scaling_network():
    """Before, a uint8 stack was a vector: an MLP read its 0..255 values as they are. Its weights have the same shapes
    as those of an MLP on the stack now (which scales it), so the stack's record in the weights tells them apart."""
    from proxima.agent import Agent
    from proxima.checkpoint import CheckpointError, check_weight_shapes

    space = gym.spaces.Box(0, 255, (4, 36, 36, 3), np.uint8)
    now = Agent(space, gym.spaces.Discrete(2), encoder="mlp").state_dict()
    old = {k: v for k, v in now.items() if not k.startswith("encoder.")}  # the old agent had no encoder module
    # one line naming the record (checkpoint.check_weight_shapes may word it as the frame stack's own)
    with pytest.raises(CheckpointError, match=r"^old\.pt: (written before Proxima read a uint8 frame stack|.*encoder\.frame_stack)"):
        check_weight_shapes("old.pt", {k: tuple(v.shape) for k, v in now.items()}, old)


# ------------------------------------------------------------------------------- 2. float images in [0, 1]
def test_a_float_image_in_0_1_trains_the_cnn_under_encoder_cnn_unscaled_and_evaluates(capsys):
    from proxima.checkpoint import load_policy
    from proxima.config import PPOConfig
    from proxima.trainer import Trainer

    kwargs = {"dtype": "float32", "high": 1}
    code, out, err = train(capsys, FRAMES, "--dry-run", kwargs=kwargs)  # auto: the MLP it always had, and its note
    assert code == 0 and yaml.safe_load(out)["encoder"] == "mlp", err
    assert "--encoder cnn reads it as an image as it is" in err

    code, out, err = train(capsys, FRAMES, "--encoder", "cnn", "--dry-run", kwargs=kwargs)
    assert code == 0 and yaml.safe_load(out)["encoder"] == "cnn", err
    assert "observation: image (36, 36, 3) channels-last, float 0..1 read as it is, CNN encoder" in err

    cfg = PPOConfig(env_id=FRAMES, env_kwargs=kwargs, encoder="cnn", num_envs=2, num_steps=4, total_timesteps=8,
                    eval_episodes=0, progress=False, checkpoint_every=0, threads=1)
    trainer = Trainer(cfg, quiet=True)
    try:
        assert trainer.rollout.obs.dtype == torch.float32
        assert first_conv(trainer.agent).in_channels == 3
        x = torch.rand(2, 36 * 36 * 3)  # the env's tensors hold it flat: reshaped, channels moved first, not scaled
        assert torch.equal(trainer.agent.encoder.pixels(x), x.reshape(2, 36, 36, 3).permute(0, 3, 1, 2))
    finally:
        trainer.close()

    code, _, err = train(capsys, FRAMES, "--encoder", "cnn", kwargs=kwargs, total=128)
    assert code == 0, err
    policy = load_policy("run", env_id=FRAMES, env_kwargs=kwargs, trust_env=True)
    assert policy.agent.encoder_kind == "cnn" and np.shape(policy.act(np.full((36, 36, 3), 0.5, np.float32))) == ()
    code, out, err = run_main(["eval", "run", "--trust-run", "--episodes", "2", "--json"], capsys)
    assert code == 0 and json.loads(out)["episodes"] == 2, err


def test_a_float_image_of_other_bounds_is_still_refused_by_encoder_cnn(capsys):
    code, _, err = train(capsys, FRAMES, "--encoder", "cnn", "--dry-run", kwargs={"dtype": "float32", "high": 255})
    error_line(code, err, "--encoder cnn needs an image observation", "make it uint8", "or use --encoder mlp")
