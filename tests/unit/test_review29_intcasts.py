"""Review 29 of the Gymnasium adapter: narrowing integer casts. train's at-a-glance check took any int in an
integer Box of a kind it holds, and both vector envs' copies (numpy's same_kind casting) wrapped what did not
fit without a word: uint16 300 in a uint8 Box trained on 44, int16 300 in int8 on 44, uint8 200 in int8 on -56.
check-env failed those envs, and its hint for the first, obs.astype(np.uint8), wrapped the value itself. In-range
ints of a wider dtype (int64 in an int32 Box) go on as before."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from cli_helpers import isolated, one_error_line, without_spaces_line

ENV = textwrap.dedent('''
    import numpy as np, gymnasium as gym

    class Ints(gym.Env):
        """obs [x, 1, 2] of dtype `obs` in a Box of dtype `box` (its whole range): x is `bad` at env step `at`
        (0: at reset), 1 otherwise; a Python list with as_list."""
        action_space = gym.spaces.Discrete(2)

        def __init__(self, obs, box, bad, at, as_list=False):
            self.observation_space = gym.spaces.Box(np.iinfo(box).min, np.iinfo(box).max, (3,), box)
            self.dtype, self.bad, self.at, self.as_list = np.dtype(obs), bad, at, as_list

        def _obs(self):
            x = np.array([self.bad if self.t == self.at else 1, 1, 2], self.dtype)
            return x.tolist() if self.as_list else x

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self._obs(), {}

        def step(self, action):
            self.t += 1
            return self._obs(), 1.0, self.t >= 10, False, {}
''')
ARGS = ["--seed", "1", "--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2", "--total-timesteps", "32",
        "--eval-episodes", "0", "--run-dir", "D", "--no-progress"]

#: (env kwargs, when, the declared range, what the cast made of it, the dtype to declare)
REPROS = {
    "uint16-in-uint8": ({"obs": "uint16", "box": "uint8", "bad": 300, "at": 3}, "env step 3", "uint8's range [0, 255]", 44, "np.uint16"),
    "int16-in-int8": ({"obs": "int16", "box": "int8", "bad": 300, "at": 0}, "reset (after env step 0)", "int8's range [-128, 127]", 44, "np.int16"),
    "uint8-in-int8": ({"obs": "uint8", "box": "int8", "bad": 200, "at": 2}, "env step 2", "int8's range [-128, 127]", -56, "np.int16"),
    "list-in-int8": ({"obs": "int64", "box": "int8", "bad": 300, "at": 2, "as_list": True}, "env step 2",
                     "int8's range [-128, 127]", 44, "np.int16"),
}


def train(tmp_path, kwargs: dict, vector: str):
    (tmp_path / "intenvs.py").write_text(ENV)
    return isolated(["-m", "proxima", "train", "intenvs:Ints", *ARGS, "--vector", vector, "--env-kwargs", json.dumps(kwargs)],
                    tmp_path)


@pytest.mark.parametrize("vector", ["sync", "async"])
@pytest.mark.parametrize("case", sorted(REPROS))
def test_ints_outside_the_declared_dtype_are_refused_in_one_line(tmp_path, case, vector):
    """Before: exit 0, the run trained on the wrapped values (under sync and async alike)."""
    kwargs, when, limits, wrapped, holds = REPROS[case]
    result = train(tmp_path, kwargs, vector)
    assert result.returncode == 2, result.stderr
    line = re.sub(r"env [01] returned", "env 0 returned", one_error_line(without_spaces_line(result.stderr), "proxima train"))
    value = kwargs["bad"]
    assert line.startswith(
        f"env 'intenvs:Ints': env 0 returned an observation value {value} (entry 0) outside {limits} at {when}; "
        f"observation_space.dtype is {kwargs['box']}, and the vector env's cast would make it {wrapped}: declare a wider "
        f"dtype ({holds}) or clip/scale the values in the env (check with: proxima check-env intenvs:Ints --env-kwargs "), line
    assert not list(tmp_path.glob("D/checkpoints/*.pt"))


GUARD = """
import json, sys
from proxima.envs.gym_adapter import GymnasiumEnv
env = GymnasiumEnv("intenvs:Ints", 2, vector=sys.argv[1], seed=1, env_kwargs=json.loads(sys.argv[2]))
out = [env.reset(seed=1).tolist()]
for _ in range(3):
    out.append(env.step([0, 1])[0].tolist())
env.close()
print(json.dumps(out))
"""


@pytest.mark.parametrize("vector", ["sync", "async"])
def test_in_range_int64_in_an_int32_box_trains_as_before(tmp_path, vector):
    """A guard: an int64 array in an int32 Box, the common case, still goes (values as they are, then a full run)."""
    kwargs = {"obs": "int64", "box": "int32", "bad": 2**31 - 128, "at": 2}  # near int32's max, and a float32 as it is
    (tmp_path / "intenvs.py").write_text(ENV)
    result = isolated(["-c", GUARD, vector, json.dumps(kwargs)], tmp_path)
    assert result.returncode == 0, result.stderr
    obs = json.loads(result.stdout.strip().splitlines()[-1])
    assert obs == [[[1, 1, 2]] * 2, [[1, 1, 2]] * 2, [[2**31 - 128, 1, 2]] * 2, [[1, 1, 2]] * 2], obs
    result = train(tmp_path, kwargs, vector)
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.glob("D/checkpoints/step_000000000032.pt"))


def test_check_env_hint_is_no_bare_astype_for_values_out_of_range(tmp_path):
    """Before: 'return obs.astype(np.uint8)', which wraps 300 to 44 itself."""
    (tmp_path / "intenvs.py").write_text(ENV)
    kwargs = {"obs": "uint16", "box": "uint8", "bad": 300, "at": 0}
    result = isolated(["-m", "proxima", "check-env", "intenvs:Ints", "--env-kwargs", json.dumps(kwargs)], tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("FAIL obs dtype"))
    assert "astype" not in line.replace("astype would make it 44", ""), line
    assert ("got dtype uint16 at reset(seed=0) (does not cast safely to uint8; obs[0] = 300 is outside its range "
                         "[0, 255] (astype would make it 44): declare a wider dtype (np.uint16) or clip/scale the values in "
                         "the env)") in line, line
    kwargs["bad"] = 3  # in range: the cast is the fix, as before
    result = isolated(["-m", "proxima", "check-env", "intenvs:Ints", "--env-kwargs", json.dumps(kwargs)], tmp_path)
    assert "(does not cast safely to uint8: return obs.astype(np.uint8))" in result.stdout, result.stdout
