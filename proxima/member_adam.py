"""Adam over a population's stacked parameters, one independent Adam per member.

Parameters are (P, ...) tensors, member p owning slice p. Adam is elementwise, so one optimizer
over stacked tensors is P Adams, except for what torch.optim.Adam keeps per tensor: the learning
rate and the step count (its bias corrections). Here both are (P,) tensors, and a (P,) bool
``active`` mask skips a member's step entirely (its weights, moments and step count stay as they
are), which a per-member early stop (``target_kl``) needs: the single run it mirrors stops its
update, so its moments and bias corrections see no further step. Written with tensor ops only (no
host reads), so a CUDA graph can record it. The arithmetic is torch.optim.Adam's single-tensor
path (``lerp_`` of the first moment, ``addcmul_`` of the second, bias corrections from the step
count, ``addcdiv_``), per member.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch


class MemberAdam:
    """Adam for stacked parameters with a (P,) learning rate, (P,) step counts and an active mask."""

    def __init__(self, params: Sequence[torch.Tensor], members: int, betas=(0.9, 0.999), eps: float = 1e-5):
        self.params = list(params)
        self.members = members
        self.beta1, self.beta2 = betas
        self.eps = eps
        device = self.params[0].device
        self.step_count = torch.zeros(members, dtype=torch.float32, device=device)
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, lr: torch.Tensor, active: Optional[torch.Tensor] = None) -> None:
        """One Adam step of every active member. lr: (P,) float; active: (P,) bool or None (all)."""
        b1, b2 = self.beta1, self.beta2
        on = torch.ones_like(self.step_count, dtype=torch.bool) if active is None else active
        self.step_count.add_(on.to(self.step_count.dtype))
        step = self.step_count.clamp(min=1.0)  # a member that never stepped: any value, it is masked out
        bias1 = 1 - b1 ** step
        bias2_sqrt = (1 - b2 ** step).sqrt()
        step_size = lr / bias1  # (P,)
        for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq):
            if p.grad is None:
                continue
            shape = (-1,) + (1,) * (p.dim() - 1)
            mask = on.view(shape)
            g = p.grad
            new_m = torch.lerp(m, g, 1 - b1)
            new_v = v * b2 + (1 - b2) * g * g
            denom = new_v.sqrt() / bias2_sqrt.view(shape) + self.eps
            new_p = p - step_size.view(shape) * new_m / denom
            m.copy_(torch.where(mask, new_m, m))
            v.copy_(torch.where(mask, new_v, v))
            p.copy_(torch.where(mask, new_p, p))

    def state_dict(self) -> dict:
        return {"step": self.step_count.clone(), "exp_avg": [m.clone() for m in self.exp_avg],
                "exp_avg_sq": [v.clone() for v in self.exp_avg_sq]}

    def load_state_dict(self, state: dict) -> None:
        if len(state["exp_avg"]) != len(self.exp_avg) or state["step"].shape != self.step_count.shape:
            raise ValueError("optimizer state does not match this population's parameters")
        self.step_count.copy_(state["step"])
        for own, got in zip(self.exp_avg + self.exp_avg_sq, list(state["exp_avg"]) + list(state["exp_avg_sq"])):
            if own.shape != got.shape:
                raise ValueError(f"optimizer moment of shape {tuple(got.shape)}, expected {tuple(own.shape)}")
            own.copy_(got)
