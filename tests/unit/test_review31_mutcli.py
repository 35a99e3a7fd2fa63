"""Mutations of the CLI's and the config's checks that survived review 31 (log: mutcli): eval's
--stochastic, --episodes and --seed bounds; an integer field given a fraction in a config file; the
boolean words a config file may spell; RLHF's missing_eos_penalty, gamma and reward_weights
checks; --seeds' top seed; typed flags kept in the order typed."""

import json

import pytest
import yaml

from cli_helpers import error_line, run_main, snapshot, tiny_cartpole_run
from proxima import cli
from proxima.config import MAX_SEED, ConfigError, coerce
from proxima.evaluate import EVAL_SEED_OFFSET
from proxima.population import parse_seeds
from proxima.rlhf.config import RLHFConfig, validate

#: the fields of the RLHF checks' configs that validate requires (it reads no file)
RLHF_REQUIRED = dict(policy="p", reward="r.py:f", prompts="q")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return tiny_cartpole_run(tmp_path_factory, "mutcli")


def _eval_json(run, capsys, *flags):
    code, out, err = run_main(["eval", str(run), "--json", *flags], capsys)
    assert code == 0, err
    return json.loads(out)


# -------------------------------------------------------------------------------------- eval
def test_eval_stochastic_samples_the_policy_and_says_so(run, capsys):
    # same seed, same episodes: only the argmax-vs-sample choice can make the returns differ
    greedy = _eval_json(run, capsys, "--episodes", "3", "--seed", "5")
    sampled = _eval_json(run, capsys, "--episodes", "3", "--seed", "5", "--stochastic")
    assert greedy["deterministic"] is True
    assert sampled["deterministic"] is False
    assert sampled["returns"] != greedy["returns"]


def test_eval_episodes_0_is_refused_before_anything_runs(run, capsys):
    before = snapshot(run)
    code, out, err = run_main(["eval", str(run), "--episodes", "0"], capsys)
    assert error_line(code, err) == "proxima eval: error: --episodes 0: must be at least 1"
    assert out == "" and snapshot(run) == before


def test_eval_seed_takes_max_seed_plus_the_eval_offset_and_refuses_one_more(run, capsys):
    top = MAX_SEED + EVAL_SEED_OFFSET  # a run's own seed may be MAX_SEED; its eval seed is that + the offset
    result = _eval_json(run, capsys, "--episodes", "1", "--max-steps", "8", "--seed", str(top))
    assert result["episodes"] == 1
    code, out, err = run_main(["eval", str(run), "--episodes", "1", "--seed", str(top + 1)], capsys)
    assert error_line(code, err) == (f"proxima eval: error: --seed {top + 1}: must be an integer from 0 to {top:,} (train's "
                                     f"largest seed, {MAX_SEED:,}, plus the {EVAL_SEED_OFFSET:,} an eval adds to a run's seed)")
    assert out == ""


# ------------------------------------------------------------------------------ config files
def _dry_run(tmp_path, capsys, text: str):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return run_main(["train", "CartPole-v1", "--config", str(path), "--dry-run"], capsys), path


def test_a_fraction_for_an_integer_field_in_a_config_file_is_refused_naming_file_and_field(tmp_path, capsys):
    (code, out, err), path = _dry_run(tmp_path, capsys, "num_envs: 4.5\n")
    assert error_line(code, err) == f"proxima train: error: {path}: field 'num_envs' got 4.5, expected an integer"
    assert out == ""


def test_a_whole_float_for_an_integer_field_is_that_integer():
    assert coerce("num_envs", 4.0) == 4 and isinstance(coerce("num_envs", 4.0), int)


TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


@pytest.mark.parametrize("word, value", [(w, True) for w in TRUE_WORDS] + [(w, False) for w in FALSE_WORDS])
@pytest.mark.parametrize("case", [str.lower, str.upper, str.title])
def test_each_boolean_word_is_its_value_in_any_case(word, value, case):
    assert coerce("anneal_lr", case(word)) is value
    assert coerce("norm_obs", case(word), source="flag") is value


def test_boolean_words_in_a_config_file_set_the_fields(tmp_path, capsys):
    # quoted: YAML reads a bare on/off/yes/no as a boolean itself, so only a quoted word reaches coerce.
    # Each word goes to a field whose default is the other value, so a word that is ignored fails too.
    off_fields = ("anneal_lr", "norm_adv", "clip_vloss", "bootstrap_truncation")  # default true
    on_fields = ("norm_obs", "norm_reward", "debug_checks", "plot")  # default false
    for fields, words, value in ((off_fields, FALSE_WORDS, False), (on_fields, TRUE_WORDS, True)):
        text = "".join(f"{f}: '{w}'\n" for f, w in zip(fields, words))
        (code, out, err), _ = _dry_run(tmp_path, capsys, text)
        assert code == 0, err
        resolved = yaml.safe_load(out)
        assert {f: resolved[f] for f in fields} == {f: value for f in fields}, text


def test_a_word_that_is_not_a_boolean_is_refused(tmp_path, capsys):
    (code, out, err), path = _dry_run(tmp_path, capsys, "anneal_lr: 'maybe'\n")
    assert error_line(code, err) == f"proxima train: error: {path}: field 'anneal_lr' got 'maybe', expected true or false"


# ------------------------------------------------------------------------------------- RLHF
@pytest.mark.parametrize("field, value, line", [
    ("missing_eos_penalty", -0.5, "--missing-eos-penalty -0.5: must be 0 or more"),
    ("gamma", 0.0, "--gamma 0.0: must be in (0, 1]"),
    ("gamma", 1.0001, "--gamma 1.0001: must be in (0, 1]"),
])
def test_rlhf_refuses_a_value_out_of_its_range(field, value, line):
    with pytest.raises(ConfigError) as e:
        validate(RLHFConfig(**RLHF_REQUIRED, **{field: value}))
    assert str(e.value) == line


@pytest.mark.parametrize("field, value", [("missing_eos_penalty", 0.0), ("gamma", 1.0), ("gamma", 1e-6)])
def test_rlhf_takes_the_ends_of_the_range(field, value):
    validate(RLHFConfig(**RLHF_REQUIRED, **{field: value}))


@pytest.mark.parametrize("flags, line", [
    (["--missing-eos-penalty", "-0.5"], "--missing-eos-penalty -0.5: must be 0 or more"),
    (["--gamma", "0"], "--gamma 0.0: must be in (0, 1]"),
    (["--gamma", "1.0001"], "--gamma 1.0001: must be in (0, 1]"),
])
def test_the_rlhf_command_refuses_them_in_one_line_and_writes_nothing(flags, line, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["rlhf", "--policy", "p", "--reward", "r.py:f", "--prompts", "q", *flags,
                               "--run-dir", str(tmp_path / "run")], capsys)
    assert error_line(code, err) == f"proxima rlhf: error: {line}"
    assert list(tmp_path.iterdir()) == []


def test_rlhf_reward_weights_of_a_boolean_are_refused(tmp_path, monkeypatch, capsys):
    # a YAML `true` is a bool, and float(True) would have read it as a weight of 1
    with pytest.raises(ConfigError) as e:
        validate(RLHFConfig(**RLHF_REQUIRED, reward_weights=[True]))
    assert str(e.value) == "RLHFConfig: field 'reward_weights' got [True], expected a comma-separated list of numbers"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.yaml").write_text("policy: p\nreward: r.py:f\nprompts: q\nreward_weights: [true]\n")
    code, out, err = run_main(["rlhf", "--config", "r.yaml"], capsys)
    assert error_line(code, err) == ("proxima rlhf: error: r.yaml: field 'reward_weights' got [True], expected a "
                                     "comma-separated list of numbers")
    assert [p.name for p in tmp_path.iterdir()] == ["r.yaml"]


# ------------------------------------------------------------------------------- --seeds
def test_seeds_take_max_seed_and_refuse_one_more():
    assert MAX_SEED == 2**31 - 1
    assert parse_seeds(str(MAX_SEED)) == [MAX_SEED]
    assert parse_seeds(f"{MAX_SEED - 1}-{MAX_SEED}") == [MAX_SEED - 1, MAX_SEED]
    with pytest.raises(ConfigError) as e:
        parse_seeds(str(MAX_SEED + 1))
    assert str(e.value) == f"--seeds '{MAX_SEED + 1}': seed {MAX_SEED + 1} is outside 0..{MAX_SEED:,}"


# ------------------------------------------------------------------------------- typed flags
@pytest.mark.parametrize("argv, order", [
    (["--lr", "1", "--clip-coef", "0.1"], ["lr", "clip_coef"]),
    (["--clip-coef", "0.1", "--lr", "1"], ["clip_coef", "lr"]),
    (["--num-envs", "2", "--anneal-lr", "--gamma", "0.9"], ["num_envs", "anneal_lr", "gamma"]),
])
def test_typed_fields_keep_the_order_typed(argv, order):
    args = cli.build_parser().parse_args(["train", *argv])
    assert cli.typed_fields(args) == order
    assert list(cli.typed_flags(args)) == order
