"""Per-token KL to the reference policy, and the coefficient that weighs it in the reward.

With r = log q(token) - log p(token) (q the reference, p the policy, token sampled from p):
k1 = -r is unbiased for KL(p || q) but can be negative per token; k3 = (e^r - 1) - r is unbiased
and never negative (Schulman, "Approximating KL divergence", 2020). k1's mean over a small batch is
noisy and often negative for a step; one that stays negative over many steps suggests the log-probs
were scored with settings (temperature, dropout) other than the sampling ones.
"""

from __future__ import annotations

import torch


def kl_per_token(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """logprobs, ref_logprobs: (B, R) log-probs of the sampled tokens -> (B, R) KL estimates."""
    if estimator == "k1":
        return logprobs - ref_logprobs
    if estimator == "k3":
        log_ratio = ref_logprobs - logprobs
        return torch.expm1(log_ratio) - log_ratio
    raise ValueError(f"kl_per_token: estimator must be k1 or k3, got {estimator!r}")


class KLController:
    """beta of the KL penalty: fixed, or adapted towards a target KL (Ziegler et al. 2019, sec. 2.2).

    Adaptive: beta <- beta * (1 + clip(kl / target - 1, -0.2, 0.2) * n / horizon) after every batch of
    n responses whose mean summed KL was ``kl``. The horizon is counted in responses and must exceed
    0.2 * n, or the factor can be 0 or negative (config.check_kl_horizon refuses such a run).
    """

    def __init__(self, init: float, adaptive: bool = False, target: float = 6.0, horizon: int = 10000):
        self.value, self.adaptive, self.target, self.horizon = float(init), adaptive, target, horizon

    def update(self, kl: float, n_responses: int) -> None:
        if not self.adaptive:
            return
        proportional_error = min(max(kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + proportional_error * n_responses / self.horizon

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])
