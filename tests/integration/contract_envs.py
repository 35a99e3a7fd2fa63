"""Small Gymnasium envs for test_env_contract.py: each breaks one rule at a known env and step.

Which env of a vector env misbehaves is told by its first reset seed (Gymnasium's vector env seeds
env i with seed + i; the probe env Proxima builds to read the spaces is never reset), so with
``--seed 1`` the env whose first seed is 2 is env 1.
"""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Clean(gym.Env):
    """Episodes of 5 steps, reward 1, obs [t, t] in Box(-10, 10, (2,))."""

    observation_space = spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = spaces.Discrete(2)
    first_seed = None

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        if self.first_seed is None and seed is not None:
            self.first_seed = seed
        self.t, self.n = 0, getattr(self, "n", 0)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        self.n += 1
        return np.full(2, self.t, np.float32), 1.0, self.t >= 5, False, {}

    @property
    def marked(self) -> bool:
        """The env whose first seed is 2 (env 1 of a run with --seed 1)."""
        return self.first_seed == 2


class WrongShapeAt(Clean):
    """Env 1 (--seed 1) returns an obs of shape (3,) at its ``at``-th step (5: the step that ends an
    episode, whose obs becomes the final obs)."""

    def __init__(self, at: int = 3):
        self.at = at

    def step(self, action):
        obs, r, te, tr, info = super().step(action)
        return (np.zeros(3, np.float32) if self.marked and self.n == self.at else obs), r, te, tr, info


class NoneInfoAt3(Clean):
    def step(self, action):
        obs, r, te, tr, info = super().step(action)
        return obs, r, te, tr, (None if self.marked and self.n == 3 else info)


class DictMissingKeyAt3(Clean):
    observation_space = spaces.Dict({"pos": spaces.Box(-10.0, 10.0, (2,), np.float32),
                                     "vel": spaces.Box(-10.0, 10.0, (1,), np.float32)})

    def reset(self, seed=None, options=None):
        obs, info = super().reset(seed=seed)
        return {"pos": obs, "vel": np.zeros(1, np.float32)}, info

    def step(self, action):
        obs, r, te, tr, info = super().step(action)
        out = {"pos": obs} if self.marked and self.n == 3 else {"pos": obs, "vel": np.zeros(1, np.float32)}
        return out, r, te, tr, info


class DictOOB(Clean):
    """Dict obs; 'vel' (declared in [-1, 1]) is 5.0 at the 3rd step of every episode."""

    observation_space = spaces.Dict({"pos": spaces.Box(-10.0, 10.0, (2,), np.float32),
                                     "vel": spaces.Box(-1.0, 1.0, (2,), np.float32)})

    def reset(self, seed=None, options=None):
        obs, info = super().reset(seed=seed)
        return {"pos": obs, "vel": np.zeros(2, np.float32)}, info

    def step(self, action):
        obs, r, te, tr, info = super().step(action)
        vel = np.array([0.5, 5.0 if self.t == 3 else 0.0], np.float32)
        return {"pos": obs, "vel": vel}, r, te, tr, info


class DictU8(gym.Env):
    """A Dict of uint8 vectors (no image): reward 1 when the action is (obs['a'][0] > 128)."""

    observation_space = spaces.Dict({"a": spaces.Box(0, 255, (3,), np.uint8), "b": spaces.Box(0, 255, (2,), np.uint8)})
    action_space = spaces.Discrete(2)

    def _obs(self):
        self.o = {"a": self.np_random.integers(0, 256, 3).astype(np.uint8),
                  "b": self.np_random.integers(100, 110, 2).astype(np.uint8)}
        return self.o

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        r = float(int(action) == int(self.o["a"][0] > 128))
        self.t += 1
        return self._obs(), r, False, self.t >= 20, {}


class StrictF64Box(Clean):
    """A float64 Box action in [-0.3, 0.3] and a step that asserts ``action_space.contains(a)``."""

    action_space = spaces.Box(-0.3, 0.3, (2,), np.float64)
    seen: list = []

    def step(self, action):
        type(self).seen.append(np.array(action))
        assert self.action_space.contains(action), f"action {action!r} outside {self.action_space}"
        return super().step(0)


class Aim(Clean):
    """A Box action in [lo, hi] (constructor arguments)."""

    def __init__(self, lo: float = 10.0, hi: float = 20.0):
        self.action_space = spaces.Box(lo, hi, (1,), np.float32)

    def step(self, action):
        return super().step(0)


class NoOptions(Clean):
    def reset(self, seed=None):
        return super().reset(seed=seed)


class NaNObsStrictBox(Clean):
    """Box actions and a step that asserts them in the space; env 1 (--seed 1) returns a NaN
    observation at its 3rd step, so the actions that follow are NaN and its next step raises."""

    action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, np.float32)), f"invalid action {action}"
        obs, r, te, tr, info = super().step(0)
        if self.marked and self.n == 3:
            obs = obs.copy()
            obs[0] = np.nan
        return obs, r, te, tr, info


class RaisesInNumpy(Clean):
    """Env 1 (--seed 1) calls numpy with a singular matrix at its 3rd step: numpy raises."""

    def step(self, action):
        if self.marked and self.n == 2:
            np.linalg.inv(np.zeros((2, 2)))
        return super().step(action)


class RaisesWhenAsked(Clean):
    """Env 1 (--seed 1) raises at its 3rd step of this process when PROXIMA_TEST_RAISE is set."""

    def step(self, action):
        if os.environ.get("PROXIMA_TEST_RAISE") and self.marked and self.n == 2:
            raise RuntimeError("asked to fail")
        return super().step(action)
