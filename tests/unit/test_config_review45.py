"""s45 config review, the parts read without building an env: other tools' flags and files (CleanRL's
--cuda False, rl-zoo's entries, --algo, -n and --hyperparams), PPOConfig's Python-facing help and
refusals, --preset none/default, --sweep's alias, hidden_sizes' forms, and a default num_minibatches."""
import re

import pytest

from proxima import PPOConfig
from proxima.config import ConfigError, coerce, from_dict, validate
from proxima.population import parse_sweep
from proxima.presets import resolve, unknown_preset
from tests.cli_helpers import error_line, run_main


# -- 1. CleanRL's switches given a false value get the flag that turns the thing off -----------------------------

@pytest.mark.parametrize("argv, meant", [
    (["--cuda", "False"], "did you mean --device cpu?"),
    (["--cuda=False"], "did you mean --device cpu?"),
    (["--cuda", "0"], "did you mean --device cpu?"),
    (["--torch-deterministic", "False"], "did you mean --no-deterministic?"),
    (["--torch-deterministic=no"], "did you mean --no-deterministic?"),
    (["--cuda"], "did you mean --device cuda?"),  # on: as before
    (["--torch-deterministic", "True"], "did you mean --deterministic?"),
])
def test_cleanrl_switch_given_false_is_sent_to_the_off_flag(argv, meant, capsys):
    # the reviewer's line, without ENV_ID: argparse takes the value (False) for it, the hint reads it still
    code, _, err = run_main(["train", "--total-timesteps", "1024", *argv, "--dry-run"], capsys)
    error_line(code, err, f"unrecognized arguments: {argv[0]}", f"; {meant} (see proxima train --help)")


# -- 2. an rl-zoo entry pasted as it is: its key is an env id ----------------------------------------------------

def test_a_pasted_zoo_entry_says_its_key_is_an_env_id():
    entry = {"CartPole-v1": {"n_envs": 8, "policy": "MlpPolicy", "n_steps": 32}}
    with pytest.raises(ConfigError) as e:
        from_dict(entry, source="zoo.yaml")
    assert str(e.value) == ("zoo.yaml: 'CartPole-v1' is an env id: an rl-zoo entry's keys go at the top level of the "
                            "file; give the id as ENV_ID")


def test_a_whole_zoo_file_names_its_entries_as_env_ids():
    with pytest.raises(ConfigError) as e:
        from_dict({"atari": {"policy": "CnnPolicy"}, "CartPole-v1": {"n_envs": 8}}, source="zoo.yaml")
    assert str(e.value) == ("zoo.yaml: 'atari', 'CartPole-v1' are rl-zoo entries (env ids): keep your env's, its keys at "
                            "the top level of the file, and give the id as ENV_ID")


def test_an_entry_beside_top_level_keys_is_named_in_the_line_of_several():
    with pytest.raises(ConfigError) as e:
        from_dict({"ALE/Pong-v5": {"n_envs": 8}, "n_envs": 8}, source="z.yaml")
    assert "ALE/Pong-v5 ('ALE/Pong-v5' is an env id: an rl-zoo entry's keys go at the top level" in str(e.value)
    assert "n_envs (num_envs)" in str(e.value)


# -- 3. rl-zoo's command-line flags -------------------------------------------------------------------------------

def test_zoo_algo_flag_says_ppo_only(capsys):
    code, _, err = run_main(["train", "--algo", "ppo", "--env", "CartPole-v1", "--dry-run"], capsys)
    line = error_line(code, err, "; --algo ppo: proxima trains PPO only; drop it",
                      "the env is the positional ENV_ID, no flag: proxima train CartPole-v1")
    assert "--plot" not in line  # difflib's guess
    code, _, err = run_main(["train", "CartPole-v1", "--algo", "a2c", "--dry-run"], capsys)
    error_line(code, err, "--algo a2c: proxima trains PPO only (a2c is not available here); drop it")


@pytest.mark.parametrize("argv", [["-n", "2048"], ["-n=2048"]])
def test_zoo_short_n_is_total_timesteps(argv, capsys):
    code, _, err = run_main(["train", "CartPole-v1", *argv, "--dry-run"], capsys)
    error_line(code, err, "; did you mean --total-timesteps 2048 (rl-zoo's -n)?")


def test_zoo_hyperparams_are_given_as_flags_in_proximas_names(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--hyperparams", "learning_rate:0.001", "n_envs:8",
                             "normalize_advantage:False", "use_sde:True", "--dry-run"], capsys)
    error_line(code, err, "--hyperparams is rl-zoo's: give them as flags: --lr 0.001 --num-envs 8 --no-norm-adv, or put "
                          "them in a --config FILE.yaml under these names; drop use_sde (no flag here)")


# -- 4. PPOConfig's help and refusals in Python's value forms ------------------------------------------------------

def _doc_line(name: str) -> str:
    return next(line for line in PPOConfig.__doc__.splitlines() if line.strip().startswith(f"{name} ("))


def test_ppoconfig_help_gives_python_value_forms():
    assert "as a dict, e.g. {'continuous': True}" in _doc_line("env_kwargs") and "JSON" not in _doc_line("env_kwargs")
    assert "(a list of ints, e.g. [64, 64])" in _doc_line("hidden_sizes") and "commas" not in _doc_line("hidden_sizes")
    assert "(None = never)" in _doc_line("target_kl")
    assert "(None = the policy's clip_coef" in _doc_line("vf_clip_coef")
    assert _doc_line("init_from").endswith("None: a fresh network.")
    assert "None: train for total_timesteps" in _doc_line("stop_return")
    for name in ("target_kl", "vf_clip_coef", "init_from", "stop_return"):
        assert not re.search(r"\bnone\b", _doc_line(name)), _doc_line(name)
    assert "none, bf16 or fp16" in _doc_line("amp")  # amp's 'none' is a string choice


@pytest.mark.parametrize("kw, line", [
    ({"init_from": "none"}, "PPOConfig.init_from = 'none': expected a checkpoint file or run directory, or None"),
    ({"run_dir": "none"}, "PPOConfig.run_dir = 'none': expected a directory, or None for the default"),
    ({"target_kl": "none"}, "PPOConfig.target_kl = 'none': expected a number or None"),
    ({"amp": ""}, "PPOConfig.amp = '': empty; give one of none, bf16, fp16"),  # was 'one of None, ...'
])
def test_python_refusals_say_none_as_python_writes_it(kw, line):
    with pytest.raises(ConfigError) as e:
        validate(PPOConfig(**kw), python=True)
    assert str(e.value) == line


# -- 6. resume --config points to train --resume ------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["r1c", "--config", "r1c/config.yaml"], ["r1c", "--config=r1c/config.yaml"]])
def test_resume_with_config_points_to_train_resume(argv, capsys):
    code, _, err = run_main(["resume", *argv], capsys)
    error_line(code, err, "proxima resume takes no --config: `proxima train --resume r1c --config r1c/config.yaml` "
                          "resumes with the file's values, checked as flags are")


# -- 7. --preset None, and default of an env without presets ------------------------------------------------------

def test_preset_none_in_any_case_is_no_preset(capsys):
    for word in ("None", "NONE", "none"):
        code, out, err = run_main(["train", "CartPole-v1", "--preset", word, "--dry-run"], capsys)
        assert code == 0, err
        assert "num_envs: 4\n" in out and "--preset none: CartPole-v1's default preset is not applied" in err


def test_preset_default_of_an_env_without_presets_is_no_preset():
    assert resolve("NoPresets-v0", "default") == resolve("NoPresets-v0", None) == PPOConfig(env_id="NoPresets-v0")


def test_unknown_preset_of_an_env_without_presets_says_it_has_none():
    assert unknown_preset("NoPresets-v0", "fast") == ("--preset 'fast': no such preset: NoPresets-v0 has no presets "
                                                      "(see `proxima presets`)")


# -- 8. --sweep takes learning_rate as lr --------------------------------------------------------------------------

def test_sweep_takes_the_alias_learning_rate_as_lr():
    assert parse_sweep(["learning_rate=1e-3,3e-4"]) == {"lr": [0.001, 0.0003]}
    with pytest.raises(ConfigError, match=r"^--sweep lr: given twice"):
        parse_sweep(["lr=1e-3", "learning_rate=3e-4"])


# -- 9. hidden_sizes: a file's single width, and the bracketed list ------------------------------------------------

def test_hidden_sizes_single_int_in_a_file_is_one_layer():
    assert from_dict({"hidden_sizes": 64}, source="h.yaml").hidden_sizes == [64]


@pytest.mark.parametrize("text", ["[64, 32]", "[64,32]", " [64 32] ", "64,32"])
def test_hidden_sizes_flag_takes_the_bracketed_list(text):
    assert coerce("hidden_sizes", text, source="flag") == [64, 32]


def test_ppoconfig_hidden_sizes_int_is_still_refused():  # Python passes a list (the docstring says so)
    with pytest.raises(ConfigError, match=r"^PPOConfig.hidden_sizes = 64: expected a list of ints"):
        validate(PPOConfig(hidden_sizes=64), python=True)


# -- 10b. a default num_minibatches that does not divide the batch -----------------------------------------------

def test_default_num_minibatches_is_named_as_the_default_with_the_counts_that_work(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "5", "--num-steps", "5", "--dry-run"], capsys)
    error_line(code, err, "proxima train: error: num_minibatches 4 (the default): must divide the batch num_envs x "
                          "num_steps = 25; give --num-minibatches 1 or 5")
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "7", "--num-steps", "9", "--dry-run"], capsys)
    error_line(code, err, "= 63; give --num-minibatches 1, 3, 7, 9 or 21")
    # typed: the flag's line, as before
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "5", "--num-steps", "5", "--num-minibatches", "4",
                             "--dry-run"], capsys)
    line = error_line(code, err, "proxima train: error: --num-minibatches 4: must divide the batch")
    assert "the default" not in line
