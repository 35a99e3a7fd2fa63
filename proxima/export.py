"""A trained policy as one ``torch.nn.Module`` to deploy: ``Policy.as_module()``.

``PolicyModule(policy)`` holds a CPU copy of the policy's network and frozen observation normalizer,
and computes in ``forward`` what ``policy.act`` returns for a batch: normalized observations, the
network's deterministic action (mean / argmax), clamped to the Box bounds, offset by a
Discrete/MultiDiscrete start, shaped and typed as the action space. It is written for
``torch.jit.trace`` and ``torch.export.export`` (and so ``torch.onnx.export``): plain tensor ops, no
numpy, no global settings read at call time.

Why a copy and not the Agent itself: ``nets.MLP`` takes mlp_cpu's row-block kernel for large CPU
batches (a trace would record the loop over one batch's blocks), and the hidden ``tanh_cpu.Tanh``
reads the process-wide ``tanh_cpu.MODE`` and may compute tanh with numpy, which neither a trace
(it records no numpy call: the output would be a constant) nor TorchScript (``torch.jit.script``
rejects the module global and the numpy view) can follow. The copy swaps each MLP for a plain
``nn.Sequential`` of the same layers (same ``state_dict`` names) and each ``tanh_cpu.Tanh`` for
:class:`_Tanh`, which computes MODE's function with torch ops: the sigmoid form's bits in "sigmoid"
mode, ``torch.tanh`` otherwise (in "numpy" mode, numpy's tanh differs from torch's by at most
~1e-7 relative, so a Box action may differ from policy.act's in its last bits there). The same for a batch
of more rows than the network's ``kernel_rows`` (4,096 for 64-wide layers): policy.act computes it with mlp_cpu's
kernel, whose float32 rounding differs from the plain layers' (a Box action in its last bits; a discrete one only where
two logits tie within that rounding); a batch of up to that many rows gives policy.act's actions exactly.
"""

from __future__ import annotations

import copy
from collections import OrderedDict

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from . import nets, tanh_cpu


class _Tanh(nn.Module):
    """tanh by torch ops: ``2 sigmoid(2x) - 1`` (tanh_cpu.sigmoid_tanh's bits: doubling is exact and
    ``s * 2 - 1`` rounds once, as its ``add(-1, s, alpha=2)`` does) or ``torch.tanh``."""

    def __init__(self, sigmoid: bool):
        super().__init__()
        self.sigmoid = sigmoid

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sigmoid:
            return torch.sigmoid(x * 2) * 2 - 1
        return torch.tanh(x)


def _portable(module: nn.Module) -> None:
    """In place: each tanh_cpu.Tanh under ``module`` -> _Tanh, each nets.MLP -> nn.Sequential of its layers."""
    for name, child in list(module.named_children()):
        if isinstance(child, tanh_cpu.Tanh):
            module._modules[name] = _Tanh(tanh_cpu.MODE == "sigmoid")
            continue
        _portable(child)
        if isinstance(child, nets.MLP):
            module._modules[name] = nn.Sequential(OrderedDict(child._modules))  # the same names: 0.weight, 2.weight, ...


def _torch_dtype(dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype


class PolicyModule(nn.Module):
    """forward(obs (B, *obs_shape)) -> the actions ``policy.act(obs)`` gives for that batch (see the
    module docstring: exactly for B up to 4,096 rows, the network's ``kernel_rows``; within float32 rounding
    above). ``obs``: the env's observations as tensors, cast to ``obs_dtype`` (float32;
    uint8 for images) and reshaped to ``obs_shape`` per row (a Box's declared shape, (B, 1, 4), is
    taken for a flat (B, 4)); a Dict's keys packed into (B, D), each flattened, in the order of
    ``policy.observation_space`` (``keys``). No checks of the values (NaN in, NaN or an index out)."""

    def __init__(self, policy):
        super().__init__()
        from .envs.spaces import obs_layout

        agent = copy.deepcopy(policy.agent).to("cpu").eval()
        _portable(agent)
        for p in agent.parameters():
            p.requires_grad_(False)
        self.agent = agent
        norm = policy.obs_normalizer
        self.obs_normalizer = None if norm is None else copy.deepcopy(norm).to("cpu").eval()
        layout = obs_layout(policy.observation_space, policy.env_id)
        self.obs_shape, self.obs_dtype = tuple(layout.shape), layout.dtype
        #: a Dict's keys in the order their values are packed (None for a Box)
        self.keys = [p.key for p in layout.parts] if layout.is_dict else None
        space = policy.action_space
        self.box = isinstance(space, gym.spaces.Box)
        self.native = policy.env_backend == "native"  # flat actions, as a NativeEnv's _dynamics takes them
        if self.box:  # batched_act's clamp in float32, then space_actions' in the space's dtype
            self.register_buffer("low32", torch.as_tensor(space.low.reshape(-1), dtype=torch.float32))
            self.register_buffer("high32", torch.as_tensor(space.high.reshape(-1), dtype=torch.float32))
        start = None
        if isinstance(space, gym.spaces.Discrete) and int(space.start):
            start = torch.tensor(int(space.start), dtype=torch.int64)
        elif isinstance(space, gym.spaces.MultiDiscrete) and np.asarray(space.start).any():
            start = torch.as_tensor(np.asarray(space.start, dtype=np.int64).reshape(-1))
        self.has_start = start is not None
        if start is not None:
            self.register_buffer("start", start)
        self.action_shape = () if isinstance(space, gym.spaces.Discrete) else tuple(
            space.nvec.shape if isinstance(space, gym.spaces.MultiDiscrete) else space.shape)
        self.action_dtype = _torch_dtype(space.dtype)
        self.rounds = self.box and np.dtype(space.dtype).kind in "biu"  # an integer or bool Box: nearest integer
        if self.box:
            bounds = (space.low, space.high)
            if self.rounds:  # clipped in float64 before the cast (space_actions: 2**31 - 1 would wrap)
                bounds = tuple(b.astype(np.float64) for b in bounds)
            self.register_buffer("low", torch.as_tensor(bounds[0].reshape(self.action_shape)))
            self.register_buffer("high", torch.as_tensor(bounds[1].reshape(self.action_shape)))
        self.eval()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.reshape(obs.shape[0], *self.obs_shape).to(self.obs_dtype)
        if self.obs_normalizer is not None:
            x = self.obs_normalizer(x, update=False)
        a = self.agent.act(x, deterministic=True)
        if self.box:
            a = torch.clamp(a, self.low32, self.high32)
        if self.has_start:
            a = a + self.start
        if self.native:
            return a
        a = a.reshape(a.shape[0], *self.action_shape)
        if self.rounds:
            return torch.clamp(torch.round(a.to(torch.float64)), self.low, self.high).to(self.action_dtype)
        a = a.to(self.action_dtype)
        return torch.clamp(a, self.low, self.high) if self.box else a
