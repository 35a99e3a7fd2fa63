"""Review 35 (env messages): a NaN observation from the autoreset's reset() was blamed on step(); an
exception in the env's constructor gave no file:line where step()'s and reset()'s do; a float Box
action range with 0 on a bound (Box(0, 1)) got no RescaleAction note, though half the policy's early
actions clip to that bound; and a run trained on a ``__main__:Class`` env (a class of the script)
was told nothing at train time, then eval failed with "module '__main__' has no attribute"."""

import json
import sys

import pytest

from proxima import PPOConfig, train
from tests.cli_helpers import TINY_POP, TINY_RUN, TINY_ENV, error_line, module_written_in, run_main

ENVS = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Base(gym.Env):
    """4-step episodes; ``nan``: what returns a NaN observation: the second reset (the first autoreset),
    the step that ends the first episode and that reset both, or step 2 of the first episode."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, nan="reset"):
        self.nan, self.resets = nan, 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.resets = 0, self.resets + 1
        bad = self.resets == 2 and self.nan in ("reset", "both")
        return np.array([np.nan if bad else 0.0, 0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        bad = self.resets == 1 and ((self.nan == "both" and self.t == 4) or (self.nan == "step" and self.t == 2))
        return np.array([np.nan if bad else 0.0, 0.0], np.float32), 1.0, False, self.t >= 4, {}


class Term(Base):
    """Base whose episodes terminate (the env's own end, not a time limit) where Base's are truncated."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, truncated, False, info


class InitFail(gym.Env):
    def __init__(self):
        raise FileNotFoundError("assets/level1.xml")


class B(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, low=0.0, high=1.0, dtype="float32"):
        self.action_space = spaces.Box(low, high, (2,), np.dtype(dtype))

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 0.0, False, self.t >= 4, {}
'''
INIT_FAIL_LINE = ENVS.splitlines().index('        raise FileNotFoundError("assets/level1.xml")') + 1


@pytest.fixture
def envs35(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "msgs35_envs", ENVS)


def check(nan: str) -> str:
    return f"""proxima check-env msgs35_envs:Base --env-kwargs '{{"nan": "{nan}"}}'"""


# --- 1. a NaN observation from the autoreset's reset() names reset() --------------------------------------------------
# TINY_RUN: 4 envs, so env step 4 (the first episode's end, where the first autoreset runs) is global step 16
@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("nan, where", [
    ("reset", "at reset (after env step 4, global step 16); check the env's reset()"),
    ("step", "at global step 8 (env step 2); check the env's step()"),  # mid-episode: step()'s own
    ("both", "at global step 16 (env step 4); check the env's step()"),  # the final observation is NaN too: step() first
])
def test_a_nan_observation_names_reset_only_where_the_step_ended_the_episode_with_a_finite_one(envs35, capsys, debug, nan, where):
    code, _, err = run_main(["train", "msgs35_envs:Base", "--env-kwargs", f'{{"nan": "{nan}"}}', *TINY_RUN,
                             "--total-timesteps", "64", "--run-dir", "R", *(["--debug-checks"] if debug else [])], capsys)
    values = " [nan, 0]" if debug else ""  # --debug-checks shows the values (a sync per step)
    line = error_line(code, err)
    # was, for "reset": "... from env 0 at global step 16 (env step 4); check the env's step() with: ..."
    assert line.startswith(f"proxima train: error: non-finite observation{values} from env 0 {where} with: {check(nan)}; "), line


@pytest.mark.parametrize("debug", [False, True])
def test_a_terminated_episodes_nan_reset_is_named_as_a_truncated_ones(envs35, capsys, debug):
    """--debug-checks reads the autoreset from terminated as well as truncated: Base's episodes only truncate."""
    code, _, err = run_main(["train", "msgs35_envs:Term", *TINY_RUN, "--total-timesteps", "64", "--run-dir", "R",
                             *(["--debug-checks"] if debug else [])], capsys)
    values = " [nan, 0]" if debug else ""
    assert error_line(code, err).startswith(
        f"proxima train: error: non-finite observation{values} from env 0 at reset (after env step 4, global step 16); "
        "check the env's reset() with: proxima check-env msgs35_envs:Term; "), err


@pytest.mark.parametrize("nan, where", [
    ("reset", "at reset (after step 8 of that member); check the env's reset()"),
    ("both", "at step 8 of that member; check the env's step()"),
    ("step", "at step 4 of that member; check the env's step()"),  # mid-episode: no episode ended before it
])
def test_a_population_names_reset_as_a_single_run_does(envs35, capsys, nan, where):
    code, _, err = run_main(["train", "msgs35_envs:Base", "--env-kwargs", f'{{"nan": "{nan}"}}', "--seeds", "1-2",
                             "--run-dir", "P", "--total-timesteps", "32", "--eval-episodes", "0", *TINY_POP], capsys)
    line = error_line(code, err)
    assert line.startswith(f"proxima train: error: non-finite observation [nan, 0] from env 0 of member 0 (m000-seed1) "
                           f"{where} with: {check(nan)}"), line


# --- 2. an exception in the env's constructor names the user's line ---------------------------------------------------
def test_a_constructor_exception_names_its_file_and_line(envs35, capsys):
    code, _, err = run_main(["train", "msgs35_envs:InitFail", *TINY_RUN, "--run-dir", "R"], capsys)
    # was: "... raised FileNotFoundError: assets/level1.xml", no line of the user's code
    assert error_line(code, err) == ("proxima train: error: building env 'msgs35_envs:InitFail' raised FileNotFoundError: "
                                     f"assets/level1.xml (msgs35_envs.py:{INIT_FAIL_LINE})")


# --- 3. a float Box action range with 0 on a bound gets the RescaleAction note -----------------------------------------
ON_BOUND = ("action_space Box({lo}, {hi}, (2,), float32): its range [{lo:g}, {hi:g}] (all 2 entries) has 0 as a bound, "
            "and the policy's early actions are centred on 0, so half of them clip to that bound; Proxima clips Box actions to "
            "the bounds but does not rescale them: wrap it in gymnasium.wrappers.RescaleAction: put def rescaled(**kw): return "
            "gymnasium.wrappers.RescaleAction(msgs35_envs.B(**kw), np.float32(-1), np.float32(1)) in a module of yours and use "
            "MODULE:rescaled as the env")
INT_ON_BOUND = ("action_space Box(0, 5, (2,), {dtype}): its range [0, 5] (all 2 entries) has 0 as a bound, and the policy's "
                "early actions are centred on 0, so half of them clip to that bound; Proxima clips Box actions to the bounds "
                "but does not rescale them: declare a float Box(-1, 1) and map it to the integers in the env, or use "
                "Discrete/MultiDiscrete if the values are choices")


@pytest.mark.parametrize("kwargs, note", [
    ('{"low": 0.0, "high": 1.0}', ON_BOUND.format(lo=0.0, hi=1.0)),
    ('{"low": -10.0, "high": 0.0}', ON_BOUND.format(lo=-10.0, hi=0.0)),
    ('{"low": -1.0, "high": 1.0}', None),
    # an integer Box too: its clipped half and the rounding make ~69% of the early actions 0 (its fix keeps it integral)
    ('{"low": 0, "high": 5, "dtype": "int64"}', INT_ON_BOUND.format(dtype="int64")),
    ('{"low": 0, "high": 5, "dtype": "uint8"}', INT_ON_BOUND.format(dtype="uint8")),  # unsigned: the same
    ('{"low": 0, "high": 1, "dtype": "bool"}', None),  # a switch: no note
])
def test_a_float_box_with_0_on_a_bound_gets_the_rescale_note(envs35, capsys, kwargs, note):
    code, out, err = run_main(["check-env", "msgs35_envs:B", "--env-kwargs", kwargs], capsys)
    assert code == 0, err
    box = json.loads(kwargs)
    dtype = box.get("dtype", "float32")
    spaces = (f"spaces: obs Box(2,) float32 -> 2 features, MLP 64x64 tanh; action Box(2,) {dtype} [{box['low']:g}, "
              f"{box['high']:g}] -> Gaussian, 2 dims, {'' if dtype == 'float32' else 'rounded and '}clipped to bounds")
    assert out.splitlines() == ([f"NOTE {note}"] if note else []) + [spaces, "OK: msgs35_envs:B passes 20 checks"]
    code, _, err = run_main(["train", "msgs35_envs:B", "--env-kwargs", kwargs, *TINY_RUN, "--run-dir", "R", "--dry-run"],
                            capsys)
    assert code == 0, err
    notes = [row for row in err.splitlines() if "does not rescale them" in row]
    assert notes == ([f"proxima: note: env 'msgs35_envs:B': {note}"] if note else []), err


# --- 4. a __main__:Class env: a note at train time, a clear line from eval ---------------------------------------------
def test_a_script_class_env_is_noted_at_train_time_and_eval_elsewhere_names_the_fix(tmp_path, monkeypatch, capsys):
    namespace: dict = {}
    exec(compile(TINY_ENV, "script35.py", "exec"), namespace)  # noqa: S102 - the test's own class, as a script defines it
    monkeypatch.setattr(sys.modules["__main__"], "Tiny35", namespace["Tiny"], raising=False)
    monkeypatch.chdir(tmp_path)
    run, _ = train(PPOConfig(env_id="__main__:Tiny35", total_timesteps=64, num_envs=4, num_steps=16, num_minibatches=2,
                             update_epochs=1, eval_episodes=0, progress=False, threads=1), run_dir="R")
    err = capsys.readouterr().err
    assert ("proxima: note: env '__main__:Tiny35' is a class of the script this process runs ('__main__'), which no other "
            "process can import: `proxima eval`, `proxima train --resume` and `proxima report` of this run will not build "
            "it; move that class into a module and name it: MODULE:Tiny35") in err.splitlines(), err

    monkeypatch.delattr(sys.modules["__main__"], "Tiny35")  # another process: its own __main__, without the class
    code, _, err = run_main(["eval", str(run), "--trust-run", "--episodes", "1"], capsys)
    # was: "module '__main__' has no attribute 'Tiny35', nor did importing it register an env id 'Tiny35' ..."
    assert error_line(code, err) == (
        "proxima eval: error: env '__main__:Tiny35' names a class of a script ('__main__' is whatever script a process runs), "
        "found only in that script's own process: this process's '__main__' has no 'Tiny35'; move that class into a module "
        "and name it: MODULE:Tiny35 (eval takes it with --env)")
