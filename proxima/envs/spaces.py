"""Observation spaces as tensors: which spaces Proxima takes, and how each becomes one (N, ...) tensor.

* a flat Box (any dtype but an image; a scalar Box of shape () too) -> (N, prod(shape)) float32;
* an image, a Box of dtype uint8 with 3 dims, channels first (C, H, W) or last (H, W, C) -> kept
  as (N, *shape) **uint8** from the env to the rollout buffer to the network, which scales it to
  [0, 1] (4x less memory than float32);
* a Dict of Boxes -> its keys, each flattened, packed side by side into one (N, D) tensor (uint8
  when every key is uint8, else float32); the agent unpacks them by key (one encoder per key).

Which end of an image holds the channels: the smallest dimension, when it is strictly smaller than
the other two (84x84x3 -> HWC, 4x84x84 -> CHW); a uint8 3-D Box with no such dimension is not an
image and goes the flat way. Any other space (Text, Graph, Sequence, Tuple, Discrete as an
observation, ...) raises EnvError naming the space and the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import gymnasium as gym
import numpy as np
import torch

from .base import EnvError


@dataclass(frozen=True)
class ObsPart:
    """One key of an observation (the only one for a Box): where it sits in the packed tensor."""

    key: Optional[str]  #: Dict key, None for a plain Box
    shape: tuple  #: the key's own shape, e.g. (84, 84, 3)
    layout: Optional[str]  #: "chw" or "hwc" for an image, None for a flat vector
    offset: int  #: first column in the packed (N, D) tensor (Dict only)
    size: int  #: prod(shape)


@dataclass(frozen=True)
class ObsLayout:
    """How an observation space maps to the (N, *shape) tensor the env returns."""

    parts: tuple  #: ObsPart per key, in the space's key order
    shape: tuple  #: per-env tensor shape: the image's shape, or (D,) for flat Box and Dict
    dtype: torch.dtype  #: torch.uint8 for images (and all-uint8 Dicts), else torch.float32
    is_dict: bool

    @property
    def is_image(self) -> bool:
        """A single image Box (not a Dict)."""
        return not self.is_dict and self.parts[0].layout is not None

    @property
    def has_image(self) -> bool:
        return any(p.layout is not None for p in self.parts)


def image_layout(space: gym.spaces.Space) -> Optional[str]:
    """'chw' or 'hwc' for an image Box (uint8, 3 dims, channels the smallest end), else None."""
    if not isinstance(space, gym.spaces.Box) or space.dtype != np.uint8 or len(space.shape) != 3:
        return None
    c_first, h, c_last = space.shape
    if c_last < min(c_first, h):
        return "hwc"
    if c_first < min(h, c_last):
        return "chw"
    return None


def _where(key: Optional[str]) -> str:
    return f" at key '{key}'" if key is not None else ""


def _check_box(space: gym.spaces.Space, key: Optional[str], env_id: str) -> None:
    if isinstance(space, gym.spaces.Box):
        if int(np.prod(space.shape)) == 0:  # a scalar Box (shape ()) holds one value: flattened to (1,)
            raise EnvError(f"env '{env_id}': observation space {space}{_where(key)} is empty (shape {space.shape})")
        return
    kind = type(space).__name__
    if isinstance(space, gym.spaces.Dict) and key is not None:
        raise EnvError(f"env '{env_id}': not supported: nested Dict observation space{_where(key)} (one level of Dict of Box)")
    raise EnvError(f"env '{env_id}': not supported: {kind} observation space {space}{_where(key)} "
                   "(supported: Box, images as uint8 Box, and Dict of Box)")


def obs_layout(space: gym.spaces.Space, env_id: str = "env") -> ObsLayout:
    """The layout of ``space``; EnvError naming the space (and Dict key) when it is not supported."""
    if isinstance(space, gym.spaces.Dict):
        if len(space.spaces) == 0:
            raise EnvError(f"env '{env_id}': Dict observation space has no keys")
        parts, offset = [], 0
        for key, sub in space.spaces.items():
            _check_box(sub, str(key), env_id)
            size = int(np.prod(sub.shape))
            parts.append(ObsPart(str(key), tuple(sub.shape), image_layout(sub), offset, size))
            offset += size
        all_u8 = all(sub.dtype == np.uint8 for sub in space.spaces.values())
        return ObsLayout(tuple(parts), (offset,), torch.uint8 if all_u8 else torch.float32, True)
    _check_box(space, None, env_id)
    layout = image_layout(space)
    size = int(np.prod(space.shape))
    if layout is not None:
        return ObsLayout((ObsPart(None, tuple(space.shape), layout, 0, size),), tuple(space.shape), torch.uint8, False)
    return ObsLayout((ObsPart(None, tuple(space.shape), None, 0, size),), (size,), torch.float32, False)


def tensor_space(space: gym.spaces.Space, layout: ObsLayout) -> gym.spaces.Space:
    """The space of one env's tensor: a flat float32 Box for vectors (bounds flattened), the image
    Box as it is, and the Dict itself (its keys packed by the layout)."""
    if layout.is_dict or layout.is_image:
        return space
    return gym.spaces.Box(space.low.reshape(-1).astype(np.float32), space.high.reshape(-1).astype(np.float32),
                          layout.shape, np.float32)


def pack_numpy(obs, layout: ObsLayout, num: int) -> np.ndarray:
    """Observations of ``num`` envs as one array (num, *layout.shape) of the layout's dtype.

    obs: an array (num, *box_shape) or, for a Dict, a dict of arrays (num, *key_shape). A finite
    value beyond float32's range (a float64 env's 1e300) raises EnvError naming the env's row: the
    cast would make it inf, and the non-finite guard would then blame the env for a NaN/inf it
    never returned.
    """
    np_dtype = np.uint8 if layout.dtype == torch.uint8 else np.float32
    try:
        with np.errstate(over="raise"):  # free unless a cast overflows
            if not layout.is_dict:
                return np.asarray(obs, dtype=np_dtype).reshape(num, *layout.shape)
            out = np.empty((num, *layout.shape), dtype=np_dtype)
            for part in layout.parts:
                out[:, part.offset:part.offset + part.size] = np.asarray(obs[part.key]).reshape(num, part.size)
            return out
    except FloatingPointError:
        raise EnvError(_overflow(obs, layout, num)) from None


def _overflow(obs, layout: ObsLayout, num: int) -> str:
    """The line for an observation whose finite values overflow float32: the first such row and key."""
    limit = float(np.finfo(np.float32).max)
    for part in layout.parts:
        x = np.asarray(obs if part.key is None else obs[part.key], dtype=np.float64).reshape(num, -1)
        big = np.isfinite(x) & (np.abs(x) > limit)
        if big.any():
            row, col = (int(i[0]) for i in np.nonzero(big))
            return (f"observation value {x[row, col]:g}{_where(part.key)} (entry {col}) of env {row} is beyond float32's range "
                    f"(+-{limit:.3g}), the precision Proxima trains in; scale it down in the env")
    return "an observation overflows float32 when cast"


def env_actions(actions: np.ndarray, space: gym.spaces.Space, num: int) -> np.ndarray:
    """The agent's actions for ``num`` envs as the env's ``step`` takes them.

    The agent acts in index space: Discrete (num,) in 0..n-1, MultiDiscrete (num, nvec.size) in
    0..nvec-1, Box (num, prod(shape)) already clipped to the bounds. Here: the space's ``start``
    added (Discrete(3, start=1) takes 1..3), MultiDiscrete and Box reshaped to the space's shape
    (a 2-D nvec, a (2, 2) Box), and the space's dtype (an integer Box gets the nearest integer,
    not a truncation).
    """
    if isinstance(space, gym.spaces.Discrete):
        return (actions.reshape(num) + int(space.start)).astype(space.dtype)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return (actions.reshape(num, *space.nvec.shape) + np.asarray(space.start)).astype(space.dtype)
    a = actions.reshape(num, *space.shape)
    if np.issubdtype(space.dtype, np.integer):
        a = np.rint(a)
    return a.astype(space.dtype)
