"""Review s37 (Python API and config): a Python resume's env and run_dir, a Trainer used directly
(its directory claimed, the caller's RNG put back), the whole-iterations note over a batch the user
set, the endless-env note for envs with a step limit, and std_return's wording."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest
import torch

from proxima import PPOConfig, train
from proxima.config import ConfigError
from proxima.rundir import RunDirError
from proxima.trainer import Trainer
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
