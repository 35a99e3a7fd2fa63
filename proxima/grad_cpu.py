"""A PPO minibatch's gradients on the CPU without autograd: autograd's ops, called from a plain function.

Why: a preset's minibatch (at most 2,048 rows; the fast CartPole preset's: 384) is small enough
that autograd's machinery and the modules' calls cost as much as the arithmetic: the graph, a
Function per stage, ``nn.Linear``/``nn.Tanh`` calls, the closed-form head and loss each wrapped
for autograd. Here the same ops run straight from a plain function, the same bits: a 1,024-row
minibatch's gradients 1.35x (1.04-1.50) and 1.36x (1.22-1.40) faster in two runs of
benchmarks/cpu_parts.py (benchmarks/results/cpu-parts.md); a 16,384-row one's (4,096 envs x 16
steps in 4 minibatches) 1.09x (1.05-1.65) in the same table.

How, in three phases as autograd's path runs them: both MLPs forward (one row block: the plain
modules' ops, ``mlp_cpu.forward_block``, into block-sized buffers kept between calls; several:
``mlp_cpu``'s kernel, ``_forward_blocks``, as ``nets.MLP`` runs it), then the head and the loss
once over the minibatch (the head's ``_CategoricalCPU`` forward and ``categorical_grad``,
``ppo.ppo_terms``, ``loss_cpu.term_grads``), then both MLPs backward (``mlp_cpu.backward_block`` /
``backward_blocks``). The same ops on the same tensors as autograd's path, so the gradients are
bit-identical to autograd's at every size (tests/unit/test_grad_cpu.py) and training is too, but
for the first layer's weight gradient on CPUs where MKL's inp^T g and g^T inp round differently
(AMD's; ``mlp_cpu.flipped``): there within rounding. The
loss and its metrics are sums divided by the minibatch size: equal to ``ppo.ppo_loss``'s means
within float rounding. (An earlier version ran each 2,048-row block through forward, loss and
backward while it was in the cache: the ~60 small head and loss ops per block cost more than the
cache saved, 0.87-0.96x at 16,384 rows.)

Only for what it covers (``BlockGradients.for_agent`` returns None otherwise and ``ppo.make_grad_step``
keeps autograd): a plain ``Agent`` (not wrapped in DistributedDataParallel, whose all-reduce runs
in autograd's backward) with a flat observation (no encoder), a Discrete action, actor and critic
MLPs of ``nn.Linear`` and one activation (``mlp_cpu.plan``), float32 parameters on the CPU that all
require gradients, no autocast or GradScaler; per call (``covers``), a float32 (B, F) observation
outside ``torch.compile`` and functorch transforms.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import loss_cpu, mlp_cpu, ppo, side_thread
from .agent import Agent, _CategoricalCPU, categorical_grad
from .nets import MLP

#: the metrics of ppo.ppo_loss, as sums over the samples (all but "loss", which is built from them)
_SUMS = ("policy_loss", "value_loss", "entropy", "approx_kl", "old_approx_kl", "clipfrac", "vf_clipfrac", "ratio")


class BlockGradients:
    """grads(mb) -> ppo.ppo_loss's dict for minibatch ``mb``, with every parameter's ``.grad`` set
    to the loss's gradient; mb holds obs (B, F), actions (B,) int, logprobs, advantages, values
    and returns (B,)."""

    def __init__(self, agent, actor_plan, critic_plan, cfg, side=None):
        self.cfg = cfg
        #: a side_thread.SideThread that computes the critic while the caller computes the actor, or None
        self.side = side
        self.actor_net, self.critic_net = agent.actor, agent.critic
        (self.actor, self.act), (self.critic, _) = actor_plan, critic_plan
        self.backward_act = mlp_cpu.ACTIVATIONS[self.act][1]
        # each MLP's kernel_rows (nets.MLP): up to that many rows the plain modules' ops, above it
        # mlp_cpu's kernel in blocks of that many rows, as autograd's path splits them
        self.rows = {"actor": self.actor_net.kernel_rows, "critic": self.critic_net.kernel_rows}
        self._buffers: dict = {}

    @classmethod
    def for_agent(cls, agent, cfg, autocast=None, scaler=None, side=None) -> Optional["BlockGradients"]:
        """A BlockGradients for ``agent`` when this file covers it (module docstring), else None;
        ``side``: a SideThread for the critic's half (side_thread.py), or None for one thread."""
        if type(agent) is not Agent or agent.kind != "discrete" or agent.encoder is not None:
            return None
        if autocast is not None or scaler is not None:
            return None
        if not (isinstance(agent.actor, MLP) and isinstance(agent.critic, MLP)):
            return None
        actor_plan, critic_plan = mlp_cpu.plan(agent.actor), mlp_cpu.plan(agent.critic)
        if actor_plan is None or critic_plan is None or actor_plan[1] != critic_plan[1]:
            return None
        params = list(agent.parameters())
        if any(p.device.type != "cpu" or p.dtype != torch.float32 or not p.requires_grad for p in params):
            return None
        return cls(agent, actor_plan, critic_plan, cfg, side)

    def covers(self, mb: dict) -> bool:
        """Whether ``make_grad_step`` can take this path for minibatch ``mb`` (else autograd's): a
        float32 (B, F) CPU observation, outside torch.compile and functorch transforms."""
        obs = mb["obs"]
        if obs.device.type != "cpu" or obs.dim() != 2 or obs.dtype != torch.float32 or torch.compiler.is_compiling():
            return False
        return not torch._C._functorch.is_functorch_wrapped_tensor(obs)

    def _scratch(self, net: str, widths) -> list:
        """``net``'s block-sized (rows, w) buffers, one per layer output, kept for the next call."""
        if net not in self._buffers:
            self._buffers[net] = [torch.empty(self.rows[net], w) for w in widths]
        return self._buffers[net]

    def _forward(self, net: str, lins, x) -> tuple:
        """(outputs of every layer [(B, out_i)], activated but the last; the weights) of MLP
        ``lins`` on x (B, F): what autograd's path computes. One block: the plain modules' ops
        (``forward_block``) into this object's block-sized buffers; several: mlp_cpu's kernel, as
        ``nets.MLP`` runs it (``_forward_blocks``: its hidden outputs kept for the backward, its
        last layer W h^T)."""
        weights, biases = [l.weight for l in lins], [l.bias for l in lins]
        b, rows = x.shape[0], self.rows[net]
        if b <= rows:
            outs = [o[:b] for o in self._scratch(net, [w.shape[0] for w in weights])]
            w_t, scaled_biases, forward_act = mlp_cpu.forward_operands(weights, biases, self.act, len(weights) - 1, b)
            mlp_cpu.forward_block(x, w_t, scaled_biases, forward_act, outs)
        else:
            outs = mlp_cpu._forward_blocks(x, weights, biases, self.act, rows, keep_hidden=True)
        return outs, weights

    def _backward(self, net: str, lins, g, x, outs, weights) -> None:
        """Set the ``.grad`` of MLP ``lins``' parameters from g (B, out), the gradient at its
        output: ``_forward``'s outputs walked back as autograd's path does."""
        inputs = [x, *outs[:-1]]
        rows = self.rows[net]
        if x.shape[0] <= rows:  # AddmmBackward's ops: mlp_cpu.backward_block on the one block
            gw, gb = [None] * len(weights), [None] * len(weights)
            mlp_cpu.backward_block(g, inputs, weights, gw, gb, self.backward_act)
            gw = mlp_cpu.weight_grads(weights, gw)
        else:  # _MLPFunction.backward's
            _, gw, gb = mlp_cpu.backward_blocks(g, inputs, weights, self.act, rows)
        for l, w_grad, b_grad in zip(lins, gw, gb):
            l.weight.grad, l.bias.grad = w_grad, b_grad

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
        clip = float(cfg.clip_coef)
        vclip = clip if cfg.vf_clip_coef is None else float(cfg.vf_clip_coef)  # None: CleanRL's one clip_coef for both
        # loss_cpu._PPOLoss.backward's scales: (1.0 * s) for the loss's incoming gradient of 1.0
        one = torch.ones(())
        pg_scale, v_scale, ent_scale = one * (1.0 / b), one * (cfg.vf_coef / b), one * (-cfg.ent_coef / b)

        side = self.side if b >= side_thread.MIN_ROWS else None
        critic = side.submit(self._forward, "critic", self.critic, obs) if side is not None else None
        a_out, a_w = self._forward("actor", self.actor, obs)
        c_out, c_w = critic.result() if critic is not None else self._forward("critic", self.critic, obs)
        value = c_out[-1].squeeze(-1)
        lp, ent, logp, p = _CategoricalCPU.forward(a_out[-1], actions)
        t = ppo.ppo_terms(lp, mb["logprobs"], advantages, value, mb["values"], mb["returns"], clip, vclip, cfg.clip_vloss)
        d_lp, d_v = loss_cpu.term_grads(t, value, mb["returns"], cfg.clip_vloss)
        terms = {"policy_loss": t["pg_loss"], "value_loss": t["v_loss"], "entropy": ent,
                 **ppo.monitor_terms(t, clip, cfg.clip_vloss)}
        sums = torch.stack([terms[k].sum() for k in _SUMS])
        g_logits = categorical_grad(logp, p, ent, actions, d_lp * pg_scale, ent_scale.expand(b))
        g_value = (d_v * v_scale).unsqueeze(-1)
        if side is not None:  # the critic's .grad is set before result() returns
            critic = side.submit(self._backward, "critic", self.critic, g_value, obs, c_out, c_w)
            self._backward("actor", self.actor, g_logits, obs, a_out, a_w)
            critic.result()
        else:
            self._backward("actor", self.actor, g_logits, obs, a_out, a_w)
            self._backward("critic", self.critic, g_value, obs, c_out, c_w)

        means = sums / b
        out = dict(zip(_SUMS, means.unbind()))
        out["loss"] = out["policy_loss"] - cfg.ent_coef * out["entropy"] + cfg.vf_coef * out["value_loss"]
        return out
