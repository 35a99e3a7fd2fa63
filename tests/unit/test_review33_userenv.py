"""A user's own env that raises mid-run (session 33's review of the user-env path): a population's
error names the member and that member's env, as its NaN line does; the Python API keeps the env's
own exception as the cause, so a notebook user can debug into their env."""
import textwrap

import pytest

from proxima import PPOConfig, train
from proxima.envs import EnvError
from tests.cli_helpers import TINY_POP, TINY_RUN, error_line, run_main

ENV = textwrap.dedent('''
    import gymnasium as gym
    import numpy as np

    class Flaky(gym.Env):
        """The env reset with seed ``bad_seed`` (a vector env seeds env i with seed + i) raises at its
        step 3; the others run."""
        observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def __init__(self, bad_seed=4, nan_reward=False):
            self.bad_seed, self.nan_reward, self.seeded, self.t = bad_seed, nan_reward, None, 0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            if seed is not None:
                self.seeded = seed
            self.t = 0
            return np.zeros(2, np.float32), {}

        def step(self, action):
            self.t += 1
            if self.seeded == self.bad_seed and self.t == 3:
                raise RuntimeError("sensor disconnected")
            reward = float("nan") if self.nan_reward and self.t == 3 else 1.0
            return np.zeros(2, np.float32), reward, self.t >= 10, False, {}


    class Picky(Flaky):
        def __init__(self):
            raise ValueError("no port")


    class NeedsLevel(Flaky):
        def __init__(self, level):
            super().__init__()


    class BadDraw(Flaky):
        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.np_random.integers(0, "big")  # numpy raises from a compiled (.pyx) frame
''')


@pytest.fixture()
def flaky(tmp_path, monkeypatch):
    (tmp_path / "flaky_r33.py").write_text(ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield "flaky_r33:Flaky"
    import sys

    sys.modules.pop("flaky_r33", None)


def test_a_population_env_error_names_the_member_and_its_env(flaky, capsys):
    # 2 members x 2 envs, seeded 1 + i: seed 4 is the batch's env 3, env 1 of member 1
    code, _, err = run_main(["train", flaky, "--seeds", "1-2", "--total-timesteps", "64", "--run-dir", "pop", "--eval-episodes", "0",
                             "--quiet", *TINY_POP], capsys)
    error_line(code, err, "env 3 raised RuntimeError: sensor disconnected (flaky_r33.py:", "at env step 3",
                      "that is env 1 of member 1 (m001-seed2), in the iteration of its steps 1 to 32")


def test_the_python_api_keeps_the_envs_own_exception_as_the_cause(flaky):
    cfg = PPOConfig(env_id=flaky, seed=1, num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, eval_episodes=0,
                    total_timesteps=128, threads=1, progress=False, run_dir="api")
    with pytest.raises(EnvError) as e:
        train(cfg)
    assert "env 3 raised RuntimeError: sensor disconnected" in str(e.value) and "global step" in str(e.value)
    cause = e.value.__cause__
    assert isinstance(cause, RuntimeError) and str(cause) == "sensor disconnected"
    assert cause.__traceback__ is not None and cause.__traceback__.tb_next is not None  # down to the env's line


def test_the_command_line_still_prints_one_line_for_it(flaky, capsys):
    code, _, err = run_main(["train", flaky, *TINY_RUN, "--seed", "1", "--total-timesteps", "128", "--run-dir", "one", "--quiet"], capsys)
    error_line(code, err, "env 3 raised RuntimeError: sensor disconnected", "; global step")
    assert "Traceback" not in err and "direct cause" not in err



def test_make_env_keeps_the_constructors_own_exception_as_the_cause(flaky):
    from proxima.envs import make_env

    with pytest.raises(EnvError) as e:
        make_env("flaky_r33:Picky", 2)
    assert "raised ValueError: no port" in str(e.value)
    assert isinstance(e.value.__cause__, ValueError) and str(e.value.__cause__) == "no port"


def test_a_directory_whose_run_wrote_no_checkpoint_is_not_advised_a_resume(flaky, capsys):
    # every member's env returns a NaN reward in iteration 1: the population keeps its records (population.json names
    # each divergence) but no checkpoint, so a retry is told to start over, not to resume
    argv = ["train", flaky, "--seeds", "3-4", "--env-kwargs", '{"bad_seed": -1, "nan_reward": true}', "--total-timesteps", "64", "--run-dir", "pop",
            "--eval-episodes", "0", "--quiet", *TINY_POP]
    code, _, err = run_main(argv, capsys)
    assert code == 2 and not list((__import__("pathlib").Path("pop") / "checkpoints").glob("*.pt")), err
    code, _, err = run_main(argv, capsys)
    line = error_line(code, err, "pop is not empty (", "it holds another run, which wrote no checkpoint; start over with "
                      "--resume auto or --overwrite (either moves the old directory aside), or choose another --run-dir")
    assert "proxima resume" not in line


def test_a_constructor_missing_an_argument_is_pointed_to_env_kwargs(flaky, capsys):
    hint = "give the env's constructor its arguments with --env-kwargs (e.g. --env-kwargs '{\"level\": ...}')"
    code, _, err = run_main(["train", "flaky_r33:NeedsLevel", *TINY_RUN, "--total-timesteps", "64", "--run-dir", "r", "--quiet"],
                            capsys)
    error_line(code, err, "NeedsLevel.__init__() missing 1 required positional argument: 'level'; " + hint)
    code, out, _ = run_main(["check-env", "flaky_r33:NeedsLevel"], capsys)
    assert code == 1 and hint in out
    code, _, err = run_main(["train", "flaky_r33:Picky", *TINY_RUN, "--total-timesteps", "64", "--run-dir", "r", "--quiet"], capsys)
    assert "--env-kwargs" not in error_line(code, err, "raised ValueError: no port")  # no hint where no argument is missing


def test_an_error_raised_inside_numpy_names_the_envs_own_line(flaky, capsys):
    code, _, err = run_main(["train", "flaky_r33:BadDraw", *TINY_RUN, "--total-timesteps", "64", "--run-dir", "r", "--quiet"],
                            capsys)
    line = error_line(code, err, "raised ValueError: ", "(flaky_r33.py:")
    assert ".pyx" not in line
