"""Review 34 (YAML configs and presets): `proxima presets ENV NAME` prints a preset's settings as a
--config file (the notes sent users to a command that showed only names); a refusal of a --config
file's value names the file and the field in the file's words, not a flag never typed; a YAML syntax
error says where and what; keys of other tools' files (preset, seeds, sweep, config:) say where their
setting goes; --preset of an env without presets names the version that has them, a typo the one meant."""

from __future__ import annotations

import json

import pytest
import yaml

from proxima.presets import all_presets, other_version_note
from tests.cli_helpers import error_line, run_main


def write(path, text: str):
    path.write_text(text)
    return path


# ------------------------------------------------------------------ 1. presets ENV NAME
def test_presets_env_name_prints_exactly_the_presets_fields_as_a_config_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["presets", "CartPole-v1", "fast"], capsys)
    assert code == 0, err
    # the fields it sets, no defaults, and the env they are for (another ENV_ID with the file is noted)
    assert yaml.safe_load(out) == {"env_id": "CartPole-v1", **all_presets()["CartPole-v1"]["fast"]["config"]}
    write(tmp_path / "fast.yaml", out)
    # as a --config file it trains what --preset fast trains
    code, from_file, err = run_main(["train", "CartPole-v1", "--config", "fast.yaml", "--dry-run", "--quiet"], capsys)
    assert code == 0, err
    code, from_preset, err = run_main(["train", "CartPole-v1", "--preset", "fast", "--dry-run", "--quiet"], capsys)
    assert code == 0, err
    assert from_file == from_preset and "num_envs: 96" in from_file


def test_presets_json_gives_each_presets_config(capsys):
    code, out, _ = run_main(["presets", "--json"], capsys)
    rows = json.loads(out)
    assert code == 0 and len(rows) == sum(len(p) for p in all_presets().values())
    for row in rows:
        assert row["config"] == all_presets()[row["env_id"]][row["preset"]]["config"], row
    code, out, _ = run_main(["presets", "CartPole-v1", "gpu", "--json"], capsys)
    (row,) = json.loads(out)
    assert code == 0 and (row["preset"], row["config"]["device"]) == ("gpu", "cuda")


def test_presets_bad_name_is_one_line_with_the_choices_and_the_one_meant(capsys):
    code, out, err = run_main(["presets", "CartPole-v1", "fsat"], capsys)
    error_line(code, err, "proxima presets: error: NAME 'fsat': no such preset for CartPole-v1 (choices: default, fast, gpu); "
               "did you mean 'fast'?")
    assert out == ""


def test_the_other_version_note_names_the_command_that_prints_the_values(capsys):
    note = other_version_note("CartPole-v0")
    assert "`proxima presets CartPole-v1 NAME` prints one's settings" in note
    code, out, _ = run_main(["presets", "CartPole-v1", "default"], capsys)  # the command it names, with a NAME
    assert code == 0 and yaml.safe_load(out) == {"env_id": "CartPole-v1", **all_presets()["CartPole-v1"]["default"]["config"]}
    assert "`proxima presets HalfCheetah-v5 default` prints its settings" in other_version_note("HalfCheetah-v4")


# ------------------------------------------------------------------ 2. a file's value is named in the file's words
def test_no_native_env_from_the_files_backend_names_the_file_and_key(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "t.yaml", "backend: native\nenv_id: CartPole-v0\n")
    code, _, err = run_main(["train", "--config", "t.yaml", "--dry-run"], capsys)
    line = error_line(code, err, "proxima train: error: t.yaml: backend native: no native env for 'CartPole-v0' (native: ")
    assert line.endswith("; edit backend in t.yaml (gymnasium or auto)") and "--backend" not in line
    # typed: the flag's words, as before
    code, _, err = run_main(["train", "CartPole-v0", "--backend", "native", "--dry-run"], capsys)
    line = error_line(code, err, "proxima train: error: no native env for 'CartPole-v0'")
    assert line.endswith("; use --backend gymnasium or auto")


def test_a_files_value_is_named_as_its_line_not_as_a_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "t.yaml", "lr: .inf\n")
    code, _, err = run_main(["train", "--config", "t.yaml", "--dry-run"], capsys)
    assert error_line(code, err).endswith("error: t.yaml: lr inf: must be a finite number")
    code, _, err = run_main(["train", "--lr", "inf", "--dry-run"], capsys)
    assert error_line(code, err).endswith("error: --lr inf: must be a finite number")


def test_env_kwargs_on_the_files_native_backend_says_to_edit_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "t.yaml", "backend: native\nenv_kwargs: {g: 9.81}\n")
    code, _, err = run_main(["train", "Pendulum-v1", "--config", "t.yaml", "--dry-run"], capsys)
    assert error_line(code, err).endswith("error: t.yaml: env_kwargs: the native 'Pendulum-v1' takes no constructor "
                                          "arguments; edit backend in t.yaml (gymnasium or auto)")
    write(tmp_path / "g.yaml", "backend: gymnasium\nenv_kwargs: {nope: 1}\n")
    code, _, err = run_main(["train", "--config", "g.yaml", "--dry-run"], capsys)
    assert error_line(code, err, "g.yaml: env_kwargs: env 'CartPole-v1' takes no argument 'nope'").endswith(
        "; drop it from env_kwargs in g.yaml")


# ------------------------------------------------------------------ 3. YAML syntax errors: where and what
@pytest.mark.parametrize("text, want", [
    ("lr:\t3e-4\n", "not valid YAML at line 1, column 4: found character '\\t' that cannot start any token"),
    ("lr: 1\n  gamma: 2\n", "not valid YAML at line 2, column 8: mapping values are not allowed here"),
    ("lr: [\n", "not valid YAML at line 2, column 1: expected the node content, but found '<stream end>'"),
])
@pytest.mark.parametrize("command", ["train", "rlhf"])
def test_a_yaml_syntax_error_names_line_column_and_problem(text, want, command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "t.yaml", text)
    code, _, err = run_main([command, "--config", "t.yaml"] + (["--dry-run"] if command == "train" else []), capsys)
    error_line(code, err, f"proxima {command}: error: --config t.yaml: {want}")


# ------------------------------------------------------------------ 4. other tools' keys
@pytest.mark.parametrize("text, want", [
    ("preset: fast\n", "t.yaml: 'preset' is not a config field: pass --preset fast on the command line"),
    ("seeds: 1-3\n", "t.yaml: 'seeds' is a flag of train, not a config field: --seeds 1-3"),
    ("sweep: {lr: [1e-3, 3e-4]}\n", "t.yaml: 'sweep' is a flag of train, not a config field: --sweep lr=0.001,0.0003"),
    ("config:\n  lr: 1e-3\n", "t.yaml: 'config' is not a config field: put the fields at the top level (the preset files' "
                              "config: nesting is not a config file's)"),
])
def test_keys_of_other_tools_files_say_where_their_setting_goes(text, want, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "t.yaml", text)
    code, _, err = run_main(["train", "--config", "t.yaml", "--dry-run"], capsys)
    line = error_line(code, err, f"proxima train: error: {want}")
    assert "did you mean" not in line


# ------------------------------------------------------------------ 5. --preset's refusals
def test_preset_of_an_env_without_presets_names_the_version_that_has_them(capsys):
    code, _, err = run_main(["train", "CartPole-v0", "--preset", "fast", "--dry-run"], capsys)
    error_line(code, err, "--preset 'fast': no such preset: CartPole-v0 has no presets (see `proxima presets`);",
               "CartPole-v1 has presets (default, fast, gpu): `proxima presets CartPole-v1 fast` prints its settings")


def test_a_preset_typo_gets_the_one_meant(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--preset", "fsat", "--dry-run"], capsys)
    assert error_line(code, err, "available: default, fast, gpu").endswith("; did you mean --preset fast?")
