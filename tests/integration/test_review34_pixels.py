"""Review 34 of training from pixels: an image whose pixels exceed the range its Box declares (by which the
network scales it) is refused at the reset or step that returns it; --hidden-sizes/--activation given for
a single-image CNN run get a note; train --dry-run and check-env say how an image is read; a Gymnasium
env's video ends on the episode's final frame (L + 1 frames for L steps)."""

import json

import gymnasium as gym
import numpy as np
import pytest

from tests.cli_helpers import TINY_RUN, error_line, module_written_in, run_main

#: (H, W, 3) uint8 images declared Box(low, high); every pixel ``low`` until env step ``at`` (0: the reset),
#: ``value`` from then on; episodes of ``length`` steps (plus ``longer`` x the seed of a seeded reset: env i of a
#: vector env reset with seed 0 gets seed i); ``key``: the image at that key of a Dict beside a vector.
#: render() draws a frame whose pixels are the env's step t, so a video's frames say which state each is.
ENVS = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Pixels(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    action_space = spaces.Discrete(2)

    def __init__(self, render_mode=None, low=0, high=255, value=0, at=10**9, key=None, length=8, longer=0, size=8):
        self.render_mode, self.low, self.value, self.at, self.key = render_mode, low, value, at, key
        self.length, self.longer, self.size, self.t, self.steps = length, longer, size, 0, length
        box = spaces.Box(low, high, (size, size, 3), np.uint8)
        self.observation_space = spaces.Dict({key: box, "vec": spaces.Box(-1.0, 1.0, (2,), np.float32)}) if key else box

    def _obs(self):
        image = np.full((self.size, self.size, 3), self.value if self.t >= self.at else self.low, np.uint8)
        return {self.key: image, "vec": np.zeros(2, np.float32)} if self.key else image

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.steps = self.length + self.longer * seed
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, self.t >= self.steps, False, {}

    def render(self):
        return np.full((16, 16, 3), self.t, np.uint8)
'''
ENV = "rev34pix_envs:Pixels"


@pytest.fixture(autouse=True)
def envs_module(tmp_path, monkeypatch):
    """The env module in tmp_path, importable; sys.path and sys.modules put back afterwards."""
    yield from module_written_in(tmp_path, monkeypatch, "rev34pix_envs", ENVS)


def train(capsys, *args, kwargs=None, total=16):
    argv = ["train", ENV, *TINY_RUN, "--num-envs", "2", "--num-steps", "8", "--total-timesteps", str(total),
            "--run-dir", "run", "--overwrite", *args]
    if kwargs is not None:
        argv += ["--env-kwargs", json.dumps(kwargs)]
    return run_main(argv, capsys)


# ------------------------------------------------------------------------------- 1. pixels beyond the declared range
@pytest.mark.parametrize("kwargs, said, fix", [
    # a Box(0, 1) that returns 0..255 (the review's WrongHigh): the network would see 255 where it expects at most 1
    ({"high": 1, "value": 255, "at": 0},
     "env 0 returned an image value 255, above its declared high 1 at reset (after env step 0); the network scales "
     "this image by observation_space's range 0..1 to [0, 1], so 255 would reach it as 255",
     "declare Box(0, 255, (8, 8, 3), np.uint8) for 0..255 pixels, or return values within 0..1"),
    # mid-episode, below the low of a Dict's image key: named by key and by the env step that returned it
    ({"low": 10, "value": 3, "at": 3, "key": "cam"},
     "env 0 returned an image value 3 at key 'cam', below its declared low 10 at env step 3; the network scales this "
     "image by observation_space['cam']'s range 10..255 to [0, 1], so 3 would reach it as -0.02857",
     "declare Box(0, 255, (8, 8, 3), np.uint8) for 0..255 pixels, or return values within 10..255"),
])
def test_train_refuses_image_pixels_beyond_the_range_the_network_scales_by(capsys, kwargs, said, fix):
    code, _, err = train(capsys, kwargs=kwargs)
    line = error_line(code, err, f"proxima train: error: env '{ENV}': {said}", fix, f"(check with: proxima check-env {ENV}")
    assert ("global step" in line) == (kwargs["at"] > 0), line  # a step's fault names the run's global step too


def test_pixels_within_a_narrow_declared_range_train_and_0_255_images_cost_no_check(capsys):
    from proxima.envs.gym_adapter import image_bounds
    from proxima.envs.spaces import obs_layout

    # a 0/1 board Box(0, 1) that returns 0 and 1, and a 0..255 image: both train
    assert train(capsys, kwargs={"high": 1, "value": 1, "at": 2})[0] == 0
    assert train(capsys, kwargs={"value": 255, "at": 2})[0] == 0

    def bounds(low, high):
        return image_bounds(obs_layout(gym.spaces.Box(low, high, (8, 8, 3), np.uint8)).parts[0])

    # a Box(0, 255) image: nothing a uint8 holds is outside it, so there is nothing to compute at each step
    assert (bounds(0, 255), bounds(0, 1), bounds(10, 255), bounds(10, 200)) == (None, (None, 1), (10, None), (10, 200))


# ------------------------------------------------------------------------------- 2. flags the CNN's linear heads drop
CNN = {"size": 36}  # 36x36: the smallest image the CNN takes (--encoder auto)
NOTE = "has no effect with the CNN encoder of a single image: its actor and critic are linear heads on the CNN's 512 features"


def notes(err: str) -> list:
    return [line for line in err.splitlines() if "no effect with the CNN encoder" in line]


def test_hidden_sizes_and_activation_given_for_a_cnn_run_get_a_note(capsys):
    code, _, err = train(capsys, "--hidden-sizes", "16,16", "--activation", "relu", kwargs=CNN)
    assert code == 0, err
    assert notes(err) == [f"proxima: note: --hidden-sizes 16,16 and --activation relu have{NOTE.removeprefix('has')}"], err
    code, _, err = train(capsys, "--activation", "tanh", kwargs=CNN)  # typed, even at its default value
    assert code == 0 and notes(err) == [f"proxima: note: --activation tanh {NOTE}"], err


@pytest.mark.parametrize("args, kwargs", [
    ((), CNN),  # not given: nothing to say
    (("--hidden-sizes", "16"), {**CNN, "key": "cam"}),  # a Dict: its MLPs (on the CNN's features and the vector) use them
    (("--hidden-sizes", "16", "--encoder", "mlp"), CNN),  # the MLP encoder uses them
    (("--hidden-sizes", "16"), {}),  # 8x8: --encoder auto takes the MLP
])
def test_no_note_where_the_flags_take_effect_or_were_not_given(capsys, args, kwargs):
    code, _, err = train(capsys, *args, kwargs=kwargs)
    assert code == 0 and notes(err) == [], err


def test_a_python_caller_is_told_in_ppoconfig_words(tmp_path, capsys):
    from proxima import PPOConfig
    from proxima.trainer import train as train_py

    cfg = PPOConfig(env_id=ENV, env_kwargs=CNN, num_envs=2, num_steps=8, total_timesteps=16, num_minibatches=2,
                    update_epochs=1, eval_episodes=0, progress=False, threads=1, hidden_sizes=[16, 16])
    train_py(cfg, run_dir=tmp_path / "py")
    assert notes(capsys.readouterr().err) == [f"proxima: note: PPOConfig.hidden_sizes = [16, 16] {NOTE}"]


# ------------------------------------------------------------------------------- 3. how an image is read
def test_dry_run_and_check_env_say_how_an_image_is_read(capsys):
    code, out, err = train(capsys, "--dry-run", kwargs={**CNN, "high": 1})
    assert code == 0 and "encoder: cnn" in out, err
    said = [line for line in err.splitlines() if "observation" in line]
    line = "proxima: observation: image (36, 36, 3) channels-last, 0..1 scaled to [0, 1]"
    # the encoder too once cli._dry_run hands it to _note_pixels (the next test's call)
    assert said in ([line], [line + ", CNN encoder"]), err
    code, out, err = run_main(["check-env", ENV, "--steps", "10", "--env-kwargs", json.dumps({**CNN, "key": "cam"})], capsys)
    assert (code, out.splitlines()) == (0, [
        "spaces: obs Dict, keys packed in this order ['cam': Box(36, 36, 3) uint8 -> image (3, 36, 36) /255, CNN (512 "
        "features), 'vec': Box(2,) float32 -> 2 features] -> 514 features, MLP 64x64 tanh; action Discrete(2) -> "
        "categorical over 2",
        f"OK: {ENV} passes 21 checks; observation['cam']: image (36, 36, 3) channels-last, 0..255 scaled to [0, 1], "
        "CNN encoder under --encoder auto"]), err
    code, out, err = run_main(["check-env", ENV, "--steps", "10"], capsys)  # 8x8: the MLP reads it
    assert (code, out.splitlines()) == (0, [
        "spaces: obs Box(8, 8, 3) uint8 -> image (3, 8, 8) /255, flattened to 192 features, MLP 64x64 tanh; action "
        "Discrete(2) -> categorical over 2",
        f"OK: {ENV} passes 20 checks; observation: image (8, 8, 3) channels-last, 0..255 scaled to [0, 1], "
        "flattened into the MLP under --encoder auto"]), err
    code, out, err = run_main(["train", "CartPole-v1", "--dry-run"], capsys)  # no image: no line
    assert code == 0 and "observation" not in err, err


def test_note_pixels_with_the_resolved_encoder_names_it_and_the_dropped_flags(capsys):
    """What train --dry-run prints once cli._dry_run hands _note_pixels the encoder it resolved and the typed flags."""
    from proxima.envs.spaces import obs_layout
    from proxima.trainer import _note_pixels

    layout = obs_layout(gym.spaces.Box(0, 255, (3, 64, 64), np.uint8))
    _note_pixels("X-v0", layout, "cnn", {"hidden_sizes": [256, 256]})
    assert capsys.readouterr().err.splitlines() == [
        "proxima: observation: image (3, 64, 64) channels-first, 0..255 scaled to [0, 1], CNN encoder",
        f"proxima: note: --hidden-sizes 256,256 {NOTE}"]


# ------------------------------------------------------------------------------- 4. a video's final frame
def policy_for(kwargs: dict):
    import torch

    from proxima.agent import Agent
    from proxima.checkpoint import Policy
    from proxima.envs import make_env

    env = make_env(ENV, 1, backend="gymnasium", env_kwargs=kwargs)
    obs_space, act_space = env.single_observation_space, env.single_action_space
    env.close()
    torch.manual_seed(0)
    return Policy(Agent(obs_space, act_space), None, {"env_id": ENV, "seed": 1}, obs_space, act_space, "cpu",
                  env_kwargs=kwargs)


def test_a_gymnasium_envs_video_ends_on_the_final_state(tmp_path):
    """Env 0's first episode of 2 steps: 3 frames, the states s0, s1, s2 (s2 was missing: the vector env
    resets the finished env inside its step, before the frame of the next step was taken), and none of
    its later episodes, which end while env 1's first (7 steps) runs on."""
    import torch

    from proxima.envs import make_env
    from proxima.evaluate import FrameRecorder, evaluate, first_episodes

    env = make_env(ENV, 2, backend="gymnasium", render_mode="rgb_array", env_kwargs={"length": 2, "longer": 5},
                   training=False)
    try:
        obs = env.reset(seed=0)
        recorder = FrameRecorder(env, ENV, "v.mp4")
        _, lengths, _ = first_episodes(env, obs, lambda o: torch.zeros(o.shape[0], dtype=torch.int64), 50,
                                       before_step=recorder.before_step)
    finally:
        env.close()
    assert lengths.tolist() == [2, 7]
    assert [int(f[0, 0, 0]) for f in recorder.frames] == [0, 1, 2]
    # the whole command's file: a GIF of 6 frames for 5 steps (each differs from the last, so none is merged), the last s5
    pytest.importorskip("PIL")
    from PIL import Image

    kwargs = {"length": 5}
    result = evaluate(policy_for(kwargs), episodes=1, backend="gymnasium", video=str(tmp_path / "v.gif"))
    with Image.open(result["video"]) as im:
        assert im.n_frames == result["lengths"][0] + 1 == 6
        im.seek(im.n_frames - 1)
        assert im.convert("RGB").getpixel((0, 0)) == (5, 5, 5)
