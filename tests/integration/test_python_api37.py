"""Review s37 (Python API and config): a Python resume's env and run_dir, a Trainer used directly
(its directory claimed, the caller's RNG put back), the whole-iterations note over a batch the user
set, the endless-env note for envs with a step limit, and std_return's wording."""

from __future__ import annotations

import hashlib
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from proxima import PPOConfig, train
from proxima.config import ConfigError
from proxima.rundir import RunDirError
from proxima.signals import TrainingInterrupted, from_python
from proxima.trainer import Trainer, _episode_limit, _note_given_total
from tests.cli_helpers import TINY_RUN, run_main

TINY = dict(num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, eval_episodes=0, progress=False, threads=1)


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    """A finished 2-iteration CartPole run trained from Python."""
    run_dir = tmp_path_factory.mktemp("api37") / "run"
    train(PPOConfig(env_id="CartPole-v1", total_timesteps=128, **TINY), run_dir=run_dir, quiet=True)
    return run_dir


def _digest(path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_python_resume_refuses_another_env(cartpole_run):
    before = (cartpole_run / "metrics.csv").read_text()
    with pytest.raises(ConfigError) as e:
        train(PPOConfig(env_id="Acrobot-v1", total_timesteps=192, **TINY), run_dir=cartpole_run, resume="auto", quiet=True)
    assert "the run trains 'CartPole-v1', not env_id='Acrobot-v1'" in str(e.value)
    assert "\n" not in str(e.value)
    assert (cartpole_run / "metrics.csv").read_text() == before  # nothing trained on


def test_python_resume_refuses_config_run_dir_elsewhere(cartpole_run, tmp_path):
    other = tmp_path / "other"
    with pytest.raises(ConfigError) as e:
        train(PPOConfig(env_id="CartPole-v1", run_dir=str(other), total_timesteps=192, **TINY), resume=cartpole_run, quiet=True)
    assert "a run resumes in its own directory" in str(e.value) and str(other) in str(e.value)
    assert not str(e.value).startswith("--run-dir")  # Python words: the caller typed no flag
    assert not other.exists()


def test_trainer_used_directly_refuses_a_directory_holding_a_run(cartpole_run):
    ckpt = sorted((cartpole_run / "checkpoints").glob("step_*.pt"))[-1]
    before, rows = _digest(ckpt), (cartpole_run / "metrics.csv").read_text()
    trainer = Trainer(PPOConfig(env_id="CartPole-v1", total_timesteps=128, seed=2, **TINY), run_dir=cartpole_run, quiet=True)
    try:
        with pytest.raises(RunDirError) as e:
            trainer.run()
    finally:
        trainer.close()
    assert f"{cartpole_run} is not empty" in str(e.value) and "it holds another run" in str(e.value)
    # the advice is in train()'s words: a Trainer's caller has no flag to type
    assert "train(..., resume='auto')" in str(e.value) and "--overwrite" not in str(e.value), e.value
    assert _digest(ckpt) == before and (cartpole_run / "metrics.csv").read_text() == rows
    assert not (cartpole_run / ".lock").exists() and not any(p.name.startswith(".lock") for p in cartpole_run.iterdir())


def test_trainer_used_directly_trains_a_new_directory_and_releases_it(tmp_path):
    run_dir = tmp_path / "fresh"
    trainer = Trainer(PPOConfig(env_id="CartPole-v1", total_timesteps=64, **TINY), run_dir=run_dir, quiet=True)
    try:
        assert trainer.run() == run_dir
    finally:
        trainer.close()
    assert len((run_dir / "metrics.csv").read_text().splitlines()) == 2  # header + one iteration
    # released: train() resumes it in the same process
    _, policy = train(PPOConfig(env_id="CartPole-v1", total_timesteps=128, **TINY), run_dir=run_dir, resume="auto", quiet=True)
    assert policy.global_step == 128


def test_trainer_close_puts_back_the_callers_rng(tmp_path):
    random.seed(42)
    np.random.seed(42)
    torch.manual_seed(42)
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(42)
    np.random.seed(42)
    torch.manual_seed(42)
    trainer = Trainer(PPOConfig(env_id="CartPole-v1", total_timesteps=64, **TINY), run_dir=tmp_path / "r", quiet=True)
    try:
        trainer.run()
    finally:
        trainer.close()
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


def test_note_over_a_preset_total_when_the_batch_is_typed(capsys):
    code, _, err = run_main(["train", "Pendulum-v1", "--num-envs", "2048", "--update-epochs", "1", "--num-minibatches", "1",
                             "--dry-run"], capsys)
    assert code == 0
    assert ("proxima: note: preset Pendulum-v1/default: total_timesteps 300,000 is not a multiple of the batch "
            "(262,144 steps = num_envs x num_steps): training 262,144 steps (1 iteration)") in err
    # the plain preset run (CartPole's 500,000 over 512-step batches, CleanRL's convention) stays quiet
    code, _, err = run_main(["train", "CartPole-v1", "--dry-run"], capsys)
    assert code == 0 and "not a multiple of the batch" not in err


def test_note_over_the_default_total_when_python_sets_the_batch(tmp_path, capsys):
    from proxima.trainer import _note_given_total

    cfg = PPOConfig(env_id="CartPole-v1", num_envs=1000, num_steps=400)
    _note_given_total(cfg, 1, False, None, None, None, python=True)
    assert ("PPOConfig's default total_timesteps 500,000 is not a multiple of the batch (400,000 steps = num_envs x "
            "num_steps): training 400,000 steps (1 iteration)") in capsys.readouterr().err
    _note_given_total(PPOConfig(env_id="CartPole-v1"), 1, False, None, None, None, python=True)
    assert "not a multiple" not in capsys.readouterr().err


def test_no_time_limit_note_for_an_env_with_a_step_limit(tmp_path, capsys):
    code, _, err = run_main(["train", "MountainCarContinuous-v0", *TINY_RUN, "--eval-episodes", "1", "--total-timesteps", "64",
                             "--run-dir", str(tmp_path / "mcc")], capsys)
    assert code == 0
    assert "no training episode ended" not in err


def test_std_return_is_worded_as_the_population_std():
    from proxima.evaluate import evaluate

    doc = " ".join(evaluate.__doc__.split())
    assert "divided by their number" not in doc
    assert "population standard deviation of the episode returns, ddof 0" in doc


# -- the run's own config.yaml, resumed from another working directory --------------------------------------------

def test_python_resume_takes_the_runs_own_config_yaml_from_another_directory(tmp_path, monkeypatch):
    (tmp_path / "A").mkdir()
    (tmp_path / "B").mkdir()
    monkeypatch.chdir(tmp_path / "A")
    train(PPOConfig(env_id="CartPole-v1", total_timesteps=64, **TINY), run_dir="runs/x", quiet=True)
    run = tmp_path / "A" / "runs" / "x"
    values = yaml.safe_load((run / "config.yaml").read_text())
    assert values["run_dir"] == "runs/x"  # recorded relative to A, which B does not share
    monkeypatch.chdir(tmp_path / "B")
    cfg = PPOConfig(**values)
    cfg.total_timesteps = 128
    _, policy = train(cfg, resume=str(run), quiet=True)
    assert policy.global_step == 128
    assert len((run / "metrics.csv").read_text().splitlines()) == 3  # header + both iterations, in the run itself
    assert not (tmp_path / "B" / "runs").exists()
    # run_dir= typed as that same text names B/runs/x, another directory: still refused
    cfg.total_timesteps = 192
    with pytest.raises(ConfigError, match=r"run_dir runs/x: a run resumes in its own directory"):
        train(cfg, run_dir="runs/x", resume=str(run), quiet=True)
    assert len((run / "metrics.csv").read_text().splitlines()) == 3


# -- train()'s run_dir= and env_id checks on a resume --------------------------------------------------------------

def test_python_resume_refuses_run_dir_argument_elsewhere(cartpole_run, tmp_path):
    other = tmp_path / "other"
    with pytest.raises(ConfigError) as e:
        train(PPOConfig(env_id="CartPole-v1", total_timesteps=128, **TINY), run_dir=other, resume=cartpole_run, quiet=True)
    assert f"run_dir {other}: a run resumes in its own directory" in str(e.value)
    assert not other.exists()


def test_python_resume_run_dir_argument_wins_over_the_configs(cartpole_run, tmp_path):
    other = tmp_path / "other"
    cfg = PPOConfig(env_id="CartPole-v1", run_dir=str(cartpole_run), total_timesteps=128, **TINY)
    with pytest.raises(ConfigError) as e:
        train(cfg, run_dir=other, resume=cartpole_run, quiet=True)
    assert f"run_dir {other}: a run resumes in its own directory" in str(e.value)


def test_python_resume_of_a_path_refuses_another_env(cartpole_run):
    before = (cartpole_run / "metrics.csv").read_text()
    with pytest.raises(ConfigError) as e:
        train(PPOConfig(env_id="Acrobot-v1", total_timesteps=192, **TINY), resume=cartpole_run, quiet=True)
    assert "the run trains 'CartPole-v1', not env_id='Acrobot-v1'" in str(e.value)
    assert (cartpole_run / "metrics.csv").read_text() == before


def test_python_auto_resume_refuses_the_default_env_over_another_envs_run(tmp_path):
    run_dir = tmp_path / "acrobot"
    train(PPOConfig(env_id="Acrobot-v1", total_timesteps=64, **TINY), run_dir=run_dir, quiet=True)
    with pytest.raises(ConfigError) as e:  # env_id left at PPOConfig's default: under "auto" it is still asked for
        train(PPOConfig(total_timesteps=128, **TINY), run_dir=run_dir, resume="auto", quiet=True)
    assert "the run trains 'Acrobot-v1', not env_id='CartPole-v1'" in str(e.value)
    assert len((run_dir / "metrics.csv").read_text().splitlines()) == 2


# -- a Trainer used directly: run() again, the caller's words and RNG put back ------------------------------------

def test_trainer_runs_on_after_a_stop_and_releases_python_words(tmp_path):
    assert from_python() is False
    run_dir = tmp_path / "r"
    trainer = Trainer(PPOConfig(env_id="CartPole-v1", total_timesteps=128, **TINY), run_dir=run_dir, quiet=True)
    try:
        with pytest.raises(TrainingInterrupted):
            trainer.run(stop_after=1)
        assert from_python() is False  # the claim's Python wording ends with the claim
        trainer.run()  # its own directory, claimed by its first run(): locked again, not refused as another run's
    finally:
        trainer.close()
    assert trainer.global_step == 128
    assert len((run_dir / "metrics.csv").read_text().splitlines()) == 3
    assert from_python() is False


def test_a_second_close_does_not_rewind_the_callers_rng(tmp_path):
    random.seed(7)
    reference = (random.random(), random.random())
    trainer = Trainer(PPOConfig(env_id="CartPole-v1", total_timesteps=64, **TINY), run_dir=tmp_path / "r", quiet=True)
    try:
        trainer.run()
    finally:
        trainer.close()
    random.seed(7)
    first = random.random()
    trainer.close()
    assert (first, random.random()) == reference


# -- the whole-iterations note over a batch set by --nproc or a --config file --------------------------------------

def test_note_over_a_preset_total_under_several_processes(capsys):
    from proxima import presets

    cfg = presets.resolve("Pendulum-v1", None, PPOConfig())
    cfg.env_id = "Pendulum-v1"
    _note_given_total(cfg, 2, False, None, {}, None, python=False)  # --nproc 2, no batch flag typed
    assert ("proxima: note: preset Pendulum-v1/default: total_timesteps 300,000 is not a multiple of the batch "
            "(8,192 steps = num_envs x num_steps x processes): training 294,912 steps (36 iterations)") in capsys.readouterr().err
    _note_given_total(cfg, 1, False, None, {}, None, python=False)  # one process: the preset's own batch, quiet
    assert "not a multiple" not in capsys.readouterr().err


def test_note_over_a_preset_total_when_a_config_file_sets_the_batch(tmp_path, capsys):
    path = tmp_path / "f.yaml"
    path.write_text("num_envs: 2048\nupdate_epochs: 1\nnum_minibatches: 1\n")
    code, _, err = run_main(["train", "Pendulum-v1", "--config", str(path), "--dry-run"], capsys)
    assert code == 0, err
    assert ("proxima: note: preset Pendulum-v1/default: total_timesteps 300,000 is not a multiple of the batch "
            "(262,144 steps = num_envs x num_steps): training 262,144 steps (1 iteration)") in err


# -- _episode_limit: where an env's step limit is known from -------------------------------------------------------

def _stub(env_id: str, env_kwargs=None, **env):
    return SimpleNamespace(cfg=SimpleNamespace(env_id=env_id, env_kwargs=env_kwargs), env=SimpleNamespace(**env))


def test_episode_limit_sources():
    assert _episode_limit(_stub("MountainCarContinuous-v0")) == 999  # the registration's, the env says none
    assert _episode_limit(_stub("mymod:Env", {"max_episode_steps": 50})) == 50
    assert _episode_limit(_stub("mymod:Env", max_episode_steps=200)) == 200
    for bad in (True, -1, 2.5):  # not a step count: no limit known
        assert _episode_limit(_stub("mymod:Env", max_episode_steps=bad)) is None
