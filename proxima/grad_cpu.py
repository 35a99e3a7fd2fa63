"""A PPO minibatch's gradients on the CPU without autograd: forward, loss and backward by row blocks.

Why: a preset's minibatch (at most 2,048 rows; the fast CartPole preset's: 1,024) is small enough
that autograd's machinery and the modules' calls cost as much as the arithmetic: the graph, a
Function per stage, ``nn.Linear``/``nn.Tanh`` calls, the closed-form head and loss each wrapped
for autograd. Here the same ops run straight from a plain loop, the same bits: a 1,024-row
minibatch's gradients 1.35x (1.04-1.50) and 1.36x (1.22-1.40) faster in two runs of
benchmarks/cpu_parts.py (benchmarks/results/cpu-parts.md).

How: once the advantages are normalized (the one statistic of the whole minibatch, computed
first) the PPO loss is a mean of per-sample terms, so the gradient with respect to one sample's
network outputs depends on that sample alone: each block of rows (``mlp_cpu``'s 2,048 for 64-wide
layers) goes through both MLPs, the head and the loss and straight back, its activations in
block-sized buffers reused by every block, adding its share into the weight gradients. For
minibatches of many blocks that locality shortens the MLPs' passes, but the head and loss then
run as ~60 small ops per 2,048-row block instead of once per minibatch: 0.87x (0.75-1.02) and
0.96x (0.86-1.24) for a 16,384-row minibatch in the same table, so ``covers`` leaves those to
autograd and ``mlp_cpu``.

The same ops as the autograd path on the same blocks (``mlp_cpu.forward_block`` and
``backward_block``, the head's ``_CategoricalCPU`` forward and ``categorical_grad``, ``ppo.ppo_terms``
and ``loss_cpu.term_grads``), with the weight gradients summed over the blocks in the same order:
the gradients are bit-identical to autograd's (tests/unit/test_grad_cpu.py), for one block (every
preset's minibatch) and for many, so training is too. The loss and its metrics are sums of block
sums divided by the minibatch size: equal to ``ppo.ppo_loss``'s means within float rounding.

Only for what it covers (``BlockGradients.for_agent`` returns None otherwise and ``ppo.make_grad_step``
keeps autograd): a plain ``Agent`` (not wrapped in DistributedDataParallel, whose all-reduce runs
in autograd's backward) with a flat observation (no encoder), a Discrete action, actor and critic
MLPs of ``nn.Linear`` and one activation (``mlp_cpu.plan``), float32 parameters on the CPU that all
require gradients, no autocast or GradScaler; per call (``covers``), a float32 (B, F) observation
of at most one block of rows, outside ``torch.compile`` and functorch transforms. Called directly,
``BlockGradients`` takes minibatches of any size (the tests check many blocks bit for bit too).
"""

from __future__ import annotations

from typing import Optional

import torch

from . import loss_cpu, mlp_cpu, ppo
from .agent import Agent, _CategoricalCPU, categorical_grad

#: the metrics of ppo.ppo_loss, as sums over the samples (all but "loss", which is built from them)
_SUMS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "vf_clipfrac", "ratio")


class BlockGradients:
    """grads(mb) -> ppo.ppo_loss's dict for minibatch ``mb``, with every parameter's ``.grad`` set
    to the loss's gradient; mb holds obs (B, F), actions (B,) int, logprobs, advantages, values
    and returns (B,)."""

    def __init__(self, actor_plan, critic_plan, cfg):
        self.cfg = cfg
        (self.actor, act), (self.critic, _) = actor_plan, critic_plan
        self.forward_act, self.backward_act = mlp_cpu.ACTIVATIONS[act]
        # blocks of the kernel's size, so that a minibatch is split exactly as mlp_cpu splits it
        # (the same weight-gradient sums); the smaller of the two where the widths differ
        self.rows = min(mlp_cpu.block_rows([l.out_features for l in lins]) for lins in (self.actor, self.critic))
        self._buffers: dict = {}

    @classmethod
    def for_agent(cls, agent, cfg, autocast=None, scaler=None) -> Optional["BlockGradients"]:
        """A BlockGradients for ``agent`` when this file covers it (module docstring), else None."""
        if type(agent) is not Agent or agent.kind != "discrete" or agent.encoder is not None:
            return None
        if autocast is not None or scaler is not None:
            return None
        actor_plan, critic_plan = mlp_cpu.plan(agent.actor), mlp_cpu.plan(agent.critic)
        if actor_plan is None or critic_plan is None or actor_plan[1] != critic_plan[1]:
            return None
        params = list(agent.parameters())
        if any(p.device.type != "cpu" or p.dtype != torch.float32 or not p.requires_grad for p in params):
            return None
        return cls(actor_plan, critic_plan, cfg)

    def covers(self, mb: dict) -> bool:
        """Whether ``make_grad_step`` should take this path for minibatch ``mb`` (else autograd's):
        one block of rows (every preset's minibatch). Larger minibatches go through autograd and
        ``mlp_cpu``'s kernel: there the ~60 small head and loss ops per block cost more than the
        cache saves (module docstring)."""
        obs = mb["obs"]
        if obs.device.type != "cpu" or obs.dim() != 2 or obs.dtype != torch.float32 or torch.compiler.is_compiling():
            return False
        return obs.shape[0] <= self.rows and not torch._C._functorch.is_functorch_wrapped_tensor(obs)

    def _scratch(self, net: str, widths) -> list:
        """``net``'s block-sized (rows, w) buffers, one per layer output, kept for the next call."""
        if net not in self._buffers:
            self._buffers[net] = [torch.empty(self.rows, w) for w in widths]
        return self._buffers[net]

    @torch.no_grad()
    def __call__(self, mb: dict) -> dict:
        cfg = self.cfg
        obs, actions = mb["obs"], mb["actions"]
        b = obs.shape[0]
        ppo._check_shape("actions", actions, torch.Size([b]))
        advantages = mb["advantages"]
        for name in ("logprobs", "advantages", "values", "returns"):
            ppo._check_shape(name, mb[name], torch.Size([b]))
        if cfg.norm_adv:  # over the whole minibatch, as ppo_loss does (the same ops)
            advantages = ppo.normalize_advantages(advantages, lambda x, keepdim: x.mean(-1, keepdim=keepdim),
                                                  b / max(b - 1, 1))
        clip, vclip = float(cfg.clip_coef), float(cfg.clip_coef)
        # loss_cpu._PPOLoss.backward's scales: (1.0 * s) for the loss's incoming gradient of 1.0
        one = torch.ones(())
        pg_scale, v_scale, ent_scale = one * (1.0 / b), one * (cfg.vf_coef / b), one * (-cfg.ent_coef / b)

        a_w = [l.weight for l in self.actor]
        a_b = [l.bias for l in self.actor]
        c_w = [l.weight for l in self.critic]
        c_b = [l.bias for l in self.critic]
        a_wt, c_wt = [w.t() for w in a_w], [w.t() for w in c_w]
        a_buf = self._scratch("actor", [w.shape[0] for w in a_w])
        c_buf = self._scratch("critic", [w.shape[0] for w in c_w])
        a_gw, a_gb = [None] * len(a_w), [None] * len(a_w)
        c_gw, c_gb = [None] * len(c_w), [None] * len(c_w)
        sums = torch.zeros(len(_SUMS))

        splits = [t.split(self.rows) for t in (obs, actions, mb["logprobs"], advantages, mb["values"], mb["returns"])]
        for x, action, old_lp, adv, old_v, ret in zip(*splits):
            r = x.shape[0]
            a_out, c_out = [o[:r] for o in a_buf], [o[:r] for o in c_buf]
            logits = mlp_cpu.forward_block(x, a_wt, a_b, self.forward_act, a_out)
            value = mlp_cpu.forward_block(x, c_wt, c_b, self.forward_act, c_out).squeeze(-1)
            lp, ent, logp, p = _CategoricalCPU.forward(logits, action)
            t = ppo.ppo_terms(lp, old_lp, adv, value, old_v, ret, clip, vclip, cfg.clip_vloss)
            d_lp, d_v = loss_cpu.term_grads(t, value, ret, cfg.clip_vloss)
            terms = {"policy_loss": t["pg_loss"], "value_loss": t["v_loss"], "entropy": ent,
                     **ppo.monitor_terms(t, clip, cfg.clip_vloss)}
            sums += torch.stack([terms[k].sum() for k in _SUMS])
            g_logits = categorical_grad(logp, p, ent, action, d_lp * pg_scale, ent_scale.expand(r))
            mlp_cpu.backward_block(g_logits, [x, *a_out[:-1]], a_w, a_gw, a_gb, self.backward_act)
            mlp_cpu.backward_block((d_v * v_scale).unsqueeze(-1), [x, *c_out[:-1]], c_w, c_gw, c_gb, self.backward_act)

        for lins, gw, gb, ws in ((self.actor, a_gw, a_gb, a_w), (self.critic, c_gw, c_gb, c_w)):
            for l, w_grad, b_grad in zip(lins, mlp_cpu.weight_grads(ws, gw), gb):
                l.weight.grad, l.bias.grad = w_grad, b_grad
        means = sums / b
        out = dict(zip(_SUMS, means.unbind()))
        out["loss"] = out["policy_loss"] - cfg.ent_coef * out["entropy"] + cfg.vf_coef * out["value_loss"]
        return out
