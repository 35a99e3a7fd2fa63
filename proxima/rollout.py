"""Rollout storage: preallocated time-major (T, N, ...) tensors on one device, written in place."""

from __future__ import annotations

import torch


class Rollout:
    """T steps x N envs of transitions, plus per-iteration episode statistics as tensors.

    obs: (T, N, *obs_shape) obs_dtype, as the network saw it (normalized if normalization is on;
        uint8 pixels for image observations, 4x smaller than float32: the network scales them)
    actions: (T, N, *act_shape) (int64 for discrete, float32 for Box; the unclipped sample)
    logprobs, values, rewards, raw_rewards: (T, N) float32
    terminated, dones: (T, N) bool
    final_obs: (T, N, *obs_shape) obs that followed step t (the finished episode's last obs where done)
    """

    def __init__(self, num_steps: int, num_envs: int, obs_shape: tuple, act_shape: tuple, act_dtype: torch.dtype, device,
                 obs_dtype: torch.dtype = torch.float32):
        T, N = num_steps, num_envs
        self.num_steps, self.num_envs, self.device = T, N, torch.device(device)
        f32 = dict(dtype=torch.float32, device=self.device)
        self.obs = torch.zeros((T, N, *obs_shape), dtype=obs_dtype, device=self.device)
        self.final_obs = torch.zeros((T, N, *obs_shape), dtype=obs_dtype, device=self.device)
        self.actions = torch.zeros((T, N, *act_shape), dtype=act_dtype, device=self.device)
        self.logprobs = torch.zeros((T, N), **f32)
        self.values = torch.zeros((T, N), **f32)
        self.rewards = torch.zeros((T, N), **f32)
        self.raw_rewards = torch.zeros((T, N), **f32)
        self.terminated = torch.zeros((T, N), dtype=torch.bool, device=self.device)
        self.dones = torch.zeros((T, N), dtype=torch.bool, device=self.device)
        # episode statistics of this iteration: sums and count, read once per iteration
        self.ep_return_sum = torch.zeros((), **f32)
        self.ep_length_sum = torch.zeros((), **f32)
        self.ep_count = torch.zeros((), **f32)

    def reset_stats(self) -> None:
        self.ep_return_sum.zero_()
        self.ep_length_sum.zero_()
        self.ep_count.zero_()

    def add_episode_stats(self, episode_return: torch.Tensor, episode_length: torch.Tensor, done: torch.Tensor) -> None:
        """Add the episodes that ended this step. Unfinished rows are 0 by contract, so plain sums
        count only finished episodes, and the count is of rows with a length (every episode lasts
        at least one step), not of ``done`` rows: an env whose statistics count longer units than
        its episodes (Atari while training: a lost life ends the episode, the statistics count
        full games, envs/atari.py) reports 0 on the rows that end an episode but no game, and
        those are no game. Where every done row ends an episode (all other envs) the two agree."""
        self.ep_return_sum += episode_return.sum()
        self.ep_length_sum += episode_length.sum()
        self.ep_count += (episode_length > 0).sum()

    def flatten(self, advantages: torch.Tensor, returns: torch.Tensor) -> dict:
        """The (T*N, ...) batch the update reads: b_obs, b_actions, ... as a dict."""
        B = self.num_steps * self.num_envs
        return {
            "obs": self.obs.reshape(B, *self.obs.shape[2:]),
            "actions": self.actions.reshape(B, *self.actions.shape[2:]),
            "logprobs": self.logprobs.reshape(B),
            "values": self.values.reshape(B),
            "advantages": advantages.reshape(B),
            "returns": returns.reshape(B),
        }
