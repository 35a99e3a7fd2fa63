"""Mutation tests of the round-49 Python API review (3e0033d, f06f27f, a8c91b9, 9ccd5dd, 1992ee0, 860b022):
train_population's every switch, train(env_id=) on a resume, load() of a run that stopped before its
first checkpoint, the CNN's too-small line from Python, make_env's numpy seed for Gymnasium and its
class/object refusals, and the action check of make_env's native envs on every space it reads
(Discrete with a start, MultiBinary, MultiDiscrete, a Box of per-element bounds, a module:Class env),
actions of the wrong shape, the first bad env named, a class-built env left unchecked; Policy.act given
bytes or an object; PPOConfig(lr=float) and a function for a non-number field."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import proxima
from proxima import ConfigError, EnvError, PPOConfig, make_env
from proxima.envs import NATIVE_ENVS, NativeEnv
from tests.cli_helpers import tiny_cartpole_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

#: one iteration of 4 envs x 16 steps, no evaluation
TINY = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, total_timesteps=64,
            eval_episodes=0, progress=False, threads=1)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    return tiny_cartpole_run(tmp_path_factory, "pyapi_mut49")


@pytest.fixture(scope="module")
def policy(finished_run):
    return proxima.load(finished_run)


# --- switches -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, value", [("quiet", "yes"), ("evaluate_at_end", "no"), ("trust_run", "False")])
def test_train_population_refuses_each_switch_given_a_string(tmp_path, name, value):
    with pytest.raises(ConfigError) as e:
        proxima.train_population(PPOConfig(**TINY), seeds=[1, 2], run_dir=tmp_path / "pop", **{name: value})
    assert str(e.value) == f"train_population: {name}={value!r}: must be True or False"
    assert not (tmp_path / "pop").exists()


# --- train(env_id=) on a resume: the run's own env decides --------------------------------------------------------------
def test_train_resume_with_a_default_config_and_another_env_id_names_the_runs_env(finished_run):
    # the config's env_id is the default one: not a second env named, so the run's line says what it trains
    with pytest.raises(ConfigError) as e:
        proxima.train(PPOConfig(**TINY), resume=finished_run, env_id="Acrobot-v1", quiet=True)
    assert "the run trains 'CartPole-v1', not env_id='Acrobot-v1'" in str(e.value)
    assert "name two envs" not in str(e.value)


def test_train_resume_whose_config_and_env_id_agree_is_not_called_two_envs(finished_run):
    with pytest.raises(ConfigError) as e:
        proxima.train(PPOConfig(**{**TINY, "env_id": "Acrobot-v1"}), resume=finished_run, env_id="Acrobot-v1", quiet=True)
    assert "the run trains 'CartPole-v1', not env_id='Acrobot-v1'" in str(e.value)
    assert "name two envs" not in str(e.value)


# --- load() of a run that stopped before its first checkpoint names the field ---------------------------------------------
def test_load_of_a_run_that_stopped_before_its_first_checkpoint_names_checkpoint_every(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("config.yaml", "meta.json", "metrics.csv"):  # no lock: no trainer holds it
        (run / name).write_text("")
    with pytest.raises(proxima.CheckpointError) as e:
        proxima.load(run)
    assert str(e.value).startswith(f"{run}: the run stopped before its first checkpoint (one is written every "
                                   "checkpoint_every iterations and at the end), so there is nothing to evaluate or resume; ")
    assert "--checkpoint-every" not in str(e.value)


# --- encoder='cnn' of images too small, from Python ----------------------------------------------------------------------
def test_encoder_cnn_of_a_too_small_image_from_python_names_the_field():
    from proxima.agent import Agent
    from proxima.signals import hold_python_caller

    space = gym.spaces.Dict({"a": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8), "v": gym.spaces.Box(-1, 1, (2,), np.float32)})
    release = hold_python_caller(True)
    try:
        with pytest.raises(ConfigError) as e:
            Agent(space, gym.spaces.Discrete(2), encoder="cnn")
    finally:
        release()
    assert str(e.value) == ("encoder='cnn': image at key 'a' is 16x16, smaller than the Nature CNN's 36x36 minimum; "
                            "use encoder='mlp' or larger frames")


# --- make_env's arguments ---------------------------------------------------------------------------------------------------
def test_make_env_takes_a_numpy_integer_seed_for_a_gymnasium_env():
    a = make_env("CartPole-v1", 2, backend="gymnasium", seed=np.int64(3)).reset()
    b = make_env("CartPole-v1", 2, backend="gymnasium", seed=3).reset()
    assert torch.equal(a, b)


class _Stepper:
    def step(self, action):
        pass

    def reset(self):
        pass


def test_make_env_given_an_env_object_without_a_spec_or_a_class_names_make_env():
    with pytest.raises(ConfigError) as e:
        make_env(_Stepper(), 2)
    assert str(e.value).startswith("make_env(env_id=<")
    assert str(e.value).endswith(": takes an env id string ('CartPole-v1') or 'module:Class', not an env object: make_env "
                                 "builds its own envs; give 'its_module:ClassName' of its class")
    with pytest.raises(ConfigError) as e:
        make_env(_Stepper, 2)
    assert str(e.value) == (f"make_env(env_id=<class '{__name__}._Stepper'>): takes an env id string ('CartPole-v1') or "
                            f"'module:Class', not the class itself; give '{__name__}:_Stepper'")


# --- the action check of make_env's native envs ---------------------------------------------------------------------------
class _Acts(NativeEnv):
    """A native env whose action space is SPACE; its actions do nothing."""

    max_episode_steps = 5
    SPACE: gym.spaces.Space = gym.spaces.Discrete(2)

    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
        self.single_action_space = self.SPACE

    def _sample_initial_state(self, n):
        return {"x": torch.zeros(n, device=self.device)}

    def _dynamics(self, action):
        return torch.zeros(self.num_envs, device=self.device), torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    def _observe(self):
        return self.state["x"].unsqueeze(1).clone()


def _checked(space, n=2):
    env = type("Acts", (_Acts,), {"SPACE": space})(n)
    env.check_actions = True  # as make_env sets it
    env.reset()
    return env


def _refusal(env, action) -> str:
    with pytest.raises(EnvError) as e:
        env.step(torch.tensor(action))
    return str(e.value)


def test_a_discrete_space_with_a_start_is_checked_from_its_start():
    env = _checked(gym.spaces.Discrete(3, start=-1))
    env.step(torch.tensor([-1, 1]))  # both in -1..1
    assert _refusal(env, [0, 2]) == "env 'Acts': env 1 was given action 2; Discrete(3, start=-1) takes a whole number from -1 to 1"
    assert _refusal(env, [-2, 0]).startswith("env 'Acts': env 0 was given action -2;")


def test_multibinary_takes_0_and_1_and_names_the_position_of_another():
    env = _checked(gym.spaces.MultiBinary(3))
    env.step(torch.tensor([[0, 1, 1], [1, 0, 0]]))
    env.step(torch.tensor([[True, False, True], [True, True, False]]))
    assert _refusal(env, [[0, 1, 1], [1, 2, 0]]) == "env 'Acts': env 1 was given action 2 (position 1); MultiBinary(3) takes 0 or 1"


def test_multidiscrete_names_the_range_of_the_position_given_a_bad_action():
    env = _checked(gym.spaces.MultiDiscrete([2, 4]))
    env.step(torch.tensor([[1, 3], [0, 0]]))  # 3 is the second position's largest
    assert _refusal(env, [[1, 4], [0, 0]]) == ("env 'Acts': env 0 was given action 4; MultiDiscrete([2 4]) takes a whole "
                                               "number from 0 to 3 at position 1")
    assert _refusal(env, [[1, 3], [2, 0]]).endswith("takes a whole number from 0 to 1 at position 0")
    started = _checked(gym.spaces.MultiDiscrete([2, 4], start=[1, -2]))
    started.step(torch.tensor([[2, 1], [1, -2]]))  # each position from its own start
    assert _refusal(started, [[2, 2], [1, -2]]).endswith("takes a whole number from -2 to 1 at position 1")


def test_a_box_of_per_element_bounds_names_each_bound():
    env = _checked(gym.spaces.Box(np.array([-1, -2], np.float32), np.array([1, 3], np.float32)))
    env.step(torch.tensor([[0.0, 5.0], [0.0, -9.0]]))  # finite: taken (the env clips)
    line = _refusal(env, [[0.0, 5.0], [0.0, float("inf")]])
    assert line.startswith("env 'Acts': env 1 was given action inf (position 1); Box(")
    assert "[-1.0, -2.0]" in line and "[1.0, 3.0]" in line


@pytest.mark.parametrize("action", [1, [[0, 1]], [[0, 1], [1, 0]]])
def test_actions_not_one_per_env_are_refused_with_their_shape(action):
    env = make_env("CartPole-v1", 2, seed=0)
    env.reset()
    shape = tuple(torch.tensor(action).shape)
    assert _refusal(env, action) == (f"env 'CartPole-v1': step() got actions of shape {shape}; it takes one action for "
                                     "each of its 2 envs, shape (2,)")


def test_the_first_env_given_a_bad_action_is_named():
    env = make_env("CartPole-v1", 3, seed=0)
    env.reset()
    assert _refusal(env, [0, 5, 7]) == "env 'CartPole-v1': env 1 was given action 5; Discrete(2) takes a whole number from 0 to 1"


def test_make_env_of_a_module_native_env_checks_its_actions(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    env = make_env("user_native_env:Drift", 2, seed=0)
    assert env.check_actions is True
    env.reset()
    with pytest.raises(EnvError, match=r"env 1 was given action 3; Discrete\(3\) takes a whole number from 0 to 2$"):
        env.step(torch.tensor([0, 3]))


def test_a_native_env_built_by_its_class_takes_an_out_of_range_action_unchecked():
    env = NATIVE_ENVS["CartPole-v1"](2, seed=0)
    env.reset()
    obs = env.step(torch.tensor([0, 5]))[0]  # no host sync to check it: an out-of-range force, as documented
    assert torch.isfinite(obs).all()


# --- Policy.act given no numbers ---------------------------------------------------------------------------------------------
def test_policy_act_given_bytes_or_an_object_says_what_it_takes(policy):
    takes = "give one observation of shape (4,), or a batch of shape (B, 4) (an array or tensor)"
    with pytest.raises(ValueError) as e:
        policy.act(b"abcd")
    assert str(e.value) == f"Policy.act: obs = b'abcd': not observations of CartPole-v1; {takes}"
    thing = object()
    with pytest.raises(ValueError) as e:
        policy.act(thing)
    assert str(e.value) == (f"Policy.act: obs = {thing!r}: not observations of CartPole-v1 (float() argument must be a "
                            f"string or a real number, not 'object'); {takes}")


# --- a function or class for a config field -------------------------------------------------------------------------------
def test_a_class_given_as_lr_and_a_function_for_a_list_field_get_no_schedule_hint(tmp_path):
    with pytest.raises(ConfigError) as e:
        proxima.train(PPOConfig(**{**TINY, "lr": float}), run_dir=tmp_path / "run")
    assert str(e.value) == "PPOConfig.lr = <class 'float'>: expected a number"
    with pytest.raises(ConfigError) as e:
        proxima.train(PPOConfig(**{**TINY, "hidden_sizes": lambda progress: [64]}), run_dir=tmp_path / "run")
    assert str(e.value).endswith(": expected a list of ints, e.g. [64, 64]")
    assert not (tmp_path / "run").exists()


# --- from_dict named where it is, for RLHF too -----------------------------------------------------------------------------
def test_train_rlhf_of_a_mapping_names_proxima_rlhf_config_from_dict_which_exists():
    import proxima.rlhf.config
    from proxima.rlhf.api import train_rlhf

    with pytest.raises(ConfigError) as e:
        train_rlhf({"seed": 1})
    assert str(e.value) == ("expected an RLHFConfig, got dict (RLHFConfig(**fields), or proxima.rlhf.config.from_dict(mapping) "
                            "for a mapping)")
    assert callable(proxima.rlhf.config.from_dict)  # the function the line names
