"""The agent: separate actor and critic MLPs (PPO_NOTES detail 13) and one action head per space.

Heads: Discrete -> categorical over logits; MultiDiscrete -> independent categoricals (log-probs
and entropies summed); Box -> Normal with a state-independent log std initialized to 0 (summed over
action dims). Sampling is written with plain tensor ops (Gumbel-max for categoricals) so it never
syncs with the host and never validates arguments on the hot path.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from torch import nn


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """Orthogonal weights with gain ``std``, constant bias (detail 2)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


def mlp(in_dim: int, hidden: list, out_dim: int, out_std: float, activation: str = "tanh") -> nn.Sequential:
    act = {"tanh": nn.Tanh, "relu": nn.ReLU}[activation]
    layers, d = [], in_dim
    for h in hidden:
        layers += [layer_init(nn.Linear(d, h)), act()]
        d = h
    layers.append(layer_init(nn.Linear(d, out_dim), std=out_std))
    return nn.Sequential(*layers)


def _categorical_sample(logits: torch.Tensor) -> torch.Tensor:
    # Gumbel-max: argmax(logits + Gumbel noise) is a categorical sample, with no host sync
    u = torch.rand_like(logits).clamp_(1e-20, 1.0)
    return torch.argmax(logits - torch.log(-torch.log(u)), dim=-1)


def _categorical_logprob_entropy(logits: torch.Tensor, action: torch.Tensor):
    logp = torch.log_softmax(logits, dim=-1)
    lp = logp.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
    ent = -(logp.exp() * logp).sum(-1)
    return lp, ent


class Agent(nn.Module):
    """Actor-critic for flat observations (obs_dim,) and a Discrete, MultiDiscrete or Box action."""

    def __init__(self, obs_space: gym.spaces.Box, action_space: gym.spaces.Space, hidden_sizes=(64, 64), activation: str = "tanh"):
        super().__init__()
        obs_dim = int(np.prod(obs_space.shape))
        hidden = list(hidden_sizes)
        self.critic = mlp(obs_dim, hidden, 1, out_std=1.0, activation=activation)
        if isinstance(action_space, gym.spaces.Discrete):
            self.kind, self.nvec = "discrete", [int(action_space.n)]
            self.actor = mlp(obs_dim, hidden, int(action_space.n), out_std=0.01, activation=activation)
        elif isinstance(action_space, gym.spaces.MultiDiscrete):
            self.kind, self.nvec = "multidiscrete", [int(n) for n in np.asarray(action_space.nvec).reshape(-1)]
            self.actor = mlp(obs_dim, hidden, sum(self.nvec), out_std=0.01, activation=activation)
        elif isinstance(action_space, gym.spaces.Box):
            self.kind = "continuous"
            self.act_dim = int(np.prod(action_space.shape))
            self.actor = mlp(obs_dim, hidden, self.act_dim, out_std=0.01, activation=activation)
            self.actor_logstd = nn.Parameter(torch.zeros(1, self.act_dim))
        else:
            raise ValueError(f"not supported yet: action space {action_space}")

    # value ----------------------------------------------------------------------------------
    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        """obs (B, obs_dim) -> V(obs) (B,)."""
        return self.critic(obs).squeeze(-1)

    # policy ---------------------------------------------------------------------------------
    def get_action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        """obs (B, obs_dim), optional action (B, *act_shape) -> action, logprob (B,), entropy (B,), value (B,)."""
        out = self.actor(obs)
        if self.kind == "continuous":
            mean = out
            logstd = self.actor_logstd.expand_as(mean)
            std = logstd.exp()
            if action is None:
                action = mean + std * torch.randn_like(mean)
            logprob = (-((action - mean) ** 2) / (2 * std * std) - logstd - 0.5 * math.log(2 * math.pi)).sum(-1)
            entropy = (0.5 + 0.5 * math.log(2 * math.pi) + logstd).sum(-1)
        elif self.kind == "discrete":
            if action is None:
                action = _categorical_sample(out)
            logprob, entropy = _categorical_logprob_entropy(out, action)
        else:
            chunks = torch.split(out, self.nvec, dim=-1)
            if action is None:
                action = torch.stack([_categorical_sample(c) for c in chunks], dim=-1)
            lps, ents = zip(*(_categorical_logprob_entropy(c, action[..., i]) for i, c in enumerate(chunks)))
            logprob, entropy = torch.stack(lps, -1).sum(-1), torch.stack(ents, -1).sum(-1)
        return action, logprob, entropy, self.get_value(obs)

    def forward(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        """Same as get_action_and_value, so a DistributedDataParallel wrapper sees the update's forward."""
        return self.get_action_and_value(obs, action)

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """The action for obs (B, obs_dim): the mode (argmax / mean) or a sample."""
        if not deterministic:
            return self.get_action_and_value(obs)[0]
        out = self.actor(obs)
        if self.kind == "continuous":
            return out
        if self.kind == "discrete":
            return out.argmax(-1)
        return torch.stack([c.argmax(-1) for c in torch.split(out, self.nvec, dim=-1)], dim=-1)

    def policy_step(self, obs: torch.Tensor):
        """The acting step of collect_rollout: obs (N, obs_dim) -> action, logprob (N,), value (N,)."""
        action, logprob, _, value = self.get_action_and_value(obs)
        return action, logprob, value


def action_dtype(space: gym.spaces.Space) -> torch.dtype:
    return torch.float32 if isinstance(space, gym.spaces.Box) else torch.int64


def action_shape(space: gym.spaces.Space) -> tuple:
    if isinstance(space, gym.spaces.Discrete):
        return ()
    if isinstance(space, gym.spaces.MultiDiscrete):
        return (int(np.asarray(space.nvec).size),)
    return (int(np.prod(space.shape)),)
