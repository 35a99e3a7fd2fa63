"""The agent: an encoder chosen by observation space, actor and critic on top, one action head per space.

Encoders (``--encoder``): flat Box -> no encoder, separate actor and critic MLPs (PPO_NOTES detail
13; the parameter names ``actor.*``/``critic.*`` of older checkpoints); image (uint8, HWC or CHW) ->
the Nature-CNN trunk of DQN / CleanRL's ``ppo_atari`` shared by a linear actor and a linear critic;
Dict -> one encoder per key (Nature CNN for images, flatten for vectors), concatenated, with actor
and critic MLPs on top (SB3's MultiInputPolicy shape). Pixels arrive as uint8 and are scaled to
[0, 1] inside the network, so the rollout buffer keeps them as uint8.

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

from .config import ConfigError
from .envs.spaces import ObsLayout, ObsPart, obs_layout

#: Nature CNN (Mnih et al. 2015): conv 8x8/4, 4x4/2, 3x3/1; the smallest image it takes
CNN_MIN_SIZE = 36
CNN_FEATURES = 512
ENCODERS = ("auto", "cnn", "mlp")


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
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


def resolve_encoder(encoder: str, layout: ObsLayout) -> str:
    """'cnn' or 'mlp' for ``--encoder`` (auto: cnn when the observation holds an image); ConfigError
    when cnn is asked of a space without an image or of an image smaller than the CNN takes."""
    if encoder not in ENCODERS:
        raise ConfigError(f"--encoder {encoder!r}: must be one of {', '.join(ENCODERS)}")
    if encoder == "auto":
        return "cnn" if layout.has_image else "mlp"
    if encoder == "cnn":
        images = [p for p in layout.parts if p.layout is not None]
        if not images:
            raise ConfigError(f"--encoder cnn needs an image observation (uint8 Box (H, W, C) or (C, H, W)); this env's "
                              f"observation has shape {layout.parts[0].shape if not layout.is_dict else [p.shape for p in layout.parts]}; use --encoder mlp")
        for p in images:
            h, w = _image_hw(p)
            if min(h, w) < CNN_MIN_SIZE:
                where = f" at key '{p.key}'" if p.key is not None else ""
                raise ConfigError(f"--encoder cnn: image{where} is {h}x{w}, smaller than the Nature CNN's "
                                  f"{CNN_MIN_SIZE}x{CNN_MIN_SIZE} minimum; use --encoder mlp or larger frames")
    return encoder


def _image_hw(part: ObsPart) -> tuple:
    return (part.shape[1], part.shape[2]) if part.layout == "chw" else (part.shape[0], part.shape[1])


class PixelInput(nn.Module):
    """(B, *image_shape) pixels 0..255 (uint8, or float in a packed Dict) -> (B, C, H, W) float in [0, 1]."""

    def __init__(self, part: ObsPart):
        super().__init__()
        self.hwc = part.layout == "hwc"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.hwc:
            x = x.permute(0, 3, 1, 2)
        return x.float() * (1.0 / 255.0)


class NatureCNN(nn.Module):
    """The DQN / CleanRL Atari trunk: (B, *image_shape) pixels -> (B, 512) ReLU features."""

    def __init__(self, part: ObsPart):
        super().__init__()
        channels = part.shape[0] if part.layout == "chw" else part.shape[2]
        h, w = _image_hw(part)
        self.pixels = PixelInput(part)
        self.convs = nn.Sequential(
            layer_init(nn.Conv2d(channels, 32, 8, stride=4)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(), nn.Flatten())
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, channels, h, w)).shape[1]
        self.fc = nn.Sequential(layer_init(nn.Linear(flat, CNN_FEATURES)), nn.ReLU())
        self.out_dim = CNN_FEATURES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.convs(self.pixels(x)))


class FlatInput(nn.Module):
    """(B, *shape) -> (B, prod(shape)) float32; pixels (an image read by an MLP) scaled to [0, 1]."""

    def __init__(self, part: ObsPart):
        super().__init__()
        self.scale = 1.0 / 255.0 if part.layout is not None else 1.0
        self.out_dim = part.size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1).float()
        return x * self.scale if self.scale != 1.0 else x


class DictEncoder(nn.Module):
    """Packed (B, D) Dict observations -> each key's encoder on its slice, concatenated (B, F)."""

    def __init__(self, layout: ObsLayout, encoder: str):
        super().__init__()
        self.parts = layout.parts
        self.encoders = nn.ModuleDict({
            p.key: NatureCNN(p) if (encoder == "cnn" and p.layout is not None) else FlatInput(p) for p in layout.parts})
        self.out_dim = sum(e.out_dim for e in self.encoders.values())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        feats = [self.encoders[p.key](x[:, p.offset:p.offset + p.size].reshape(b, *p.shape)) for p in self.parts]
        return torch.cat(feats, dim=-1)


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
    """Actor-critic for observations (B, *obs_shape) and a Discrete, MultiDiscrete or Box action.

    obs_shape and dtype follow :func:`proxima.envs.spaces.obs_layout`: (obs_dim,) float32 for a flat
    Box, the image shape in uint8, (D,) packed keys for a Dict. ``encoder``: cnn, mlp or auto.
    """

    def __init__(self, obs_space: gym.spaces.Space, action_space: gym.spaces.Space, hidden_sizes=(64, 64),
                 activation: str = "tanh", encoder: str = "mlp"):
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
            self.actor_logstd = nn.Parameter(torch.zeros(1, self.act_dim))
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
    def get_action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        """obs (B, *obs_shape), optional action (B, *act_shape) -> action, logprob (B,), entropy (B,), value (B,)."""
        feat = self.features(obs)  # once: a CNN trunk is shared by actor and critic
        out = self.actor(feat)
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
        return action, logprob, entropy, self.critic(feat).squeeze(-1)

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
        if self.kind == "discrete":
            return out.argmax(-1)
        return torch.stack([c.argmax(-1) for c in torch.split(out, self.nvec, dim=-1)], dim=-1)

    def policy_step(self, obs: torch.Tensor):
        """The acting step of collect_rollout: obs (N, *obs_shape) -> action, logprob (N,), value (N,)."""
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
