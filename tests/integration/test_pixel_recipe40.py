"""Gymnasium pixel envs (review 40): docs/atari.md's recipe (a module:function factory that grayscales,
stacks and rescales CarRacing-v3) run as documented on a small stand-in env; the no-preset note of an
image env, which must not advise the --norm-obs it refuses; --env-kwargs KEY=VALUE's spelling in JSON;
a grayscale (H, W) note naming GrayscaleObservation's keep_dim=True."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

from tests.cli_helpers import error_line, module_written_in, run_main

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "atari.md").read_text()
SIZE = 40  # CarRacing's frames are 96x96 and it steps ~50/s here: a 40x40 stand-in (the CNN's least is 36)


def _frame(rng) -> np.ndarray:
    return rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)


class FakeCar(gym.Env):
    """CarRacing-v3's spaces at 40x40: RGB uint8 frames; steering [-1, 1], gas and brake [0, 1]."""

    observation_space = gym.spaces.Box(0, 255, (SIZE, SIZE, 3), np.uint8)
    action_space = gym.spaces.Box(np.array([-1, 0, 0], np.float32), np.ones(3, np.float32))

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return _frame(self.np_random), {}

    def step(self, action):
        self.t += 1
        return _frame(self.np_random), float(action[1]), self.t >= 8, False, {}


class FakeCarDict(FakeCar):
    """The same frames under a Dict key, beside a speed vector."""

    observation_space = gym.spaces.Dict({"cam": FakeCar.observation_space,
                                         "speed": gym.spaces.Box(-1, 1, (1,), np.float32)})

    def reset(self, seed=None, options=None):
        obs, info = super().reset(seed=seed)
        return {"cam": obs, "speed": np.zeros(1, np.float32)}, info

    def step(self, action):
        obs, *rest = super().step(action)
        return {"cam": obs, "speed": np.zeros(1, np.float32)}, *rest


class Gray(FakeCar):
    """GrayscaleObservation's default output: uint8 (H, W), no channel axis."""

    observation_space = gym.spaces.Box(0, 255, (SIZE, SIZE), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        obs, info = super().reset(seed=seed)
        return obs[..., 0], info

    def step(self, action):
        obs, *rest = super().step(np.array([0, 0, 0], np.float32))
        return obs[..., 0], *rest


for _id, _cls in (("FakeCar40-v0", FakeCar), ("FakeCarDict40-v0", FakeCarDict), ("Gray40-v0", Gray)):
    if _id not in gym.registry:
        gym.register(_id, entry_point=_cls)


def _doc_recipe() -> tuple[str, list]:
    """(the factory module's source, its commands) as docs/atari.md shows them."""
    module = re.search(r"```python\n(# carracing_pixels\.py.*?)```", DOC, re.S)
    commands = re.search(r"```text\n(proxima check-env carracing_pixels:make\n.*?)```", DOC, re.S)
    assert module and commands, "docs/atari.md lost its CarRacing-v3 recipe"
    return module.group(1), [shlex.split(line)[1:] for line in commands.group(1).splitlines()]


@pytest.fixture
def recipe(tmp_path, monkeypatch):
    """The doc's module written as carracing_pixels.py, building the stand-in where it builds CarRacing-v3."""
    source, _ = _doc_recipe()
    assert source.count('gymnasium.make("CarRacing-v3", **kwargs)') == 1
    yield from module_written_in(tmp_path, monkeypatch, "carracing_pixels",
                                 source.replace('"CarRacing-v3"', '"FakeCar40-v0"'))


TINY = ["--total-timesteps", "32", "--num-envs", "2", "--num-steps", "16", "--no-progress", "--threads", "1",
        "--eval-episodes", "0"]


# ------------------------------------------------------------------------ 4. the documented recipe runs
def test_the_documented_pixel_recipe_checks_trains_and_evaluates_as_shown(recipe, capsys):
    check, train, evaluate = _doc_recipe()[1]
    assert check == ["check-env", "carracing_pixels:make"]
    code, out, err = run_main(check, capsys)
    assert code == 0, out + err
    # the stack of grayscale frames with keep_dim is an image to Proxima (a 4-channel one), read by the CNN
    assert out.splitlines()[-1] == (
        f"OK: carracing_pixels:make passes 20 checks; observation: image (4, {SIZE}, {SIZE}, 1) a stack of 4 "
        "channels-last frames (4 channels), 0..255 scaled to [0, 1], CNN encoder under --encoder auto")
    assert train[:2] == ["train", "carracing_pixels:make"] and "--norm-obs" not in train
    code, _, err = run_main(train + TINY, capsys)  # the doc's flags, a few steps long (later flags win)
    assert code == 0, err
    # RescaleAction moved gas and brake to [-1, 1]: no note that half the actions clip to 0
    assert "clip to that bound" not in err and "no preset" not in err, err
    run_dir = Path(train[train.index("--run-dir") + 1])
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert (config["env_id"], config["encoder"], config["ent_coef"], config["norm_reward"], config["norm_obs"]) == (
        "carracing_pixels:make", "cnn", 0.0, True, False)
    code, out, err = run_main(evaluate, capsys)
    assert code == 0, err
    assert out.startswith("carracing_pixels:make: ") and out.rstrip().endswith("at step 32 over 5 episodes (deterministic)"), out


def test_the_recipes_float32_bounds_keep_gymnasium_quiet(recipe):
    import carracing_pixels

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = carracing_pixels.make()
    assert [str(w.message) for w in caught] == []
    assert env.action_space == gym.spaces.Box(-1, 1, (3,), np.float32)
    assert env.observation_space == gym.spaces.Box(0, 255, (4, SIZE, SIZE, 1), np.uint8)
    # what the doc warns of: Python float bounds are cast down, with a warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gym.wrappers.RescaleAction(gym.make("FakeCar40-v0"), -1.0, 1.0)
    assert any("precision lowered by casting to float32" in str(w.message) for w in caught)


def test_the_doc_says_what_resizing_needs():
    assert "`pip install opencv-python-headless`, or the\n`[atari]` extra" in DOC
    if importlib.util.find_spec("cv2") is None:  # as here: the doc quotes Gymnasium's refusal
        with pytest.raises(gym.error.DependencyNotInstalled, match=r"^opencv \(cv2\) is not installed"):
            gym.wrappers.ResizeObservation(gym.make("FakeCar40-v0"), (36, 36))
        assert "`DependencyNotInstalled:\nopencv (cv2) is not installed`" in DOC


# ------------------------------------------------------------------------ 1. the no-preset note of an image env
NOTE = ("proxima: note: env '{}' has Box actions and no preset, so it trains with PPOConfig's defaults, tuned for "
        "discrete classic control (ent_coef 0.01, no normalization); continuous-control presets use --ent-coef 0 "
        "--norm-reward (and --norm-obs, which this env's image observations do not take: the network scales their "
        "pixels to [0, 1]) (`proxima presets Pendulum-v1 default` shows one), except LunarLanderContinuous-v3's, "
        "which keeps ent_coef 0.01")


@pytest.mark.parametrize("env_id", ["FakeCar40-v0", "FakeCarDict40-v0"])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_the_no_preset_note_of_an_image_env_does_not_advise_norm_obs(env_id, dry_run, tmp_path, capsys):
    # the dry run hands the note its ObsLayout, a run its observation space: both tell the image
    argv = ["train", env_id, "--run-dir", str(tmp_path / "r"), *TINY] + (["--dry-run"] if dry_run else [])
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    assert [ln for ln in err.splitlines() if "no preset" in ln] == [NOTE.format(env_id)]
    # the advice it withholds is refused indeed
    code, _, err = run_main(["train", env_id, "--norm-obs", "--dry-run", *TINY], capsys)
    assert error_line(code, err) == ("proxima train: error: --norm-obs: this env's observations hold an image, which "
                                     "the network scales to [0, 1]; drop --norm-obs (a Dict observation's vector keys: "
                                     "normalize them inside the env)")


# ------------------------------------------------------------------------ 2. --env-kwargs KEY=VALUE
@pytest.mark.parametrize("typed, example", [
    ("continuous=false", """'{"continuous": false}'"""),
    ("continuous=False, lap_complete_percent=0.9 render_mode=rgb_array",
     """'{"continuous": false, "lap_complete_percent": 0.9, "render_mode": "rgb_array"}'"""),
    ("it's=1", """'{"size": 8, "continuous": false}'"""),  # no KEY=VALUE: the generic example
])
def test_env_kwargs_not_json_gives_the_json_spelling_of_what_was_typed(typed, example, capsys):
    code, _, err = run_main(["train", "CarRacing-v3", "--env-kwargs", typed, "--dry-run"], capsys)
    line = error_line(code, err)
    assert line == f"proxima train: error: --env-kwargs {typed!r}: not valid JSON (Expecting value at column 1); " \
                   f"e.g. --env-kwargs {example}"
    # the example, as the shell hands it over, is the JSON object the flag takes
    assert json.loads(shlex.split(example)[0]) == json.loads(shlex.split(line.rpartition("e.g. --env-kwargs ")[2])[0])
    assert isinstance(json.loads(shlex.split(example)[0]), dict)


def test_a_config_files_env_kwargs_not_json_gives_the_files_spelling(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("env_id: CartPole-v1\nenv_kwargs: continuous=false\n")
    code, _, err = run_main(["train", "--config", str(path), "--dry-run"], capsys)
    assert error_line(code, err) == (
        f"proxima train: error: {path}: field 'env_kwargs' got 'continuous=false': not valid JSON (Expecting value at "
        'column 1); e.g. env_kwargs: {"continuous": false}')


# ------------------------------------------------------------------------ 3. a grayscale (H, W) names keep_dim=True
def test_a_grayscale_2d_observation_is_told_of_grayscale_observations_keep_dim(capsys):
    code, out, err = run_main(["check-env", "Gray40-v0"], capsys)
    assert code == 0, out + err
    [note] = [ln for ln in out.splitlines() if ln.startswith("NOTE ")]
    assert note.endswith(
        f"add a channel axis: declare Box(0, 255, ({SIZE}, {SIZE}, 1), np.uint8) and return obs[..., None] (if it "
        "comes from Gymnasium's GrayscaleObservation, wrap it as GrayscaleObservation(env, keep_dim=True) instead)"), note
    # the documented fix makes it an image: GrayscaleObservation of the RGB env, keep_dim=True
    wrapped = gym.wrappers.GrayscaleObservation(gym.make("FakeCar40-v0"), keep_dim=True)
    from proxima.envs.spaces import image_layout, image_note

    assert image_layout(wrapped.observation_space) is not None
    # a Dict key: no wrapper of Gymnasium's grayscales one key, so only the reshape is advised
    how, fix = image_note(Gray.observation_space, "obs['cam']")
    assert fix.endswith("and return obs['cam'][..., None]"), fix


def test_a_population_refuses_norm_obs_of_an_image_env_with_the_single_runs_line(tmp_path, capsys):
    """One text for the refusal (run_setup.check_norm_obs), whichever path reaches it first."""
    lines = []
    for seeds in ([], ["--seeds", "1-2"]):
        code, _, err = run_main(["train", "FakeCarDict40-v0", "--norm-obs", "--run-dir", str(tmp_path / f"r{len(seeds)}"),
                                 *seeds, *TINY], capsys)
        lines.append(error_line(code, err))
    assert lines[0] == lines[1] and "normalize them inside the env" in lines[1], lines
