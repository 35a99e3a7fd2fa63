"""A user's own envs with the less common spaces and faults: what reaches the env, what Policy.act
returns, and the one line a failure gets (fixtures: tests/fixtures/user_envs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from proxima.checkpoint import load_policy
from proxima.config import PPOConfig
from proxima.envs import EnvError
from proxima.evaluate import evaluate, format_result, summarize
from proxima.trainer import train
from cli_helpers import run_main, without_spaces_line

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(autouse=True)
def fixtures_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


def _train(tmp_path, env_id, steps=256, **kw):
    cfg = PPOConfig(env_id=env_id, backend="gymnasium", num_envs=2, num_steps=16, total_timesteps=steps, eval_episodes=0,
                    progress=False, checkpoint_every=0, threads=1, **kw)
    run_dir, _ = train(cfg, run_dir=tmp_path / "run", quiet=True)
    return load_policy(run_dir, env_id=env_id)


def test_discrete_start_reaches_the_env_as_its_own_values(tmp_path):
    import user_envs

    user_envs.DiscreteFrom1.seen = []
    policy = _train(tmp_path, "user_envs:DiscreteFrom1", steps=512)  # the env raises on an action outside 1..3
    seen = {int(a) for a in user_envs.DiscreteFrom1.seen}
    assert seen == {1, 2, 3}, seen
    assert policy.action_space.start == 1  # recorded in the checkpoint
    actions = policy.act(np.zeros((64, 2), np.float32), deterministic=False)
    assert set(actions.tolist()) <= {1, 2, 3} and 3 in actions.tolist()
    result = evaluate(policy, episodes=4, seed=1, backend="gymnasium")  # evaluate steps the env with the agent's indices
    assert result["episodes"] == 4


def test_multidiscrete_with_a_2d_nvec_and_starts(tmp_path):
    import user_envs

    user_envs.MultiDiscrete2D.seen = []
    policy = _train(tmp_path, "user_envs:MultiDiscrete2D")
    space = user_envs.MultiDiscrete2D.action_space
    assert all(a.shape == (2, 2) and space.contains(a) for a in user_envs.MultiDiscrete2D.seen)
    assert policy.action_space == space
    action = policy.act(np.zeros(2, np.float32))
    assert action.shape == (2, 2) and space.contains(action), action


@pytest.mark.parametrize("cls, shape, dtype", [("IntBox", (2,), np.int64), ("Box2D", (2, 2), np.float64)])
def test_box_actions_from_policy_act_fit_the_space(tmp_path, cls, shape, dtype):
    import user_envs

    getattr(user_envs, cls).seen = []
    policy = _train(tmp_path, f"user_envs:{cls}")
    space = getattr(user_envs, cls).action_space
    single = policy.act(np.zeros(2, np.float32), deterministic=False)
    batch = policy.act(np.zeros((5, 2), np.float32), deterministic=False)
    assert single.shape == shape and single.dtype == dtype and space.contains(single)
    assert batch.shape == (5, *shape) and all(space.contains(a) for a in batch)
    as_torch = policy.act(torch.zeros(5, 2))
    assert isinstance(as_torch, torch.Tensor) and tuple(as_torch.shape) == (5, *shape)


def test_policy_act_takes_one_observation_in_the_envs_own_shape_as_one(tmp_path):
    """A Box (1, 4) is read flat as (4,): the env's own observation of shape (1, 4) is one observation
    (a scalar action the env takes), not a batch of one; the checkpoint records the declared shape."""
    import torch as _torch

    from proxima.checkpoint import CheckpointError, space_from_dict, space_to_dict

    policy = _train(tmp_path, "user_envs:RowObs")
    obs = np.full((1, 4), 0.5, np.float32)
    action = policy.act(obs)
    assert np.ndim(action) == 0 and policy.action_space.contains(action), action
    assert policy.act(np.zeros((3, 1, 4), np.float32)).shape == (3,)  # a batch in the env's shape
    assert policy.act(np.zeros((3, 4), np.float32)).shape == (3,)  # and flat, as before
    recorded = space_to_dict(policy.observation_space)
    assert recorded["shape"] == [4] and recorded["declared_shape"] == [1, 4]
    assert space_from_dict(recorded).declared.shape == (1, 4)
    with pytest.raises(CheckpointError, match="'declared_shape' is \\[3\\], not the shape of 4 values"):
        space_from_dict({**recorded, "declared_shape": [3]}, "ckpt: spaces.observation")
    plain = {k: v for k, v in recorded.items() if k != "declared_shape"}  # a checkpoint from before: as it read then
    assert type(space_from_dict(plain)).__name__ == "Box" and isinstance(plain["low"], _torch.Tensor)


def test_int_box_actions_are_rounded_not_truncated():
    import gymnasium as gym

    from proxima.envs.spaces import env_actions

    space = gym.spaces.Box(0, 5, (2,), np.int64)
    out = env_actions(np.array([[4.9, 0.6], [2.5, 3.49]], np.float32), space, 2)
    assert out.dtype == np.int64 and out.tolist() == [[5, 1], [2, 3]]


def test_a_scalar_box_observation_trains(tmp_path):
    policy = _train(tmp_path, "user_envs:ScalarObs")
    assert policy.act(np.float32(0.5)) in (0, 1)


def test_auto_encoder_flattens_images_smaller_than_the_cnn_takes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "user_envs:SmallImage", "--num-envs", "2", "--num-steps", "8", "--total-timesteps", "32",
                             "--run-dir", "D", "--no-progress", "--eval-episodes", "0", "--hidden-sizes", "8"], capsys)
    assert code == 0, err
    assert yaml.safe_load((tmp_path / "D" / "config.yaml").read_text())["encoder"] == "mlp"


@pytest.mark.parametrize("vector", ["sync", "async"])
def test_an_exception_in_the_env_mid_run_is_one_line_naming_env_and_step(tmp_path, monkeypatch, capsys, vector):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "user_envs:RaisesAtStep5", "--vector", vector, "--num-envs", "2", "--num-steps", "16",
                             "--total-timesteps", "64", "--run-dir", "D", "--no-progress"], capsys)
    assert code == 2
    lines = without_spaces_line(err).strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "Warning" not in err, err
    assert "env 'user_envs:RaisesAtStep5': env " in lines[0]
    assert "raised RuntimeError: the simulator lost its connection (user_envs.py:" in lines[0]
    assert "at env step 5" in lines[0] and "no checkpoint was written yet" in lines[0]
    assert not (tmp_path / "D").exists()  # it failed in the first iteration: nothing left behind


def test_a_float64_value_beyond_float32_is_named_not_called_non_finite(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "user_envs:Float64Huge", "--num-envs", "2", "--num-steps", "16", "--total-timesteps", "64",
                             "--run-dir", "D", "--no-progress"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "observation value 1e+300 (entry 0) of env 0 is beyond float32's range" in err and "non-finite" not in err
    code, out, _ = run_main(["check-env", "user_envs:Float64Huge", "--steps", "5"], capsys)
    assert code == 1 and "FAIL obs float32 range:" in out and "obs[0] = 1e+300" in out


def test_check_env_and_the_failure_hint_take_env_kwargs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_main(["check-env", "user_envs:NeedsLevel", "--steps", "5"], capsys)
    assert code == 1 and "FAIL build:" in out  # no level: the constructor raises
    code, out, _ = run_main(["check-env", "user_envs:NeedsLevel", "--steps", "5", "--env-kwargs", '{"level": 1}'], capsys)
    lines = [line for line in out.splitlines() if not line.startswith("NOTE no episode ended in 5 steps")]
    assert code == 0 and len(lines) == 2 and lines[1].startswith("OK"), out
    assert lines[0] == "spaces: obs Box(2,) float32 -> 2 features, MLP 64x64 tanh; action Discrete(2) -> categorical over 2"
    code, out, _ = run_main(["check-env", "user_envs:NeedsLevel", "--env-kwargs", '{"level": 2}'], capsys)
    assert code == 1 and "FAIL obs shape:" in out
    code, _, err = run_main(["check-env", "user_envs:NeedsLevel", "--env-kwargs", "{level"], capsys)
    assert code == 2 and "--env-kwargs" in err and "not valid JSON" in err
    code, _, err = run_main(["train", "user_envs:NeedsLevel", "--env-kwargs", '{"level": 2}', "--num-envs", "2",  "--num-steps", "16",
                             "--total-timesteps", "64", "--run-dir", "D", "--no-progress"], capsys)
    err = without_spaces_line(err)
    assert code == 2 and err.count("\n") == 1, err
    assert ("env 'user_envs:NeedsLevel': env 0 returned an observation of shape (3,) at env step 3; observation_space "
            "declares shape (2,)") in err, err
    assert "proxima check-env user_envs:NeedsLevel --env-kwargs '{\"level\": 2}'" in err


def test_evaluation_of_an_env_without_a_time_limit_counts_returns_up_to_max_steps_and_says_so(tmp_path):
    policy = _train(tmp_path, "user_envs:NoTimeLimit", steps=64)
    result = evaluate(policy, episodes=3, seed=1, backend="gymnasium", max_steps=50)
    assert result["episodes"] == 3 and result["unfinished"] == 3 and result["lengths"] == [50, 50, 50]
    assert format_result(result).endswith(
        "over 3 episodes (deterministic); all of them cut at 50 steps (--max-steps), with their return so far; no episode "
        "ended: raise --max-steps")
    from proxima.evaluate import MAX_STEPS

    at_default = summarize("E", torch.ones(3, dtype=torch.float64), torch.full((3,), MAX_STEPS), True,
                           torch.zeros(3, dtype=torch.bool), MAX_STEPS)
    assert format_result(at_default).endswith(
        f"all of them cut at {MAX_STEPS:,} steps (--max-steps), with their return so far; no episode ended: give the env "
        "a time limit (gymnasium.wrappers.TimeLimit, or max_episode_steps when registering it)")


def test_unfinished_episodes_count_with_their_return_so_far_and_are_named():
    """Leaving a long episode out would average the short ones only (50 here would drop to 20)."""
    returns = torch.tensor([10.0, 50.0, 30.0], dtype=torch.float64)
    lengths = torch.tensor([10, 50, 30])
    result = summarize("E", returns, lengths, True, torch.tensor([True, False, True]), 50)
    assert result["episodes"] == 3 and result["returns"] == [10.0, 50.0, 30.0] and result["mean_return"] == 30.0
    assert result["unfinished"] == 1 and result["max_steps"] == 50
    assert format_result(result).endswith("over 3 episodes (deterministic); 1 of them cut at 50 steps (--max-steps), "
                                          "with their return so far")
    full = summarize("E", returns, lengths, True, torch.ones(3, dtype=torch.bool), 50)
    assert "unfinished" not in full and full["episodes"] == 3 and format_result(full).endswith("(deterministic)")


def test_stochastic_evaluation_is_reproducible_from_its_seed(tmp_path):
    policy = _train(tmp_path, "user_envs:DiscreteFrom1", steps=64)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first = evaluate(policy, episodes=6, seed=4, backend="gymnasium", deterministic=False)
    again = evaluate(policy, episodes=6, seed=4, backend="gymnasium", deterministic=False)
    other = evaluate(policy, episodes=6, seed=5, backend="gymnasium", deterministic=False)
    assert first["returns"] == again["returns"]
    assert other["returns"] != first["returns"]
    assert torch.equal(torch.get_rng_state(), state)  # the caller's random state is left as it was


def test_policy_act_with_a_dict_of_tensors_returns_a_tensor(tmp_path):
    policy = _train(tmp_path, "bad_envs:ImageDictObs", steps=32)
    obs = {"image": torch.zeros(3, 36, 36, 3, dtype=torch.uint8), "vec": torch.zeros(3, 2)}
    out = policy.act(obs)
    assert isinstance(out, torch.Tensor) and tuple(out.shape) == (3,)
    as_numpy = policy.act({k: v.numpy() for k, v in obs.items()})
    assert isinstance(as_numpy, np.ndarray) and as_numpy.tolist() == out.tolist()


def test_a_missing_extra_names_the_repository_install_command(tmp_path, monkeypatch, capsys):
    """PyPI's `proxima` is another package: every install hint installs the extra from this repository."""
    import gymnasium as gym

    from proxima.envs import GymnasiumEnv, atari

    def missing(*a, **k):
        raise gym.error.DependencyNotInstalled("Box2D is not installed")

    monkeypatch.setattr(gym, "make", missing)
    with pytest.raises(EnvError) as e:
        GymnasiumEnv("LunarLander-v3", 1)
    assert str(e.value) == ("env 'LunarLander-v3' needs an optional dependency: install it from the repository root with: "
                            ".venv/bin/pip install -c requirements.lock -e '.[box2d]'")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["train", "HalfCheetah-v5", "--total-timesteps", "4096", "--run-dir", "D", "--no-progress"], capsys)
    assert code == 2 and err == ("proxima train: error: env 'HalfCheetah-v5' needs an optional dependency: install it from "
                                 "the repository root with: .venv/bin/pip install -c requirements.lock -e '.[mujoco]'\n"), err
    assert atari.INSTALL == "install it from the repository root with: .venv/bin/pip install -c requirements.lock -e '.[atari]'"


def test_an_env_kwargs_key_the_constructor_does_not_take_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    """Not Gymnasium's "... was raised from the environment creator for CartPole-v1 with kwargs ({'foo': 1})"."""
    monkeypatch.chdir(tmp_path)
    line = "--env-kwargs: env 'CartPole-v1' takes no argument 'foo' (CartPoleEnv.__init__); drop it from --env-kwargs"
    code, _, err = run_main(["train", "CartPole-v1", "--env-kwargs", '{"foo": 1}', "--total-timesteps", "4096", "--run-dir", "D",
                             "--no-progress"], capsys)
    assert code == 2 and err == f"proxima train: error: {line}\n", err
    code, out, err = run_main(["check-env", "CartPole-v1", "--env-kwargs", '{"foo": 1}'], capsys)
    assert code == 2 and out == "" and err == f"proxima check-env: error: {line}\n", err
    assert not (tmp_path / "D").exists()


def test_other_constructor_type_errors_keep_their_text_without_gymnasiums_note(monkeypatch):
    import gymnasium as gym

    from proxima.envs import GymnasiumEnv

    def creator(**kwargs):
        raise TypeError("level must be an int, not str")

    monkeypatch.setitem(gym.registry, "ProximaTypeError-v0", gym.envs.registration.EnvSpec("ProximaTypeError-v0", entry_point=creator))
    with pytest.raises(EnvError) as e:
        GymnasiumEnv("ProximaTypeError-v0", 1, env_kwargs={"level": "x"})
    line = creator.__code__.co_firstlineno + 1  # its raise: the user's line, named as step()'s exceptions name theirs
    assert str(e.value) == ("building env 'ProximaTypeError-v0' raised TypeError: level must be an int, not str "
                            f"(test_user_envs.py:{line})")


def test_gymnasium_warnings_while_building_do_not_precede_the_error_line(tmp_path, monkeypatch):
    """`proxima train HalfCheetah-v4` without MuJoCo: Gymnasium's coloured DeprecationWarning (two
    lines) is dropped, the one error line stays; an env that builds still shows its warnings."""
    import warnings

    import gymnasium as gym

    from proxima.envs import GymnasiumEnv
    from proxima.envs.gym_adapter import _probe

    real_make = gym.make

    def outdated(env_id, **kwargs):
        gym.logger.deprecation(f"The environment {env_id} is out of date. You should consider upgrading to version `v5`.")
        raise gym.error.DependencyNotInstalled("MuJoCo is not installed")

    monkeypatch.setattr(gym, "make", outdated)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(EnvError) as e:
            GymnasiumEnv("HalfCheetah-v4", 1)
    assert str(e.value) == ("env 'HalfCheetah-v4' needs an optional dependency: install it from the repository root with: "
                            ".venv/bin/pip install -c requirements.lock -e '.[mujoco]'")
    assert [str(w.message) for w in seen] == []

    def noisy():
        warnings.warn("this env is noisy", UserWarning)
        return real_make("CartPole-v1")

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _probe(noisy, "CartPole-v1").close()
    assert [str(w.message) for w in seen] == ["this env is noisy"]


def test_a_dict_observation_with_unsorted_keys_trains_evaluates_and_acts_in_its_own_order(tmp_path, capsys):
    # the checkpoint read back sorted ('a', 'z') once: the final evaluation refused the run after training
    # ("trained on Dict('a', 'z')"), and Policy.act packed observations in another order than training
    run = tmp_path / "run"
    code, _, err = run_main(["train", "user_envs:DictZA", "--backend", "gymnasium", "--num-envs", "2", "--num-steps", "16",
                             "--total-timesteps", "64", "--eval-episodes", "2", "--threads", "1", "--no-progress", "--quiet",
                             "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert json.loads((run / "eval.json").read_text())["episodes"] == 2
    policy = load_policy(run, env_id="user_envs:DictZA")
    assert list(policy.observation_space.spaces) == ["z", "a"]
    rng = np.random.default_rng(0)
    obs = {"z": rng.uniform(-1, 1, (64, 5)).astype(np.float32), "a": rng.uniform(-1, 1, (64, 2)).astype(np.float32)}
    packed = torch.from_numpy(np.concatenate([obs["z"], obs["a"]], axis=1))  # the env's order, as training packed it
    with torch.no_grad():
        want = policy.agent.act(packed, deterministic=True)
    assert np.array_equal(np.asarray(policy.act(obs)), want.numpy())
