"""RLHF's pieces of the PPO data path, in reading order, as plain tensor functions.

Shapes: B responses in the batch, R response tokens (padded after EOS). ``mask`` (B, R) bool marks the
response tokens up to and including the first EOS; ``lengths`` (B,) counts them (>= 1).

    rewards   = token_rewards(scores, kl, ...)            -beta * KL per token, score at the last token
    adv, ret  = gae_advantages(rewards, values, ...)      the core compute_gae on the token axis
    adv       = masked_whiten(adv, mask)                   (docs/ppo_notes.md: whitened under the response mask)
or, without a critic,
    adv       = group_advantages(sequence_rewards, G, "rloo")
    adv       = grpo_advantages(scores, summed KL, G, beta)   the score normalised, the KL added after
"""

from __future__ import annotations

import torch

from ..ppo import compute_gae
from .masked import masked_sum


def last_token_mask(lengths: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """(B,) lengths -> (B, R) bool, True at each response's last token (EOS or the length limit)."""
    positions = torch.arange(num_tokens, device=lengths.device)
    return positions[None, :] == (lengths - 1)[:, None]


def token_rewards(scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor,
                  kl_coef: float) -> tuple:
    """Per-token rewards of the RLHF objective.

    scores (B,) from the reward model or function; kl (B, R) per-token KL estimates.
    Returns (rewards, non_score_rewards), both (B, R) and 0 on padding: the KL penalty -beta * kl on
    every response token, plus the score on the last one (the only place the reward model speaks).
    """
    zero = torch.zeros((), dtype=kl.dtype, device=kl.device)
    non_score = torch.where(mask, -kl_coef * kl, zero)
    rewards = non_score + torch.where(last_token_mask(lengths, kl.shape[1]), scores[:, None].to(kl.dtype), zero)
    return rewards, non_score


def gae_advantages(rewards: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor, gamma: float,
                   lam: float) -> tuple:
    """GAE over response tokens through the core ``compute_gae``.

    rewards, values (B, R) (values of the state before each token). The response ends at its last
    token: no bootstrap there (terminated) and the trace is cut (done), so padding after it never
    leaks into valid tokens. Returns (advantages, returns), (B, R); meaningful under the mask only.
    """
    num_tokens = rewards.shape[1]
    positions = torch.arange(num_tokens, device=rewards.device)
    ended = positions[None, :] >= (lengths - 1)[:, None]  # the last token and the padding after it
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    values = torch.where(ended & ~last_token_mask(lengths, num_tokens), zero, values)
    next_values = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], dim=1)
    # compute_gae is time-major (T, N): transpose so the token axis is T
    adv, ret = compute_gae(rewards.T, values.T, next_values.T, ended.T, ended.T, gamma, lam)
    return adv.T.contiguous(), ret.T.contiguous()


def sequence_rewards(scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """Critic-free estimators see one reward per response: score - beta * (KL summed over its tokens). (B,)"""
    return scores.to(kl.dtype) - kl_coef * masked_sum(kl, mask, dim=1)


def grpo_advantages(scores: torch.Tensor, kl_sums: torch.Tensor, group_size: int, kl_coef: float,
                    eps: float = 1e-4) -> torch.Tensor:
    """GRPO's advantages: (s - group mean s) / (group std s + eps) - beta * (kl - group mean kl). (B,)

    scores, kl_sums (B,) (KL summed over each response's tokens), groups of ``group_size`` adjacent.
    Only the score is normalised (Shao et al. 2024; TRL's GRPOTrainer): folding -beta * KL into the
    reward before the division would cancel beta, so a group of tied scores (all right or all wrong,
    common with 0/1 rewards) would get unit-size advantages made of KL noise whatever beta is. Here
    such a group's advantage is exactly -beta * (its centred KL): beta sets the penalty's weight
    against a score advantage of unit scale, and beta = 0 gives the score's advantage alone.
    """
    adv = group_advantages(scores.to(kl_sums.dtype), group_size, "grpo", eps)
    kl = kl_sums.view(-1, group_size)
    # centred in the group, as the score is (RLOO's baseline centres the KL too): each group's advantages
    # still sum to 0, and only a response's KL relative to its siblings pushes it
    return adv - kl_coef * (kl - kl.mean(1, keepdim=True)).reshape(-1)


def group_advantages(rewards: torch.Tensor, group_size: int, kind: str, eps: float = 1e-4) -> torch.Tensor:
    """Baselines from the other responses to the same prompt; no value model.

    rewards (B,) with the G = ``group_size`` responses to one prompt adjacent (B = prompts x G).
    grpo: (r - mean of the group) / (std of the group + eps)   (Shao et al. 2024)
    rloo: r - mean of the *other* G - 1 responses               (Ahmadian et al. 2024)
    Returns (B,) advantages, one per response (the same for each of its tokens).
    """
    groups = rewards.view(-1, group_size)
    if kind == "grpo":
        adv = (groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + eps)
    elif kind == "rloo":
        adv = groups - (groups.sum(1, keepdim=True) - groups) / (group_size - 1)
    else:
        raise ValueError(f"group_advantages: kind must be grpo or rloo, got {kind!r}")
    return adv.reshape(-1)
