"""A CleanRL/SB3 user migrating, review 45's second pass: check-env still fails an env under a Normalize* wrapper
whose steps are not reproducible and leaves a wrapper the user froze frozen; the --env-kwargs hint is for the
factory's own call only, and a script is told PPOConfig.env_kwargs; a resume of a NormalizeObservation alone says
nothing of rewards; evaluate refuses a Proxima env as SB3's habit; a minibatch count that does not divide the batch
gets the nearest counts that do however it was given; a refusal of lr names the --learning-rate or learning_rate
that was typed."""

import pytest

from proxima import PPOConfig
from proxima.config import (BATCH_SIZE_SPELLINGS, OFF_POLICY_NAMES, ConfigError, from_dict, minibatch_counts,
                            nearest_minibatches, validate)
from tests.cli_helpers import error_line, module_written_in, run_main

FACTORIES = '''
import gymnasium as gym
import numpy as np


class StepNoisy(gym.Env):  # reset from self.np_random (reproducible), step from numpy's global stream (not)
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        return np.random.uniform(-1, 1, 2).astype(np.float32), 1.0, False, self.t >= 8, {}


class RewardNoisy(StepNoisy):  # the same obs each call, a reward from numpy's global stream
    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), float(np.random.uniform(-1, 1)), False, self.t >= 8, {}


def make_obs_noisy():
    return gym.wrappers.NormalizeObservation(StepNoisy())


def make_rew_noisy():
    return gym.wrappers.NormalizeReward(RewardNoisy())


def make_user_frozen():  # a wrapper frozen by its user: its statistics are to stay as they are
    env = gym.wrappers.NormalizeObservation(gym.make("CartPole-v1"))
    env.update_running_mean = False
    return env


def make(**kw):  # gym.make's own missing id: a call inside the factory
    return gym.make(**kw)


def outer():  # two levels down, a helper called without its arguments
    return inner()


def inner():
    return helper(1)


def helper(a, b):
    return a + b


def make_env(env_id, idx, capture_video, run_name, gamma=0.99):  # CleanRL's
    def thunk():
        return gym.wrappers.RecordEpisodeStatistics(gym.make(env_id))
    return thunk
'''


#: a second factory named make, whose own helper calls gym.make without an id
TWO_LEVELS = '''
import gymnasium as gym


def make(**kw):
    return _inner(kw)


def _inner(kw):
    return gym.make(**kw)
'''


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "cleanrl_mig45b_two.py").write_text(TWO_LEVELS)
    yield from module_written_in(tmp_path, monkeypatch, "cleanrl_mig45b", FACTORIES)


# -- 1. check-env: step determinism still runs, and fails, with the Normalize* wrappers frozen ------------------------

@pytest.mark.parametrize("factory", ["make_obs_noisy", "make_rew_noisy"])
def test_check_env_fails_unreproducible_steps_under_a_normalize_wrapper(factories, capsys, factory):
    code, out, _ = run_main(["check-env", f"cleanrl_mig45b:{factory}"], capsys)
    assert code == 1, out
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert [line.partition(":")[0] for line in fails] == ["FAIL step determinism"], out
    assert "reset determinism" not in "".join(fails)


def test_check_env_leaves_a_wrapper_the_user_froze_frozen(factories):
    import cleanrl_mig45b

    from proxima.envs.checker import frozen_normalizers

    env = cleanrl_mig45b.make_user_frozen()
    with frozen_normalizers(env) as unfrozen:
        assert unfrozen == [] and env.update_running_mean is False
    assert env.update_running_mean is False
    env.reset(seed=0)
    assert env.obs_rms.count == 1e-4  # Gymnasium's starting count: the reset did not update it


# -- 3, 4. the --env-kwargs hint: the factory's own call, and PPOConfig.env_kwargs from Python ------------------------

@pytest.mark.parametrize("env_id, said", [("cleanrl_mig45b:make", "make() missing 1 required positional argument: 'id'"),
                                          ("cleanrl_mig45b_two:make", "make() missing 1 required positional argument: 'id'"),
                                          ("cleanrl_mig45b:outer", "helper() missing 1 required positional argument: 'b'")])
def test_a_call_inside_the_factory_missing_its_arguments_gets_no_env_kwargs_hint(factories, capsys, env_id, said):
    code, _, err = run_main(["train", env_id, "--dry-run"], capsys)
    line = error_line(code, err, said)
    assert "env-kwargs" not in line and "env_kwargs" not in line


def test_a_factorys_missing_arguments_from_python_name_ppoconfig_env_kwargs(factories):
    from proxima import train
    from proxima.envs.base import EnvError

    with pytest.raises(EnvError) as e:
        train(PPOConfig(env_id="cleanrl_mig45b:helper", total_timesteps=128, num_envs=1, num_steps=128))
    assert str(e.value).endswith("helper() missing 2 required positional arguments: 'a' and 'b'; give the factory its "
                                 "arguments with PPOConfig.env_kwargs (e.g. env_kwargs={'a': ..., 'b': ...})"), str(e.value)
    assert "--env-kwargs" not in str(e.value)


def test_cleanrls_make_env_from_python_is_told_of_its_thunk(factories):
    """Given its four arguments, CleanRL's make_env returns a thunk, refused next: the line says so at once."""
    from proxima import train
    from proxima.envs.base import EnvError

    with pytest.raises(EnvError) as e:
        train(PPOConfig(env_id="cleanrl_mig45b:make_env", total_timesteps=128, num_envs=1, num_steps=128))
    assert "; this is CleanRL's make_env(env_id, idx, capture_video, run_name), which returns a thunk" in str(e.value)
    assert "env_kwargs" not in str(e.value)


# -- 5. a resume's note on the env's own wrappers ---------------------------------------------------------------------

def test_a_resume_under_normalize_observation_alone_claims_no_scaled_rewards(capsys):
    from types import SimpleNamespace

    from proxima.trainer import _note_resumed_wrappers

    _note_resumed_wrappers(SimpleNamespace(env=SimpleNamespace(normalize_wrappers=["NormalizeObservation"])))
    err = capsys.readouterr().err
    assert err == ("proxima: note: the statistics of the env's own gymnasium.wrappers.NormalizeObservation restart with "
                   "this resume (no checkpoint holds them): the run meets observations normalized otherwise than before "
                   "the stop until they settle\n")
    _note_resumed_wrappers(SimpleNamespace(env=SimpleNamespace(normalize_wrappers=["NormalizeReward"])))
    assert "the run meets rewards scaled otherwise" in capsys.readouterr().err


# -- 7. SB3's evaluate_policy(model, env) with a Proxima env ----------------------------------------------------------

def test_evaluate_given_a_proxima_env_says_what_it_plays():
    from proxima.envs.gym_adapter import GymnasiumEnv
    from proxima.evaluate import evaluate

    env = GymnasiumEnv("CartPole-v1", 1)
    try:
        with pytest.raises(TypeError) as e:
            evaluate(object(), env)
    finally:
        env.close()
    assert str(e.value).startswith("evaluate: got an env ('CartPole-v1', a GymnasiumEnv) as its second argument, as "
                                   "SB3's evaluate_policy(model, env) takes one: evaluate plays the policy's own env")


# -- 8, 14. the name typed for lr: --learning-rate, a file's learning_rate ---------------------------------------------

def test_resume_names_a_refused_learning_rate_as_typed(tmp_path, capsys):
    code, _, err = run_main(["resume", str(tmp_path / "run"), "--learning-rate", "lin_1e-3"], capsys)
    line = error_line(code, err, "proxima resume: error: --learning-rate 'lin_1e-3': expected a number")
    assert "--lr" not in line


def test_typed_flags_name_a_refused_learning_rate_as_typed():
    from proxima import cli

    args = cli.build_parser().parse_args(["resume", "RUN", "--learning-rate", "lin_1e-3"])
    with pytest.raises(ConfigError) as e:
        cli.typed_flags(args)
    assert str(e.value).startswith("--learning-rate 'lin_1e-3': expected a number")


@pytest.mark.parametrize("value, said", [("nan", "--learning-rate nan: must be a finite number"),
                                         ("-1", "--learning-rate -1.0: must be positive")])
def test_validates_refusal_of_a_typed_learning_rate_names_learning_rate(capsys, value, said):
    code, _, err = run_main(["train", "CartPole-v1", "--learning-rate", value, "--dry-run"], capsys)
    line = error_line(code, err, f"proxima train: error: {said}")
    assert "--lr" not in line
    code, _, err = run_main(["train", "CartPole-v1", "--lr", value, "--dry-run"], capsys)  # --lr typed: --lr
    error_line(code, err, f"proxima train: error: {said.replace('--learning-rate', '--lr')}")


def test_validates_refusal_of_a_files_learning_rate_names_learning_rate(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text("learning_rate: -1\n")
    code, _, err = run_main(["train", "CartPole-v1", "--config", str(tmp_path / "c.yaml"), "--dry-run"], capsys)
    error_line(code, err, f"proxima train: error: {tmp_path / 'c.yaml'}: learning_rate (lr's other name) -1.0: must be positive")
    (tmp_path / "c.yaml").write_text("lr: -1\n")
    code, _, err = run_main(["train", "CartPole-v1", "--config", str(tmp_path / "c.yaml"), "--dry-run"], capsys)
    error_line(code, err, f"proxima train: error: {tmp_path / 'c.yaml'}: lr -1.0: must be positive")


def test_a_learning_rate_flag_over_a_files_learning_rate_is_named_as_typed(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text("learning_rate: 0.001\n")
    code, _, err = run_main(["train", "CartPole-v1", "--config", str(tmp_path / "c.yaml"), "--lr", "-1", "--dry-run"], capsys)
    error_line(code, err, "proxima train: error: --lr -1.0: must be positive")


# -- 9-13. a minibatch count that does not divide the batch -----------------------------------------------------------

NEAREST_25 = "must divide the batch num_envs x num_steps = 25; the nearest counts that do: 1 or 5 (minibatches of 25 or 5)"


def test_a_files_count_equal_to_the_default_gets_the_nearest_counts(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text("num_envs: 5\nnum_steps: 5\nnum_minibatches: 4\n")
    code, _, err = run_main(["train", "CartPole-v1", "--config", str(tmp_path / "c.yaml"), "--dry-run"], capsys)
    error_line(code, err, f"proxima train: error: {tmp_path / 'c.yaml'}: num_minibatches 4: {NEAREST_25}")


def test_a_typed_count_equal_to_the_default_gets_the_nearest_counts(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "5", "--num-steps", "5", "--num-minibatches", "4",
                             "--dry-run"], capsys)
    line = error_line(code, err, f"proxima train: error: --num-minibatches 4: {NEAREST_25}")
    assert line.endswith(NEAREST_25) and "(the default)" not in line


def test_without_advantage_normalization_minibatches_of_one_sample_count():
    with pytest.raises(ConfigError) as e:
        validate(PPOConfig(num_envs=8, num_steps=32, num_minibatches=300, norm_adv=False), python=True)
    assert str(e.value).endswith("= 256; the nearest count that does: 256 (minibatches of 1)")
    assert minibatch_counts(PPOConfig(num_envs=2, num_steps=2, norm_adv=False)) == [1, 2, 4]
    assert minibatch_counts(PPOConfig(num_envs=2, num_steps=2)) == [1, 2]


def test_a_batch_with_no_count_that_does_offers_none():
    cfg = PPOConfig(num_envs=1, num_steps=1, num_minibatches=2)
    assert nearest_minibatches(cfg) == ""
    with pytest.raises(ConfigError) as e:
        validate(cfg, python=True)
    assert str(e.value) == "PPOConfig.num_minibatches = 2: must divide the batch num_envs x num_steps = 1"


# -- 12. every spelling and every off-policy key the module names -----------------------------------------------------

@pytest.mark.parametrize("key", BATCH_SIZE_SPELLINGS)
def test_each_batch_size_spelling_gets_the_minibatch_count_hint(key):
    with pytest.raises(ConfigError) as e:
        from_dict({key: 64}, source="c.yaml")
    assert str(e.value) == (f"c.yaml: unknown field '{key}' (did you mean 'num_minibatches'? it counts minibatches: "
                            "num_envs x num_steps / your minibatch size)")


@pytest.mark.parametrize("key", OFF_POLICY_NAMES)
def test_each_sb3_off_policy_key_is_named_as_such(key):
    with pytest.raises(ConfigError) as e:
        from_dict({key: 1}, source="c.yaml")
    assert str(e.value) == (f"c.yaml: unknown field '{key}': an off-policy setting (SB3's DQN, SAC, TD3: replay buffer, "
                            "target network, exploration schedule) that PPO, on-policy, has no use for; drop it")


def test_the_spellings_and_off_policy_keys_are_not_fields():
    from proxima.config import FIELDS

    assert not set(BATCH_SIZE_SPELLINGS) & set(FIELDS) and not set(OFF_POLICY_NAMES) & set(FIELDS)
    assert len(OFF_POLICY_NAMES) >= 16 and len(BATCH_SIZE_SPELLINGS) >= 4
