"""Review 29 of check-env: the obs dtype advice of an integer obs. It was worked out once, at the first
occurrence (reset), so an int64 obs in an int32 Box whose values fit at reset but not at step 2 was told
``return obs.astype(np.int32)``, which wraps 3e9 to -1294967296, inside the Box's bounds: check-env then passed
an env that feeds garbage. And int_range_fault told uint64 values above int64's range to take "a float dtype"
though np.uint64 holds them."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from cli_helpers import run_main
from proxima.envs.gym_adapter import int_range_fault

ENVS = textwrap.dedent('''
    import numpy as np, gymnasium as gym

    I32 = np.iinfo(np.int32)


    class Late(gym.Env):
        """obs [1, 2, x] of dtype `obs` in an int32 Box of its whole range: x is `big` at env step `at` (0: at
        reset), 3 otherwise; episodes of 250 steps."""
        action_space = gym.spaces.Discrete(2)

        def __init__(self, big=3_000_000_000, at=2, obs="int64", box="int32"):
            info = np.iinfo(box)
            self.observation_space = gym.spaces.Box(info.min, info.max, (3,), box)
            self.big, self.at, self.dtype = big, at, np.dtype(obs)

        def _obs(self):
            return np.array([1, 2, self.big if self.t == self.at else 3], self.dtype)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self._obs(), {}

        def step(self, action):
            self.t += 1
            return self._obs(), 1.0, self.t >= 250, False, {}


    class DictLate(gym.Env):
        """A Dict of two int32 Boxes fed int64: 'velocity'[1] is 5e9 at step 7 of check-env's third episode (the
        second after its seeded one), in range everywhere else (episodes of 10 steps)."""
        action_space = gym.spaces.Discrete(2)

        def __init__(self):
            box = gym.spaces.Box(I32.min, I32.max, (2,), np.int32)
            self.observation_space = gym.spaces.Dict({"position": box, "velocity": box})
            self.episode = 0

        def _obs(self):
            late = self.t == 7 and self.episode == 2
            return {"position": np.array([1, 2], np.int64), "velocity": np.array([3, 5_000_000_000 if late else 4], np.int64)}

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            self.episode += 1 if seed is None else 0  # the seeded resets of the check itself stay episode 0
            return self._obs(), {}

        def step(self, action):
            self.t += 1
            return self._obs(), 1.0, self.t >= 10, False, {}
''')
MODULE = "review29_ckrange_envs"


@pytest.fixture
def envs(tmp_path, monkeypatch):
    (tmp_path / f"{MODULE}.py").write_text(ENVS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)


def check_env_lines(cls: str, capsys, *argv: str) -> tuple[int, list]:
    code, out, err = run_main(["check-env", f"{MODULE}:{cls}", *argv], capsys)
    assert err == ""
    return code, out.strip().splitlines()


def dtype_line(lines: list) -> str:
    (line,) = [ln for ln in lines if ln.startswith("FAIL obs dtype")]
    return line


def test_a_value_out_of_range_at_a_later_step_gets_the_range_advice_naming_it(envs, capsys):
    """Before: '(does not cast safely to int32: return obs.astype(np.int32))', worked out at reset, where the values fit."""
    code, lines = check_env_lines("Late", capsys)
    assert code == 1
    assert dtype_line(lines) == (
        "FAIL obs dtype: expected dtype int32 (observation_space.dtype); got dtype int64 at reset(seed=0) (does not cast "
        "safely to int32; obs[2] = 3000000000, at step 2, is outside its range [-2147483648, 2147483647] (astype would "
        "make it -1294967296): declare a wider dtype (np.int64) or clip/scale the values in the env) (and 203 more times)")
    assert "FAIL obs bounds: expected obs[2] in [-2147483648, 2147483647] (observation_space low/high); got obs[2] = " \
           "3000000000, above high[2] = 2147483647, at step 2" in lines


def test_a_dict_key_out_of_range_later_is_named_with_its_step_and_episode(envs, capsys):
    """The line names the key, value, step and episode, and is not cut off before its fix (300 characters were).
    The head's key ('position', in range throughout) keeps its own astype advice: the other key's range clause
    goes beside it (review 29d: it had replaced it, telling 'position' about int16 for a key that is int32)."""
    code, lines = check_env_lines("DictLate", capsys, "--steps", "40")
    assert code == 1
    line = dtype_line(lines)
    assert line == (
        "FAIL obs dtype: expected dtype int32 (observation_space['position'].dtype); got obs['position'] dtype int64 at "
        "reset(seed=0) (does not cast safely to int32: return obs['position'].astype(np.int32)); obs['velocity'] too: "
        "does not cast safely to int32; obs['velocity'][1] = 5000000000, at step 27 (step 7 of episode 3), "
        "is outside its range [-2147483648, 2147483647] (astype would make it 705032704): declare a wider dtype "
        "(np.int64) or clip/scale the values in the env (and 45 more times)"), line


def test_the_astype_advice_stays_when_every_value_fits(envs, capsys):
    """A guard: in range at every step, the cast is the fix, as before; out of range at reset, the words are unchanged."""
    code, lines = check_env_lines("Late", capsys, "--env-kwargs", '{"big": 2147483647}')
    assert code == 1
    assert dtype_line(lines).endswith("got dtype int64 at reset(seed=0) (does not cast safely to int32: return "
                                      "obs.astype(np.int32)) (and 203 more times)"), lines
    code, lines = check_env_lines("Late", capsys, "--env-kwargs", '{"at": 0}')
    assert dtype_line(lines).endswith("got dtype int64 at reset(seed=0) (does not cast safely to int32; obs[2] = 3000000000 "
                                      "is outside its range [-2147483648, 2147483647] (astype would make it -1294967296): "
                                      "declare a wider dtype (np.int64) or clip/scale the values in the env) (and 203 more "
                                      "times)"), lines


def test_uint64_values_above_int64s_range_are_told_np_uint64(envs, capsys):
    """Before: 'declare a wider dtype (a float dtype)', though np.uint64 holds them exactly."""
    big = 2**63 + 5
    assert int_range_fault(np.array([1, big], np.uint64), np.int64) == (1, big, big - 2**64, "np.uint64")
    code, lines = check_env_lines("Late", capsys, "--env-kwargs", f'{{"big": {big}, "at": 0, "obs": "uint64", "box": "int64"}}')
    assert code == 1
    assert "declare a wider dtype (np.uint64) or clip/scale the values in the env" in dtype_line(lines), lines
    # signed values keep signed widths, and a wider one of the declared kind comes first
    assert int_range_fault(np.array([-1, 2**40]), np.int32)[3] == "np.int64"
    assert int_range_fault(np.array([0, 3_000_000_000]), np.int32)[3] == "np.int64"
    assert int_range_fault(np.array([-1, 2**63 - 1]), np.int32)[3] == "np.int64"
