"""Session 47's migration review: what a zoo, SB3 or CleanRL file or command line is told to give.

Each test loads a config or runs --dry-run (nothing trains): the line a user reads is the assertion."""
from pathlib import Path

import pytest
import yaml

from proxima.config import ConfigError, PPOConfig, from_dict, validate
from proxima.presets import presets_for, resolve
from tests.cli_helpers import error_line, run_main

ROOT = Path(__file__).resolve().parents[2]

# a dump of CleanRL ppo.py's args (vars(args) as YAML), as the reviewer's clean.yml
CLEANRL_DUMP = {
    "exp_name": "ppo", "seed": 1, "torch_deterministic": True, "cuda": True, "track": False,
    "wandb_project_name": "cleanRL", "wandb_entity": None, "capture_video": False, "env_id": "CartPole-v1",
    "total_timesteps": 500000, "learning_rate": 0.00025, "num_envs": 4, "num_steps": 128, "anneal_lr": True,
    "gamma": 0.99, "gae_lambda": 0.95, "num_minibatches": 4, "update_epochs": 4, "norm_adv": True, "clip_coef": 0.2,
    "clip_vloss": True, "ent_coef": 0.01, "vf_coef": 0.5, "max_grad_norm": 0.5, "target_kl": None,
    "batch_size": 512, "minibatch_size": 128, "num_iterations": 976,
}


def refusal(values: dict) -> str:
    with pytest.raises(ConfigError) as e:
        from_dict(values, source="f.yml")
    return str(e.value)


# -- 1. CleanRL's derived keys ----------------------------------------------------------------------------------------

def test_a_cleanrl_dump_names_its_derived_keys_as_derived():
    line = refusal(CLEANRL_DUMP)
    assert "batch_size (derived (num_envs x num_steps): drop it)" in line
    assert "minibatch_size (derived: num_minibatches = batch_size / minibatch_size (= 4 here): drop it)" in line
    assert line.endswith("num_iterations (derived (total_timesteps / (num_envs x num_steps)): drop it)")
    assert "num_envs)" not in line and "it counts minibatches" not in line  # difflib's and SB3's meanings


@pytest.mark.parametrize("key", ["num_iterations", "num_updates"])
def test_num_iterations_alone_is_derived_not_num_envs_or_num_steps(key):
    assert refusal({key: 976}) == f"f.yml: unknown field '{key}' (derived (total_timesteps / (num_envs x num_steps)): drop it)"
    with pytest.raises(ConfigError) as e:
        PPOConfig(**{key: 976})
    assert str(e.value).endswith("not a PPOConfig field (derived (total_timesteps / (num_envs x num_steps)): drop it)")


def test_a_batch_size_of_num_envs_x_num_steps_is_cleanrls_and_another_keeps_sb3s_meaning():
    assert refusal({"num_envs": 4, "num_steps": 128, "batch_size": 512}) == (
        "f.yml: unknown field 'batch_size' (derived (num_envs x num_steps): drop it)")
    assert "it counts minibatches: num_envs x num_steps / your minibatch size" in refusal(
        {"num_envs": 4, "num_steps": 128, "batch_size": 64})


def test_minibatch_size_without_num_minibatches_says_the_count_to_give():
    line = refusal({"exp_name": "x", "num_envs": 4, "num_steps": 128, "minibatch_size": 128})
    assert "minibatch_size (derived: num_minibatches = batch_size / minibatch_size (= 4 here): drop it; give " \
           "num_minibatches: 4)" in line


@pytest.mark.parametrize("flags, said", [
    (["--num-iterations", "976"], "; --num-iterations: derived (--total-timesteps / (--num-envs x --num-steps)): drop it"),
    (["--num-updates=976"], "; --num-updates: derived (--total-timesteps / (--num-envs x --num-steps)): drop it"),
    (["--num-envs", "4", "--num-steps", "128", "--batch-size", "512"], "; --batch-size: derived (--num-envs x --num-steps): drop it"),
    (["--exp-name", "x", "--batch-size", "512"], "; --batch-size: derived (--num-envs x --num-steps): drop it"),
    (["--num-envs", "4", "--num-steps", "128", "--minibatch-size", "128"],
     "--num-minibatches (CleanRL derives --minibatch-size: --num-minibatches = --num-envs x --num-steps / "
     "--minibatch-size (= 4 here))"),
    (["--gym-id", "CartPole-v1"], "; the env is the positional ENV_ID, no flag: proxima train CartPole-v1"),
])
def test_cleanrls_derived_and_old_flags_are_told_what_they_are(flags, said, capsys):
    code, out, err = run_main(["train", "CartPole-v1", *flags, "--dry-run"], capsys)
    line = error_line(code, err)
    assert said in line and out == ""
    assert "did you mean --num-envs" not in line and "did you mean --num-steps" not in line


def test_an_sb3_batch_size_flag_keeps_its_minibatch_count_note(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "4", "--num-steps", "128", "--batch-size", "64",
                             "--dry-run"], capsys)
    assert "did you mean --num-minibatches (it counts minibatches: --num-envs x --num-steps / your minibatch size)?" \
           in error_line(code, err)


# -- 2. SB3's batch_size copied into num_minibatches ------------------------------------------------------------------

def test_num_minibatches_equal_to_the_batch_asks_about_sb3s_batch_size_before_no_norm_adv(tmp_path, capsys):
    (tmp_path / "mech.yml").write_text("num_envs: 8\nnum_steps: 32\nnum_minibatches: 256\n")
    code, _, err = run_main(["train", "CartPole-v1", "--config", str(tmp_path / "mech.yml"), "--dry-run"], capsys)
    line = error_line(code, err)
    sb3 = line.index("did you copy SB3's batch_size (a minibatch size)? num_minibatches = num_envs x num_steps / "
                     "batch_size, 1 when batch_size >= num_envs x num_steps (1 here for 256)")
    assert sb3 < line.index("--no-norm-adv")
    with pytest.raises(ConfigError) as e:
        validate(PPOConfig(num_envs=1, num_steps=256, num_minibatches=256), python=True)
    assert str(e.value) == ("PPOConfig.num_minibatches = 256: gives minibatches of 1 sample; did you copy SB3's batch_size "
                            "(a minibatch size)? num_minibatches = num_envs x num_steps / batch_size, 1 when batch_size >= "
                            "num_envs x num_steps (1 here for 256); advantage normalization needs at least 2 (lower "
                            "num_minibatches, or add norm_adv=False)")


def test_a_small_test_batch_split_into_single_samples_is_not_asked_about_sb3():
    with pytest.raises(ConfigError) as e:
        validate(PPOConfig(num_envs=1, num_steps=4, num_minibatches=4, total_timesteps=8), python=True)
    assert "SB3" not in str(e.value)


# -- 3. a zoo file's values that no field takes, in the one line ------------------------------------------------------

def test_the_unknown_fields_line_carries_the_schedules_to_change():
    line = refusal({"n_envs": 8, "n_steps": 32, "learning_rate": "lin_0.001", "clip_range": "lin_0.2"})
    assert line == ("f.yml: unknown fields: n_envs (num_envs), n_steps (num_steps), clip_range (clip_coef; no schedule "
                    "for it here: clip_coef: 0.2); and a value to change: learning_rate (lr: 0.001 with anneal_lr: true)")
    assert "\n" not in line


# -- 4. normalize, as its value says ----------------------------------------------------------------------------------

@pytest.mark.parametrize("value, said", [
    (True, "normalize: true is norm_obs: true and norm_reward: true"),
    (False, "normalize: false is norm_obs: false and norm_reward: false, PPOConfig's defaults: drop it"),
    ("{'norm_obs': True, 'norm_reward': False}", "is norm_obs: true, norm_reward: false"),
    ("dict(norm_reward=False, clip_obs=5.0)", "is norm_obs: true, norm_reward: false, clip_obs: 5.0"),
])
def test_normalize_is_translated_from_its_value(value, said):
    line = refusal({"normalize": value})
    assert line.startswith("f.yml: unknown field 'normalize' (") and said in line


# -- 5. policy_kwargs and activation, as their values say -------------------------------------------------------------

def test_policy_kwargs_echo_their_own_values():
    assert refusal({"policy_kwargs": "dict(net_arch=[256, 256], activation_fn=nn.ReLU)"}) == (
        "f.yml: unknown field 'policy_kwargs' (hidden_sizes: [256, 256]; activation: relu)")
    line = refusal({"policy_kwargs": {"net_arch": {"pi": [64], "vf": [128]}, "ortho_init": False, "squash_output": True}})
    assert line == ("f.yml: unknown field 'policy_kwargs' (separate pi/vf sizes ({'pi': [64], 'vf': [128]}) are not "
                    "supported: one hidden_sizes list sizes both the actor's and the critic's hidden layers; ortho_init "
                    "false: not supported (layers are always initialized orthogonally; false: results will differ): "
                    "drop it; squash_output: no counterpart here; drop it)")
    assert refusal({"policy_kwargs": "dict(net_arch=[dict(pi=[64, 64], vf=[64, 64])])"}).endswith(
        "(hidden_sizes: [64, 64] (pi and vf alike))")  # SB3's older list form


def test_policy_kwargs_are_read_never_run(tmp_path):
    marker = tmp_path / "ran"
    line = refusal({"policy_kwargs": f"dict(net_arch=open({str(marker)!r}, 'w'))"})
    assert not marker.exists()
    assert "net_arch=[64, 64] is hidden_sizes=[64, 64]" in line  # the general note: nothing to echo
    assert "net_arch=[64, 64]" in refusal({"policy_kwargs": "dict(net_arch=[" + "1, " * 2000 + "1])"})  # too long to read


@pytest.mark.parametrize("given", [["--activation", "nn.Tanh"], ["--activation", "torch.nn.ReLU"]])
def test_a_torch_activation_class_is_named_as_its_word(given, capsys):
    code, _, err = run_main(["train", "CartPole-v1", *given, "--dry-run"], capsys)
    word = given[1].rsplit(".", 1)[-1].lower()
    assert error_line(code, err).endswith(f"must be one of tanh, relu ({given[1]} is {word})")


# -- 6. and 9. docs and preset descriptions ---------------------------------------------------------------------------

def test_the_docs_say_which_cleanrl_default_differs_and_the_cleanrl_presets_bootstrap():
    text = " ".join((ROOT / "docs" / "migrating.md").read_text().split())
    assert "give `--no-bootstrap-truncation` to match CleanRL exactly" in text
    for env_id in ("CartPole-v1", "Acrobot-v1"):
        assert resolve(env_id).bootstrap_truncation
        assert "unlike CleanRL, time-limit truncations are bootstrapped" in presets_for(env_id)["default"]["description"]


def test_the_lunarlander_preset_says_its_value_loss_weighs_half_the_zoos(capsys):
    preset = yaml.safe_load((ROOT / "proxima" / "presets" / "box2d.yaml").read_text())["LunarLander-v3"]["default"]
    assert "vf_coef" not in preset["config"] and PPOConfig().vf_coef == 0.5  # the description is about this value
    code, out, _ = run_main(["presets", "LunarLander-v3"], capsys)
    assert code == 0
    assert ("vf_coef 0.5 on half the squared error (the zoo has a constant lr, no value clipping and SB3's vf_coef 0.5 "
            "on the whole squared error, twice this value loss's weight)") in out


# -- 7. the learning_rate note names SB3's other defaults --------------------------------------------------------------

def test_the_learning_rate_note_names_the_sb3_defaults_the_file_leaves_out(tmp_path, capsys):
    (tmp_path / "zoo.yml").write_text("learning_rate: 0.001\nvf_coef: 1.0\n")
    code, _, err = run_main(["train", "CartPole-v1", "--config", str(tmp_path / "zoo.yml"), "--ent-coef", "0",
                             "--dry-run"], capsys)
    assert code == 0
    notes = [line for line in err.splitlines() if "learning_rate" in line]
    assert len(notes) == 1 and notes[0].endswith(
        "add anneal_lr: false to the file to match; for SB3's other defaults the file leaves out, add clip_vloss: false "
        "(SB3's clip_range_vf=None: no value clipping) (docs/migrating.md)")


# -- 8. SB3's batch_size of the whole rollout or more -----------------------------------------------------------------

def test_a_zoo_batch_size_above_the_rollout_is_one_minibatch():
    line = refusal({"n_envs": 1, "n_steps": 8, "batch_size": 256})  # the zoo's MountainCarContinuous
    assert line.endswith("batch_size (num_minibatches: 1 here: it counts minibatches, 1 when batch_size >= n_envs x n_steps)")
    assert refusal({"n_envs": 16, "n_steps": 1024, "batch_size": 64}).endswith(
        "batch_size (num_minibatches: it counts minibatches: num_envs x num_steps / your minibatch size)")
    text = " ".join((ROOT / "docs" / "migrating.md").read_text().split())
    assert "and `num_minibatches: 1` when batch_size >= n_envs x n_steps" in text
