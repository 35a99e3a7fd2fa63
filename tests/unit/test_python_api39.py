"""The Python API as an SB3 user meets it: ``~`` in the paths it takes, ``seed=None``, and errors in
the words of the call (``device='cuda'``), not of the command line's flags."""

from pathlib import Path

import pytest
import torch
import yaml

import proxima
from proxima import ConfigError, PPOConfig
from proxima.device import resolve_device

SMALL = dict(num_envs=4, num_steps=16, threads=1, progress=False, total_timesteps=64, eval_episodes=0)


def test_train_run_dir_tilde_is_the_home_directory_never_a_folder_named_tilde(home):
    run_dir, trained = proxima.train(PPOConfig(env_id="CartPole-v1", **SMALL), run_dir="~/tilde_run", quiet=True)
    assert run_dir == home / "tilde_run"
    assert not Path("~").exists()  # the cwd holds no '~' for a later `rm -rf ~` to take the home with it
    assert yaml.safe_load((home / "tilde_run" / "config.yaml").read_text())["run_dir"] == str(home / "tilde_run")
    # load, and resume, take the same ~ path
    policy = proxima.load("~/tilde_run")
    assert Path(policy.path) == Path(trained.path)
    again, _ = proxima.train(None, resume="~/tilde_run", quiet=True)
    assert again == home / "tilde_run" and not Path("~").exists()


def test_config_run_dir_and_init_from_tilde_expand(home):
    first, _ = proxima.train(PPOConfig(env_id="CartPole-v1", run_dir="~/a", **SMALL), quiet=True)
    assert first == home / "a"
    # config.yaml names the run where it is: `proxima train --config ~/a/config.yaml` must not make a folder named ~
    assert yaml.safe_load((home / "a" / "config.yaml").read_text())["run_dir"] == str(home / "a")
    second, _ = proxima.train(PPOConfig(env_id="CartPole-v1", run_dir="~/b", init_from="~/a", **SMALL), quiet=True)
    assert second == home / "b" and not Path("~").exists()
    recorded = yaml.safe_load((home / "b" / "config.yaml").read_text())["init_from"]
    assert recorded.startswith(str(home / "a" / "checkpoints")), recorded


def test_expand_home_keeps_the_type_and_leaves_other_values(home):
    assert proxima._expand_home("~/x") == str(home / "x")
    assert proxima._expand_home(Path("~/x")) == home / "x"
    assert proxima._expand_home("runs/~x") == "runs/~x"  # only a leading ~ is the home
    assert proxima._expand_home(None) is None


def test_seed_none_draws_a_seed_records_it_and_leaves_the_callers_streams(home, capsys):
    import random

    random.seed(7)
    before = random.random()
    random.seed(7)
    cfg = PPOConfig(env_id="CartPole-v1", seed=None, run_dir="~/r", **SMALL)
    run_dir, trained = proxima.train(cfg)
    assert random.random() == before
    assert cfg.seed is None  # the caller's config is not changed
    seed = yaml.safe_load((run_dir / "config.yaml").read_text())["seed"]
    assert isinstance(seed, int) and 0 <= seed <= 2**31 - 1
    assert trained.config["seed"] == seed
    assert f"proxima: note: seed=None: drew seed {seed} (recorded in config.yaml; seed={seed} repeats the run)" \
        in capsys.readouterr().err
    # a resume asked with seed=None keeps the run's seed (nothing is refused as a changed seed), and draws none
    proxima.train(PPOConfig(env_id="CartPole-v1", seed=None, **{**SMALL, "total_timesteps": 128}), resume=run_dir)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["seed"] == seed
    assert "drew seed" not in capsys.readouterr().err
    # the draw is not from the caller's seeded streams (which train() puts back): a sweep's next seed=None
    # run in the same process is another run, not a silent repeat; quiet=True drops the note
    random.seed(7)
    other, _ = proxima.train(PPOConfig(env_id="CartPole-v1", seed=None, run_dir="~/r2", **SMALL), quiet=True)
    assert yaml.safe_load((other / "config.yaml").read_text())["seed"] != seed
    assert "drew seed" not in capsys.readouterr().err


def test_evaluate_video_tilde_lands_in_the_home_directory(home):
    from proxima.evaluate import evaluate

    _, trained = proxima.train(PPOConfig(env_id="CartPole-v1", run_dir="~/v", **SMALL), quiet=True)
    result = evaluate(trained, episodes=1, video="~/cartpole.gif")
    assert Path(result["video"]) == home / "cartpole.gif" and (home / "cartpole.gif").stat().st_size > 0
    assert not Path("~").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_load_device_error_names_the_argument_and_the_cli_keeps_its_flag(home):
    proxima.train(PPOConfig(env_id="CartPole-v1", run_dir="~/r", **SMALL), quiet=True)
    with pytest.raises(ConfigError) as e:
        proxima.load("~/r", device="cuda")
    assert str(e.value) == "device='cuda': CUDA is not usable here (run `proxima doctor`); use device='cpu'"
    with pytest.raises(ConfigError) as e:
        resolve_device("cuda")
    assert str(e.value) == "--device 'cuda': CUDA is not usable here (run `proxima doctor`); use --device cpu"
    with pytest.raises(ConfigError) as e:
        resolve_device("gpu", arg="device")
    assert str(e.value) == "device='gpu': not a torch device (cpu, cuda, cuda:1, auto)"


def test_predict_is_sb3s_pair_stochastic_by_default_and_refuses_a_recurrent_state(tmp_path):
    """SB3 users port `action, _ = model.predict(obs, deterministic=True)`; load()'s and train()'s policies both have it."""
    import numpy as np
    import torch

    import proxima
    from proxima.config import PPOConfig

    run, trained = proxima.train(PPOConfig(env_id="CartPole-v1", total_timesteps=512, num_envs=4, num_steps=128,
                                           progress=False, eval_episodes=0), run_dir=tmp_path / "run", quiet=True)
    loaded = proxima.load(run)
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    for policy in (trained, loaded):
        actions, state = policy.predict(obs, deterministic=True)
        assert state is None and isinstance(actions, np.ndarray)
        np.testing.assert_array_equal(actions, policy.act(obs))
        torch.manual_seed(0)
        draws = [policy.predict(obs)[0] for _ in range(4)]  # SB3's default: sampled
        assert any((d != actions).any() for d in draws)
        with pytest.raises(ValueError, match=r"^Policy.predict: state=\.\.\. given, but this policy has no recurrent state"):
            policy.predict(obs, state=(np.zeros(1),))
