"""A user coming from rl-baselines3-zoo or CleanRL: their keys and flags get what to give here, a zoo
entry's unknown keys in one line, --preset none, and docs/migrating.md's table names real fields and flags."""

from __future__ import annotations

import argparse
import math
import re
import shlex
from pathlib import Path

import pytest
import torch
import yaml

from proxima import cli
from proxima.config import FIELDS, FOREIGN_UNSUPPORTED, SB3_POLICY_NOTE, ConfigError, from_dict
from proxima.presets import preset_config, resolve
from tests.cli_helpers import error_line, one_error_line, run_main

ROOT = Path(__file__).resolve().parents[2]


def _refusal(values: dict) -> str:
    with pytest.raises(ConfigError) as e:
        from_dict(values, source="zoo.yml")
    return str(e.value)


# ------------------------------------------------------------------------------ a zoo entry in a file
def test_a_zoo_entry_names_every_unknown_key_with_its_field_in_one_line():
    line = _refusal({"n_envs": 8, "n_steps": 2048, "batch_size": 64, "n_epochs": 10, "policy": "MlpPolicy", "gamma": 0.98})
    assert line == ("zoo.yml: unknown fields: n_envs (num_envs), n_steps (num_steps), batch_size (num_minibatches: it "
                    "counts minibatches: num_envs x num_steps / your minibatch size), n_epochs (update_epochs), policy "
                    "(SB3's policy class: drop it; the policy here is an MLP actor-critic sized by hidden_sizes and "
                    "activation, encoder: cnn for CnnPolicy)")


def test_a_zoo_policy_line_is_sb3s_policy_class_not_an_rlhf_setting():
    assert _refusal({"policy": "MlpPolicy"}) == (
        "zoo.yml: unknown field 'policy': 'MlpPolicy' is SB3's policy class: drop it; the policy here is an MLP "
        "actor-critic sized by hidden_sizes and activation, encoder: cnn for CnnPolicy")
    assert "proxima rlhf" in _refusal({"policy": "gpt2"})  # an rlhf file's policy is a model: still sent there


@pytest.mark.parametrize("key, value, says", [
    ("use_sde", True, "no gSDE here: a Box action is drawn from a Normal whose log std is a learned parameter"),
    ("ortho_init", False, "layers are always initialized orthogonally"),
    ("sde_sample_freq", 4, "no gSDE here (see use_sde)"),
])
def test_sb3_settings_without_a_field_say_what_proxima_does_instead(key, value, says):
    line = _refusal({key: value})
    assert line.startswith(f"zoo.yml: unknown field '{key}': ") and says in line, line


def test_net_arch_with_separate_pi_and_vf_sizes_says_one_list_sizes_both():
    line = _refusal({"hidden_sizes": {"pi": [64], "vf": [64]}})
    assert line.endswith("(separate pi/vf sizes are not supported: one list sizes both the actor's and the critic's "
                         "hidden layers)"), line
    assert "separate pi/vf sizes (dict(pi=[..], vf=[..])) are not supported" in _refusal({"net_arch": {"pi": [64]}})


def test_the_zoos_linear_lr_schedule_is_lr_with_anneal_lr():
    assert _refusal({"lr": "lin_3e-4"}) == (
        "zoo.yml: field 'lr' got 'lin_3e-4', expected a number (the zoo's lin_3e-4, a linear decay to 0, is lr 3e-4 with "
        "anneal_lr true, PPOConfig's default; SB3's lr is constant unless lin_)")
    assert _refusal({"clip_coef": "lin_0.2"}).endswith("(no schedule for clip_coef: it stays constant; give 0.2)")


def test_learning_rate_in_a_file_is_lr_and_both_are_refused():
    cfg = from_dict({"learning_rate": 1e-3}, source="zoo.yml")
    assert cfg.lr == 1e-3
    assert _refusal({"lr": 3e-4, "learning_rate": 1e-3}) == (
        "zoo.yml: both 'learning_rate' and 'lr' given (learning_rate is lr's other name); keep one")


# ------------------------------------------------------------------------------ flags
@pytest.mark.parametrize("name", sorted(FOREIGN_UNSUPPORTED))
def test_an_sb3_flag_without_a_field_says_what_proxima_does_not_a_close_flag(name, capsys):
    flag = "--" + name.replace("_", "-")
    code, _, err = run_main(["train", "CartPole-v1", flag, "1"], capsys)
    line = error_line(code, err)
    assert f"; {flag}: {FOREIGN_UNSUPPORTED[name]} (see proxima train --help)" in line, line
    assert "did you mean" not in line  # --use-sde went to --seed


def test_resume_dry_run_points_to_trains_and_never_suggests_trust_run(capsys):
    code, _, err = run_main(["resume", "R", "--dry-run"], capsys)
    assert one_error_line(err, "proxima resume") == (
        "unrecognized arguments: --dry-run; a resume's dry run is `proxima train --resume RUN --dry-run`: it checks "
        "the resume and prints the config it would continue with, writing nothing (see proxima resume --help)")
    code, _, err = run_main(["resume", "R", "--trust-ru"], capsys)
    assert "--trust-run" not in error_line(code, err)


def test_no_train_flag_shows_two_defaults():
    """--run-dir's help gives runs/<env>__<seed>__<time>; argparse's '(default: None)' contradicted it."""
    parser = cli.build_parser()
    train = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
    helps = {a.option_strings[0]: a.help for a in train._actions if a.option_strings and a.help}
    assert not [flag for flag, text in helps.items() if "(default: None)" in text]
    assert not [flag for flag, text in helps.items() if text.count("default") > 1 and "(default " in text]
    assert helps["--run-dir"] == "Run directory (default runs/<env>__<seed>__<time>)."
    assert helps["--target-kl"].endswith("(default: none)")


# ------------------------------------------------------------------------------ --preset none
def test_preset_none_keeps_ppoconfigs_defaults_under_a_config_file(tmp_path, capsys):
    assert resolve("Pendulum-v1").backend == "native"  # the default preset that --preset none turns off
    (tmp_path / "z.yml").write_text("num_envs: 8\ntotal_timesteps: 1024\n")
    code, out, err = run_main(["train", "Pendulum-v1", "--preset", "none", "--config", str(tmp_path / "z.yml"),
                               "--dry-run"], capsys)
    assert code == 0, err
    assert "\nbackend: auto\n" in out and "\nnum_minibatches: 4\n" in out and "\nnum_envs: 8\n" in out
    assert err == ("proxima train: note: --preset none: Pendulum-v1's default preset is not applied (PPOConfig's "
                   "defaults, then --config FILE and flags)\n")


def test_a_typed_env_id_over_the_files_is_noted_naming_both(tmp_path, capsys):
    (tmp_path / "e.yml").write_text("env_id: Pendulum-v1\n")
    code, out, err = run_main(["train", "CartPole-v1", "--config", str(tmp_path / "e.yml"), "--dry-run"], capsys)
    assert code == 0, err
    assert out.startswith("env_id: CartPole-v1\n")
    assert err == (f"proxima train: note: ENV_ID CartPole-v1 overrides --config {tmp_path / 'e.yml'}'s env_id "
                   "Pendulum-v1 (typed values beat the file's); leave ENV_ID out to train the file's\n")


# ------------------------------------------------------------------------------ docs/migrating.md
def _table_names(text: str) -> tuple[set, set]:
    """The fields (column 2) and flags (column 3) the mapping tables of docs/migrating.md give."""
    fields, flags = set(), set()
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("zoo / SB3", "CleanRL") or set(cells[0]) <= set("-"):
            continue
        fields |= set(re.findall(r"`([a-z_]+)`", cells[1]))
        flags |= set(re.findall(r"`(--[a-z-]+)`", cells[2]))
        assert re.sub(r"`[^`]*`|,|\s", "", cells[1]) in ("", "(none)"), line  # only backticked names
    return fields, flags


def test_every_name_in_migrating_md_is_a_real_field_or_flag():
    fields, flags = _table_names((ROOT / "docs" / "migrating.md").read_text())
    assert len(fields) > 25 and len(flags) > 25  # the tables were read
    assert fields <= set(FIELDS), fields - set(FIELDS)
    parser = cli.build_parser()
    train = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
    known = {o for a in train._actions for o in a.option_strings}
    assert flags <= known, flags - known


def test_migrating_mds_lunarlander_entry_gives_minibatches_of_64(tmp_path, capsys):
    pytest.importorskip("Box2D")  # the dry run builds LunarLander-v3 to read its spaces (the box2d extra)
    text = (ROOT / "docs" / "migrating.md").read_text()
    entry = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    (tmp_path / "ll.yml").write_text(entry)
    code, out, err = run_main(["train", "--preset", "none", "--config", str(tmp_path / "ll.yml"), "--dry-run"], capsys)
    assert code == 0, err
    assert out.splitlines()[-1].startswith("# batch 16,384 (num_envs 16 x num_steps 1,024), minibatch 64, ")
    assert "\nanneal_lr: false\n" in out and "\nclip_vloss: false\n" in out and "\nvf_coef: 1.0\n" in out


# ------------------------------------------------------------------------------ SB3's loss, schedule and counts
def _migrating_row(name: str) -> str:
    """The line of docs/migrating.md's zoo/SB3 table for the zoo key ``name``."""
    text = (ROOT / "docs" / "migrating.md").read_text()
    return next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))


def test_sb3s_vf_coef_is_twice_proxima_s_because_proxima_halves_the_squared_error():
    """SB3: vf_coef * F.mse_loss(returns, values); here vf_coef * 0.5 * (values - returns)**2: the doc's 2X."""
    from proxima.ppo import ppo_loss

    b = torch.zeros(4)
    values, returns = torch.tensor([0.0, 1.0, 2.0, 3.0]), torch.tensor([1.0, 1.0, 0.0, 3.0])
    loss = ppo_loss(b, b, b, values, values, returns, b, clip_coef=0.2, vf_coef=1.0, ent_coef=0.0,
                    clip_vloss=False, norm_adv=False)
    sb3_value_loss = torch.nn.functional.mse_loss(returns, values)  # 1.25
    assert loss["loss"].item() == pytest.approx(0.5 * sb3_value_loss.item())  # vf_coef 1.0 here is SB3's 0.5
    assert "SB3's `vf_coef` X is `vf_coef: 2X` here (SB3's default 0.5 is 1.0)" in _migrating_row("vf_coef")


def test_clip_range_vf_says_sb3_clips_by_another_method_in_file_flag_and_doc(capsys):
    assert "where SB3 takes the clipped one alone; SB3's clip_range_vf=None is clip_vloss=False" in _refusal(
        {"clip_range_vf": 0.2})
    code, _, err = run_main(["train", "CartPole-v1", "--clip-range-vf", "0.2"], capsys)
    assert "CleanRL's max of the clipped and unclipped squared errors, where SB3 takes the clipped one alone" in (
        error_line(code, err))
    assert "does not reproduce its loss" in _migrating_row("clip_range_vf")


def test_target_kl_row_says_the_crossing_step_is_kept():
    row = _migrating_row("target_kl")
    assert "SB3 checks before that minibatch's optimizer step and discards it; Proxima takes the step" in row
    assert "to match SB3's T" not in row  # 1.5 x T is close, not a match


@pytest.mark.parametrize("key, says", [
    ("env_wrapper", "no wrapper field: wrap the env in your own gymnasium.Env class and train it as ENV_ID "
                    "module:ClassName; drop it"),
    ("frame_stack", "Atari ids always stack the last 4 frames (docs/atari.md); for another env stack them in your "
                    "own gymnasium.Env class, trained as ENV_ID module:ClassName; drop it"),
])
def test_zoo_wrapper_keys_say_what_the_doc_says_not_env_kwargs(key, says):
    assert _refusal({key: [1]}) == f"zoo.yml: unknown field '{key}': {says}"  # was: did you mean 'env_kwargs'?


def test_log_std_init_is_a_field_of_its_own():  # review 47: SB3's log_std_init is --log-std-init
    assert from_dict({"log_std_init": -2}).log_std_init == -2.0
    assert "`--log-std-init`" in _migrating_row("policy_kwargs: log_std_init")


def test_a_files_learning_rate_without_anneal_lr_notes_sb3s_constant_rate(tmp_path, capsys):
    (tmp_path / "zoo.yml").write_text("learning_rate: 0.001\n")
    code, out, err = run_main(["train", "CartPole-v1", "--config", str(tmp_path / "zoo.yml"), "--dry-run"], capsys)
    assert code == 0 and "\nanneal_lr: true\n" in out
    assert err == (f"proxima train: note: --config {tmp_path / 'zoo.yml'}: learning_rate 0.001 is annealed linearly to "
                   "0 over the run (anneal_lr: true, Proxima's and CleanRL's default); SB3 keeps it constant: add "
                   "anneal_lr: false to the file to match; for SB3's other defaults the file leaves out, add clip_vloss: "
                   "false (SB3's clip_range_vf=None: no value clipping), vf_coef: 1.0 (SB3's 0.5 weighs the squared "
                   "error, Proxima's half of it) and ent_coef: 0.0 (SB3's default) (docs/migrating.md)\n")
    for file, flags in (("learning_rate: 0.001\nanneal_lr: true\n", []), ("learning_rate: 0.001\n", ["--no-anneal-lr"]),
                        ("lr: 0.001\n", []),  # anneal_lr chosen, or lr (Proxima's and CleanRL's name): no note
                        ("learning_rate: 0.001\n", ["--lr", "5e-4"])):  # a typed rate replaced the file's: no note quoting it
        (tmp_path / "zoo.yml").write_text(file)
        code, _, err = run_main(["train", "CartPole-v1", "--config", str(tmp_path / "zoo.yml"), *flags, "--dry-run"],
                                capsys)
        assert code == 0 and err == "", (file, flags, err)


@pytest.mark.parametrize("argv", [["--learning-rate", "1e-3", "--lr", "2e-3"], ["--lr", "2e-3", "--learning-rate", "2e-3"]])
def test_lr_and_learning_rate_flags_together_are_refused_as_in_a_file(argv, capsys):
    code, out, err = run_main(["train", "CartPole-v1", *argv, "--dry-run"], capsys)
    assert code == 2 and out == ""
    assert one_error_line(err, "proxima train") == (
        "both --learning-rate and --lr given (--learning-rate is --lr's other name); keep one (see proxima train --help)")
    code, out, _ = run_main(["train", "CartPole-v1", "--lr", "1e-3", "--lr", "2e-3", "--dry-run"], capsys)
    assert code == 0 and "\nlr: 0.002\n" in out  # one name twice: argparse's last, as for every flag


def test_n_timesteps_row_gives_the_steps_each_library_trains(capsys):
    row = _migrating_row("n_timesteps")
    for total, steps in ((100000, "390 iterations = 99,840 steps"), (100096, "391 iterations = 100,096 steps")):
        code, out, err = run_main(["train", "CartPole-v1", "--num-envs", "8", "--num-steps", "32", "--total-timesteps",
                                   str(total), "--dry-run"], capsys)
        assert code == 0 and out.splitlines()[-1].endswith(steps), out.splitlines()[-1]
        assert steps.split()[-2] in row
    assert math.ceil(100000 / 256) * 256 == 100096  # SB3's count: it collects while num_timesteps < 1e5


def test_migrating_md_lists_every_value_of_pendulums_default_preset():
    text = " ".join((ROOT / "docs" / "migrating.md").read_text().split())
    listed = re.search(r"Pendulum-v1's sets (.*?), and each of those", text).group(1)
    pairs = dict(re.findall(r"`([a-z_]+): ([^`]+)`", listed))
    assert {k: yaml.safe_load(v) for k, v in pairs.items()} == preset_config("Pendulum-v1", "default")


def test_migrating_mds_cleanrl_continuous_flags_give_ppo_continuous_actions_settings(capsys):
    text = (ROOT / "docs" / "migrating.md").read_text()
    command = re.search(r"## CleanRL's ppo_continuous_action.py.*?```sh\n(.*?)```", text, re.S).group(1)
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[:2] == ["proxima", "train"]
    code, out, err = run_main(argv[1:] + ["--dry-run"], capsys)
    assert code == 0, err
    got = yaml.safe_load("\n".join(line for line in out.splitlines() if not line.startswith("#")))
    cleanrl = {"num_envs": 1, "num_steps": 2048, "lr": 3e-4, "anneal_lr": True, "num_minibatches": 32,
               "update_epochs": 10, "ent_coef": 0.0, "gamma": 0.99, "gae_lambda": 0.95, "norm_obs": True,
               "norm_reward": True, "clip_obs": 10.0, "clip_reward": 10.0, "total_timesteps": 1000000,
               "clip_coef": 0.2, "clip_vloss": True, "vf_coef": 0.5, "max_grad_norm": 0.5, "norm_adv": True,
               "target_kl": None, "bootstrap_truncation": False, "hidden_sizes": [64, 64], "activation": "tanh"}
    assert {k: got[k] for k in cleanrl} == cleanrl
    mujoco = preset_config("HalfCheetah-v5", "default")  # the doc's "the MuJoCo ids' default preset is those settings"
    assert {k: v for k, v in mujoco.items() if k != "backend"} == {k: got[k] for k in mujoco if k != "backend"}


# ------------------------------------------------------------------------------ survivors of the mutation review
@pytest.mark.parametrize("argv", [["resume", "R", "--trust"], ["eval", "R", "--trust"], ["train", "CartPole-v1", "--trust"]])
def test_a_flags_first_word_never_completes_to_trust_run(argv, capsys):
    """--trust is the first word of --trust-run alone: the prefix match must not offer the flag that imports code."""
    code, _, err = run_main(argv, capsys)
    line = error_line(code, err)
    assert "unrecognized arguments: --trust; did you mean --" in line and "--trust-run" not in line, line


def test_gsde_advice_is_for_train_and_resume_only(capsys):
    code, _, err = run_main(["eval", "R", "--use-sde", "1"], capsys)
    line = error_line(code, err)
    assert "unrecognized arguments: --use-sde 1" in line and "gSDE" not in line, line  # eval has no policy to train
    # and no close-match guess either: --seed is not what an SB3 user meant
    assert line.endswith("--use-sde is a training setting of SB3 or its zoo, not a flag of proxima eval "
                         "(see proxima eval --help)") and "--seed" not in line, line


def test_exactly_two_unknown_keys_share_one_line():
    assert _refusal({"n_envs": 8, "n_steps": 16}) == "zoo.yml: unknown fields: n_envs (num_envs), n_steps (num_steps)"


@pytest.mark.parametrize("policy", ["MlpPolicy", "CnnPolicy", "MultiInputPolicy"])
def test_every_sb3_policy_class_is_sb3s_alone_and_among_others(policy):
    assert _refusal({"policy": policy}) == f"zoo.yml: unknown field 'policy': {policy!r} is {SB3_POLICY_NOTE}"
    assert _refusal({"policy": policy, "n_envs": 2}) == (
        f"zoo.yml: unknown fields: policy ({SB3_POLICY_NOTE}), n_envs (num_envs)")


def test_an_unsupported_sb3_key_among_others_keeps_its_advice():
    assert _refusal({"use_sde": True, "n_envs": 8}) == (
        f"zoo.yml: unknown fields: use_sde ({FOREIGN_UNSUPPORTED['use_sde']}), n_envs (num_envs)")


def test_an_rlhf_key_among_zoo_keys_is_named_an_rlhf_setting():
    assert _refusal({"kl_coef": 0.1, "n_envs": 8}) == (
        "zoo.yml: unknown fields: kl_coef (a `proxima rlhf` setting), n_envs (num_envs)")


def test_a_value_clip_schedule_says_it_stays_constant():
    assert _refusal({"vf_clip_coef": "lin_0.2"}) == (
        "zoo.yml: field 'vf_clip_coef' got 'lin_0.2', expected a number or none (no schedule for vf_clip_coef: it "
        "stays constant; give 0.2)")


@pytest.mark.parametrize("file, flags", [("env_id: CartPole-v1\n", []), ("env_id: Pendulum-v1\n", ["--quiet"])])
def test_no_env_id_note_for_the_files_own_env_or_under_quiet(file, flags, tmp_path, capsys):
    (tmp_path / "e.yml").write_text(file)
    code, out, err = run_main(["train", "CartPole-v1", "--config", str(tmp_path / "e.yml"), *flags, "--dry-run"], capsys)
    assert code == 0 and out.startswith("env_id: CartPole-v1\n")
    assert err == ""


@pytest.mark.parametrize("env_id, flags", [("gymnasium.envs.classic_control.cartpole:CartPoleEnv", []),
                                           ("Pendulum-v1", ["--quiet"])])
def test_no_preset_none_note_without_a_default_preset_or_under_quiet(env_id, flags, capsys):
    """A module:Class env has no presets, so none is skipped; --quiet silences the note for an env that has one."""
    code, out, err = run_main(["train", env_id, "--preset", "none", *flags, "--dry-run"], capsys)
    assert code == 0 and out.startswith(f"env_id: {env_id}\n")
    assert err == ""
