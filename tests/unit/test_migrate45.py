"""A CleanRL/SB3 user migrating (review 45): check-env does not blame an env for its Normalize* wrappers' updates,
CleanRL's make_env thunk and its missing arguments are named, SB3's evaluate_policy(model, env, n_eval_episodes)
habit gets one line, misspelt batch keys and SB3's off-policy keys are named for what they are, a minibatch count
that does not divide the batch gets the nearest that do, and learning_rate: lin_X is refused under that name."""

import gymnasium as gym
import pytest

from proxima import PPOConfig
from proxima.config import ConfigError, from_dict, validate
from proxima.evaluate import evaluate
from tests.cli_helpers import error_line, module_written_in, run_main

FACTORIES = '''
import gymnasium as gym
import numpy as np


def make_cont(**kwargs):  # CleanRL's ppo_continuous_action.py stack
    env = gym.make("Pendulum-v1", **kwargs)
    env = gym.wrappers.FlattenObservation(env)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = gym.wrappers.ClipAction(env)
    env = gym.wrappers.NormalizeObservation(env)
    env = gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10), env.observation_space)
    env = gym.wrappers.NormalizeReward(env, gamma=0.99)
    env = gym.wrappers.TransformReward(env, lambda reward: np.clip(reward, -10, 10))
    return env


def make_rew(**kwargs):
    return gym.wrappers.NormalizeReward(gym.wrappers.ClipAction(gym.make("Pendulum-v1", **kwargs)), gamma=0.99)


class Unseeded(gym.Env):  # a start state drawn from numpy's global stream: not reproducible by reset(seed)
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 0.0, False, self.t >= 8, {}


def make_unseeded():
    return gym.wrappers.NormalizeObservation(Unseeded())


def make_env(env_id, idx, capture_video, run_name, gamma=0.99):  # CleanRL's, literally
    def thunk():
        env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        return env
    return thunk


def thunk_cp():
    return make_env("CartPole-v1", 0, False, "x")


def helper(a, b):
    return a + b


def broken():  # a TypeError of a call inside the factory: no --env-kwargs gives that
    helper(1)
'''

THUNK = ("returned a function (make_env.<locals>.thunk), not a gymnasium.Env: CleanRL's make_env returns a thunk: give a "
         "function that returns the env (e.g. def make(): return make_env('CartPole-v1', 0, False, 'x')()), or call the "
         "thunk in your factory")


@pytest.fixture
def factories(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "cleanrl_mig45", FACTORIES)


def _check_lines(out: str) -> dict:
    """{check: 'OK'/'FAIL ...'} of check-env's output lines ('FAIL check: ...'), with the NOTE lines under 'NOTE'."""
    lines = {"NOTE": [line for line in out.splitlines() if line.startswith("NOTE ")]}
    for line in out.splitlines():
        if line.startswith("FAIL "):
            lines[line[5:].partition(":")[0]] = line
    return lines


# -- 1. check-env: the Normalize* wrappers' running statistics are no fault of the env --------------------------------

def test_check_env_passes_cleanrls_normalized_stack_with_the_wrappers_frozen(factories, capsys):
    code, out, _ = run_main(["check-env", "cleanrl_mig45:make_cont"], capsys)
    assert code == 0, out
    assert "OK: cleanrl_mig45:make_cont passes" in out
    assert "reset determinism" not in _check_lines(out) and "step determinism" not in _check_lines(out)
    assert ("NOTE reset and step determinism were checked with the running statistics of gymnasium.wrappers.NormalizeReward "
            "and gymnasium.wrappers.NormalizeObservation frozen (update_running_mean = False)") in out
    code, out, _ = run_main(["check-env", "cleanrl_mig45:make_rew"], capsys)  # NormalizeReward alone: the step check's
    assert code == 0 and "step determinism" not in _check_lines(out), out


def test_check_env_still_fails_an_unseeded_env_under_normalize_observation(factories, capsys):
    code, out, _ = run_main(["check-env", "cleanrl_mig45:make_unseeded"], capsys)
    assert code == 1
    assert "FAIL reset determinism: expected reset(seed=0) twice gives the same obs" in out


def test_frozen_normalizers_puts_the_updates_back(factories):
    import cleanrl_mig45

    from proxima.envs.checker import frozen_normalizers

    env = cleanrl_mig45.make_cont()
    obs_norm = env.get_wrapper_attr("obs_rms")
    with frozen_normalizers(env) as unfrozen:
        env.reset(seed=0)
        count = obs_norm.count
        env.reset(seed=0)
        assert unfrozen == [] and obs_norm.count == count  # frozen: the second reset changed nothing
    env.reset(seed=0)
    assert obs_norm.count == count + 1  # updating again
    layer, flags = env, []
    while isinstance(layer, gym.Wrapper):
        if isinstance(layer, (gym.wrappers.NormalizeObservation, gym.wrappers.NormalizeReward)):
            flags.append(layer.update_running_mean)
        layer = layer.env
    assert flags == [True, True]


# -- 4. CleanRL's make_env: its thunk and its missing arguments -------------------------------------------------------

def test_cleanrls_make_env_missing_arguments_is_told_of_its_thunk(factories, capsys):
    """Its four arguments given with --env-kwargs, CleanRL's make_env would return its thunk, refused next: the
    line says at once to give a function that returns the env, not to give the arguments."""
    code, _, err = run_main(["train", "cleanrl_mig45:make_env", "--dry-run"], capsys)
    line = error_line(code, err, "make_env() missing 4 required positional arguments: 'env_id', 'idx', 'capture_video', and "
                                 "'run_name'; this is CleanRL's make_env(env_id, idx, capture_video, run_name), which returns "
                                 "a thunk for its vector env: give a function that returns the env")
    assert "--env-kwargs" not in line


def test_a_factorys_missing_arguments_name_env_kwargs(factories, capsys):
    code, _, err = run_main(["train", "cleanrl_mig45:helper", "--dry-run"], capsys)
    error_line(code, err, "helper() missing 2 required positional arguments: 'a' and 'b'; give the factory its arguments "
                          "with --env-kwargs (e.g. --env-kwargs '{\"a\": ..., \"b\": ...}')")


def test_a_factory_returning_cleanrls_thunk_is_told_to_call_it(factories, capsys):
    given = '{"env_id": "CartPole-v1", "idx": 0, "capture_video": false, "run_name": "x"}'
    code, _, err = run_main(["train", "cleanrl_mig45:make_env", "--env-kwargs", given, "--dry-run"], capsys)
    error_line(code, err, f"'cleanrl_mig45:make_env' {THUNK}")
    code, _, err = run_main(["train", "cleanrl_mig45:thunk_cp", "--dry-run"], capsys)
    error_line(code, err, f"'cleanrl_mig45:thunk_cp' {THUNK}")
    code, out, _ = run_main(["check-env", "cleanrl_mig45:thunk_cp"], capsys)
    assert code == 1 and THUNK in out


def test_a_type_error_inside_the_factory_gets_no_env_kwargs_hint(factories, capsys):
    code, _, err = run_main(["train", "cleanrl_mig45:broken", "--dry-run"], capsys)
    line = error_line(code, err, "helper() missing 1 required positional argument: 'b'")
    assert "--env-kwargs" not in line


# -- 5. SB3's evaluate_policy(model, env, n_eval_episodes=N) ---------------------------------------------------------

SB3_NOTE = ("evaluate plays the policy's own env (its run's env id; proxima.load(path, env_id=..., env_kwargs=...) picks "
            "another) for episodes=N, and returns a dict (mean_return, std_return, returns, lengths, ...), not SB3's "
            "(mean, std) tuple")


def test_evaluate_given_an_env_says_what_it_plays_and_returns():
    env = gym.make("CartPole-v1")
    for call in (lambda: evaluate(object(), env), lambda: evaluate(object(), env, n_eval_episodes=5),
                 lambda: evaluate(object(), episodes=env)):
        with pytest.raises(TypeError) as e:
            call()
        assert str(e.value) == f"evaluate: got an env ('CartPole-v1', a TimeLimit) as its second argument, as SB3's " \
                               f"evaluate_policy(model, env) takes one: {SB3_NOTE}"
    vector = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    with pytest.raises(TypeError, match=r"^evaluate: got an env \(SyncVectorEnv\) as its second argument"):
        evaluate(object(), vector)


def test_evaluate_given_n_eval_episodes_names_episodes():
    import proxima

    with pytest.raises(TypeError) as e:
        proxima.evaluate(object(), n_eval_episodes=5)  # the callable module, as `from proxima import evaluate` gives it
    assert str(e.value) == f"evaluate: n_eval_episodes=5 is SB3's evaluate_policy's name: give episodes=5; {SB3_NOTE}"


def test_evaluate_keeps_its_signature():
    import inspect

    assert list(inspect.signature(evaluate).parameters)[:3] == ["policy", "episodes", "deterministic"]


# -- 6. misspelt batch keys and SB3's off-policy keys -----------------------------------------------------------------

@pytest.mark.parametrize("key", ["batchsize", "batch-size", "mini_batch_size", "minibatchsize"])
def test_batch_size_spellings_get_the_minibatch_count_hint(key):
    with pytest.raises(ConfigError) as e:
        from_dict({key: 64}, source="c.yaml")
    assert str(e.value) == (f"c.yaml: unknown field '{key}' (did you mean 'num_minibatches'? it counts minibatches: "
                            "num_envs x num_steps / your minibatch size)")


@pytest.mark.parametrize("key", ["learning_starts", "gradient_steps", "train_freq", "buffer_size", "tau",
                                 "target_update_interval", "exploration_fraction", "exploration_final_eps"])
def test_sb3_off_policy_keys_are_named_as_such(key):
    with pytest.raises(ConfigError) as e:
        from_dict({key: 1}, source="c.yaml")
    assert str(e.value) == (f"c.yaml: unknown field '{key}': an off-policy setting (SB3's DQN, SAC, TD3: replay buffer, "
                            "target network, exploration schedule) that PPO, on-policy, has no use for; drop it")


def test_an_off_policy_flag_is_named_as_such(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--learning-starts", "100", "--dry-run"], capsys)
    line = error_line(code, err, "--learning-starts: an off-policy setting")
    assert "--lr" not in line


def test_a_dqn_zoo_entry_names_every_off_policy_key():
    with pytest.raises(ConfigError) as e:
        from_dict({"learning_starts": 1000, "gradient_steps": 1, "n_envs": 8}, source="dqn.yml")
    assert "learning_starts (an off-policy setting" in str(e.value) and "gradient_steps (an off-policy setting" in str(e.value)
    assert "'lr'" not in str(e.value) and "(num_steps)" not in str(e.value)


# -- 7. a minibatch count that does not divide the batch --------------------------------------------------------------

def test_a_count_that_does_not_divide_gets_the_nearest_that_do(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "8", "--num-steps", "32", "--num-minibatches", "3",
                             "--dry-run"], capsys)
    error_line(code, err, "--num-minibatches 3: must divide the batch num_envs x num_steps = 256; the nearest counts that "
                          "do: 2 or 4 (minibatches of 128 or 64)")
    with pytest.raises(ConfigError) as e:
        validate(PPOConfig(num_envs=8, num_steps=32, num_minibatches=300), python=True)
    assert str(e.value).endswith("= 256; the nearest count that does: 128 (minibatches of 2)")


def test_the_defaults_line_keeps_its_own_counts_once(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "5", "--num-steps", "5", "--dry-run"], capsys)
    line = error_line(code, err, "num_minibatches 4 (the default): must divide the batch num_envs x num_steps = 25; give "
                                 "--num-minibatches 1 or 5")
    assert "nearest" not in line


# -- 8. learning_rate: lin_X is refused under the name typed -----------------------------------------------------------

def test_a_files_learning_rate_schedule_is_refused_as_learning_rate(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text("learning_rate: lin_0.001\n")
    code, _, err = run_main(["train", "CartPole-v1", "--config", str(tmp_path / "c.yaml"), "--dry-run"], capsys)
    error_line(code, err, "c.yaml: field 'learning_rate' (lr's other name) got 'lin_0.001', expected a number (the zoo's "
                          "lin_0.001, a linear decay to 0, is lr 0.001 with anneal_lr true")
    (tmp_path / "c.yaml").write_text("lr: lin_0.001\n")
    code, _, err = run_main(["train", "CartPole-v1", "--config", str(tmp_path / "c.yaml"), "--dry-run"], capsys)
    error_line(code, err, "c.yaml: field 'lr' got 'lin_0.001'")
