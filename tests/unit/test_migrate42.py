"""A user coming from rl-baselines3-zoo or CleanRL: their keys and flags get what to give here, a zoo
entry's unknown keys in one line, --preset none, and docs/migrating.md's table names real fields and flags."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from proxima import cli
from proxima.config import FIELDS, FOREIGN_UNSUPPORTED, ConfigError, from_dict
from proxima.presets import resolve
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
    ("log_std_init", -2, "the learned log std always starts at 0 (std 1); drop it"),
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
    text = (ROOT / "docs" / "migrating.md").read_text()
    entry = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    (tmp_path / "ll.yml").write_text(entry)
    code, out, err = run_main(["train", "--preset", "none", "--config", str(tmp_path / "ll.yml"), "--dry-run"], capsys)
    assert code == 0, err
    assert out.splitlines()[-1].startswith("# batch 16,384 (num_envs 16 x num_steps 1,024), minibatch 64, ")
    assert "\nanneal_lr: false\n" in out and "\nclip_vloss: false\n" in out
