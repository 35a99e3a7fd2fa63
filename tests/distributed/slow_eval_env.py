"""A Gymnasium env whose evaluation is slow on purpose (tests/distributed/test_dist_eval.py).

``SlowEval`` sleeps ``SLOW_EVAL_SLEEP`` seconds (an environment variable, default 5) when it is reset with the evaluation's seed (the run's seed,
0, plus 1,000,000), so a rank-0 evaluation outlasts a short PROXIMA_DIST_TIMEOUT while training,
seeded 0 and 10,000, runs at full speed. Episodes last 8 steps (evaluations need them to end)."""

from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np

EVAL_SEED = 1_000_000


class SlowEval(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed == EVAL_SEED:
            time.sleep(float(os.environ.get("SLOW_EVAL_SLEEP", "5")))
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return obs, float(action == (obs[0] > 0)), False, self.t >= 8, {}
