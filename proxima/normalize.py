"""Running statistics as torch modules on the device: observation normalizer and reward scaler.

Both keep their statistics as buffers, so they travel with ``state_dict()`` into checkpoints and
evaluation uses them frozen (``update=False`` / ``.eval()``).
"""

from __future__ import annotations

import torch
from torch import nn


class RunningMeanStd(nn.Module):
    """Streaming mean/variance (Chan et al. parallel update) over the leading batch dimension.

    ``groups`` G > 0 (populations): the batch (G*B, *shape) is G equal blocks, each with its own
    statistics (mean and var (G, *shape)), as G separate instances would keep them.

    The prior (``count`` starts at ``epsilon``, ``var`` at 1) only keeps the variance of the first
    rows away from 0: after n rows ``mean`` is their plain mean and ``var`` is
    (epsilon * 1 + n * their biased variance) / (n + epsilon), whatever the chunking. This departs
    from gymnasium's RunningMeanStd (and its NormalizeObservation/NormalizeReward), which places the
    prior at mean 0: its first merge adds ~mean**2 * epsilon / n to the variance, so a dimension
    with a large offset and a small spread (1e4 +- 0.01) got a variance of ~1 instead of 1e-4 and
    was squashed to ~0 for the whole run. Where the offset is O(1) the two barely differ: on 8
    CartPole or Pendulum envs the normalized observations move by < 2e-5 after the first update and
    < 1e-7 after 1000 (on 1 env, by < 1e-2 while both variances are still ~epsilon)."""

    def __init__(self, shape: tuple = (), epsilon: float = 1e-4, groups: int = 0):
        super().__init__()
        full = (groups, *shape) if groups else tuple(shape)
        self.groups, self.epsilon = groups, float(epsilon)
        self.register_buffer("mean", torch.zeros(full, dtype=torch.float64))
        self.register_buffer("var", torch.ones(full, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.to(torch.float64)
        if self.groups:  # (G*B, ...) -> per block: the statistics each member's own instance would see
            x = x.reshape(self.groups, -1, *x.shape[1:])
            batch_mean, batch_var, batch_count = x.mean(1), x.var(1, unbiased=False), x.shape[1]
        else:
            batch_mean = x.mean(0)
            batch_var = x.var(0, unbiased=False)
            batch_count = x.shape[0]
        # Chan's merge of the rows seen (n, mean, m2) with the batch; the prior's epsilon weighs in the
        # variance only, so it adds no mean**2 term (n is 0 before the first update: the batch's own
        # moments). Tensor arithmetic only, no branch on a value: the rollout may be a captured CUDA graph
        seen, m2_seen = self.moments()
        delta = batch_mean - self.mean
        tot = self.count + batch_count
        new_mean = self.mean + delta * batch_count / (seen + batch_count)
        m2 = m2_seen + batch_var * batch_count + delta.pow(2) * seen * batch_count / (seen + batch_count)
        self.set_moments(new_mean, m2, tot)

    def moments(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(n, m2): the rows counted (count less the prior) and their summed squared deviations about
        ``mean`` (the variance less the prior's share): what an update, or distributed.sync_normalizers'
        merge across ranks, combines."""
        return self.count - self.epsilon, (self.var * self.count - self.epsilon).clamp_min(0.0)

    def set_moments(self, mean: torch.Tensor, m2: torch.Tensor, count) -> None:
        """Hold ``mean`` and ``m2`` over ``count`` (rows plus the prior): var = (m2 + epsilon) / count."""
        self.mean.copy_(mean)
        self.var.copy_((m2 + self.epsilon) / count)
        self.count.copy_(count)


class ObsNormalizer(nn.Module):
    """(obs - mean) / sqrt(var + eps), clipped to [-clip, clip]; updates its stats while training."""

    def __init__(self, shape: tuple, clip: float = 10.0, epsilon: float = 1e-8, groups: int = 0):
        super().__init__()
        self.rms = RunningMeanStd(shape, groups=groups)
        self.clip, self.epsilon, self.groups = clip, epsilon, groups

    def forward(self, obs: torch.Tensor, update: bool | None = None) -> torch.Tensor:
        """obs (B, *shape) -> normalized float32; with ``groups`` G, B = G*N and block g uses its own stats."""
        if update if update is not None else self.training:
            self.rms.update(obs)
        x = obs.to(torch.float64)
        if self.groups:
            x = x.reshape(self.groups, -1, *obs.shape[1:])
            mean, var = self.rms.mean.unsqueeze(1), self.rms.var.unsqueeze(1)
            out = ((x - mean) / torch.sqrt(var + self.epsilon)).reshape(obs.shape)
        else:
            out = (x - self.rms.mean) / torch.sqrt(self.rms.var + self.epsilon)
        return out.clamp(-self.clip, self.clip).to(torch.float32)

    @torch.no_grad()
    def count_reset(self, obs: torch.Tensor) -> None:
        """Count the observations an env reset returned, (B, *shape), once (collect_rollout counts
        every later one as its step returns it); nothing when frozen (eval mode)."""
        if self.training:
            self.rms.update(obs)

    def member(self, index: int) -> "ObsNormalizer":
        """Group ``index``'s statistics as a plain ObsNormalizer (a population member's, for eval)."""
        one = ObsNormalizer(tuple(self.rms.mean.shape[1:]), self.clip, self.epsilon).to(self.rms.mean.device)
        one.load_state_dict({"rms.mean": self.rms.mean[index].clone(), "rms.var": self.rms.var[index].clone(),
                             "rms.count": self.rms.count.clone()})
        return one


class RewardScaler(nn.Module):
    """Divide rewards by the std of a running discounted return (no mean subtraction), then clip.

    ``returns`` (N,) is the per-env discounted return, reset where an episode ended.
    """

    def __init__(self, num_envs: int, gamma, clip: float = 10.0, epsilon: float = 1e-8, groups: int = 0):
        """gamma: a float, or with ``groups`` G a (num_envs,) float64 tensor (each member's gamma on its rows)."""
        super().__init__()
        self.rms = RunningMeanStd((), groups=groups)
        self.register_buffer("returns", torch.zeros(num_envs, dtype=torch.float64))
        self.gamma, self.clip, self.epsilon, self.groups = gamma, clip, epsilon, groups

    def forward(self, reward: torch.Tensor, done: torch.Tensor, update: bool | None = None) -> torch.Tensor:
        if update if update is not None else self.training:
            self.returns.mul_(self.gamma).add_(reward.to(torch.float64))
            self.rms.update(self.returns)
            self.returns.masked_fill_(done, 0.0)
        var = self.rms.var.repeat_interleave(reward.shape[0] // self.groups) if self.groups else self.rms.var
        out = reward.to(torch.float64) / torch.sqrt(var + self.epsilon)
        return out.clamp(-self.clip, self.clip).to(torch.float32)
