"""Review 30, configuration input (PPO side): a copied config.yaml's run_dir and env_id named with
their file, names YAML reads as numbers refused with "quote it", YAML 1.2 numbers, merge keys
refused, `report` on a hand-edited `stop_episodes: .inf`, `--hidden-sizes 64 64`, a typed --preset
the --config file overrides entirely, and the wording of a few refusals."""

from __future__ import annotations

import shutil

import pytest
import yaml
from cli_helpers import error_line, run_main, snapshot

from proxima import cli
from proxima.config import ConfigError, PPOConfig, dump_yaml, from_dict, load_config_file, load_yaml, validate

SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "0",
         "--no-progress", "--threads", "1"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A complete 1-iteration CartPole run in runs/a of its own folder (config.yaml records run_dir runs/a)."""
    root = tmp_path_factory.mktemp("rev30")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        assert cli.main(["train", "CartPole-v1", *SMALL, "--total-timesteps", "64", "--run-dir", "runs/a", "--quiet"]) == 0
    return root / "runs" / "a"


def write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ------------------------------------------------------------------ 1. a copied config.yaml's run_dir and env_id
@pytest.mark.parametrize("dry_run", [False, True], ids=["train", "dry-run"])
def test_a_copied_config_yaml_names_itself_when_its_run_dir_holds_another_run(dry_run, run, monkeypatch, capsys):
    root = run.parent.parent
    monkeypatch.chdir(root)
    shutil.copy(run / "config.yaml", write(root / "c" / "exp.yaml", ""))
    before = snapshot(run)
    code, out, err = run_main(["train", "--config", "c/exp.yaml", "--total-timesteps", "1024"]
                              + (["--dry-run"] if dry_run else []), capsys)
    line = error_line(code, err, "proxima train: error: c/exp.yaml: run_dir runs/a: not empty (",
                      "it holds another run", "choose another --run-dir, or edit run_dir in c/exp.yaml")
    # neither fix acts on the run the file merely names
    assert "--overwrite" not in line and "--resume" not in line and "proxima resume" not in line
    assert snapshot(run) == before and "run directory" not in out


def test_train_help_says_when_a_config_yaml_run_dir_is_not_reused(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "a run's config.yaml in its run directory: its run_dir, that run's own directory, is not reused" in text
    assert "a copy elsewhere is a file like any other, and a new run trains in the run_dir it names" in text


def test_an_env_id_from_the_file_is_named_with_its_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "c" / "e.yaml", 'env_id: "  CartPole-v1"\n')
    code, _, err = run_main(["train", "--config", "c/e.yaml", "--dry-run"], capsys)
    error_line(code, err, "proxima train: error: c/e.yaml: env_id: unknown env id '  CartPole-v1'")


# ------------------------------------------------------------------ 2. a name YAML reads as a number
@pytest.mark.parametrize("text,end", [
    ("1.10", "got 1.1, a number, not text (YAML reads an unquoted 1.10 as 1.1, 1e3 as 1000.0); quote it as you wrote it "
             "(run_dir: '...')"),
    ("1e3", "got 1000.0, a number, not text (YAML reads an unquoted 1.10 as 1.1, 1e3 as 1000.0); quote it as you wrote "
            "it (run_dir: '...')"),
    ("123", "got 123, a number, not text; quote it as you wrote it (run_dir: '...')"),
    ("0x1F", "got 31, a number, not text; quote it as you wrote it (run_dir: '...')"),
    ("yes", "got True, a boolean, not text (YAML reads an unquoted yes, on or true as one); quote it as you wrote it "
            "(run_dir: '...')"),
    ("2024-01-15", "got datetime.date(2024, 1, 15), a date, not text (YAML reads an unquoted 2024-01-15 as one); quote "
                   "it (run_dir: '2024-01-15')")])
def test_a_run_dir_yaml_reads_as_another_type_is_refused_with_quote_it(text, end, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "c.yaml", f"run_dir: {text}\n")
    code, out, err = run_main(["train", "--config", "c.yaml", "--dry-run"], capsys)
    error_line(code, err, f"proxima train: error: c.yaml: field 'run_dir' {end}")
    assert out == "" and sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_a_run_dir_with_a_leading_zero_is_the_text_typed(tmp_path, monkeypatch, capsys):
    """YAML 1.2 read 007 as 7; a leading zero stays text (an old run's config.yaml wrote 08 unquoted)."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "c.yaml", "run_dir: 007\nseed: 010\n")
    code, out, err = run_main(["train", "--config", "c.yaml", "--dry-run"], capsys)
    assert code == 0, err
    assert (yaml.safe_load(out)["run_dir"], yaml.safe_load(out)["seed"]) == ("007", 10)


def test_an_env_id_yaml_reads_as_a_number_is_refused_with_quote_it():
    with pytest.raises(ConfigError, match=r"^c\.yaml: field 'env_id' got 1\.1, a number, not text .*; quote it"):
        from_dict({"env_id": 1.1}, source="c.yaml")


# ------------------------------------------------------------------ 3. YAML 1.2 numbers
@pytest.mark.parametrize("text,value", [
    ("seed: 010", {"seed": "010"}), ("seed: 08", {"seed": "08"}), ("hidden_sizes: [64, 010]", {"hidden_sizes": [64, "010"]}),
    ("seed: 0o17", {"seed": "0o17"}), ("seed: 0x1F", {"seed": 31}), ("lr: 1:30", {"lr": "1:30"}), ("a: 0", {"a": 0}),
    ("a: -7", {"a": -7}), ("a: 1.", {"a": 1.0}), ("a: 01.5", {"a": 1.5}),
    ("run_dir: 2024_01_15", {"run_dir": "2024_01_15"}), ("run_dir: 12:30", {"run_dir": "12:30"}),
    ("lr: 1e-3", {"lr": 1e-3}), ("stop_return: .inf", {"stop_return": float("inf")}), ("progress: yes", {"progress": True})])
def test_load_yaml_reads_numbers_as_yaml_1_2(text, value):
    assert load_yaml(text) == value


def test_a_base_60_number_is_refused_not_reread(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "c.yaml", "lr: 1:30\n")
    code, _, err = run_main(["train", "--config", "c.yaml", "--dry-run"], capsys)
    error_line(code, err, "proxima train: error: c.yaml: field 'lr' got '1:30', expected a number")


@pytest.mark.parametrize("name", ["08", "010", "0o17", "0x1F", "1:30", "1_000", "1e1", "2024_01_15"])
def test_dump_yaml_quotes_a_string_either_yaml_version_reads_as_a_number(name):
    import yaml

    text = dump_yaml({"run_dir": name})
    assert load_yaml(text) == {"run_dir": name} and yaml.safe_load(text) == {"run_dir": name}


# ------------------------------------------------------------------ 4. merge keys
@pytest.mark.parametrize("text,line", [("<<: {lr: 0.1, lr: 0.2}\n", 1), ("seed: 3\nenv_kwargs:\n  a: 1\n  <<: {a: 2}\n", 4)])
def test_a_merge_key_is_refused_naming_file_and_line(text, line, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "m.yaml", text)
    code, _, err = run_main(["train", "--config", "m.yaml", "--dry-run"], capsys)
    error_line(code, err, f"proxima train: error: --config m.yaml: holds a YAML merge key (<<, line {line}); ")


def test_a_quoted_merge_key_is_an_ordinary_unknown_field(tmp_path):
    with pytest.raises(ConfigError, match="unknown field '<<'"):
        from_dict(load_config_file(str(write(tmp_path / "q.yaml", "'<<': 1\n"))), source="q.yaml")


# ------------------------------------------------------------------ 5. report on a hand-edited config.yaml
def test_report_of_a_run_whose_config_yaml_says_stop_episodes_inf(tmp_path, capsys):
    run_dir = tmp_path / "s"
    assert cli.main(["train", "CartPole-v1", *SMALL, "--total-timesteps", "64", "--stop-return", "1000",
                     "--run-dir", str(run_dir), "--quiet"]) == 0
    text = (run_dir / "config.yaml").read_text()
    assert "stop_episodes: 20\n" in text
    (run_dir / "config.yaml").write_text(text.replace("stop_episodes: 20\n", "stop_episodes: .inf\n")
                                         .replace("total_timesteps: 64\n", "total_timesteps: 100000\n"))
    (run_dir / "eval.json").unlink(missing_ok=True)
    capsys.readouterr()
    code, out, err = run_main(["report", str(run_dir), "--episodes", "1"], capsys)
    assert code == 0 and "Traceback" not in err, err
    assert (run_dir / "report.md").is_file()


# ------------------------------------------------------------------ 6. --hidden-sizes 64 64
@pytest.mark.parametrize("argv", [["--hidden-sizes", "32", "16"], ["--hidden-sizes=32", "16"], ["--hidden-sizes", "32,", "16"],
                                  ["--hidden-sizes", "32 16"], ["--hidden-sizes", "32,16"]])
def test_hidden_sizes_take_widths_separated_by_spaces_as_the_help_says(argv, capsys):
    code, out, err = run_main(["train", *argv, "--dry-run"], capsys)
    assert code == 0, err
    assert "hidden_sizes:\n- 32\n- 16\n" in out and "env_id: CartPole-v1\n" in out


def test_hidden_sizes_words_stop_at_the_env_id(capsys):
    code, out, err = run_main(["train", "--hidden-sizes", "32", "48", "Acrobot-v1", "--dry-run"], capsys)
    assert code == 0, err
    assert "hidden_sizes:\n- 32\n- 48\n" in out and "env_id: Acrobot-v1\n" in out


# ------------------------------------------------------------------ 7. a --preset the file overrides entirely
def _fast_fields() -> dict:
    from proxima.presets import presets_for

    return dict(presets_for("CartPole-v1")["fast"]["config"])


def test_a_preset_every_field_of_which_the_file_sets_gets_a_note(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    values = {**_fast_fields(), "num_envs": 8, "total_timesteps": 4096, "eval_episodes": 0}
    write(tmp_path / "full.yaml", dump_yaml(values))
    code, _, err = run_main(["train", "--preset", "fast", "--config", "full.yaml", "--dry-run"], capsys)
    assert code == 0, err
    assert "proxima train: note: --preset fast changes nothing: --config full.yaml sets every field it sets (backend, " in err
    code, _, err = run_main(["train", "--preset", "fast", "--config", "full.yaml", "--dry-run", "--quiet"], capsys)
    assert code == 0 and "--preset fast changes nothing" not in err
    del values["lr"]  # the preset's lr now applies: no note
    write(tmp_path / "part.yaml", dump_yaml(values))
    code, _, err = run_main(["train", "--preset", "fast", "--config", "part.yaml", "--dry-run"], capsys)
    assert code == 0 and "changes nothing" not in err
    code, _, err = run_main(["train", "--preset", "fast", "--config", "part.yaml", "--lr", "0.002", "--dry-run"], capsys)
    assert code == 0 and "--config part.yaml and the flags set every field it sets" in err


# ------------------------------------------------------------------ 8. wording
@pytest.mark.parametrize("kw,expected", [
    (dict(hidden_sizes="64,64"), "PPOConfig.hidden_sizes = '64,64': expected a list of ints, e.g. [64, 64]"),
    (dict(env_kwargs="{}"), "PPOConfig.env_kwargs = '{}': expected a dict of keyword arguments, e.g. {'continuous': True}"),
    (dict(amp=None), "PPOConfig.amp = None: expected one of none, bf16, fp16")])
def test_python_api_type_refusals_speak_python(kw, expected):
    with pytest.raises(ConfigError) as info:
        validate(PPOConfig(**kw), python=True)
    assert str(info.value).startswith(expected), str(info.value)


def test_a_null_choice_from_a_file_lists_the_choices():
    with pytest.raises(ConfigError, match=r"^c\.yaml: field 'amp' got None, expected one of none, bf16, fp16$"):
        from_dict(load_yaml("amp: null"), source="c.yaml")


def test_an_rlhf_key_in_a_ppo_file_is_named_an_rlhf_setting(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "r.yaml", "kl_coef: 0.1\n")
    code, _, err = run_main(["train", "--config", "r.yaml", "--dry-run"], capsys)
    line = error_line(code, err, "proxima train: error: r.yaml: unknown field 'kl_coef': it is a `proxima rlhf` setting")
    assert "did you mean" not in line


@pytest.mark.parametrize("env_id", ["", " "])
def test_presets_refuses_an_empty_env_id(env_id, capsys):
    code, out, err = run_main(["presets", env_id], capsys)
    error_line(code, err, f"proxima presets: error: ENV_ID {env_id!r}: empty; name an env (e.g. CartPole-v1)")
    assert out == ""


def test_resume_keeps_a_numeric_run_dir_after_hidden_sizes(tmp_path, monkeypatch, capsys):
    """Day review: `proxima resume --hidden-sizes 64,64 7` took the run directory 7 as a width."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "2", "--num-steps", "16", "--total-timesteps", "32",
                             "--eval-episodes", "0", "--no-progress", "--run-dir", "7"], capsys)
    assert code == 0, err
    code, _, err = run_main(["resume", "--hidden-sizes", "64,64", "7"], capsys)  # complete: trains nothing
    assert code == 0, err


def test_resume_joins_the_widths_as_train_does(tmp_path, monkeypatch, capsys):
    """Final review: `proxima resume RUN --hidden-sizes 32 32` (the train line's widths) said
    "unrecognized arguments: 32" once resume no longer joined them."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "2", "--num-steps", "16", "--total-timesteps", "32",
                             "--eval-episodes", "0", "--no-progress", "--hidden-sizes", "32", "32", "--run-dir", "r"], capsys)
    assert code == 0, err
    code, _, err = run_main(["resume", "r", "--hidden-sizes", "32", "32"], capsys)  # complete: trains nothing
    assert code == 0, err
