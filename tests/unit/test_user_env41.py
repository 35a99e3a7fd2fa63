"""A user's own Gymnasium env module (module:Class, module:function, ids it registers): an error
raised while importing it names the user's file and line; a mistyped attribute or --env-kwargs key
gets a "did you mean"; a shape-() Box action reaches each env as action_space.sample() gives it,
a 0-d ndarray of the space's dtype, under --vector sync and async alike."""

from __future__ import annotations

import sys

import gymnasium as gym
import pytest

from tests.cli_helpers import TINY_RUN, error_line, run_main

ENV_MODULE = '''
import gymnasium as gym
import numpy as np


class MD(gym.Env):
    def __init__(self, size=2, render_mode=None):
        self.observation_space = gym.spaces.Box(-1, 1, (size,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action):
        return np.zeros(self.observation_space.shape, np.float32), 1.0, False, False, {}


def make(size=2):
    return MD(size)


gym.register("Tiny41-v0", entry_point="t41env:MD")
'''

# writes, at every step, what the action it got is and how many warnings contains() gave for it
SCALAR_MODULE = '''
import warnings

import gymnasium as gym
import numpy as np


class Scalar(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (), np.float64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            inside = self.action_space.contains(action)
        with open("seen.txt", "a") as f:
            f.write(f"{type(action).__name__} {np.shape(action)} {getattr(action, 'dtype', None)} {inside} {len(caught)}\\n")
        return np.zeros(2, np.float32), 1.0, False, False, {}
'''


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """Write modules (name -> code) into the current directory, where the user runs proxima; popped after."""
    written: list[str] = []

    def write(**modules: str):
        for name, code in modules.items():
            (tmp_path / f"{name}.py").write_text(code)
            written.append(name)
        return tmp_path

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield write
    for name in written:
        sys.modules.pop(name, None)
    gym.registry.pop("Tiny41-v0", None)


@pytest.mark.parametrize("command", [["train", "--dry-run"], ["check-env"]])
def test_an_error_importing_the_users_module_names_its_file_and_line(user_dir, capsys, command):
    user_dir(broken41="import math\nx = undefined_name\n")
    code, _, err = run_main([command[0], "broken41:X", *command[1:]], capsys)
    # was: "... raised NameError: name 'undefined_name' is not defined", no file nor line
    assert error_line(code, err) == (f"proxima {command[0]}: error: importing 'broken41' for env 'broken41:X' raised "
                                     "NameError: name 'undefined_name' is not defined (broken41.py:2)")


def test_a_syntax_error_in_a_module_it_imports_names_that_file_and_line(user_dir, capsys):
    user_dir(outer41="import inner41\n", inner41="x = 1\ndef f(:\n    pass\n")
    code, _, err = run_main(["train", "outer41:X", "--dry-run"], capsys)
    # was: "raised SyntaxError: invalid syntax (inner41.py, line 2)", the file and line in a form of its own
    assert error_line(code, err) == ("proxima train: error: importing 'outer41' for env 'outer41:X' raised SyntaxError: "
                                     "invalid syntax (inner41.py:2)")


def test_an_error_raised_in_a_library_at_import_names_the_users_line(user_dir, capsys):
    user_dir(npcall41="import numpy as np\n\nZEROS = np.zeros(-1)\n")
    code, _, err = run_main(["train", "npcall41:X", "--dry-run"], capsys)
    assert error_line(code, err).endswith("raised ValueError: negative dimensions are not allowed (npcall41.py:3)")


@pytest.mark.parametrize("attr, meant", [("Md", "t41env:MD"), ("Tiny41-v1", "t41env:Tiny41-v0")])
def test_a_mistyped_attribute_suggests_the_modules_own_names(user_dir, capsys, attr, meant):
    user_dir(t41env=ENV_MODULE)
    code, _, err = run_main(["train", f"t41env:{attr}", "--dry-run"], capsys)
    assert error_line(code, err) == (f"proxima train: error: module 't41env' has no attribute '{attr}', nor did importing "
                                     f"it register an env id '{attr}' (env 't41env:{attr}'); did you mean {meant}?")


@pytest.mark.parametrize("attr, fn", [("MD", "MD.__init__"), ("make", "make"), ("Tiny41-v0", "MD.__init__")])
@pytest.mark.parametrize("command", [["train", "--dry-run"], ["check-env"]])
def test_a_mistyped_env_kwarg_suggests_the_constructors_argument(user_dir, capsys, attr, fn, command):
    user_dir(t41env=ENV_MODULE)
    code, _, err = run_main([command[0], f"t41env:{attr}", "--env-kwargs", '{"sise": 3}', *command[1:]], capsys)
    assert error_line(code, err) == (f"proxima {command[0]}: error: --env-kwargs: env 't41env:{attr}' takes no argument "
                                     f"'sise' ({fn}); did you mean 'size'?")


def test_an_env_kwarg_like_no_argument_is_still_told_to_drop(user_dir, capsys):
    user_dir(t41env=ENV_MODULE)
    code, _, err = run_main(["train", "t41env:MD", "--env-kwargs", '{"colour": 3}', "--dry-run"], capsys)
    assert error_line(code, err).endswith("takes no argument 'colour' (MD.__init__); drop it from --env-kwargs")


@pytest.mark.parametrize("vector", ["sync", "async"])
def test_a_shape_0_box_action_reaches_the_env_as_a_0d_array_of_its_dtype(user_dir, capsys, vector):
    folder = user_dir(scalar41=SCALAR_MODULE)
    code, _, err = run_main(["train", "scalar41:Scalar", "--vector", vector, *TINY_RUN, "--num-envs", "2",
                             "--num-steps", "8", "--total-timesteps", "16", "--run-dir", str(folder / "run"), "--quiet"],
                            capsys)
    assert code == 0, err
    seen = (folder / "seen.txt").read_text().splitlines()
    # was "float64 () float64 True 1": a numpy scalar, and Gymnasium's "Casting input x to numpy array" at each step
    assert len(seen) == 16 and set(seen) == {"ndarray () float64 True 0"}, seen[:3]
