"""CLI flags a review found taken wrongly (part A): --video names that are no file, empty strings read
as "no value", one-sample minibatches without advantage normalization, e-notation integers, plot's
run directories, RLHF's wording of a refused value, and --nproc above the CPU count. Each refusal is
one line naming the flag, file or path (exit 2), and nothing is written."""

from __future__ import annotations

import csv
import math
import sys
import warnings
from types import SimpleNamespace

import pytest
from cli_helpers import TINY_RUN, tiny_cartpole_run, error_line, one_error_line, run_main, snapshot

from proxima import launch
from proxima.config import ConfigError, PPOConfig, coerce, from_dict, validate
from proxima.rlhf import config as rlhf_config

SMALL = TINY_RUN


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished 2-iteration CartPole run (a checkpoint to evaluate, a metrics.csv to plot)."""
    return tiny_cartpole_run(tmp_path_factory, "flags2")


# ------------------------------------------------------------------------------------ eval --video
@pytest.mark.parametrize("video, example", [("", "episode.mp4"), (" ", "episode.mp4"), ("/", "/episode.mp4"),
                                            ("..", "../episode.mp4"), (".", "./episode.mp4"), ("clips/", "clips/episode.mp4"),
                                            ("clips", "clips/episode.mp4"), ("clips/..", "clips/../episode.mp4")])
def test_a_video_name_that_is_no_file_is_refused_before_evaluating(run, tmp_path, capsys, monkeypatch, video, example):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "clips").mkdir()  # an existing directory: once written as clips.mp4 beside it
    before = snapshot(tmp_path)
    code, out, err = run_main(["eval", str(run), "--episodes", "1", "--video", video], capsys)
    shown = video if video.strip() else repr(video)
    assert one_error_line(err, "proxima eval") == f"--video {shown}: give a file name, e.g. {example}"
    assert (code, out) == (2, "")
    assert snapshot(tmp_path) == before  # no clips.mp4, no '...mp4'


# ------------------------------------------------------------------------------------ empty strings
@pytest.mark.parametrize("flag, value, expected", [
    ("--run-dir", "", "a directory, or none for the default"), ("--run-dir", " ", "a directory, or none for the default"),
    ("--stop-return", "", "a number or none"), ("--target-kl", "", "a number or none"), ("--lr", "  ", "a number"),
    ("--num-envs", "", "an integer"), ("--hidden-sizes", " ", "a comma-separated list of integers"),
    ("--activation", "", "one of tanh, relu"), ("--norm-obs", "", "true or false")])
def test_an_empty_flag_value_is_refused_not_read_as_the_default(tmp_path, capsys, monkeypatch, flag, value, expected):
    monkeypatch.chdir(tmp_path)
    if flag == "--norm-obs":  # a bool flag takes no value: the empty string reaches it only from a file or the API
        with pytest.raises(ConfigError, match=r"^--norm-obs '': empty; give true or false$"):
            coerce("norm_obs", "", source="flag")
        return
    code, out, err = run_main(["train", "CartPole-v1", "--dry-run", "--quiet", flag, value], capsys)
    assert error_line(code, err).endswith(f"{flag} {value!r}: empty; give {expected}")
    assert out == "" and list(tmp_path.iterdir()) == []  # no runs/ and no directory named " "


def test_an_empty_value_in_a_config_file_or_a_ppoconfig_is_refused_and_none_still_unsets(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("stop_return: ''\n")
    code, _, err = run_main(["train", "CartPole-v1", "--config", str(path), "--dry-run"], capsys)
    assert error_line(code, err).endswith(f"{path}: field 'stop_return' got '': empty; give a number or none")
    with pytest.raises(ConfigError, match=r"^PPOConfig\.run_dir = ' ': empty; give a directory, or None for the default$"):
        validate(PPOConfig(run_dir=" "))
    # the explicit unset is kept: `none` on the command line, null in a file
    assert from_dict({"stop_return": "none", "target_kl": None, "run_dir": "null"}).stop_return is None
    code, out, err = run_main(["train", "CartPole-v1", "--preset", "fast", "--stop-return", "none", "--dry-run", "--quiet"], capsys)
    assert code == 0, err


def test_rlhf_refuses_an_empty_value_as_ppo_does():
    with pytest.raises(ConfigError, match=r"^--tokenizer '': empty; give a string or none$"):
        rlhf_config.from_dict({"tokenizer": ""}, source="command line")
    with pytest.raises(ConfigError, match=r"^f.yaml: field 'steps' got ' ': empty; give an integer$"):
        rlhf_config.from_dict({"steps": " "}, source="f.yaml")
    assert rlhf_config.from_dict({"tokenizer": "none"}, source="command line").tokenizer is None


# ------------------------------------------------------------------------------------ --no-norm-adv
def test_one_sample_minibatches_train_without_advantage_normalization(tmp_path, capsys):
    cfg = dict(num_envs=2, num_steps=2, num_minibatches=4, total_timesteps=8)
    with pytest.raises(ConfigError, match="advantage normalization needs at least 2 .*add --no-norm-adv"):
        validate(PPOConfig(**cfg))
    validate(PPOConfig(**cfg, norm_adv=False))
    # the whole batch still needs 2 rows: its explained variance (torch warns and gives NaN for one)
    with pytest.raises(ConfigError, match=r"^one batch \(--num-envs 1 x --num-steps 1\) is 1 step; .*explained variance"):
        validate(PPOConfig(num_envs=1, num_steps=1, num_minibatches=1, total_timesteps=8, norm_adv=False))
    run_dir = tmp_path / "r"
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no std or var of one sample anywhere in the update
        code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "2", "--num-steps", "2", "--num-minibatches", "4",
                                 "--no-norm-adv", "--total-timesteps", "8", "--eval-episodes", "0", "--no-progress",
                                 "--threads", "1", "--run-dir", str(run_dir), "--quiet"], capsys)
    assert code == 0, err
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    assert all(math.isfinite(float(r[k])) for r in rows for k in ("losses/policy_loss", "losses/value_loss"))


# ------------------------------------------------------------------------------------ integers
def test_hidden_sizes_take_e_notation_as_other_integer_fields_do():
    assert coerce("num_envs", "1e3", source="flag") == 1000
    assert coerce("hidden_sizes", "1e3,64", source="flag") == [1000, 64]
    assert coerce("hidden_sizes", ["2.5e2", 64], source="c.yaml") == [250, 64]
    with pytest.raises(ConfigError, match=r"^--hidden-sizes '1.5,64': expected a comma-separated list of integers$"):
        coerce("hidden_sizes", "1.5,64", source="flag")


def test_plot_smooth_takes_e_notation(run, tmp_path, capsys):
    out = tmp_path / "c.png"
    code, _, err = run_main(["plot", str(run), "--smooth", "1e1", "--out", str(out)], capsys)
    assert code == 0 and out.is_file(), err
    code, _, err = run_main(["plot", str(run), "--smooth", "1.5", "--out", str(tmp_path / "d.png")], capsys)
    error_line(code, err, "--smooth: invalid int value: '1.5'")


# ------------------------------------------------------------------------------------ plot's directories
def test_plot_refuses_a_run_directory_that_does_not_exist_or_is_a_file(run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    before = snapshot(tmp_path)
    code, out, err = run_main(["plot", str(run), "Acrobot", "--out", "two.png"], capsys)
    assert one_error_line(err, "proxima plot") == "Acrobot: no such directory"  # as plot_runs says it of one run
    code2, _, err = run_main(["plot", "afile"], capsys)
    assert one_error_line(err, "proxima plot") == "afile: a file, not a run directory"  # not "--out afile/curve.png"
    assert (code, code2, out) == (2, 2, "")
    assert snapshot(tmp_path) == before
    # a folder that exists but holds no run is still skipped with a note
    (tmp_path / "notes").mkdir()
    code, out, err = run_main(["plot", str(run), "notes", "--out", "two.png"], capsys)
    assert code == 0 and "note: skipping notes" in err and (tmp_path / "two.png").is_file(), err


def test_report_refuses_a_run_directory_that_does_not_exist_among_several(run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["report", str(run), "Acrobot", "--out", "two.md", "--episodes", "0"], capsys)
    assert one_error_line(err, "proxima report") == "Acrobot: no such directory"  # not skipped with a note
    assert code == 2 and not (tmp_path / "two.md").exists()


# ------------------------------------------------------------------------------------ RLHF wording
def test_rlhf_names_a_refused_flag_and_suggests_an_alias_as_ppo_does(tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"^--steps '1.5': expected an integer$"):
        rlhf_config.from_dict({"steps": "1.5"}, source="command line")
    assert rlhf_config.from_dict({"steps": "1e3"}, source="command line").steps == 1000
    code, _, err = run_main(["rlhf", "--steps", "1.5"], capsys)
    error_line(code, err, "--steps '1.5': expected an integer")
    path = tmp_path / "r.yaml"
    path.write_text("learnig_rate: 0.1\n")  # learning_rate itself is lr's other name (test_rlhf42)
    code, _, err = run_main(["rlhf", "--config", str(path)], capsys)
    error_line(code, err, f"{path}: unknown field 'learnig_rate' (did you mean 'lr'?)")


# ------------------------------------------------------------------------------------ --nproc
def test_a_typed_nproc_far_above_the_cpus_is_refused_on_a_new_run(tmp_path, capsys, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the launcher started torchrun")

    monkeypatch.setattr(launch, "subprocess", SimpleNamespace(Popen=refuse))
    monkeypatch.setattr(launch.os, "cpu_count", lambda: 2)
    argv = ["train", "CartPole-v1", "--nproc", "1000", *SMALL, "--run-dir", str(tmp_path / "r")]
    monkeypatch.setattr(sys, "argv", ["proxima", *argv])
    code, _, err = run_main(argv, capsys)
    assert one_error_line(err, "proxima train") == (
        "--nproc 1000: must be at most 8 (4 x this machine's 2 CPUs); give --nproc 8 or fewer (several machines: "
        "torchrun on each, docs/distributed.md)")
    assert code == 2 and not (tmp_path / "r").exists()
    launch.check_nproc(8)  # a few more processes than cores still run (a multi-process test on a small machine)
