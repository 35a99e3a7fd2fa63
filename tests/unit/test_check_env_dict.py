"""``proxima check-env`` on Dict observations: each key's Box gets a plain Box's checks, named by key;
missing and unexpected keys are named; int keys are refused in one line; pixels Proxima does not read
as an image get a note (fixtures: tests/fixtures/bad_envs.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from cli_helpers import run_main, without_spaces_line
from proxima.check_env_cli import register
from proxima.envs.checker import check_env

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(autouse=True)
def fixtures_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


def report(cls: str, *argv: str, capsys) -> tuple[int, list]:
    """(exit code, stdout lines) of ``proxima check-env bad_envs:CLS ARGV``, stderr empty."""
    parser = argparse.ArgumentParser(prog="proxima")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["check-env", f"bad_envs:{cls}", "--steps", "30", *argv])
    code = args.func(args)
    out, err = capsys.readouterr()
    assert err == ""
    return code, out.strip().splitlines()


# (class, the FAIL line): every key-level fault is named by key, with the step and the fix
DICT_FAULTS = [
    ("DictVecFloat64", "FAIL obs dtype: expected dtype float32 (observation_space['vec'].dtype); got obs['vec'] dtype float64 "
                       "at reset(seed=0) (does not cast safely to float32: return obs['vec'].astype(np.float32)) (and 34 more times)"),
    ("DictVecOutOfBounds", "FAIL obs bounds: expected obs['vec'][0] in [-1, 1] (observation_space['vec'] low/high); "
                           "got obs['vec'][0] = 4.25, above high[0] = 1, at step 3 (and 23 more times)"),
    ("DictFloatImage", "FAIL obs dtype: expected dtype uint8 (observation_space['image'].dtype); got obs['image'] dtype float32 "
                       "at reset(seed=0) (does not cast safely to uint8; its values lie in [0, 1]: return np.uint8 pixels 0..255 "
                       "as (obs['image'] * 255).astype(np.uint8)) (and 34 more times)"),
    ("DictImageCHW", "FAIL obs shape: expected shape (36, 36, 3) (observation_space['image'].shape); got obs['image'] shape "
                     "(3, 36, 36) at reset(seed=0) (channels first where observation_space['image'] declares them last: "
                     "return obs['image'].transpose(1, 2, 0)) (and 34 more times)"),
    ("DictMissingKey", "FAIL obs keys: expected the keys observation_space declares ('image', 'vec'); got missing key 'vec' "
                       "at step 2 (return obs['vec'] too) (and 26 more times)"),
    ("DictExtraKey", "FAIL obs keys: expected the keys observation_space declares ('image', 'vec'); got unexpected key 'extra' "
                     "at reset(seed=0) (declare 'extra' in observation_space or leave it out) (and 34 more times)"),
    ("DictWrongShapeAtStep4", "FAIL obs shape: expected shape (2,) (observation_space['vec'].shape); got obs['vec'] shape (3,) "
                              "at step 4 (and 20 more times)"),
    ("DictIntKeys", "FAIL spaces supported: expected observation Box or Dict of Box; action Discrete, MultiDiscrete, "
                    "MultiBinary or Box; got not supported: Dict observation key 0 (int); Proxima takes string keys: use '0' "
                    "in observation_space and in the obs reset() and step() return"),
]


DICT_IMAGE_READING = ("observation['image']: image (36, 36, 3) channels-last, 0..255 scaled to [0, 1], CNN encoder "
                      "under --encoder auto")


# the spaces line a run of each Dict fixture prints, which check-env prints before its count once it read the spaces
DICT_SPACES = ("spaces: obs Dict, keys packed in this order ['image': Box(36, 36, 3) uint8 -> image (3, 36, 36) /255, "
               "CNN (512 features), 'vec': Box(2,) float32 -> 2 features] -> 514 features, MLP 64x64 tanh; "
               "action Discrete(2) -> categorical over 2")


@pytest.mark.parametrize("cls, line", DICT_FAULTS, ids=[f[0] for f in DICT_FAULTS])
def test_a_dict_fault_is_one_line_naming_the_key_step_and_fix(cls, line, capsys):
    code, lines = report(cls, capsys=capsys)
    assert code == 1
    # how the image key is read (and the spaces line) is said on failure too, unless the spaces themselves are refused
    reading = [] if cls == "DictIntKeys" else [DICT_IMAGE_READING, DICT_SPACES]
    assert lines == [line, *reading, f"1 violation(s) in bad_envs:{cls}"]


def test_a_nondeterministic_dict_reset_names_the_key_and_first_differing_entry():
    (v,) = check_env("bad_envs:DictNondeterministicReset", steps=0)
    assert v.check == "reset determinism"
    assert v.actual.startswith("obs['vec']: first [ 0.5 , -0.")
    assert "(obs['vec'][1] = -0." in v.actual and "dict of" not in v.actual


def test_clean_dicts_run_the_box_checks_on_each_key():
    report = check_env("bad_envs:ImageDictObs", steps=30)
    assert list(report) == []
    assert {"obs keys", "obs shape", "obs dtype", "obs finite", "obs bounds"} <= set(report.checks_run)
    assert "obs in space" not in report.checks_run


# (class, the NOTE line): pixels Proxima reads as a flat vector, how it trains them and what to change
NOTES = [  # (class, the NOTE line, the spaces line)
    ("GrayImage", "NOTE observation_space: uint8 Box (84, 84) is not an image to Proxima (an image is a uint8 Box (H, W, C) "
                  "or (C, H, W) whose channel axis, at one end, is smaller than the other two), so it trains an MLP on its 7056 "
                  "values flattened and unscaled (0..255); to have it read as an image (pixels scaled to [0, 1], the CNN from "
                  "36x36), add a channel axis: declare Box(0, 255, (84, 84, 1), np.uint8) and return obs[..., None] (if it "
                  "comes from Gymnasium's GrayscaleObservation, wrap it as GrayscaleObservation(env, keep_dim=True) instead)",
     "spaces: obs Box(84, 84) uint8 -> flattened to 7056 features, as float32, MLP 64x64 tanh; "
     "action Discrete(2) -> categorical over 2"),
    ("FloatImage", "NOTE observation_space: float32 Box (40, 40, 3) declares pixels in [0, 1]: --encoder cnn reads it as an "
                   "image as it is, but --encoder auto takes the CNN for uint8 images only, so it trains an MLP on its 4800 "
                   "values flattened as they are; train with --encoder cnn, or (4x less memory, and --encoder auto takes the "
                   "CNN from 36x36) make it uint8: declare Box(0, 255, (40, 40, 3), np.uint8) and return np.uint8 pixels "
                   "0..255 as (obs * 255).astype(np.uint8)",
     "spaces: obs Box(40, 40, 3) float32 -> flattened to 4800 features, MLP 64x64 tanh; "
     "action Discrete(2) -> categorical over 2"),
]


@pytest.mark.parametrize("cls, note, spaces", NOTES, ids=[n[0] for n in NOTES])
def test_pixels_that_are_not_an_image_pass_with_a_note(cls, note, spaces, capsys):
    code, lines = report(cls, capsys=capsys)
    assert code == 0
    assert lines == [note, spaces, f"OK: bad_envs:{cls} passes 20 checks"]


def test_a_frame_stack_is_an_image_with_no_note(capsys):
    """FrameStackObservation's (4, 40, 40, 1): an image since review 34 (it had the note above before)."""
    code, lines = report("FrameStack", capsys=capsys)
    assert code == 0
    assert lines == ["spaces: obs Box(4, 40, 40, 1) uint8 -> image (4, 40, 40) (a stack of 4 frames) /255, Nature CNN "
                     "(512 features), linear actor and critic heads; action Discrete(2) -> categorical over 2",
                     "OK: bad_envs:FrameStack passes 20 checks; observation: image (4, 40, 40, 1) a stack of 4 channels-last "
                     "frames (4 channels), 0..255 scaled to [0, 1], CNN encoder under --encoder auto"]


def test_train_names_the_missing_key_and_refuses_int_keys_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["--backend", "gymnasium", "--num-envs", "2", "--num-steps", "4", "--total-timesteps", "8",
            "--num-minibatches", "2", "--hidden-sizes", "8", "--run-dir", "D", "--no-progress", "--eval-episodes", "0"]
    code, _, err = run_main(["train", "bad_envs:DictMissingKey", *argv], capsys)
    assert err.count("proxima: spaces: ") == 1, err  # the run started: its spaces line, then the one error line
    err = without_spaces_line(err)
    assert code == 2 and err.count("\n") == 1, err
    # caught where the env returns it (envs/gym_adapter.EnvCalls): the env index, its step and the run's global step
    assert err == ("proxima train: error: env 'bad_envs:DictMissingKey': env 0 returned an observation without the key 'vec' "
                   "at env step 2; the observation space declares it: return obs['vec'] too (check with: proxima check-env "
                   "bad_envs:DictMissingKey); global step 4; no checkpoint was written yet (--checkpoint-every N writes one "
                   "every N iterations)\n"), err
    code, _, err = run_main(["train", "bad_envs:DictIntKeys", *argv], capsys)  # was: KeyError '0' mid-run
    assert code == 2 and err == ("proxima train: error: env 'bad_envs:DictIntKeys': not supported: Dict observation key 0 (int); "
                                 "Proxima takes string keys: use '0' in observation_space and in the obs reset() and step() return\n")
    code, _, err = run_main(["train", "bad_envs:GrayImage", "--encoder", "cnn", *argv], capsys)
    assert code == 2 and err == (
        "proxima train: error: --encoder cnn needs an image observation (uint8 Box (H, W, C) or (C, H, W)); this env's "
        "observation has shape (84, 84); to have it read as an image (pixels scaled to [0, 1], the CNN from 36x36), add a "
        "channel axis: declare Box(0, 255, (84, 84, 1), np.uint8) and return obs[..., None] (if it comes from Gymnasium's "
        "GrayscaleObservation, wrap it as GrayscaleObservation(env, keep_dim=True) instead); or use --encoder mlp\n")
    assert not (tmp_path / "D").exists()
