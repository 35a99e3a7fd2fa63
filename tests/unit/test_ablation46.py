"""The ablation switches' refusals name what the user wrote (follow-up of 0381f97 and 0259e99): the
clip_vloss=false refusal of a value-clip range names where the range came from (a --config file, a
--sweep, the flag, PPOConfig's field); `plot A+A2` (the pooled report's syntax) of directories that are no
populations is refused with the pool's line (tests/unit/test_plot_pool47.py draws a valid pool); a resume's refusal of a switch names the flag typed
(--no-anneal-lr) and the run's value as true/false; a sweep value refused from Python names sweep=."""

from __future__ import annotations

import pytest

import proxima
from cli_helpers import error_line, run_main
from proxima.config import ConfigError, PPOConfig
from proxima.population_run import sweep_given

TINY = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "0",
        "--quiet"]
TAIL = ("sets the range of the value clip that the clip_vloss=false members turn off; {fix} (the clip then takes "
        "clip_coef, as CleanRL's) or sweep vf_clip_coef in a population of clip_vloss=true alone")


# --- 1. clip_vloss=false and a value-clip range: the range's source -------------------------------------------------


def test_a_value_clip_range_from_the_config_file_is_named_as_the_file_not_a_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "vfc.yaml").write_text("vf_clip_coef: 0.3\n")
    code, _, err = run_main(["train", "CartPole-v1", "--config", "vfc.yaml", "--seeds", "1-2",
                             "--sweep", "clip_vloss=true,false", "--dry-run"], capsys)
    line = error_line(code, err)
    assert line == ("proxima train: error: --sweep clip_vloss: --config vfc.yaml (vf_clip_coef 0.3) "
                    + TAIL.format(fix="drop vf_clip_coef from vfc.yaml"))


def test_a_swept_value_clip_range_is_named_as_the_sweep_typed(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "clip_vloss=true,false",
                             "--sweep", "vf_clip_coef=0.2,none", "--dry-run"], capsys)
    line = error_line(code, err)
    assert line == ("proxima train: error: --sweep clip_vloss: --sweep vf_clip_coef=0.2,none "
                    + TAIL.format(fix="drop that --sweep"))


def test_a_typed_value_clip_range_is_still_named_as_its_flag(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "clip_vloss=true,false",
                             "--vf-clip-coef", "0.3", "--dry-run"], capsys)
    line = error_line(code, err)
    assert line == "proxima train: error: --sweep clip_vloss: --vf-clip-coef 0.3 " + TAIL.format(fix="drop --vf-clip-coef")


PY_TAIL = ("sets the range of the value clip that the clip_vloss=False members turn off; {fix} (the clip then takes "
           "clip_coef, as CleanRL's) or sweep vf_clip_coef in a population of clip_vloss=True alone")


@pytest.mark.parametrize("config, sweep, line", [
    (dict(vf_clip_coef=0.3), {"clip_vloss": [True, False]},
     "sweep['clip_vloss']: PPOConfig.vf_clip_coef = 0.3 " + PY_TAIL.format(fix="leave vf_clip_coef at None")),
    ({}, {"clip_vloss": [True, False], "vf_clip_coef": [0.2, None]},
     "sweep['clip_vloss']: sweep={'vf_clip_coef': [0.2, None]} " + PY_TAIL.format(fix="drop vf_clip_coef from the sweep")),
])
def test_from_python_the_range_is_named_as_the_script_set_it(small_config, tmp_path, config, sweep, line):
    with pytest.raises(ConfigError) as e:
        proxima.train_population(small_config(**config), seeds=[1, 2], sweep=sweep, run_dir=tmp_path / "pop")
    assert str(e.value) == line
    assert not (tmp_path / "pop").exists()


# --- 2. plot A+A2 ---------------------------------------------------------------------------------------------------


def test_plot_of_a_pool_of_folders_that_are_no_populations_is_refused_with_the_pools_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "A").mkdir()
    (tmp_path / "A2").mkdir()
    code, _, err = run_main(["plot", "A+A2", "--out", "x.png"], capsys)
    line = error_line(code, err)
    assert line == ("proxima plot: error: A: is a single run (no population.json); + pools populations "
                    "(train --seeds/--sweep) of one setting")
    assert not (tmp_path / "x.png").exists()


def test_plot_of_a_plus_whose_part_is_missing_names_the_missing_part(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "A").mkdir()
    code, _, err = run_main(["plot", "A+B"], capsys)
    assert error_line(code, err) == "proxima plot: error: B: no such directory"  # report A+B's line


def test_a_directory_named_with_a_plus_is_that_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("A", "A2", "A+A2"):
        (tmp_path / name).mkdir()
    code, _, err = run_main(["plot", "A+A2"], capsys)
    assert error_line(code, err).startswith("proxima plot: error: A+A2: not a run directory (no metrics.csv)")


# --- 3. a resume's refusal of a switch ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A single run trained with --no-norm-adv and a population of 2 (every switch on), 32 steps each."""
    from proxima import cli

    root = tmp_path_factory.mktemp("ablation46")
    assert cli.main(["train", "CartPole-v1", *TINY, "--total-timesteps", "32", "--no-norm-adv", "--run-dir",
                     str(root / "S1")]) == 0
    assert cli.main(["train", "CartPole-v1", *TINY, "--total-timesteps", "32", "--seeds", "1-2", "--run-dir",
                     str(root / "A")]) == 0
    return root


@pytest.mark.parametrize("run, flag, was", [
    ("A", "--no-anneal-lr", "anneal_lr true"),
    ("A", "--no-clip-vloss", "clip_vloss true"),
    ("S1", "--norm-adv", "norm_adv false"),
])
def test_a_resume_refuses_a_switch_naming_the_flag_typed_and_the_run_value_as_true_or_false(trained, run, flag, was,
                                                                                            capsys):
    code, _, err = run_main(["resume", str(trained / run), flag], capsys)
    line = error_line(code, err)
    assert line.startswith(f"proxima resume: error: {flag}: cannot change when resuming (the run was trained with {was}); "
                           "safe to change on resume: --total-timesteps"), line


def test_a_switch_from_a_config_file_on_resume_is_named_as_the_file_spells_it(trained, tmp_path, capsys):
    (tmp_path / "noanneal.yaml").write_text("anneal_lr: false\n")
    code, _, err = run_main(["train", "--resume", str(trained / "S1"), "--config", str(tmp_path / "noanneal.yaml")], capsys)
    line = error_line(code, err)
    assert line.startswith(f"proxima train: error: --config {tmp_path / 'noanneal.yaml'}: anneal_lr false: cannot change "
                           "when resuming (the run was trained with anneal_lr true)"), line


def test_from_python_a_resume_refuses_the_switch_as_the_field_set(trained):
    cfg = PPOConfig(num_envs=2, num_steps=16, num_minibatches=2, update_epochs=1, eval_episodes=0, anneal_lr=False,
                    norm_adv=False, total_timesteps=32)
    with pytest.raises(ConfigError) as e:
        proxima.train(cfg, resume=str(trained / "S1"))
    assert str(e.value).startswith("anneal_lr=False: cannot change when resuming (the run was trained with True); ")


# --- 3b. a sweep value refused from Python ---------------------------------------------------------------------------


@pytest.mark.parametrize("sweep, line", [
    ({"norm_adv": [True, "maybe"]}, "sweep={'norm_adv': [True, 'maybe']}: value 'maybe': expected true or false"),
    ({"lr": [1e-3, "x"]}, "sweep={'lr': [0.001, 'x']}: value 'x': expected a number"),
    ({"lr": [True]}, "sweep={'lr': [True]}: value True: expected a number"),
])
def test_a_sweep_value_refused_from_python_is_named_as_the_sweep_argument(sweep, line):
    with pytest.raises(ConfigError) as e:
        sweep_given(sweep)
    assert str(e.value) == line


def test_train_population_names_the_refused_switch_value_as_its_sweep_argument(small_config, tmp_path):
    with pytest.raises(ConfigError) as e:
        proxima.train_population(small_config(), seeds=[1], sweep={"norm_adv": [True, "maybe"]}, run_dir=tmp_path / "p")
    assert str(e.value) == "sweep={'norm_adv': [True, 'maybe']}: value 'maybe': expected true or false"
