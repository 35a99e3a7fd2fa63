"""Running statistics as torch modules on the device: observation normalizer and reward scaler.

Both keep their statistics as buffers, so they travel with ``state_dict()`` into checkpoints and
evaluation uses them frozen (``update=False`` / ``.eval()``).
"""

from __future__ import annotations

import torch
from torch import nn


class RunningMeanStd(nn.Module):
    """Streaming mean/variance (Chan et al. parallel update) over the leading batch dimension."""

    def __init__(self, shape: tuple = (), epsilon: float = 1e-4):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.to(torch.float64)
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False)
        batch_count = x.shape[0]
        delta = batch_mean - self.mean
        tot = self.count + batch_count
        new_mean = self.mean + delta * batch_count / tot
        m2 = self.var * self.count + batch_var * batch_count + delta.pow(2) * self.count * batch_count / tot
        self.mean.copy_(new_mean)
        self.var.copy_(m2 / tot)
        self.count.copy_(tot)


class ObsNormalizer(nn.Module):
    """(obs - mean) / sqrt(var + eps), clipped to [-clip, clip]; updates its stats while training."""

    def __init__(self, shape: tuple, clip: float = 10.0, epsilon: float = 1e-8):
        super().__init__()
        self.rms = RunningMeanStd(shape)
        self.clip, self.epsilon = clip, epsilon

    def forward(self, obs: torch.Tensor, update: bool | None = None) -> torch.Tensor:
        if update if update is not None else self.training:
            self.rms.update(obs)
        out = (obs.to(torch.float64) - self.rms.mean) / torch.sqrt(self.rms.var + self.epsilon)
        return out.clamp(-self.clip, self.clip).to(torch.float32)


class RewardScaler(nn.Module):
    """Divide rewards by the std of a running discounted return (no mean subtraction), then clip.

    ``returns`` (N,) is the per-env discounted return, reset where an episode ended.
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, epsilon: float = 1e-8):
        super().__init__()
        self.rms = RunningMeanStd(())
        self.register_buffer("returns", torch.zeros(num_envs, dtype=torch.float64))
        self.gamma, self.clip, self.epsilon = gamma, clip, epsilon

    def forward(self, reward: torch.Tensor, done: torch.Tensor, update: bool | None = None) -> torch.Tensor:
        if update if update is not None else self.training:
            self.returns.mul_(self.gamma).add_(reward.to(torch.float64))
            self.rms.update(self.returns)
            self.returns.masked_fill_(done, 0.0)
        out = reward.to(torch.float64) / torch.sqrt(self.rms.var + self.epsilon)
        return out.clamp(-self.clip, self.clip).to(torch.float32)
