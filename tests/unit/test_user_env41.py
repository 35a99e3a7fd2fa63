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


@pytest.fixture
def registered():
    """Env ids a test registers (gymnasium.register in its module): taken out of the registry after it."""
    ids: list[str] = []
    yield ids
    for env_id in ids:
        gym.registry.pop(env_id, None)


def test_a_multi_line_message_raised_at_import_is_one_line(user_dir, capsys):
    user_dir(multi41='X = 1\nraise ValueError("first\\n  second")\n')
    code, _, err = run_main(["train", "multi41:X", "--dry-run"], capsys)
    assert error_line(code, err) == ("proxima train: error: importing 'multi41' for env 'multi41:X' raised ValueError: "
                                     "first second (multi41.py:2)")


def test_a_syntax_error_in_code_the_module_compiles_names_the_users_line(user_dir, capsys):
    user_dir(exec41='X = 1\nexec("def f(:")\n')
    code, _, err = run_main(["train", "exec41:X", "--dry-run"], capsys)
    # '<string>:1' is no file the user can open: the line of theirs that ran exec() is
    assert error_line(code, err).endswith(" (exec41.py:2)"), err


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    from tests.cli_helpers import tiny_cartpole_run

    return tiny_cartpole_run(tmp_path_factory, "user_env41")


@pytest.mark.parametrize("command", ["resume", "eval"])
def test_a_module_failing_at_import_under_resume_env_is_one_line(user_dir, capsys, cartpole_run, command):
    user_dir(broken41="import math\nx = undefined_name\n")
    extra = ["--total-timesteps", "256", "--quiet"] if command == "resume" else ["--episodes", "1"]
    # resume checks that the module registers the id (check_registers); eval imports it to build the env
    code, _, err = run_main([command, str(cartpole_run), "--env", "broken41:CartPole-v1", *extra], capsys)
    assert error_line(code, err) == (f"proxima {command}: error: importing 'broken41' for env 'broken41:CartPole-v1' "
                                     "raised NameError: name 'undefined_name' is not defined (broken41.py:2)")


def test_an_attribute_like_no_name_of_the_module_gets_no_hint(user_dir, capsys):
    user_dir(t41env=ENV_MODULE)
    code, _, err = run_main(["train", "t41env:Zzz", "--dry-run"], capsys)
    assert error_line(code, err) == ("proxima train: error: module 't41env' has no attribute 'Zzz', nor did importing it "
                                     "register an env id 'Zzz' (env 't41env:Zzz')")


@pytest.mark.parametrize("attr, hint", [("Md", "; did you mean t41env:MD?"), ("Size", "")])
def test_private_names_and_constants_are_never_suggested(user_dir, capsys, attr, hint):
    user_dir(t41env=ENV_MODULE + "\n\ndef _md():\n    return MD()\n\n\nSIZE = 2\n")
    code, _, err = run_main(["train", f"t41env:{attr}", "--dry-run"], capsys)
    assert error_line(code, err) == (f"proxima train: error: module 't41env' has no attribute '{attr}', nor did importing "
                                     f"it register an env id '{attr}' (env 't41env:{attr}'){hint}")


def test_an_id_registered_with_a_class_as_entry_point_is_suggested(user_dir, capsys, registered):
    registered.append("Call41-v0")
    user_dir(t41env=ENV_MODULE + '\ngym.register("Call41-v0", entry_point=MD)\n')
    code, _, err = run_main(["train", "t41env:Call41-v1", "--dry-run"], capsys)
    assert error_line(code, err).endswith("(env 't41env:Call41-v1'); did you mean t41env:Call41-v0?"), err


def test_every_close_name_is_suggested(user_dir, capsys):
    user_dir(t41env=ENV_MODULE + "\nMDx = MD\n")
    code, _, err = run_main(["train", "t41env:Md", "--dry-run"], capsys)
    assert error_line(code, err).endswith("(env 't41env:Md'); did you mean t41env:MD, t41env:MDx?"), err


def test_a_keyword_only_argument_is_suggested(user_dir, capsys):
    user_dir(kw41=ENV_MODULE.replace("def __init__(self, size=2, render_mode=None)",
                                     "def __init__(self, *, size=2, render_mode=None)").replace("t41env", "kw41"))
    code, _, err = run_main(["train", "kw41:MD", "--env-kwargs", '{"sise": 3}', "--dry-run"], capsys)
    assert error_line(code, err) == ("proxima train: error: --env-kwargs: env 'kw41:MD' takes no argument 'sise' "
                                     "(MD.__init__); did you mean 'size'?")


NATIVE_MODULE = '''
import gymnasium as gym
import numpy as np
import torch

from proxima.envs import NativeEnv


class Nat(NativeEnv):
    def __init__(self, num_envs, device="cpu", seed=None):
        super().__init__(num_envs, device, seed)
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)

    def _sample_initial_state(self, n):
        return {"s": torch.zeros(n, 2)}

    def _dynamics(self, action):
        return self.state, torch.ones(self.num_envs), torch.zeros(self.num_envs, dtype=torch.bool)

    def _observe(self):
        return self.state["s"]
'''


def test_a_native_envs_own_seed_is_never_suggested_for_env_kwargs(user_dir, capsys):
    user_dir(nat41=NATIVE_MODULE)
    code, _, err = run_main(["train", "nat41:Nat", "--env-kwargs", '{"sed": 1}', "--dry-run"], capsys)
    # --env-kwargs may not set seed ('is set by Proxima; ... use --seed'): suggesting it would lead there
    assert error_line(code, err) == ("proxima train: error: --env-kwargs: env 'nat41:Nat' takes no argument 'sed' "
                                     "(Nat.__init__); drop it from --env-kwargs")


def test_a_float32_shape_0_box_action_is_a_0d_float32_array(user_dir, capsys):
    folder = user_dir(scalar41=SCALAR_MODULE.replace("(-1, 1, (), np.float64)", "(-1, 1, (), np.float32)"))
    code, _, err = run_main(["train", "scalar41:Scalar", *TINY_RUN, "--num-envs", "2", "--num-steps", "8",
                             "--total-timesteps", "16", "--run-dir", str(folder / "run"), "--quiet"], capsys)
    assert code == 0, err
    seen = (folder / "seen.txt").read_text().splitlines()
    # the space's dtype: GymnasiumEnv.step (space_actions) casts the batch to it before each env's EnvCalls
    assert len(seen) == 16 and set(seen) == {"ndarray () float32 True 0"}, seen[:3]
