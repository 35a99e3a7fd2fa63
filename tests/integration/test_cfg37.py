"""s37 config review: dry-run sizes, --help's defaults, a preset's value named as the preset's, population
keywords and torch.device in PPOConfig, the Box-action note, and docs/ppo_notes.md's LunarLander row."""
from pathlib import Path

import pytest
import torch
import yaml

from proxima import PPOConfig
from proxima.config import ConfigError, UnknownFieldError, batch_size, num_iterations, validate
from tests.cli_helpers import error_line, run_main

ROOT = Path(__file__).resolve().parents[2]


# -- 1. --dry-run says the batch, minibatch, iterations and steps that train ---------------------------------------

def test_dry_run_sizes_the_run_as_the_trainer_does_and_stdout_stays_yaml(capsys):
    code, out, err = run_main(["train", "Pendulum-v1", "--dry-run"], capsys)
    assert code == 0, err
    cfg = PPOConfig(**{k: v for k, v in yaml.safe_load(out).items()})  # the comment is YAML's: the config parses
    steps = num_iterations(cfg) * batch_size(cfg)
    assert (batch_size(cfg), num_iterations(cfg), steps) == (4096, 73, 299_008)
    assert out.splitlines()[-1] == ("# batch 4,096 (num_envs 32 x num_steps 128), minibatch 256, 73 iterations "
                                    "= 299,008 steps")


def test_nproc_dry_run_sizes_the_jobs_batch(capsys):
    code, out, err = run_main(["train", "CartPole-v1", "--dry-run", "--num-envs", "4", "--num-steps", "32",
                               "--total-timesteps", "2000", "--nproc", "2"], capsys)
    assert code == 0, err
    assert out.splitlines()[-1] == ("# batch 256 (2 processes x num_envs 4 x num_steps 32), minibatch 32 per process, "
                                    "7 iterations = 1,792 steps")


# -- 2. --help: the defaults shown are PPOConfig's, a preset may set others ----------------------------------------

def test_train_help_says_presets_replace_the_defaults_shown(capsys):
    code, out, _ = run_main(["train", "--help"], capsys)
    text = " ".join(out.split())
    assert code == 0 and "--num-envs NUM_ENVS Parallel environments N (per process). (default: 4)" in text
    assert "A flag's (default: ...) below is PPOConfig's, which the env's preset may replace" in text
    assert "`proxima train ENV_ID --dry-run` prints every value the run would use" in text
    assert "`proxima presets ENV_ID default` lists what a preset sets" in text  # the preset's name: its values, not a list


# -- 3. a refusal of a preset's value names the preset, not a flag never typed -------------------------------------

def test_a_presets_num_minibatches_is_named_as_the_presets(capsys):
    code, _, err = run_main(["train", "Pendulum-v1", "--num-envs", "2", "--num-steps", "4", "--dry-run"], capsys)
    error_line(code, err, "proxima train: error: preset Pendulum-v1/default: num_minibatches 16: must divide the batch "
                          "num_envs x num_steps = 8; pass --num-minibatches to override the preset's value")
    code, _, err = run_main(["train", "Pendulum-v1", "--num-envs", "2", "--num-steps", "4", "--num-minibatches", "3",
                             "--dry-run"], capsys)  # typed: the flag's line, as before
    error_line(code, err, "proxima train: error: --num-minibatches 3: must divide the batch num_envs x num_steps = 8")


def test_a_presets_num_envs_in_a_batch_too_large_is_named_as_the_presets(capsys):
    code, _, err = run_main(["train", "Pendulum-v1", "--num-steps", "8", "--total-timesteps", "100", "--dry-run"], capsys)
    line = error_line(code, err, "proxima train: error: one batch (--num-envs 32 x --num-steps 8 = 256 steps) is larger "
                                 "than --total-timesteps 100")
    assert line.endswith(" (num_envs 32 from preset Pendulum-v1/default; flags override it)"), line
    code, _, err = run_main(["train", "Pendulum-v1", "--total-timesteps", "100", "--dry-run"], capsys)
    line = error_line(code, err, "proxima train: error: one batch (--num-envs 32 x --num-steps 128 = 4,096 steps)")
    assert line.endswith(" (num_envs 32, num_steps 128 from preset Pendulum-v1/default; flags override it)"), line


def _pendulum_cfg(file_values=None):
    from proxima import presets
    from proxima.config import from_dict

    cfg = presets.resolve("Pendulum-v1", None, PPOConfig())
    return from_dict(file_values, cfg, source="f.yaml") if file_values else cfg


def test_a_presets_value_set_after_the_preset_keeps_the_flags_words():
    from proxima.cli import _name_config_file

    e = ConfigError("--ent-coef 0.0: too small for this env")
    # swept (exclude): the member's value, not the preset's
    assert str(_name_config_file(e, _pendulum_cfg(), exclude=("ent_coef",))) == str(e)
    assert str(_name_config_file(e, _pendulum_cfg())) == ("preset Pendulum-v1/default: ent_coef 0.0: too small for this "
                                                          "env; pass --ent-coef to override the preset's value")


def test_a_refusal_about_several_preset_fields_lists_them_all():
    from proxima.cli import _name_config_file

    e = ConfigError("--num-envs 32 x --num-steps 128: too large for this machine")
    e.fields = ("num_envs", "num_steps")
    assert str(_name_config_file(e, _pendulum_cfg())) == (
        "--num-envs 32 x --num-steps 128: too large for this machine (num_envs 32, num_steps 128 from preset "
        "Pendulum-v1/default; flags override it)")


def test_a_config_files_backend_prefixes_a_refusal_of_a_presets_value():
    from proxima.cli import _name_config_file

    e = ConfigError("--num-envs 32: not for this backend; use --backend gymnasium or auto")
    assert str(_name_config_file(e, _pendulum_cfg({"backend": "native"}))) == (
        "f.yaml: backend native: --num-envs 32: not for this backend; edit backend in f.yaml (gymnasium or auto)")


# -- 5, 6. PPOConfig keywords: a population's, a torch.device ------------------------------------------------------

def test_ppoconfig_seeds_points_to_train_population_and_the_flag():
    for name, value in (("seeds", [1, 2]), ("sweep", {"lr": [1e-3]})):
        with pytest.raises(UnknownFieldError) as info:
            PPOConfig(**{name: value})
        assert "did you mean 'seed'" not in str(info.value)
        assert f"a population's {name} is an argument of proxima.train_population(config, {name}=" in str(info.value)
        assert "(proxima train ENV_ID --" in str(info.value), info.value


def test_ppoconfig_population_advice_wherever_the_keyword_stands():
    for kwargs in ({"foo": 1, "seeds": [1]}, {"seeds": [1], "foo": 1}):
        with pytest.raises(UnknownFieldError) as info:
            PPOConfig(**kwargs)
        message = str(info.value)
        assert message.startswith("PPOConfig(seeds=[1]): not a PPOConfig field: a population's seeds is an argument of "
                                  "proxima.train_population(config, seeds=range(1, 4))"), message
        assert message.endswith("(also not PPOConfig fields: foo)") and "did you mean" not in message, message


def test_ppoconfig_takes_a_torch_device_as_its_string():
    cfg = PPOConfig(device=torch.device("cpu"))
    validate(cfg, python=True)
    assert cfg.device == "cpu" and type(cfg.device) is str  # config.yaml records plain text
    with pytest.raises(ConfigError, match="PPOConfig.device = 7: expected a device"):
        validate(PPOConfig(device=7), python=True)


# -- 7. a Box-action env without a preset: a note on PPOConfig's discrete defaults ---------------------------------
# needs box-action-note.patch (proxima/trainer.py, another fixer's file) applied

def test_box_action_env_without_a_preset_gets_a_note_on_the_defaults(capsys):
    pytest.importorskip("Box2D")
    code, _, err = run_main(["train", "BipedalWalker-v3", "--dry-run", "--total-timesteps", "2048"], capsys)
    note = [line for line in err.splitlines() if "has Box actions and no preset" in line]
    assert code == 0 and len(note) == 1 and "--ent-coef 0 --norm-obs --norm-reward" in note[0], err
    code, _, err = run_main(["train", "BipedalWalker-v3", "--dry-run", "--total-timesteps", "2048", "--ent-coef", "0",
                             "--norm-obs"], capsys)  # already the continuous settings: nothing to say
    assert code == 0 and "no preset" not in err, err
    code, _, err = run_main(["train", "Pendulum-v1", "--dry-run"], capsys)  # its preset: nothing to say
    assert code == 0 and "no preset" not in err, err


@pytest.mark.parametrize("flags", [["--ent-coef", "0"], ["--norm-obs"]])
def test_box_action_note_is_dropped_by_either_continuous_setting(flags, capsys):
    pytest.importorskip("Box2D")
    code, _, err = run_main(["train", "BipedalWalker-v3", "--dry-run", "--total-timesteps", "2048", *flags], capsys)
    assert code == 0 and "no preset" not in err, err


def test_box_action_preset_set_back_to_the_defaults_gets_no_note(capsys):
    # a preset in use: its flags were chosen over it, not PPOConfig's defaults taken unawares (the gymnasium
    # backend: the note is on the Gymnasium env the run builds)
    code, _, err = run_main(["train", "Pendulum-v1", "--backend", "gymnasium", "--ent-coef", "0.01", "--no-norm-obs",
                             "--dry-run"], capsys)
    assert code == 0 and "no preset" not in err, err


# -- 8. docs/ppo_notes.md's LunarLander row ------------------------------------------------------------------------

def test_ppo_notes_lunarlander_row_is_a_reference_not_the_presets_result():
    row = next(line for line in (ROOT / "docs" / "ppo_notes.md").read_text().splitlines() if line.startswith("| LunarLander |"))
    assert "a reference claim, not this repo's result" in row and "3M steps" in row and "4 of 10 seeds" in row
    preset = yaml.safe_load((ROOT / "proxima" / "presets" / "box2d.yaml").read_text())["LunarLander-v3"]["default"]
    assert preset["config"]["total_timesteps"] == 3_000_000  # the row's 3M is the shipped preset's
