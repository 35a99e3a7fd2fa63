"""What a --config file or a PPOConfig built in Python may hold, second round: a NaN keeps its file,
every refusal of a file's value names the file (the env, the device and the memory checks too),
a key given twice, numpy scalars, YAML 1.2's ``1e-3``, and an empty env_id. Each refusal is one
line naming the field and where it came from, exit 2, nothing written."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from cli_helpers import error_line, run_main

from proxima.config import ConfigError, PPOConfig, dump_yaml, from_dict, load_config_file, load_yaml, source_of, validate, yaml_alias_error


def write(path, text: str):
    path.write_text(text)
    return path


# ------------------------------------------------------------------ 1. a NaN from the file keeps its file
def test_a_nan_from_the_config_file_is_refused_naming_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "nan.yaml", "lr: .nan\n")
    code, out, err = run_main(["train", "--config", "nan.yaml", "--dry-run"], capsys)
    error_line(code, err, "proxima train: error: nan.yaml: lr nan: must be a finite number")
    assert out == "" and sorted(p.name for p in tmp_path.iterdir()) == ["nan.yaml"]


def test_source_of_a_nan_is_the_source_that_set_it():
    cfg = from_dict({"lr": math.nan, "checkpoint_minutes": math.nan}, source="f.yaml")
    assert source_of(cfg, "lr") == source_of(cfg, "checkpoint_minutes") == "f.yaml"
    cfg.lr = 0.1  # set by a flag or the code afterwards: no longer the file's
    assert source_of(cfg, "lr") is None


def test_a_typed_flag_equal_to_the_files_value_is_named_as_the_flag(tmp_path, capsys):
    config = write(tmp_path / "big.yaml", "num_envs: 64\n")
    code, _, err = run_main(["train", "--config", str(config), "--num-envs", "64", "--total-timesteps", "4096", "--dry-run"], capsys)
    line = error_line(code, err, "proxima train: error: one batch (--num-envs 64 x --num-steps 128")
    assert str(config) not in line


# ------------------------------------------------------------------ 2. every refusal of a file's value names the file
@pytest.mark.parametrize("text, want", [
    ("device: cuda:x\n", "big.yaml: device 'cuda:x': not a torch device"),
    ("num_envs: 64\n", "big.yaml: num_envs: one batch (num_envs 64 x --num-steps 128 = 8,192 steps) is larger than "
                       "--total-timesteps 4096: lower num_envs in big.yaml or --num-steps, or raise --total-timesteps"),
    ("num_envs: 64\nnum_steps: 256\n", "big.yaml: num_envs, num_steps: one batch (num_envs 64 x num_steps 256"),
    ("eval_episodes: 1000000000000\n", "big.yaml: eval_episodes 1,000,000,000,000: the evaluation builds "
                                       "one env per episode"),
    ("backend: gymnasium\nenv_kwargs: {nope: 1}\n", "big.yaml: env_kwargs: env 'CartPole-v1' takes no argument 'nope'"),
])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "train"])
def test_a_refusal_of_a_config_file_value_names_the_file(text, want, dry_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "big.yaml", text)
    argv = ["train", "--config", "big.yaml", "--total-timesteps", "4096", "--run-dir", "run", "--quiet"]
    code, out, err = run_main(argv + (["--dry-run"] if dry_run else []), capsys)
    line = error_line(code, err, f"proxima train: error: {want}")
    assert line.startswith(f"proxima train: error: {want}")
    assert out == "" and sorted(p.name for p in tmp_path.iterdir()) == ["big.yaml"]  # nothing written


def test_the_batch_line_names_total_timesteps_when_the_file_set_it(tmp_path, capsys):
    config = write(tmp_path / "t.yaml", "total_timesteps: 100\n")
    code, _, err = run_main(["train", "--config", str(config), "--dry-run"], capsys)
    error_line(code, err, f"proxima train: error: {config}: total_timesteps: one batch (--num-envs 4 x --num-steps 128 = 512 steps) "
                          f"is larger than total_timesteps 100: lower --num-envs or --num-steps, or raise total_timesteps in {config}")


def test_a_swept_value_is_named_as_the_flag_though_the_file_sets_the_field(tmp_path, capsys):
    config = write(tmp_path / "p.yaml", "lr: 0.001\n")
    code, _, err = run_main(["train", "--config", str(config), "--sweep", "lr=-1,0.001", "--dry-run"], capsys)
    error_line(code, err, "proxima train: error: --sweep lr: value -1.0: must be positive")


# ------------------------------------------------------------------ 3. a key given twice
def test_a_key_given_twice_in_the_config_file_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "dup.yaml", "lr: 0.001\nenv_id: CartPole-v1\nnum_envs: 4\nlr: 0.00025\n")
    code, out, err = run_main(["train", "--config", "dup.yaml", "--dry-run"], capsys)
    error_line(code, err, "proxima train: error: --config dup.yaml: 'lr' given twice (lines 1 and 4)")
    assert out == ""


@pytest.mark.parametrize("text, want", [
    ("env_kwargs: {g: 1.0, g: 2.0}\n", "'g' given twice (both on line 1)"),
    ("env_kwargs:\n  g: 1.0\n  l: 2\n  g: 3.0\n", "'g' given twice (lines 2 and 4)"),
])
def test_a_key_given_twice_in_env_kwargs_is_refused(text, want, tmp_path, capsys):
    config = write(tmp_path / "dup.yaml", text)
    code, _, err = run_main(["train", "--config", str(config), "--dry-run"], capsys)
    error_line(code, err, f"proxima train: error: --config {config}: {want}")


def test_load_yaml_refuses_a_key_twice_and_keeps_distinct_keys():
    with pytest.raises(yaml_alias_error(), match=r"^'a' given twice \(lines 1 and 2\)$"):
        load_yaml("a: 1\na: 2\n")
    assert load_yaml("a: 1\nb: {a: 2}\nc: [{a: 3}, {a: 4}]\n") == {"a": 1, "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]}


# ------------------------------------------------------------------ 4. numpy scalars
def test_validate_makes_numpy_scalars_python_values():
    cfg = PPOConfig(lr=np.float64(1e-3), num_envs=np.int64(4), hidden_sizes=[np.int64(64), np.int64(32)], anneal_lr=np.bool_(False),
                    target_kl=np.float32(0.5), env_kwargs={"g": np.float64(9.5), "n": [np.int64(1)]})
    validate(cfg)
    assert (cfg.lr, cfg.num_envs, cfg.hidden_sizes, cfg.anneal_lr, cfg.target_kl, cfg.env_kwargs) == (
        0.001, 4, [64, 32], False, 0.5, {"g": 9.5, "n": [1]})
    assert {type(v) for v in (cfg.lr, cfg.num_envs, *cfg.hidden_sizes, cfg.anneal_lr, cfg.target_kl, cfg.env_kwargs["g"])} \
        == {float, int, bool}
    assert load_yaml(dump_yaml(cfg.to_dict()))["lr"] == 0.001  # config.yaml can be written, and reads back


def test_a_python_run_with_a_numpy_learning_rate_trains_and_records_it(tmp_path):
    import proxima

    cfg = PPOConfig(lr=np.float64(1e-3), num_envs=np.int64(4), total_timesteps=128, num_steps=16, num_minibatches=2, update_epochs=1,
                    eval_episodes=0, threads=1, progress=False)
    run_dir, _ = proxima.train(cfg, run_dir=tmp_path / "run", quiet=True)
    recorded = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert recorded["lr"] == 0.001 and recorded["num_envs"] == 4


# ------------------------------------------------------------------ 5. YAML 1.2 floats
def test_a_float_without_a_dot_is_a_float_in_env_kwargs(tmp_path, capsys):
    config = write(tmp_path / "g.yaml", "env_id: Pendulum-v1\nbackend: gymnasium\nenv_kwargs: {g: 1e1}\n")
    code, out, err = run_main(["train", "--config", str(config), "--dry-run"], capsys)
    assert code == 0, err
    g = yaml.safe_load(out)["env_kwargs"]["g"]
    assert g == 10.0 and isinstance(g, float)
    assert load_config_file(str(config))["env_kwargs"] == {"g": 10.0}


def test_yaml12_floats_change_no_other_scalar():
    values = load_yaml("a: 1e-3\nb: 1.0e3\nc: -.5E+2\nd: 10\ne: 1_000\nf: '1e1'\ng: 0x10\nh: 1.5\ni: 1e\nj: e5\nk: 2020-01-01\n"
                       "l: .nan\nm: 1.0e-3\n")
    assert {k: v for k, v in values.items() if k not in ("k", "l")} == {
        "a": 0.001, "b": 1000.0, "c": -50.0, "d": 10, "e": "1_000", "f": "1e1", "g": 16, "h": 1.5, "i": "1e", "j": "e5", "m": 0.001}
    assert [type(values[k]) for k in "ad"] == [float, int]  # 1_000: YAML 1.2 text (an int field still reads it)
    assert str(values["k"]) == "2020-01-01" and math.isnan(values["l"])


def test_a_string_that_reads_as_a_float_is_quoted_when_written():
    text = dump_yaml({"env_kwargs": {"mode": "1e1"}, "lr": 1e-5})
    assert load_yaml(text) == {"env_kwargs": {"mode": "1e1"}, "lr": 1e-5}


def test_a_date_in_env_kwargs_is_still_refused(tmp_path, capsys):
    config = write(tmp_path / "d.yaml", "env_kwargs: {a: 2020-01-01}\n")
    code, _, err = run_main(["train", "--config", str(config), "--dry-run"], capsys)
    error_line(code, err, f"{config}: field 'env_kwargs': key 'a' holds date")


# ------------------------------------------------------------------ 6. an empty env_id
@pytest.mark.parametrize("value", ['""', "' '"])
def test_an_empty_env_id_in_the_config_file_names_no_flag(value, tmp_path, capsys):
    config = write(tmp_path / "e.yaml", f"env_id: {value}\n")
    code, _, err = run_main(["train", "--config", str(config), "--dry-run"], capsys)
    shown = repr(yaml.safe_load(f"v: {value}")["v"])
    line = error_line(code, err, f"proxima train: error: {config}: env_id {shown}: must name an environment")
    assert "--env-id" not in line


def test_an_empty_env_id_in_python_names_the_field():
    with pytest.raises(ConfigError, match=r"^env_id '': must name an environment"):
        validate(PPOConfig(env_id=""))


def test_validate_makes_zero_dim_arrays_and_tensors_python_values():
    import torch

    cfg = PPOConfig(lr=torch.logspace(-4, -2, 3)[1], num_envs=np.array(4), hidden_sizes=[torch.tensor(64)])
    validate(cfg)
    assert (type(cfg.lr), cfg.num_envs, cfg.hidden_sizes) == (float, 4, [64]) and type(cfg.num_envs) is int
    assert load_yaml(dump_yaml(cfg.to_dict()))["lr"] == pytest.approx(1e-3)


@pytest.mark.parametrize("flag", ["--lr", "--clip-coef", "--max-grad-norm"])
def test_a_positive_value_that_is_zero_in_float32_is_refused(tmp_path, monkeypatch, capsys, flag):
    # 1e-46 passed "must be positive" and became 0.0 in the run's float32 tensors (no learning, or all clipped)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", flag, "1e-46", "--dry-run", "--no-flush-denormal"], capsys)
    error_line(code, err, f"proxima train: error: {flag} 1e-46: must be above 7.006e-46 (smaller values are 0 in float32")
    code, _, err = run_main(["train", flag, "1e-45", "--dry-run", "--quiet", "--no-flush-denormal"], capsys)
    assert code == 0, err
    # flushing denormals (the default) makes every float32 below the smallest normal one 0: 1e-44 trained at lr 0
    code, _, err = run_main(["train", flag, "1e-44", "--dry-run"], capsys)
    error_line(code, err, f"proxima train: error: {flag} 1e-44: must be at least 1.175e-38 (float32's smallest normal value")
    code, _, err = run_main(["train", flag, "1.2e-38", "--dry-run", "--quiet"], capsys)
    assert code == 0, err


def test_a_bad_vector_value_gets_the_error_line_alone_not_the_native_note_before_it(tmp_path, monkeypatch, capsys):
    # hypothesis found `train CartPole-v1 --vector 0`: the "applies to the gymnasium backend only" note, then the error
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--vector", "0", "--dry-run"], capsys)
    assert code == 2 and err.splitlines() == ["proxima train: error: --vector '0': must be one of sync, async"], err
    code, _, err = run_main(["train", "CartPole-v1", "--vector", "async", "--dry-run"], capsys)
    assert code == 0 and "--vector async: applies to the gymnasium backend only" in err, err
