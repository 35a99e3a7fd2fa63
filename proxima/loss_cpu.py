"""The PPO loss of ``ppo.ppo_loss`` with a closed-form backward, for the CPU.

Why: autograd differentiates ``torch.max`` and ``torch.clamp`` with boolean masks (``where(a == b,
...)``, ``masked_fill_``, ``where(lo <= x & x <= hi, ...)``), and this project's CPU builds of torch
run boolean kernels far slower than float ones: over 16,384 floats a ``torch.where`` with a bool
condition takes 100 us, a comparison 25 us and a bool-to-float cast 24 us, against 4 us for a
multiply (microbenchmarks, torch 2.13, AVX-512 and AVX2 alike). The loss of a 16,384-row minibatch
spent 1.3 ms forward and backward, most of it in those masks, at 4,096 CartPole envs; now 0.9 ms
(``python benchmarks/cpu_parts.py``, benchmarks/results/cpu-parts.md).

Here the forward is ``ppo.ppo_loss`` itself (``ppo.ppo_loss_with_terms``, which also hands back
the per-sample terms; inside a Function's forward autograd records nothing, so none of its masks
are built), and from those terms it computes the gradient of the loss with respect to the new
log-probabilities and values as two float tensors, using signs (``x.sign()``) instead of boolean
masks. The backward only scales them by the incoming gradient.
Same derivative as autograd's, branch for branch, ties included: where both surrogate terms are
equal (the ratio inside the clip range) each gets half of the gradient, as ``torch.max`` gives it;
``clamp`` passes the gradient on its closed range. The gradients agree with autograd's within float
rounding (tests/unit/test_loss_cpu.py).

Used by ``ppo.make_grad_step`` (which hands it float32 log-probs and values, autocast or not) for
a single run's (B,) minibatch on the CPU without a mask, ``torch.compile`` or a functorch
transform that grad_cpu.py does not take (Box and MultiDiscrete actions, encoders, AMP, DDP,
minibatches of more than one row block); grad_cpu.py runs this file's ``term_grads`` itself;
everything else (CUDA, where a graph or a compiled kernel fuses the loss; a
population's (P, B) inputs with per-member coefficients; RLHF's masked tokens) takes
``ppo.ppo_loss`` itself, the reference this file must match.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import ppo

#: ppo.ppo_loss's keys, in the order _PPOLoss returns them
NAMES = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "old_approx_kl", "clipfrac", "vf_clipfrac", "ratio")


def term_grads(t: dict, new_values: torch.Tensor, returns: torch.Tensor, clip_vloss: bool) -> tuple:
    """d(pg_loss)/d new_logprob and d(v_loss)/d new_values / 2 for each sample, (B,) floats, from
    ``ppo.ppo_terms``' dict ``t``: signs, not boolean masks.

    Surrogate max(u, c), u = -A r, c = -A clamp(r): torch.max gives u's side the gradient where
    u > c, half of it on a tie, none where u < c, and c's side the rest; d u/d r = -A, d c/d r = -A
    where clamp passed r (r inside its closed range), else 0; then d r/d logprob = r. So
    d/d logprob = u * (w + (1 - w) * passed), w = 1, 1/2 or 0."""
    w = (t["unclipped"] - t["clipped"]).sign_().add_(1.0).mul_(0.5)
    passed = 1.0 - (t["ratio_clipped"] - t["ratio"]).abs().sign_()
    d_logprob = t["unclipped"] * (w + (1.0 - w) * passed)
    if clip_vloss:
        # 0.5 max(vu, vc) the same way: d vu/d v = 2 (v - R); d vc/d v = 2 (v_clipped_pred - R) where
        # clamp passed the delta; the 0.5 and the 2 cancel
        w = (t["v_unclipped"] - t["v_clipped"]).sign_().add_(1.0).mul_(0.5)
        passed = 1.0 - (t["v_delta_clipped"] - t["v_delta"]).abs().sign_()
        d_values = w * (new_values - returns) + (1.0 - w) * passed * (t["v_clipped_pred"] - returns)
    else:
        d_values = new_values - returns
    return d_logprob, d_values


class _PPOLoss(torch.autograd.Function):
    """(new_logprob, new_values, entropy) (B,) with grad -> loss and metrics, scalars."""

    @staticmethod
    def forward(ctx, new_logprob, new_values, entropy, old_logprob, advantages, old_values, returns,
                clip_coef: float, vclip: float, vf_coef: float, ent_coef: float, clip_vloss: bool, norm_adv: bool):
        out, t = ppo.ppo_loss_with_terms(new_logprob, old_logprob, advantages, new_values, old_values, returns, entropy,
                                         clip_coef=clip_coef, vf_coef=vf_coef, ent_coef=ent_coef, clip_vloss=clip_vloss,
                                         norm_adv=norm_adv, vf_clip_coef=vclip)
        d_logprob, d_values = term_grads(t, new_values, returns, clip_vloss)
        ctx.save_for_backward(d_logprob, d_values)
        b = new_logprob.shape[0]
        ctx.scales = (1.0 / b, vf_coef / b, -ent_coef / b)
        ctx.entropy_shape = entropy.shape
        metrics = tuple(out[k] for k in NAMES[1:])
        ctx.mark_non_differentiable(*metrics)
        return (out["loss"], *metrics)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss, *_metric_grads):
        d_logprob, d_values = ctx.saved_tensors
        pg_scale, v_scale, ent_scale = ctx.scales
        g_logprob = d_logprob * (grad_loss * pg_scale)
        g_values = d_values * (grad_loss * v_scale)
        g_entropy = (grad_loss * ent_scale).expand(ctx.entropy_shape)
        return (g_logprob, g_values, g_entropy) + (None,) * 10


def eligible(new_logprob: torch.Tensor, coefs, mask) -> bool:
    """Whether this file computes what ppo.ppo_loss would, for these inputs."""
    if mask is not None or new_logprob.device.type != "cpu" or new_logprob.dim() != 1:
        return False
    if any(torch.is_tensor(c) for c in coefs) or torch.compiler.is_compiling():
        return False
    return not torch._C._functorch.is_functorch_wrapped_tensor(new_logprob)


def ppo_loss(new_logprob: torch.Tensor, old_logprob: torch.Tensor, advantages: torch.Tensor,
             new_values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
             entropy: torch.Tensor, *, clip_coef, vf_coef, ent_coef,
             clip_vloss: bool = True, norm_adv: bool = True, mask: Optional[torch.Tensor] = None,
             vf_clip_coef: Optional[float] = None) -> dict:
    """``ppo.ppo_loss`` (same arguments, same dict), with the closed-form backward above where it
    applies and ``ppo.ppo_loss`` itself elsewhere."""
    vclip = clip_coef if vf_clip_coef is None else vf_clip_coef
    if not eligible(new_logprob, (clip_coef, vf_coef, ent_coef, vclip), mask):
        return ppo.ppo_loss(new_logprob, old_logprob, advantages, new_values, old_values, returns, entropy,
                            clip_coef=clip_coef, vf_coef=vf_coef, ent_coef=ent_coef, clip_vloss=clip_vloss,
                            norm_adv=norm_adv, mask=mask, vf_clip_coef=vf_clip_coef)
    shape = new_logprob.shape
    for name, x in (("old_logprob", old_logprob), ("advantages", advantages), ("new_values", new_values),
                    ("old_values", old_values), ("returns", returns), ("entropy", entropy)):
        ppo._check_shape(name, x, shape)
    out = _PPOLoss.apply(new_logprob, new_values, entropy, old_logprob, advantages, old_values, returns,
                         float(clip_coef), float(vclip), float(vf_coef), float(ent_coef), bool(clip_vloss), bool(norm_adv))
    return dict(zip(NAMES, out))
