"""The agent: an encoder chosen by observation space, actor and critic on top, one action head per space.

Encoders (``--encoder``, nets.py): flat Box -> no encoder, separate actor and critic MLPs (docs/ppo_notes.md detail
13; the parameter names ``actor.*``/``critic.*`` of older checkpoints); image (uint8, HWC or CHW, or a
frame stack of them read as N * C channels; under ``--encoder cnn`` also a single float Box(0, 1) image) ->
the Nature-CNN trunk of DQN / CleanRL's ``ppo_atari`` shared by a linear actor and a linear critic;
Dict -> one encoder per key (Nature CNN for images, flatten for vectors), concatenated, with actor
and critic MLPs on top (SB3's MultiInputPolicy shape). Pixels arrive as uint8 and are scaled to
[0, 1] inside the network, so the rollout buffer keeps them as uint8.

The encoders, ``layer_init`` and ``mlp`` live in nets.py (re-exported here).

Heads: Discrete -> categorical over logits; MultiDiscrete -> independent categoricals (log-probs
and entropies summed); MultiBinary -> the MultiDiscrete([2] * n) head, one 2-way categorical per bit
(spaces.index_space); Box -> Normal with a state-independent log std initialized to ``log_std_init``
(PPOConfig.log_std_init, 0 by default: std 1; summed over action dims). Sampling is written with plain tensor ops (Gumbel-max for categoricals) so it never
syncs with the host and never validates arguments on the hot path.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from .envs.spaces import index_space, obs_layout
from .nets import DictEncoder, FlatInput, NatureCNN, layer_init, mlp, resolve_encoder

__all__ = ["Agent", "action_dtype", "action_shape", "layer_init", "mlp", "NatureCNN", "resolve_encoder"]


def _noise(like: torch.Tensor, generators=None, normal: bool = False) -> torch.Tensor:
    """Uniform [0, 1) (or standard normal) noise shaped like ``like``: from the global generator, or,
    for a stacked population agent's (P, ...) tensor, member p's slice from ``generators[p]`` (the
    numbers the single run with member p's seed draws from its global generator)."""
    if generators is None:  # out of place: vmap (encoder populations) batches it
        # row-major whatever ``like``'s layout (mlp_cpu returns (B, n) views of (n, B) tensors):
        # the same numbers land on the same (row, column) as for a contiguous ``like``
        fmt = torch.contiguous_format
        return torch.randn_like(like, memory_format=fmt) if normal else torch.rand_like(like, memory_format=fmt)
    draw = torch.randn if normal else torch.rand
    return torch.stack([draw(like.shape[1:], generator=g, device=like.device, dtype=like.dtype) for g in generators])


def _categorical_sample(logits: torch.Tensor, generators=None) -> torch.Tensor:
    # Gumbel-max: argmax(logits + Gumbel noise) is a categorical sample, with no host sync. Written
    # as argmin(log(-log u) - logits), the same index (the negated differences, ties to the first),
    # so that the result takes the noise's row-major layout: over (B, n) logits laid out as (n, B)
    # (mlp_cpu's last layer) an arg-reduction of the last axis is ~10x slower (570 against 52 us at
    # 4,096 x 2, benchmarks/results/cpu-parts.md)
    u = _noise(logits, generators).clamp(1e-20, 1.0)
    return torch.argmin(torch.log(-torch.log(u)) - logits, dim=-1)


class _CategoricalCPU(torch.autograd.Function):
    """logits (..., n), action (...) -> log-prob of the action and entropy (...), plus log p and p
    (n, ...) for the backward. The plain head's forward ops over an (n, ...) copy of the logits;
    the backward in closed form (d log p_a/d z = onehot(a) - p, d H/d z = -p (log p + H)), a few ops
    where autograd chains the backwards of log_softmax, gather (a scatter), exp and the products,
    returning a contiguous (..., n) gradient: the layout the actor's last layer gets from a plain head."""

    generate_vmap_rule = True  # populations vmap the agent

    @staticmethod
    def forward(logits, action):
        logp = torch.log_softmax(logits.movedim(-1, 0).contiguous(), dim=0)
        p = logp.exp()
        lp = logp.gather(0, action.long().unsqueeze(0)).squeeze(0)
        ent = -(p * logp).sum(0)
        return lp, ent, logp, p

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, action = inputs
        _, ent, logp, p = output
        ctx.mark_non_differentiable(logp, p)
        ctx.save_for_backward(logp, p, ent, action)

    @staticmethod
    def backward(ctx, g_lp, g_ent, _g_logp, _g_p):
        logp, p, ent, action = ctx.saved_tensors
        return categorical_grad(logp, p, ent, action, g_lp, g_ent), None


def categorical_grad(logp, p, ent, action, g_lp, g_ent) -> torch.Tensor:
    """The gradient of _CategoricalCPU's log-prob and entropy (...) with respect to the logits,
    (..., n) contiguous, given their incoming gradients g_lp and g_ent (either may be None) and
    what its forward returned: log p and p (n, ...), the entropy and the action (...)."""
    g_lp = torch.zeros_like(ent) if g_lp is None else g_lp
    inner = g_lp if g_ent is None else g_lp + g_ent * (logp + ent)  # (n, ...)
    grad = -(p * inner)
    grad.scatter_add_(0, action.long().unsqueeze(0), g_lp.unsqueeze(0))
    return grad.movedim(0, -1).contiguous()


def _categorical_logprob_entropy(logits: torch.Tensor, action: torch.Tensor):
    """logits (..., n), action (...) -> log-prob of the action and entropy, both (...)."""
    if logits.device.type == "cpu":
        # CPU reductions over a last axis of a few entries are slow (log_softmax of 16,384 x 2
        # logits: 624 us, of the same numbers laid out 2 x 16,384: 61 us; microbenchmarks on this
        # project's CPU), and so is autograd's chain of small backwards: _CategoricalCPU. Values equal
        # to _categorical_autograd's within rounding (bit for bit at n <= 4 for most batch sizes here; the
        # vectorized and scalar exp/log round differently, and sums of more actions can too)
        if torch.is_grad_enabled():
            lp, ent, _, _ = _CategoricalCPU.apply(logits, action)
        else:  # acting (no_grad): the same ops without Function.apply (68 -> 29 us at 256 rows: benchmarks/results/cpu-parts.md)
            lp, ent, _, _ = _CategoricalCPU.forward(logits, action)
        return lp, ent
    return _categorical_autograd(logits, action)


def _categorical_autograd(logits: torch.Tensor, action: torch.Tensor):
    """The off-CPU body of ``_categorical_logprob_entropy`` (plain ops for autograd, CUDA graphs and
    torch.compile), a function of its own so that the CPU-only test suite can check it too."""
    logp = torch.log_softmax(logits, dim=-1)
    lp = logp.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
    ent = -(logp.exp() * logp).sum(-1)
    return lp, ent


class Agent(nn.Module):
    """Actor-critic for observations (B, *obs_shape) and a Discrete, MultiDiscrete, MultiBinary or Box action.

    obs_shape and dtype follow :func:`proxima.envs.spaces.obs_layout`: (obs_dim,) float32 for a flat
    Box, the image shape in uint8, (D,) packed keys for a Dict. ``encoder``: cnn, mlp or auto.
    ``log_std_init``: a Box action's initial log std (its Normal's std starts at exp of it).
    """

    def __init__(self, obs_space: gym.spaces.Space, action_space: gym.spaces.Space, hidden_sizes=(64, 64),
                 activation: str = "tanh", encoder: str = "mlp", log_std_init: float = 0.0):
        super().__init__()
        layout = obs_layout(obs_space, "observation")
        self.encoder_kind = resolve_encoder(encoder, layout)
        self.has_pixels = layout.has_image
        hidden = list(hidden_sizes)
        if layout.is_dict:
            self.encoder = DictEncoder(layout, self.encoder_kind)
            feat_dim = self.encoder.out_dim
        elif self.encoder_kind == "cnn":
            # CleanRL ppo_atari: one shared trunk, linear actor and critic heads on its 512 features
            self.encoder, hidden = NatureCNN(layout.parts[0]), []
            feat_dim = self.encoder.out_dim
        elif layout.is_image:  # an MLP reading pixels: flattened and scaled, no parameters
            self.encoder = FlatInput(layout.parts[0])
            feat_dim = self.encoder.out_dim
        else:  # flat Box: no encoder module, so older checkpoints load unchanged
            self.encoder = None
            feat_dim = layout.parts[0].size
        self.critic = mlp(feat_dim, hidden, 1, out_std=1.0, activation=activation)
        action_space = index_space(action_space)  # a MultiBinary: one 2-way categorical per bit
        if isinstance(action_space, gym.spaces.Discrete):
            self.kind, self.nvec = "discrete", [int(action_space.n)]
            self.actor = mlp(feat_dim, hidden, int(action_space.n), out_std=0.01, activation=activation)
        elif isinstance(action_space, gym.spaces.MultiDiscrete):
            self.kind, self.nvec = "multidiscrete", [int(n) for n in np.asarray(action_space.nvec).reshape(-1)]
            self.actor = mlp(feat_dim, hidden, sum(self.nvec), out_std=0.01, activation=activation)
        elif isinstance(action_space, gym.spaces.Box):
            self.kind = "continuous"
            self.act_dim = int(np.prod(action_space.shape))
            self.actor = mlp(feat_dim, hidden, self.act_dim, out_std=0.01, activation=activation)
            # SB3's log_std_init: the Normal's starting log std (0: std 1, CleanRL's); the CNN and Dict paths share this head
            self.actor_logstd = nn.Parameter(torch.full((1, self.act_dim), float(log_std_init)))
        else:
            raise ValueError(f"not supported yet: action space {action_space}")

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """obs (B, *obs_shape) -> (B, F) float features (the obs itself for a flat Box)."""
        return obs if self.encoder is None else self.encoder(obs)

    # value ----------------------------------------------------------------------------------
    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        """obs (B, *obs_shape) -> V(obs) (B,)."""
        return self.critic(self.features(obs)).squeeze(-1)

    # policy ---------------------------------------------------------------------------------
    def get_action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None, generators=None):
        """obs (B, *obs_shape), optional action (B, *act_shape) -> action, logprob (B,), entropy (B,), value (B,).

        ``generators``: for a stacked population agent (inputs (P, B, ...)), one torch.Generator per
        member that its action samples are drawn from (None: the global generator)."""
        feat = self.features(obs)  # once: a CNN trunk is shared by actor and critic
        action, logprob, entropy = self.policy(feat, action, generators)
        return action, logprob, entropy, self.critic(feat).squeeze(-1)

    def policy(self, feat: torch.Tensor, action: torch.Tensor | None = None, generators=None):
        """The actor's half of get_action_and_value: features (B, F) (``features(obs)``), optional
        action -> action (sampled when None), logprob (B,), entropy (B,)."""
        out = self.actor(feat)
        if self.kind == "continuous":
            mean = out
            logstd = self.actor_logstd.expand_as(mean)
            std = logstd.exp()
            if action is None:
                action = mean + std * _noise(mean, generators, normal=True)
            logprob = (-((action - mean) ** 2) / (2 * std * std) - logstd - 0.5 * math.log(2 * math.pi)).sum(-1)
            entropy = (0.5 + 0.5 * math.log(2 * math.pi) + logstd).sum(-1)
        elif self.kind == "discrete":
            if action is None:
                action = _categorical_sample(out, generators)
            logprob, entropy = _categorical_logprob_entropy(out, action)
        else:
            chunks = torch.split(out, self.nvec, dim=-1)
            if action is None:
                action = torch.stack([_categorical_sample(c, generators) for c in chunks], dim=-1)
            lps, ents = zip(*(_categorical_logprob_entropy(c, action[..., i]) for i, c in enumerate(chunks)))
            logprob, entropy = torch.stack(lps, -1).sum(-1), torch.stack(ents, -1).sum(-1)
        return action, logprob, entropy

    def forward(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        """Same as get_action_and_value, so a DistributedDataParallel wrapper sees the update's forward."""
        return self.get_action_and_value(obs, action)

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """The action for obs (B, *obs_shape): the mode (argmax / mean) or a sample."""
        if not deterministic:
            return self.get_action_and_value(obs)[0]
        out = self.actor(self.features(obs))
        if self.kind == "continuous":
            return out
        if self.kind == "discrete":  # row-major first: see _categorical_sample
            return out.contiguous().argmax(-1)
        return torch.stack([c.contiguous().argmax(-1) for c in torch.split(out, self.nvec, dim=-1)], dim=-1)

    def policy_step(self, obs: torch.Tensor, generators=None):
        """The acting step of collect_rollout: obs (N, *obs_shape) -> action, logprob (N,), value (N,)."""
        action, logprob, _, value = self.get_action_and_value(obs, generators=generators)
        return action, logprob, value


def action_dtype(space: gym.spaces.Space) -> torch.dtype:
    return torch.float32 if isinstance(space, gym.spaces.Box) else torch.int64


def action_shape(space: gym.spaces.Space) -> tuple:
    """The shape of one env's action as the agent gives it (index_space's: a MultiBinary's bits flat)."""
    space = index_space(space)
    if isinstance(space, gym.spaces.Discrete):
        return ()
    if isinstance(space, gym.spaces.MultiDiscrete):
        return (int(np.asarray(space.nvec).size),)
    return (int(np.prod(space.shape)),)
