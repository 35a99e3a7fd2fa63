"""Adam over a population's stacked parameters, one independent Adam per member.

Parameters are (P, ...) tensors, member p owning slice p. Adam is elementwise, so one optimizer
over stacked tensors is P Adams, except for what torch.optim.Adam keeps per tensor: the learning
rate and the step count (its bias corrections). Here both are (P,) tensors, and a (P,) bool
``active`` mask skips a member's step entirely (its weights, moments and step count stay as they
are), which a per-member early stop (``target_kl``) needs: the single run it mirrors stops its
update, so its moments and bias corrections see no further step. A step that would make a member's
weights non-finite is skipped the same way and reported (``step`` returns the members stepped).

The parameters are re-pointed at views of one (P, D) buffer, so the step, the per-member gradient
norm and the clip are a dozen ops on one tensor whatever the number of layers (a few hundred small
ops per minibatch otherwise). Tensor ops only (no host reads), so a CUDA graph can record it. The
arithmetic is torch.optim.Adam(fused=True)'s, which a single run uses (``proxima.adam``), per member:
``lerp`` of the first moment, the second moment, and the step size and bias correction computed
from the step count in float64 and rounded to float32 (tests/unit/test_review27_population.py
compares each member with torch's fused Adam run on it alone).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch


class MemberAdam:
    """Adam for stacked parameters with a (P,) learning rate, (P,) step counts and an active mask.

    ``params``: (P, ...) tensors; their storage is moved into one (P, D) buffer (``self.flat``) that
    the step updates in place, so modules holding them see every step."""

    def __init__(self, params: Sequence[torch.Tensor], members: int, betas=(0.9, 0.999), eps: float = 1e-5):
        self.params = list(params)
        self.members = members
        self.beta1, self.beta2 = betas
        self.eps = eps
        P = members
        sizes = [p[0].numel() for p in self.params]
        self.flat = torch.cat([p.detach().reshape(P, -1) for p in self.params], dim=1)  # (P, D)
        offset = 0
        for p, n in zip(self.params, sizes):  # each parameter becomes a view of its columns
            p.data = self.flat[:, offset:offset + n].view_as(p)
            offset += n
        self.step_count = torch.zeros(P, dtype=torch.float32, device=self.flat.device)
        self.exp_avg = torch.zeros_like(self.flat)
        self.exp_avg_sq = torch.zeros_like(self.flat)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def flat_grad(self) -> torch.Tensor:
        """Every parameter's gradient as one (P, D) tensor (zeros for a parameter without one)."""
        P = self.members
        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(P, -1) for p in self.params], dim=1)

    @torch.no_grad()
    def step(self, grad: torch.Tensor, lr: torch.Tensor, active: Optional[torch.Tensor] = None) -> torch.Tensor:
        """One Adam step of every active member. grad: (P, D) (``flat_grad``, clipped); lr: (P,)
        float; active: (P,) bool or None (all). Returns the (P,) bool mask of the members stepped:
        the active ones whose new weights are all finite. A step that would leave a member's weights
        NaN or inf (a non-finite gradient, or a learning rate so large that the step overflows) is
        not applied, so the member keeps its last finite weights, moments and step count: a
        population freezes a diverged member rather than let it act on NaN weights."""
        b1, b2 = self.beta1, self.beta2
        on = torch.ones_like(self.step_count, dtype=torch.bool) if active is None else active
        count = self.step_count + on.to(self.step_count.dtype)
        # Bias corrections in float64, rounded to float32 once, as torch's fused Adam (the single
        # run's optimizer) computes them: in float32, 1 - 0.999**1 is 0.0009999871, which puts every
        # step of every member ~7e-6 relative off the single run's. (P,) tensor ops: no host read.
        step = count.clamp(min=1.0).double()  # a member that never stepped: any value, it is masked out
        bias2_sqrt = (1 - b2 ** step).sqrt().to(self.flat.dtype).unsqueeze(1)
        step_size = (lr.double() / (1 - b1 ** step)).to(self.flat.dtype).unsqueeze(1)  # (P, 1)
        new_m = torch.lerp(self.exp_avg, grad, 1 - b1)
        new_v = self.exp_avg_sq * b2 + (1 - b2) * grad * grad
        new_p = self.flat - step_size * new_m / (new_v.sqrt() / bias2_sqrt + self.eps)
        stepped = on & torch.isfinite(new_p).all(dim=1)  # a NaN/inf gradient makes new_p NaN too
        mask = stepped.unsqueeze(1)
        self.step_count.copy_(torch.where(stepped, count, self.step_count))
        self.exp_avg.copy_(torch.where(mask, new_m, self.exp_avg))
        self.exp_avg_sq.copy_(torch.where(mask, new_v, self.exp_avg_sq))
        self.flat.copy_(torch.where(mask, new_p, self.flat))
        return stepped

    def state_dict(self) -> dict:
        return {"step": self.step_count.clone(), "exp_avg": self.exp_avg.clone(), "exp_avg_sq": self.exp_avg_sq.clone()}

    def load_state_dict(self, state: dict) -> None:
        for name, own in (("step", self.step_count), ("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
            got = state[name]
            if not torch.is_tensor(got) or got.shape != own.shape:
                raise ValueError(f"optimizer {name} of shape {tuple(getattr(got, 'shape', ()))}, this population's {tuple(own.shape)}")
            own.copy_(got)
