"""Mutation review of session 47's migration hints (commit e7f029c): the exact line a CleanRL, SB3 or zoo
user reads for derived keys, normalize, policy_kwargs, schedules and CleanRL's flags.

Each test loads a config, validates one, or runs --dry-run (nothing trains)."""
import pytest

from proxima.config import ConfigError, PPOConfig, from_dict, validate
from tests.cli_helpers import error_line, run_main

DERIVED_BATCH = "batch_size (derived (num_envs x num_steps): drop it)"
GENERAL_POLICY_KWARGS = "(did you mean 'hidden_sizes'? net_arch=[64, 64] is hidden_sizes=[64, 64]"
GENERAL_NORMALIZE = ("f.yml: unknown field 'normalize' (did you mean 'norm_obs'? the zoo's normalize: true is "
                     "norm_obs=True and norm_reward=True)")


def refusal(values: dict) -> str:
    with pytest.raises(ConfigError) as e:
        from_dict(values, source="f.yml")
    return str(e.value)


# -- which files are CleanRL's dumps --------------------------------------------------------------------------------

@pytest.mark.parametrize("key, value", [("exp_name", "ppo"), ("torch_deterministic", True), ("wandb_entity", None),
                                        ("wandb_project_name", "cleanRL"), ("capture_video", False)])
def test_one_cleanrl_only_key_makes_its_batch_size_the_derived_one(key, value):
    # no num_envs/num_steps to compare: the CleanRL-only key alone says whose batch_size this is
    line = refusal({key: value, "batch_size": 512})
    assert line.endswith(DERIVED_BATCH) and "it counts minibatches" not in line


def test_a_batch_size_above_num_envs_x_num_steps_is_one_minibatch_not_cleanrls_batch():
    # only equality with num_envs x num_steps is CleanRL's derived batch; more is SB3's one-minibatch rollout
    assert refusal({"num_envs": 4, "num_steps": 128, "batch_size": 1024}) == (
        "f.yml: unknown field 'batch_size' (num_minibatches: 1 here: it counts minibatches, 1 when batch_size >= "
        "num_envs x num_steps)")  # the names the file gave
    assert refusal({"n_envs": 1, "n_steps": 8, "batchsize": 256}).endswith(  # SB3's batch_size spelt otherwise
        "batchsize (num_minibatches: 1 here: it counts minibatches, 1 when batch_size >= n_envs x n_steps)")


def test_minibatch_size_counts_from_the_dumps_batch_size_and_never_rounds():
    line = refusal({"exp_name": "x", "batch_size": 512, "minibatch_size": 128})  # no num_envs/num_steps: the dump's batch
    assert line.endswith("minibatch_size (derived: num_minibatches = batch_size / minibatch_size (= 4 here): drop it; "
                         "give num_minibatches: 4)")
    line = refusal({"exp_name": "x", "num_envs": 4, "num_steps": 128, "minibatch_size": 100})  # 512 / 100: no count
    assert line.endswith("minibatch_size (derived: num_minibatches = batch_size / minibatch_size: drop it; "
                         "give num_minibatches)")


# -- policy_kwargs and net_arch: what is echoed as hidden_sizes -------------------------------------------------------

@pytest.mark.parametrize("net_arch", [[True, True], [64, 0], ["64", "64"]])
def test_net_arch_that_is_no_list_of_positive_widths_is_not_echoed_as_hidden_sizes(net_arch):
    assert refusal({"policy_kwargs": {"net_arch": net_arch}}) == (
        f"f.yml: unknown field 'policy_kwargs' (net_arch {net_arch}: hidden_sizes is one list of widths)")


def test_policy_kwargs_reads_keywords_only_and_a_non_mapping_gets_the_general_note():
    assert refusal({"policy_kwargs": "dict(**extra, net_arch=[64])"}) == (
        "f.yml: unknown field 'policy_kwargs' (hidden_sizes: [64])")  # **extra: nothing to name
    for text in ("dict({'a': 1}, net_arch=[64])", "[64, 64]"):  # a positional dict(), a bare list: not read
        line = refusal({"policy_kwargs": text})
        assert GENERAL_POLICY_KWARGS in line and "hidden_sizes: [64]" not in line
    assert refusal({"normalize": "[1, 2]"}) == GENERAL_NORMALIZE


def test_policy_kwargs_names_as_bare_or_dotted_and_a_dict_literal_are_read():
    for text in ("dict(net_arch=[64], activation_fn=ReLU)", "{'net_arch': [64], 'activation_fn': nn.ReLU}"):
        assert refusal({"policy_kwargs": text}) == "f.yml: unknown field 'policy_kwargs' (hidden_sizes: [64]; activation: relu)"
    assert refusal({"policy_kwargs": "dict(log_std_init=-2, ortho_init=False)"}) == (
        "f.yml: unknown field 'policy_kwargs' (log_std_init: -2; ortho_init false: not supported (layers are always "
        "initialized orthogonally; false: results will differ): drop it)")
    assert refusal({"policy_kwargs": {"net_arch": {}}}) == (  # no pi/vf sizes given: not "separate pi/vf sizes"
        "f.yml: unknown field 'policy_kwargs' (net_arch {}: hidden_sizes is one list of widths)")


def test_several_policy_kwargs_without_counterpart_are_dropped_together():
    assert refusal({"policy_kwargs": "dict(squash_output=True, use_sde=False)"}) == (
        "f.yml: unknown field 'policy_kwargs' (squash_output, use_sde: no counterpart here; drop them)")
    assert refusal({"activation_fn": "nn.ELU"}) == (
        "f.yml: unknown field 'activation_fn' (nn.ELU has no counterpart: activation is tanh or relu)")


def test_the_2000_character_cap_is_on_the_text_as_given():
    body = "dict(net_arch=[" + "1, " * 660 + "1])"
    assert len("  " + body) == 2000
    assert "(hidden_sizes: [1, 1, 1," in refusal({"policy_kwargs": "  " + body})  # 2000 characters: read
    assert GENERAL_POLICY_KWARGS in refusal({"policy_kwargs": "   " + body})  # 2001: not read


def test_hostile_normalize_and_policy_kwargs_are_never_run(tmp_path):
    marker = tmp_path / "ran"
    touch = f"__import__('os').system('touch {marker}')"
    assert refusal({"normalize": "{'norm_obs': " + touch + "}"}) == GENERAL_NORMALIZE
    assert refusal({"normalize": "{'norm_obs': __import__('os')}"}) == GENERAL_NORMALIZE
    assert GENERAL_POLICY_KWARGS in refusal({"policy_kwargs": f"dict(net_arch={touch})"})
    assert GENERAL_POLICY_KWARGS in refusal({"policy_kwargs": "dict(net_arch=" + "[" * 300 + "]" * 300 + ")"})
    assert not marker.exists()
    # too deep to read (RecursionError) or no literal (an unhashable key): the general note, never a traceback
    for text in ("dict(net_arch=[" + "-" * 1900 + "1])", "dict(net_arch=" + "not " * 450 + "1)", "{[1]: 2}"):
        assert GENERAL_POLICY_KWARGS in refusal({"policy_kwargs": text})


# -- normalize's clips and gamma --------------------------------------------------------------------------------------

def test_normalize_kwargs_carry_both_clips_and_gamma():
    assert refusal({"normalize": "dict(clip_obs=5.0, clip_reward=3.0, gamma=0.9)"}) == (
        "f.yml: unknown field 'normalize' (normalize: 'dict(clip_obs=5.0, clip_reward=3.0, gamma=0.9)' is norm_obs: true, "
        "norm_reward: true, clip_obs: 5.0, clip_reward: 3.0; its gamma is the run's gamma)")


def test_a_long_normalize_string_is_shortened_in_the_line():
    value = "{'norm_obs': True, 'norm_reward': False, 'clip_obs': 10.0, 'gamma': 0.99}"
    assert refusal({"normalize": value}) == (
        "f.yml: unknown field 'normalize' (normalize: \"{'norm_obs': True, 'norm_reward': False, 'clip_obs': 10.... is "
        "norm_obs: true, norm_reward: false, clip_obs: 10.0; its gamma is the run's gamma)")


# -- schedules ---------------------------------------------------------------------------------------------------------

def test_clip_range_vf_schedule_gives_its_number_and_how_it_clips():
    line = refusal({"clip_range_vf": "lin_0.2"})
    assert line.startswith("f.yml: unknown field 'clip_range_vf' (vf_clip_coef; no schedule for it here: vf_clip_coef: "
                           "0.2; vf_clip_coef=X with clip_vloss=True (the default) clips differently")


def test_schedules_under_field_names_are_listed_as_values_to_change():
    assert refusal({"clip_coef": "lin_0.2", "lr": "lin_0.001", "n_envs": 8, "n_steps": 8}) == (
        "f.yml: unknown fields: n_envs (num_envs), n_steps (num_steps); and values to change: clip_coef (no schedule "
        "for it here: clip_coef: 0.2), lr (lr: 0.001 with anneal_lr: true)")


# -- SB3's batch_size copied into num_minibatches -----------------------------------------------------------------------

def test_a_batch_of_8_split_into_8_minibatches_is_asked_about_sb3():
    with pytest.raises(ConfigError) as e:
        validate(PPOConfig(num_envs=1, num_steps=8, num_minibatches=8), python=True)
    assert "; did you copy SB3's batch_size (a minibatch size)? " in str(e.value)
    assert "(1 here for 8); advantage normalization needs at least 2" in str(e.value)


# -- the learning_rate note: SB3's defaults the run already has are not listed ----------------------------------------

@pytest.mark.parametrize("env_id, flags", [
    ("Pendulum-v1", []),  # Pendulum-v1's preset: ent_coef 0.0, SB3's already
    ("CartPole-v1", ["--ent-coef", "0.02"]),  # a typed --ent-coef was chosen, SB3's or not
])
def test_the_learning_rate_note_leaves_out_what_the_run_already_chose(env_id, flags, tmp_path, capsys):
    (tmp_path / "zoo.yml").write_text("learning_rate: 0.001\n")
    code, _, err = run_main(["train", env_id, "--config", str(tmp_path / "zoo.yml"), *flags, "--dry-run"], capsys)
    assert code == 0
    notes = [line for line in err.splitlines() if "learning_rate" in line]
    assert len(notes) == 1 and notes[0].endswith(
        "to match; for SB3's other defaults the file leaves out, add clip_vloss: false (SB3's clip_range_vf=None: no "
        "value clipping) and vf_coef: 1.0 (SB3's 0.5 weighs the squared error, Proxima's half of it) (docs/migrating.md)")


# -- CleanRL's flags ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, said", [
    (["--num-envs=4", "--num-steps=128", "--batch-size=512"], "; --batch-size: derived (--num-envs x --num-steps): drop it"),
    (["--gym-id", "CartPole-v1", "--batch-size", "64"], "; --batch-size: derived (--num-envs x --num-steps): drop it"),
    (["--exp-name", "x", "--batch-size", "512", "--minibatch-size", "128"],
     "--num-minibatches (CleanRL derives --minibatch-size: --num-minibatches = --num-envs x --num-steps / "
     "--minibatch-size (= 4 here))"),
])
def test_cleanrls_batch_flags_are_derived(flags, said, capsys):
    code, out, err = run_main(["train", "CartPole-v1", *flags, "--dry-run"], capsys)
    assert said in error_line(code, err) and out == ""


@pytest.mark.parametrize("flags", [
    ["--batch-size", "64", "--minibatch-size", "16"],  # SB3's minibatch size, spelt twice: not CleanRL's
    ["--num-envs", "4", "--num-steps", "128", "--minibatch-size", "100"],  # 512 / 100 is no count
    ["--num-envs", "4", "--num-steps", "128", "--batch-size", "1024"],  # more than the batch: SB3's
])
def test_sb3s_minibatch_size_flags_keep_sb3s_note(flags, capsys):
    code, _, err = run_main(["train", "CartPole-v1", *flags, "--dry-run"], capsys)
    line = error_line(code, err)
    assert "did you mean --num-minibatches (it counts minibatches: --num-envs x --num-steps / your minibatch size)?" in line
    assert "derived" not in line and "CleanRL" not in line


def test_eval_is_not_told_about_train_settings(capsys):
    code, _, err = run_main(["eval", "runs/x", "--num-iterations", "5"], capsys)
    assert error_line(code, err) == ("proxima eval: error: unrecognized arguments: --num-iterations 5 "
                                     "(see proxima eval --help)")
