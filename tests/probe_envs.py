"""Probe environments: tiny torch BatchedEnvs that a correct PPO learner solves in seconds.

Each isolates one part of the learner (after Andy Jones' "Debugging RL, Without the Agonizing
Pain"): a failure points at the value loss, discounting, the policy gradient or the wiring of
observations to actions. They follow proxima/envs/base.py's contract: (N, ...) tensors, same-step
autoreset with ``info["final_obs"]``, separate terminated/truncated, episode statistics in info.

Register them through ``proxima.envs.classic.NATIVE_ENVS`` (the ``probe_envs`` fixture of
tests/conftest.py does it with monkeypatch), then train with ``env_id="Probe1-v0"`` and so on.
"""

from __future__ import annotations

from typing import Optional

import gymnasium as gym
import numpy as np
import torch

from proxima.envs.base import BatchedEnv


class ProbeEnv(BatchedEnv):
    """Shared plumbing: one float obs, Discrete(2) actions, episodes of ``episode_length`` steps.

    A subclass defines ``_first_obs(n)`` (the obs at the start of an episode), ``_next_obs(obs)``
    (the obs after a non-final step) and ``_reward(obs, action, t)`` (t: step index in the episode).
    Every episode ends with ``terminated`` after ``episode_length`` steps.
    """

    backend = "native"
    can_save_state = False
    episode_length = 1

    def __init__(self, num_envs: int, device="cpu", seed: Optional[int] = None):
        self.env_id = type(self).__name__
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(0 if seed is None else int(seed))
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.t = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self.ep_return = torch.zeros(self.num_envs, dtype=torch.float32, device=self.device)
        self.obs = self._first_obs(self.num_envs)

    def _random_sign(self, n: int) -> torch.Tensor:
        bits = torch.randint(0, 2, (n, 1), generator=self.generator, device=self.device)
        return bits.to(torch.float32) * 2 - 1

    def _first_obs(self, n: int) -> torch.Tensor:
        return torch.zeros((n, 1), dtype=torch.float32, device=self.device)

    def _next_obs(self, obs: torch.Tensor) -> torch.Tensor:
        return obs

    def _reward(self, obs: torch.Tensor, action: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        if seed is not None:
            self.generator.manual_seed(int(seed))
        self.t.zero_()
        self.ep_return.zero_()
        self.obs = self._first_obs(self.num_envs)
        return self.obs.clone()

    def step(self, action: torch.Tensor):
        action = torch.as_tensor(action, device=self.device).reshape(self.num_envs)
        reward = self._reward(self.obs, action, self.t).to(torch.float32)
        self.t += 1
        self.ep_return += reward
        terminated = self.t >= self.episode_length
        truncated = torch.zeros_like(terminated)
        final_obs = torch.where(terminated.unsqueeze(-1), self.obs, self._next_obs(self.obs))
        episode_return = torch.where(terminated, self.ep_return, torch.zeros_like(self.ep_return))
        episode_length = torch.where(terminated, self.t, torch.zeros_like(self.t))
        # same-step autoreset: finished rows start their next episode now
        self.obs = torch.where(terminated.unsqueeze(-1), self._first_obs(self.num_envs), final_obs)
        self.t = torch.where(terminated, torch.zeros_like(self.t), self.t)
        self.ep_return = torch.where(terminated, torch.zeros_like(self.ep_return), self.ep_return)
        info = {"final_obs": final_obs, "episode_return": episode_return, "episode_length": episode_length}
        return self.obs.clone(), reward, terminated, truncated, info


class ConstantReward(ProbeEnv):
    """Probe 1: one step, obs 0, reward +1. The value of obs 0 must become 1 (value loss, returns)."""

    def _reward(self, obs, action, t):
        return torch.ones(self.num_envs, device=self.device)


class ObsDependentReward(ProbeEnv):
    """Probe 2: one step, obs +-1 at random, reward = obs. V(+1) = +1 and V(-1) = -1 (the critic reads obs)."""

    def _first_obs(self, n):
        return self._random_sign(n)

    def _reward(self, obs, action, t):
        return obs[:, 0]


class TwoStepDiscount(ProbeEnv):
    """Probe 3: two steps, obs 0 then obs 1, reward 1 only after the second. V(0) = gamma, V(1) = 1."""

    episode_length = 2

    def _next_obs(self, obs):
        return torch.ones_like(obs)

    def _reward(self, obs, action, t):
        return (t == 1).to(torch.float32)


class ActionDependentReward(ProbeEnv):
    """Probe 4: one step, obs 0, reward +1 for action 1 and -1 for action 0 (the policy gradient)."""

    def _reward(self, obs, action, t):
        return action.to(torch.float32) * 2 - 1


class ObsTimesAction(ProbeEnv):
    """Probe 5: one step, obs +-1 at random; reward +1 when the action matches the obs (1 for +1,
    0 for -1), -1 otherwise. The policy must read the obs to choose."""

    def _first_obs(self, n):
        return self._random_sign(n)

    def _reward(self, obs, action, t):
        wanted = (obs[:, 0] > 0).to(action.dtype)
        return torch.where(action == wanted, 1.0, -1.0)


PROBES = {
    "Probe1-v0": ConstantReward,
    "Probe2-v0": ObsDependentReward,
    "Probe3-v0": TwoStepDiscount,
    "Probe4-v0": ActionDependentReward,
    "Probe5-v0": ObsTimesAction,
}
