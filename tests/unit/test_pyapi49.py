"""The Python API review (round 49): switches (overwrite, trust_env, deterministic, ...) refuse a string,
train(env_id=) and train(resume=True) say what to give, errors from Python name no CLI flag, make_env
checks its arguments and (by default) the actions its native envs are given, and native Pendulum's
start states do not depend on num_envs."""

from __future__ import annotations

import math


import numpy as np
import pytest
import torch

import proxima
from proxima import ConfigError, PPOConfig
from tests.cli_helpers import tiny_cartpole_run

#: one iteration of 4 envs x 16 steps, no evaluation
TINY = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, total_timesteps=64,
            eval_episodes=0, progress=False, threads=1)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    return tiny_cartpole_run(tmp_path_factory, "pyapi49")


@pytest.fixture(scope="module")
def policy(finished_run):
    return proxima.load(finished_run)


# --- 2: a switch given a string -------------------------------------------------------------------------------
@pytest.mark.parametrize("name, value", [("overwrite", "False"), ("quiet", "yes"), ("evaluate_at_end", "no"),
                                         ("trust_run", "False")])
def test_train_refuses_a_switch_given_a_string_before_anything_is_written(tmp_path, name, value):
    run = tmp_path / "run"
    with pytest.raises(ConfigError) as e:
        proxima.train(PPOConfig(**TINY), run_dir=run, **{name: value})
    assert str(e.value) == f"train: {name}={value!r}: must be True or False"
    assert not run.exists()


def test_train_population_refuses_a_switch_given_a_string(tmp_path):
    with pytest.raises(ConfigError, match=r"^train_population: overwrite='False': must be True or False$"):
        proxima.train_population(PPOConfig(**TINY), seeds=[1, 2], run_dir=tmp_path / "pop", overwrite="False")


@pytest.mark.parametrize("name, value", [("trust_env", "False"), ("best", "no")])
def test_load_refuses_a_switch_given_a_string(finished_run, name, value):
    with pytest.raises(ConfigError) as e:
        proxima.load(finished_run, **{name: value})
    assert str(e.value) == f"load: {name}={value!r}: must be True or False"


@pytest.mark.parametrize("method", ["act", "predict"])
def test_policy_act_and_predict_refuse_deterministic_given_a_string(policy, method):
    obs = np.zeros((2, 4), dtype=np.float32)
    with pytest.raises(ValueError) as e:
        getattr(policy, method)(obs, deterministic="False")
    assert str(e.value) == f"Policy.{method}: deterministic='False': must be True or False"


def test_policy_act_takes_a_numpy_bool(policy):
    obs = np.zeros((2, 4), dtype=np.float32)
    assert policy.act(obs, deterministic=np.bool_(True)).shape == (2,)


# --- 3: env_id= on a new run ----------------------------------------------------------------------------------
def test_train_env_id_without_resume_is_refused_pointing_to_the_config_field(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(ConfigError) as e:
        proxima.train(PPOConfig(**TINY), run_dir=run, env_id="Acrobot-v1")
    assert str(e.value) == ("train: env_id='Acrobot-v1' names the env of a resumed run (with resume=); a new run "
                            "trains config.env_id: give PPOConfig(env_id='Acrobot-v1')")
    assert not run.exists()


def test_train_env_id_that_contradicts_the_configs_is_refused(finished_run):
    with pytest.raises(ConfigError, match=r"^train: env_id='Acrobot-v1' and PPOConfig\(env_id='Pendulum-v1'\) name two "
                                          r"envs; give one of them$"):
        proxima.train(PPOConfig(env_id="Pendulum-v1"), resume=finished_run, env_id="Acrobot-v1")


# --- 6: resume=True -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [True, 1])
def test_train_resume_true_says_what_resume_takes(tmp_path, value):
    with pytest.raises(ConfigError) as e:
        proxima.train(PPOConfig(**TINY), run_dir=tmp_path / "run", resume=value)
    assert str(e.value) == f"train: resume={value!r}: give resume='auto' or a run directory or checkpoint path"


# --- 5: errors from Python name the argument or field, never a CLI flag -----------------------------------------
def test_train_run_dir_that_is_a_file_names_run_dir_not_the_flag(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError) as e:
        proxima.train(PPOConfig(**TINY), run_dir=tmp_path / "afile", quiet=True)
    assert str(e.value) == f"run_dir {tmp_path / 'afile'}: exists and is not a directory"
    with pytest.raises(ConfigError) as e:
        proxima.train(PPOConfig(**TINY, run_dir=str(tmp_path / "afile" / "sub")), quiet=True)
    assert str(e.value) == f"run_dir {tmp_path / 'afile' / 'sub'}: {tmp_path / 'afile'} is a file, not a folder"


def test_train_overwrite_of_the_current_directory_names_run_dir(tmp_path, monkeypatch):
    (tmp_path / "old.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        proxima.train(PPOConfig(**TINY), run_dir=".", overwrite=True, quiet=True)
    assert str(e.value) == ("run_dir .: is the current directory, which cannot be moved aside; run from another "
                            "directory (cd ..) or choose another run_dir")
    assert (tmp_path / "old.txt").read_text() == "x"


def test_train_backend_envpool_for_a_classic_env_names_the_field(tmp_path):
    with pytest.raises(proxima.EnvError) as e:
        proxima.train(PPOConfig(**TINY, backend="envpool"), run_dir=tmp_path / "run", quiet=True)
    assert str(e.value) == "backend='envpool' runs Atari games (ids like Pong-v5), not 'CartPole-v1'; use backend='auto'"


def test_train_encoder_cnn_without_images_names_the_field(tmp_path):
    with pytest.raises(ConfigError) as e:
        proxima.train(PPOConfig(**TINY, encoder="cnn"), run_dir=tmp_path / "run", quiet=True)
    assert str(e.value) == ("encoder='cnn' needs an image observation (uint8 Box (H, W, C) or (C, H, W)); this env's "
                            "observation has shape (4,); use encoder='mlp'")


def test_load_of_a_run_in_progress_names_checkpoint_every_not_the_flag(tmp_path):
    import json
    import os
    import socket

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("config.yaml", "meta.json", "metrics.csv"):  # what a run writes before its first checkpoint
        (run / name).write_text("")
    (run / ".proxima.lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    with pytest.raises(proxima.CheckpointError) as e:
        proxima.load(run)
    assert str(e.value) == (f"{run}: the run is in progress and has no checkpoint yet (one is written every "
                            "checkpoint_every iterations and at the end); wait for its first, or train with a smaller "
                            "checkpoint_every")


# --- 4: make_env checks vector and seed ---------------------------------------------------------------------------
def test_make_env_refuses_an_unknown_vector():
    from proxima import make_env

    with pytest.raises(ConfigError, match=r"^make_env\(vector='asyn'\): must be one of 'sync', 'async'$"):
        make_env("CartPole-v1", 2, backend="gymnasium", vector="asyn")


@pytest.mark.parametrize("backend", ["native", "gymnasium"])
@pytest.mark.parametrize("seed", [1.5, "1", True, -1])
def test_make_env_refuses_a_seed_that_is_no_whole_number(backend, seed):
    from proxima import make_env

    with pytest.raises(ConfigError) as e:
        make_env("CartPole-v1", 2, backend=backend, seed=seed)
    assert str(e.value) == f"make_env(seed={seed!r}): must be None or an integer from 0 to 2**64 - 1"


def test_make_env_takes_a_numpy_integer_seed_as_the_int():
    from proxima import make_env

    assert torch.equal(make_env("CartPole-v1", 2, seed=np.int64(3)).reset(), make_env("CartPole-v1", 2, seed=3).reset())


# --- 9: make_env given an env object -----------------------------------------------------------------------------
def test_make_env_given_a_gymnasium_env_object_says_to_give_its_id():
    import gymnasium as gym

    from proxima import make_env

    with pytest.raises(ConfigError) as e:
        make_env(gym.make("CartPole-v1"), num_envs=2)
    assert str(e.value).startswith("make_env(env_id=<TimeLimit")
    assert str(e.value).endswith(": takes an env id string ('CartPole-v1') or 'module:Class', not an env object: make_env "
                                 "builds its own envs; give its id 'CartPole-v1'")


# --- 10: from_dict named where it is -----------------------------------------------------------------------------
def test_train_of_a_mapping_names_proxima_config_from_dict_which_exists(tmp_path, monkeypatch):
    import proxima.config

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        proxima.train({"env_id": "Acrobot-v1"})
    assert str(e.value) == ("expected a PPOConfig, got dict (PPOConfig(**fields), or proxima.config.from_dict(mapping) "
                            "for a mapping)")
    assert proxima.config.from_dict({"env_id": "Acrobot-v1"}).env_id == "Acrobot-v1"  # the function the line names
    with pytest.raises(ConfigError, match=r"^expected a PPOConfig, got str 'Acrobot-v1': give "
                                          r"PPOConfig\(env_id='Acrobot-v1'\) \(or proxima\.presets\.resolve\('Acrobot-v1'\)"):
        proxima.trainer.Trainer("Acrobot-v1")


# --- 7: native Pendulum's start states do not depend on num_envs ---------------------------------------------------
@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0"])
def test_a_native_envs_start_does_not_depend_on_how_many_envs_are_built(env_id):
    from proxima import make_env

    two, five = make_env(env_id, 2, seed=5).reset(), make_env(env_id, 5, seed=5).reset()
    assert torch.equal(two, five[:2])


def test_native_pendulum_draws_each_envs_angle_and_velocity_in_their_bounds():
    from proxima import make_env

    env = make_env("Pendulum-v1", 4000, seed=1)
    env.reset()
    th, thdot = env.state["s"].unbind(-1)
    assert -math.pi <= th.min() < -3.1 and 3.1 < th.max() < math.pi
    assert -1.0 <= thdot.min() < -0.99 and 0.99 < thdot.max() < 1.0


def test_evaluate_of_2_episodes_gives_the_first_2_returns_of_5_on_pendulum(tmp_path):
    from proxima import evaluate

    _, policy = proxima.train(PPOConfig(**{**TINY, "env_id": "Pendulum-v1"}), run_dir=tmp_path / "run", quiet=True,
                              evaluate_at_end=False)
    two = evaluate(policy, episodes=2, seed=3)["returns"]
    five = evaluate(policy, episodes=5, seed=3)["returns"]
    assert list(two) == pytest.approx(list(five[:2]), rel=1e-5)  # the same starts; a batch of 5 rounds its matmuls apart


# --- 1 and 11: make_env's native envs refuse actions outside their space --------------------------------------------
@pytest.mark.parametrize("env_id, action, env, shown, takes", [
    ("CartPole-v1", [0, 5], 1, "5", "Discrete(2) takes a whole number from 0 to 1"),
    ("CartPole-v1", [-1, 0], 0, "-1", "Discrete(2) takes a whole number from 0 to 1"),
    ("CartPole-v1", [1.0, 0.7], 1, "0.7", "Discrete(2) takes a whole number from 0 to 1"),
    ("CartPole-v1", [math.nan, 1.0], 0, "nan", "Discrete(2) takes a whole number from 0 to 1"),
    ("Acrobot-v1", [7, 1], 0, "7", "Discrete(3) takes a whole number from 0 to 2"),
    ("Acrobot-v1", [1, -4], 1, "-4", "Discrete(3) takes a whole number from 0 to 2"),
    ("MountainCar-v0", [9, 1], 0, "9", "Discrete(3) takes a whole number from 0 to 2"),
    ("Pendulum-v1", [[1.0], [math.nan]], 1, "nan",
     "Box(-2.0, 2.0, (1,), float32) takes a finite number (out of [-2, 2] is clipped)"),
])
def test_make_envs_native_env_refuses_an_action_outside_its_space_naming_the_env(env_id, action, env, shown, takes):
    from proxima import EnvError, make_env

    built = make_env(env_id, 2, seed=0)
    obs = built.reset()
    with pytest.raises(EnvError) as e:
        built.step(torch.tensor(action))
    assert str(e.value) == f"env '{env_id}': env {env} was given action {shown}; {takes}"
    assert torch.equal(built._observe(), obs)  # refused before the dynamics ran: no step taken


def test_make_envs_native_env_takes_whole_float_actions_and_clips_finite_box_ones():
    from proxima import make_env

    cart = make_env("CartPole-v1", 2, seed=0)
    cart.reset()
    floats = cart.step(torch.tensor([1.0, 0.0]))[0]
    cart.reset(seed=0)
    assert torch.equal(floats, cart.step(torch.tensor([1, 0]))[0])
    pendulum = make_env("Pendulum-v1", 2, seed=0)
    pendulum.reset()
    big = pendulum.step(torch.tensor([[5.0], [-7.0]]))[1]
    pendulum.reset(seed=0)
    assert torch.equal(big, pendulum.step(torch.tensor([[2.0], [-2.0]]))[1])  # clipped to [-2, 2], as Gymnasium


def test_make_envs_native_env_refuses_actions_for_another_number_of_envs():
    from proxima import EnvError, make_env

    env = make_env("CartPole-v1", 3, seed=0)
    env.reset()
    with pytest.raises(EnvError) as e:
        env.step(torch.tensor([0, 1]))
    assert str(e.value) == ("env 'CartPole-v1': step() got actions of shape (2,); it takes one action for each of its "
                            "3 envs, shape (3,)")


def test_the_trainer_turns_the_action_check_off_and_a_class_built_env_has_it_off(tmp_path):
    from proxima.envs import NATIVE_ENVS, make_env
    from proxima.trainer import Trainer

    assert make_env("CartPole-v1", 2).check_actions is True
    assert NATIVE_ENVS["CartPole-v1"](2).check_actions is False
    trainer = Trainer(PPOConfig(**TINY), run_dir=tmp_path / "run", quiet=True)
    try:
        assert trainer.env.check_actions is False
    finally:
        trainer.close()


def test_a_population_turns_the_action_check_off():
    from proxima.population import Population, member_configs

    pop = Population(member_configs(PPOConfig(**TINY), [0, 1]))
    try:
        assert pop.env.check_actions is False
    finally:
        pop.close()


# --- 11: policy.act given no numbers, a schedule given as lr --------------------------------------------------------
@pytest.mark.parametrize("obs, why", [("hello", ""), (None, ""),
                                      (["a", "b", "c", "d"], " (could not convert string to float: 'a')")])
def test_policy_act_given_no_numbers_says_what_it_takes(policy, obs, why):
    with pytest.raises(ValueError) as e:
        policy.act(obs)
    assert str(e.value) == (f"Policy.act: obs = {obs!r}: not observations of CartPole-v1{why}; give one observation of "
                            "shape (4,), or a batch of shape (B, 4) (an array or tensor)")


def test_a_schedule_given_as_lr_points_to_anneal_lr(tmp_path):
    with pytest.raises(ConfigError) as e:
        proxima.train(PPOConfig(**{**TINY, "lr": lambda progress: 3e-4 * progress}), run_dir=tmp_path / "run")
    assert str(e.value).startswith("PPOConfig.lr = <function ")
    assert str(e.value).endswith(": expected a number; a schedule (a function of the progress, as SB3's learning_rate "
                                 "takes) is not taken: give the starting rate, which anneal_lr=True (the default) decays "
                                 "linearly to 0 over the run")
    with pytest.raises(ConfigError, match=r": expected a number; a schedule \(a function\) is not taken: give one number$"):
        proxima.train(PPOConfig(**{**TINY, "ent_coef": lambda progress: 0.01}), run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
