"""Pixels Proxima reads as a vector, and the advice on making pixels uint8 (review round 25):

* train and train --dry-run say (not under --quiet) when a run trains an MLP on pixels flattened
  unscaled: a grayscale (H, W), a frame stack (N, H, W, C), as check-env notes them;
* every advice to make pixels uint8 keeps the range the space declares (a 0/1 board stays 0 and 1,
  a uint16 depth image is mapped onto 0..255, not wrapped);
* the non-finite guard skips integer observations (always finite);
* train --dry-run prints the encoder the run records, not 'auto'.
"""

from __future__ import annotations

import types

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from cli_helpers import run_main

from proxima.envs import EnvError
from proxima.envs.spaces import image_note


class _Pixels(gym.Env):
    """Episodes of 4 steps on samples of ``observation_space`` (set by the subclass)."""

    def __init__(self):
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def _obs(self):
        return self.observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(action), self.t >= 4, False, {}


class Gray(_Pixels):
    """Gymnasium's GrayscaleObservation output: uint8 (H, W)."""

    def __init__(self):
        super().__init__()
        self.observation_space = gym.spaces.Box(0, 255, (40, 40), np.uint8)


class Stack(_Pixels):
    """FrameStackObservation of a (H, W, 1) frame: uint8 (N, H, W, C)."""

    def __init__(self):
        super().__init__()
        # frames of 2 channels: a stack of 1, 3 or 4-channel frames is an image since review 34
        self.observation_space = gym.spaces.Box(0, 255, (4, 40, 40, 2), np.uint8)


class StackCHW(_Pixels):
    """FrameStackObservation of grayscale (H, W) frames: (4, 40, 40), an image (channels first)."""

    def __init__(self):
        super().__init__()
        self.observation_space = gym.spaces.Box(0, 255, (4, 40, 40), np.uint8)


class FloatBoard(_Pixels):
    """Declares a 0/1 board Box(0, 1, (40, 40, 2), uint8) but returns it as float32 0/1."""

    def __init__(self):
        super().__init__()
        self.observation_space = gym.spaces.Box(0, 1, (40, 40, 2), np.uint8)

    def _obs(self):
        return self.observation_space.sample().astype(np.float32)


for _cls in (Gray, Stack, StackCHW, FloatBoard):
    gym.register(f"Pix25{_cls.__name__}-v0", entry_point=_cls, disable_env_checker=True)

NOTE = "proxima: note: env 'Pix25{}-v0': observation_space: uint8 Box {} is not an image to Proxima"


# ------------------------------------------------------------------------ 1. train notes pixels read as a vector
@pytest.mark.parametrize("env, shape, fix", [
    ("Gray", (40, 40), "add a channel axis: declare Box(0, 255, (40, 40, 1), np.uint8) and return obs[..., None] (if it "
                       "comes from Gymnasium's GrayscaleObservation, wrap it as GrayscaleObservation(env, keep_dim=True) instead)"),
    ("Stack", (4, 40, 40, 2), "merge the frame stack into channels: declare Box(0, 255, (40, 40, 8), np.uint8) and "
                              "return obs.transpose(1, 2, 0, 3).reshape(40, 40, 8)"),
])
def test_train_dry_run_notes_pixels_it_would_read_as_a_vector(env, shape, fix, capsys):
    code, out, err = run_main(["train", f"Pix25{env}-v0", "--dry-run", "--threads", "1"], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("proxima: note:")]
    assert len(notes) == 1, err
    assert notes[0].startswith(NOTE.format(env, shape)) and "flattened and unscaled (0..255)" in notes[0], notes[0]
    assert notes[0].endswith(fix), notes[0]
    assert yaml.safe_load(out)["encoder"] == "mlp"
    code, out, err = run_main(["train", f"Pix25{env}-v0", "--dry-run", "--quiet", "--threads", "1"], capsys)
    assert code == 0 and err == "", err  # --quiet: no note, as for the action-range note


def test_train_notes_pixels_read_as_a_vector_at_the_start_of_a_run(tmp_path, capsys):
    argv = ["train", "Pix25Gray-v0", "--num-envs", "2", "--num-steps", "8", "--total-timesteps", "16",
            "--eval-episodes", "0", "--no-progress", "--threads", "1"]
    code, _, err = run_main(argv + ["--run-dir", str(tmp_path / "a")], capsys)
    assert code == 0, err
    assert sum(line.startswith(NOTE.format("Gray", (40, 40))) for line in err.splitlines()) == 1, err
    assert yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())["encoder"] == "mlp"  # what the note is about
    code, _, err = run_main(argv + ["--run-dir", str(tmp_path / "b"), "--quiet"], capsys)
    assert code == 0 and "note" not in err, err


# ------------------------------------------------------------------------ 2. advice from the declared range
def test_the_uint8_advice_keeps_a_0_1_boards_range():
    from proxima.envs.spaces import uint8_pixels

    board = gym.spaces.Box(0, 1, (40, 40, 2), np.uint8)
    ones = np.ones((40, 40, 2), np.float32)
    # the network maps the declared 0..1 to [0, 1]: scaled by 255 it would see 255 where it trained on 1
    assert uint8_pixels(board, "obs", ones) == ((0, 1), "np.uint8 pixels 0..1 as obs.astype(np.uint8)")
    assert uint8_pixels(board, "obs", ones, tensor=True)[1] == "torch.uint8 pixels 0..1 as obs.to(torch.uint8)"
    # a 0..255 image given [0, 1] floats is scaled, as before
    image = gym.spaces.Box(0, 255, (40, 40, 3), np.uint8)
    assert uint8_pixels(image, "obs", np.full(3, 0.5))[1] == "np.uint8 pixels 0..255 as (obs * 255).astype(np.uint8)"
    # a uint8 board as a grayscale (H, W): the Box the note suggests declares the board's range
    assert image_note(gym.spaces.Box(0, 1, (40, 40), np.uint8))[1].endswith(
        "declare Box(0, 1, (40, 40, 1), np.uint8) and return obs[..., None]")


def test_trains_image_check_names_the_declared_range():
    from proxima.envs.gym_adapter import GymnasiumEnv

    env = GymnasiumEnv("Pix25FloatBoard-v0", 1)
    try:
        with pytest.raises(EnvError) as e:
            env.reset(seed=0)
    finally:
        env.close()
    assert "the observation space declares uint8 (40, 40, 2) (return np.uint8 pixels 0..1 of that shape)" in str(e.value)


def test_the_advice_for_a_uint16_depth_image_maps_it_onto_0_255():
    """A cast would wrap 51951 to 239, and (obs * 255) overflows: the advice maps 0..65535 onto 0..255."""
    depth = gym.spaces.Box(0, 65535, (64, 64, 1), np.uint16)
    fix = image_note(depth)[1]
    assert fix.endswith("declare Box(0, 255, (64, 64, 1), np.uint8) and return np.uint8 pixels 0..255 as "
                        "np.interp(obs, (0, 65535), (0, 255)).astype(np.uint8)"), fix
    expr = fix.rsplit(" as ", 1)[1]
    obs = np.array([0, 257, 51951, 65535], np.uint16).reshape(1, 2, 2)
    assert eval(expr, {"np": np, "obs": obs}).reshape(-1).tolist() == [0, 1, 202, 255]  # noqa: S307 - our own advice


# ------------------------------------------------------------------------ 3. the guard skips integer observations
def _guard(obs_dtype):
    from proxima.guards import EnvGuard

    N = 3

    class Env:
        def step(self, action):
            obs = torch.zeros((N, 4, 8, 8), dtype=obs_dtype)
            final = obs.clone()
            if obs_dtype.is_floating_point:
                final[1, 0, 0, 0] = float("nan")
            return obs, torch.zeros(N), torch.zeros(N, dtype=torch.bool), torch.zeros(N, dtype=torch.bool), {"final_obs": final}

    trainer = types.SimpleNamespace(
        env=Env(), rollout=types.SimpleNamespace(num_steps=2, num_envs=N), dist=types.SimpleNamespace(world_size=1),
        device=torch.device("cpu"), cfg=types.SimpleNamespace(debug_checks=False, env_id="x:Y", env_kwargs=None))
    return EnvGuard(trainer)


def test_the_non_finite_guard_skips_integer_observations(monkeypatch):
    calls = []
    isfinite = torch.isfinite
    monkeypatch.setattr(torch, "isfinite", lambda x: calls.append(x.dtype) or isfinite(x))
    guard = _guard(torch.uint8)
    guard.begin(0)
    for _ in range(2):
        guard.step(torch.zeros(3, dtype=torch.int64))
    assert calls == []  # integers are always finite: no op over every pixel of every step
    assert bool(guard.obs_ok.all()) and bool(guard.final_ok.all())

    guard = _guard(torch.float32)  # floats are still checked: a NaN in env 1's final observation is found
    guard.begin(0)
    guard.step(torch.zeros(3, dtype=torch.int64))
    assert calls == [torch.float32, torch.float32]
    assert guard.obs_ok[0].tolist() == [True, True, True] and guard.final_ok[0].tolist() == [True, False, True]


# ------------------------------------------------------------------------ 4. the dry run resolves the encoder
def test_train_dry_run_prints_the_encoder_the_run_records(tmp_path, capsys):
    code, out, err = run_main(["train", "Pix25StackCHW-v0", "--dry-run", "--threads", "1"], capsys)
    assert code == 0, err
    dry = yaml.safe_load(out)
    assert dry["encoder"] == "cnn", out
    code, _, err = run_main(["train", "Pix25StackCHW-v0", "--num-envs", "2", "--num-steps", "8", "--total-timesteps", "16",
                             "--eval-episodes", "0", "--no-progress", "--threads", "1", "--run-dir", str(tmp_path / "r")], capsys)
    assert code == 0, err
    recorded = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())
    assert recorded["encoder"] == dry["encoder"] and recorded["hidden_sizes"] == dry["hidden_sizes"]
    code, out, _ = run_main(["train", "Pix25StackCHW-v0", "--dry-run", "--encoder", "mlp", "--threads", "1"], capsys)
    assert code == 0 and yaml.safe_load(out)["encoder"] == "mlp"  # a typed encoder is printed as typed



def test_policy_act_advises_a_cast_for_a_0_1_board_given_as_floats():
    # Policy.act said "(obs * 255).astype(np.uint8)": the network, trained on the board's 0..1, would see 255
    from proxima.agent import Agent
    from proxima.checkpoint import Policy
    from proxima.envs import make_env

    env = make_env("Pix25FloatBoard-v0", 1, backend="gymnasium")
    obs_space, act_space = env.single_observation_space, env.single_action_space
    env.close()
    policy = Policy(Agent(obs_space, act_space, encoder="cnn"), None, {"env_id": "Pix25FloatBoard-v0"}, obs_space, act_space, "cpu")
    assert policy.act(np.ones((40, 40, 2), np.uint8)) in range(2)
    with pytest.raises(ValueError) as e:
        policy.act(np.ones((40, 40, 2), np.float32))
    assert str(e.value).endswith("pass np.uint8 pixels 0..1 as obs.astype(np.uint8)"), str(e.value)
    with pytest.raises(ValueError) as e:
        policy.act(torch.ones((40, 40, 2)))
    assert str(e.value).endswith("pass torch.uint8 pixels 0..1 as obs.to(torch.uint8)"), str(e.value)
