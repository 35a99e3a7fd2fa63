"""Synthetic torch-native tasks for benchmarks and tests, sized like the usual continuous tasks.

``LinearQuadratic-v0``: a stable random linear system ``s' = A s + B a`` with 17-dim observations
and 6-dim actions in [-1, 1] (HalfCheetah's sizes), reward ``-(|s|^2 + 0.1 |a|^2) / dim``,
1,000-step episodes. Cheap to step, so a benchmark on it measures the learner, not the simulator;
and it is learnable (drive the state to 0), so it is not a meaningless load.
"""

from __future__ import annotations

from typing import Optional

import gymnasium as gym
import numpy as np
import torch

from .base import NativeEnv


class LinearQuadratic(NativeEnv):
    env_id = "LinearQuadratic-v0"
    max_episode_steps = 1000
    obs_dim, act_dim = 17, 6

    def __init__(self, num_envs: int, device="cpu", seed: Optional[int] = None):
        super().__init__(num_envs, device, seed)
        # fixed system matrices (same for every seed): the task is the same, only the episodes differ
        g = torch.Generator().manual_seed(1234)
        a = torch.randn(self.obs_dim, self.obs_dim, generator=g) / self.obs_dim ** 0.5
        self.A = (0.95 * a / torch.linalg.matrix_norm(a, ord=2)).to(self.device)  # spectral norm < 1: stable
        self.B = (0.3 * torch.randn(self.act_dim, self.obs_dim, generator=g)).to(self.device)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (self.obs_dim,), np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (self.act_dim,), np.float32)

    def _sample_initial_state(self, n):
        return {"s": self._uniform((n, self.obs_dim), -1.0, 1.0)}

    def _dynamics(self, action):
        a = action.reshape(self.num_envs, self.act_dim).clamp(-1.0, 1.0)
        s = self.state["s"] @ self.A + a @ self.B
        self.state["s"] = s
        reward = -(s.pow(2).sum(-1) + 0.1 * a.pow(2).sum(-1)) / self.obs_dim
        return reward, torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    def _observe(self):
        return self.state["s"].clone()
