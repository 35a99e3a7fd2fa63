"""Review 29 of the Gymnasium adapter: signed ints in an unsigned (non-image) Box. Under --vector sync
numpy refused the copy; under async the shared memory wrapped 300 to 44 and the run trained on it."""

from __future__ import annotations

import re
import textwrap

import pytest

from cli_helpers import isolated, one_error_line

ENV = textwrap.dedent('''
    import numpy as np, gymnasium as gym

    class SignedInUnsigned(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (4,), np.uint8)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.array([1, 2, 3, 300], np.int64), {}

        def step(self, action):
            self.t += 1
            return np.array([1, 2, 3, 4], np.int64), 1.0, self.t >= 10, False, {}
''')
ARGS = ["--seed", "1", "--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2", "--total-timesteps", "32",
        "--eval-episodes", "0", "--run-dir", "D", "--no-progress"]


@pytest.mark.parametrize("vector", ["sync", "async"])
def test_signed_ints_in_an_unsigned_box_are_refused_under_sync_and_async(tmp_path, vector):
    (tmp_path / "u8envs.py").write_text(ENV)
    result = isolated(["-m", "proxima", "train", "u8envs:SignedInUnsigned", *ARGS, "--vector", vector], tmp_path)
    assert result.returncode == 2, result.stderr
    line = re.sub(r"env [01] returned", "env 0 returned", one_error_line(result.stderr, "proxima train"))
    assert line.startswith("env 'u8envs:SignedInUnsigned': env 0 returned an observation of dtype int64 at reset"), line
    assert "observation_space.dtype is uint8, and int64 does not cast safely to uint8" in line, line
    assert not list((tmp_path / "D").glob("checkpoints/*.pt"))  # train writes checkpoints/step_*.pt, never final.pt
