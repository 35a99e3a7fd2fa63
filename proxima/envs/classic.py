"""Torch-native, batched versions of Gymnasium's classic-control tasks.

Each class follows Gymnasium's dynamics, rewards, termination, time limit, reset distribution and
spaces (gymnasium/envs/classic_control), vectorized over N envs as tensor ops. State is kept in
``dtype`` (float32 by default; float64 for bit-level parity checks against Gymnasium).
"""

from __future__ import annotations

import math
from typing import Optional

import gymnasium as gym
import numpy as np
import torch

from .base import NativeEnv


class CartPole(NativeEnv):
    """CartPole-v1: push the cart left (0) or right (1) to keep the pole up; +1 per step, 500 steps."""

    env_id = "CartPole-v1"
    max_episode_steps = 500
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass = masscart + masspole
    polemass_length = masspole * length
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def __init__(self, num_envs: int, device="cpu", seed: Optional[int] = None, dtype=torch.float32):
        super().__init__(num_envs, device, seed)
        self.dtype = dtype
        high = np.array([self.x_threshold * 2, np.finfo(np.float32).max, self.theta_threshold * 2, np.finfo(np.float32).max], dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(2)

    def _sample_initial_state(self, n):
        return {"s": self._uniform((n, 4), -0.05, 0.05).to(self.dtype)}

    def _dynamics(self, action):
        s = self.state["s"]
        x, x_dot, theta, theta_dot = s.unbind(-1)
        force = torch.where(action.view(-1) == 1, self.force_mag, -self.force_mag).to(s.dtype)
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        temp = (force + self.polemass_length * theta_dot * theta_dot * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta * costheta / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        # Gymnasium's default "euler" integrator: positions use the old velocities
        s = torch.stack(
            (x + self.tau * x_dot, x_dot + self.tau * xacc, theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc), -1
        )
        self.state["s"] = s
        x, theta = s[:, 0], s[:, 2]
        terminated = (x.abs() > self.x_threshold) | (theta.abs() > self.theta_threshold)
        reward = torch.ones(self.num_envs, dtype=torch.float32, device=self.device)
        return reward, terminated

    def _observe(self):
        return self.state["s"].to(torch.float32)


#: env id -> native class. make_env() consults this first when backend is auto or native.
NATIVE_ENVS: dict[str, type[NativeEnv]] = {
    "CartPole-v1": CartPole,
}
