"""Review 31 (checkpoints of an older Proxima): a field the run's recorded config lacks is read as what
that version ran as (config.ABSENT_MEANS), not today's default: a run from before --flush-denormal
resumes without flushing and takes --no-flush-denormal, one from before --encoder is an MLP run
(--encoder mlp and auto accepted, cnn refused naming mlp). The "old" run here is a tiny current run
whose checkpoint and config.yaml had the newer fields taken out, as an older version wrote them."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch
import yaml

from cli_helpers import TINY_RUN, error_line, run_main, snapshot
from proxima import checkpoint as ckpt
from proxima import cli
from proxima import config as config_module

#: PPOConfig's fields in Proxima's first version (e7e98e4): every later one is in ABSENT_MEANS
FIRST_FIELDS = {
    "env_id", "backend", "vector", "num_envs", "total_timesteps", "num_steps", "lr", "anneal_lr", "gamma", "gae_lambda",
    "num_minibatches", "update_epochs", "norm_adv", "clip_coef", "clip_vloss", "ent_coef", "vf_coef", "max_grad_norm",
    "target_kl", "bootstrap_truncation", "hidden_sizes", "activation", "norm_obs", "norm_reward", "clip_obs", "clip_reward",
    "seed", "device", "threads", "deterministic", "compile", "compile_mode", "cudagraphs", "amp", "run_dir",
    "checkpoint_every", "keep_checkpoints", "eval_episodes", "progress", "debug_checks", "plot"}

#: what a run of commit 35a5ee2 (before flush_denormal and encoder) lacks, and what its code ran as
OLD_ABSENT = {"encoder": "mlp", "flush_denormal": False, "keep_host_memory": False, "stop_return": None, "stop_episodes": 20}


def test_every_field_added_since_the_first_version_says_what_its_absence_means():
    fields = {f.name for f in dataclasses.fields(config_module.PPOConfig)}
    absent = getattr(config_module, "ABSENT_MEANS", {})
    assert set(absent) == fields - FIRST_FIELDS
    for name, value in OLD_ABSENT.items():
        assert absent[name] == value, name
    cfg = config_module.recorded_config({}, "old")
    config_module.validate(cfg)
    assert cfg.env_kwargs == {} and cfg.env_kwargs is not absent["env_kwargs"]  # never the table's own dict


@pytest.fixture(scope="module")
def old_template(tmp_path_factory):
    """A finished 2-iteration CartPole run whose checkpoint and config.yaml lack OLD_ABSENT's fields."""
    run = tmp_path_factory.mktemp("old") / "run"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "128", "--run-dir", str(run), "--quiet"]) == 0
    path = ckpt.list_checkpoints(run)[-1]
    state = torch.load(path, weights_only=True)
    assert state["config"]["flush_denormal"] is True and state["config"]["encoder"] == "mlp"
    for name in OLD_ABSENT:
        del state["config"][name]
    torch.save(state, path)
    values = yaml.safe_load((run / "config.yaml").read_text())
    for name in OLD_ABSENT:
        del values[name]
    (run / "config.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
    return run


@pytest.fixture
def old_run(old_template, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(old_template, run)
    return run


def _recorded(run) -> dict:
    return yaml.safe_load((run / "config.yaml").read_text())


def test_an_old_run_resumes_as_it_trained_without_flushing_denormals(old_run, capsys):
    code, _, err = run_main(["resume", str(old_run), "--no-flush-denormal"], capsys)
    assert code == 0, err
    assert "flush" not in err  # no refusal, and no note that config.yaml (which lacks it) differs
    recorded = _recorded(old_run)
    for name, value in OLD_ABSENT.items():
        assert recorded[name] == value, (name, recorded[name])


def test_a_plain_resume_of_an_old_run_records_what_it_ran_as_and_trains_on_so(old_run, capsys):
    code, _, err = run_main(["resume", str(old_run), "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0, err
    assert "differs" not in err, err
    assert _recorded(old_run)["flush_denormal"] is False
    state = torch.load(ckpt.list_checkpoints(old_run)[-1], weights_only=True)
    assert state["global_step"] == 192
    assert {name: state["config"][name] for name in OLD_ABSENT} == OLD_ABSENT


def test_flush_denormal_on_an_old_run_is_refused_naming_false(old_run, capsys):
    before = snapshot(old_run)
    code, _, err = run_main(["resume", str(old_run), "--flush-denormal"], capsys)
    error_line(code, err, "--flush-denormal: cannot change when resuming (the run was trained with flush_denormal false)")
    assert snapshot(old_run) == before


def test_a_current_run_still_refuses_no_flush_denormal_naming_true(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run), "--quiet"]) == 0
    capsys.readouterr()
    code, _, err = run_main(["resume", str(run), "--no-flush-denormal"], capsys)
    error_line(code, err, "--no-flush-denormal: cannot change when resuming (the run was trained with flush_denormal true)")


@pytest.mark.parametrize("encoder", ["mlp", "auto"])
def test_train_resume_of_an_old_mlp_run_takes_encoder_mlp_and_auto(old_run, encoder, capsys):
    code, out, err = run_main(["train", "--resume", str(old_run), "--encoder", encoder, "--dry-run"], capsys)
    assert code == 0, err
    assert "encoder: mlp" in out.splitlines()
    assert "flush_denormal: false" in out.splitlines()


def test_train_resume_of_an_old_mlp_run_refuses_encoder_cnn_naming_mlp(old_run, capsys):
    code, _, err = run_main(["train", "--resume", str(old_run), "--encoder", "cnn", "--dry-run"], capsys)
    error_line(code, err, "--encoder 'cnn': cannot change when resuming (the run was trained with 'mlp')")
