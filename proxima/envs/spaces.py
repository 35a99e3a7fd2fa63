"""Observation spaces as tensors: which spaces Proxima takes, and how each becomes one (N, ...) tensor.

* a flat Box (any dtype but an image; a scalar Box of shape () too) -> (N, prod(shape)) float32;
* an image, a Box of dtype uint8 with 3 dims, channels first (C, H, W) or last (H, W, C), or a
  stack of them with 4 (Gymnasium's FrameStackObservation: (N, H, W, C) or (N, C, H, W), frames of
  1, 3 or 4 channels, which the CNN reads as N * C channels) -> kept as (N, *shape) **uint8** from
  the env to the rollout buffer to the network, which scales it to [0, 1] by the range the Box
  declares (4x less memory than float32): 0..255 divided by 255, a 0/1 board Box(0, 1, ..., np.uint8)
  kept as 0 and 1 (nets.pixel_range);
* a Dict of Boxes -> its keys, each flattened, packed side by side into one (N, D) tensor (uint8
  when every key is uint8, else float32); the agent unpacks them by key (one encoder per key).
  Keys are strings without '.' (they name the encoders; checkpoints record them as strings).

Which end of an image holds the channels: the smallest dimension, when it is strictly smaller than
the other two (84x84x3 -> HWC, 4x84x84 -> CHW); a uint8 3-D Box with no such dimension, or a 4-D
one whose last 3 dims are no such frame of 1, 3 or 4 channels, is not an image and goes the flat
way (:func:`image_note` says so, and what to do, for what looks like pixels: a grayscale (H, W), a
stack of 2-channel frames, a float image). A float Box declared exactly Box(0, 1) of an image's
shape (:func:`unit_image_layout`) is a vector too, float32, which ``--encoder cnn`` (nets) reshapes
into an image and reads unscaled. Any other space (Text,
Graph, Sequence, Tuple, Discrete as an observation, ...) raises EnvError naming the space and the key;
for a Discrete, MultiDiscrete, MultiBinary or Tuple of those and Boxes the line gives the fix:
gymnasium.wrappers.FlattenObservation in a ``module:function`` factory (at a Dict key: that key
declared as the Box gymnasium.spaces.flatten_space makes of it), but for a Tuple with an image part a
Dict factory (the image at a key of its own, for the CNN), as flattening would feed its pixels raw to an MLP.

Actions (:func:`check_action_space`): Discrete, MultiDiscrete, MultiBinary or Box, holding one value
or more. A Box's bounds may be infinite, fully or on one side (Box(-inf, inf), as CleanRL's and SB3's
continuous envs wrapped in gymnasium.wrappers.ClipAction declare): the policy's Normal samples
unbounded and Proxima's clip to the bounds is a no-op on an infinite side, so the env (or its
ClipAction) gets the sample as it is. A MultiBinary(shape) is MultiDiscrete([2] * prod(shape)) to the
agent (:func:`index_space`: one 2-way categorical per bit, which is as expressive as SB3's Bernoulli
per bit: a Categorical over 2 logits is a Bernoulli of their difference) and the env gets an array of
the MultiBinary's own shape and dtype (int8) of 0/1 values (:func:`space_actions`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
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
    layout: Optional[str]  #: "chw" or "hwc" for an image, "nchw" or "nhwc" for a frame stack, None for a flat vector
    offset: int  #: first column in the packed (N, D) tensor (Dict only)
    size: int  #: prod(shape)
    #: the Box the env declares for this key, as declared (the (84, 84) of a Box the env's tensors hold
    #: flattened): messages name what the user wrote; not part of the layout, so not compared
    source: Optional[gym.spaces.Space] = field(default=None, compare=False, repr=False)


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


#: the channel counts a frame of a 4-D frame stack may have (grayscale, RGB, RGBA): a 4-D Box whose
#: frame has another is not read as a stack (a voxel grid (16, 16, 16, 2) is no video)
FRAME_CHANNELS = (1, 3, 4)
#: the layouts of a frame stack (Gymnasium's FrameStackObservation of an HWC or CHW image)
STACKS = ("nhwc", "nchw")


def shape_layout(shape: tuple) -> Optional[str]:
    """The image layout a shape alone gives: 'hwc' or 'chw' for 3 dims whose channels are the end
    strictly smaller than the other two; 'nhwc' or 'nchw' for a stack of N such frames (N, H, W, C)
    or (N, C, H, W) whose frames have 1, 3 or 4 channels (FrameStackObservation's shapes); else None.
    A 3-D frame never has both ends strictly smallest, so a stack is never read two ways."""
    shape = tuple(int(n) for n in shape)
    if len(shape) == 3:
        c_first, h, c_last = shape
        if c_last < min(c_first, h):
            return "hwc"
        if c_first < min(h, c_last):
            return "chw"
        return None
    if len(shape) == 4 and shape[0] >= 1:
        frame = shape_layout(shape[1:])
        if frame == "hwc" and shape[3] in FRAME_CHANNELS:
            return "nhwc"
        if frame == "chw" and shape[1] in FRAME_CHANNELS:
            return "nchw"
    return None


def image_layout(space: gym.spaces.Space) -> Optional[str]:
    """'chw' or 'hwc' for an image Box (uint8, 3 dims, channels the smallest end), 'nchw' or 'nhwc'
    for a uint8 stack of such frames (:func:`shape_layout`), else None."""
    if not isinstance(space, gym.spaces.Box) or space.dtype != np.uint8:
        return None
    return shape_layout(space.shape)


def unit_image_layout(space: gym.spaces.Space) -> Optional[str]:
    """:func:`shape_layout` of a float32/float64 Box that declares every low exactly 0 and every high
    exactly 1 (pixels already in [0, 1]), else None: the images ``--encoder cnn`` reads as they are.
    Any other float bounds (0..255, unbounded) do not say the scale, and such Boxes stay vectors."""
    if not isinstance(space, gym.spaces.Box) or np.dtype(space.dtype) not in (np.float32, np.float64):
        return None
    low, high = np.asarray(space.low), np.asarray(space.high)
    if not low.size or not (np.all(low == 0) and np.all(high == 1)):
        return None
    return shape_layout(space.shape)


def image_chw(layout: str, shape: tuple) -> tuple:
    """(C, H, W) of the CNN input an image of ``layout`` and ``shape`` becomes: a frame stack's N
    frames of C channels give N * C channels, frame after frame."""
    shape = tuple(int(n) for n in shape)
    if layout == "chw":
        return shape
    if layout == "hwc":
        return shape[2], shape[0], shape[1]
    if layout == "nchw":
        return shape[0] * shape[1], shape[2], shape[3]
    if layout == "nhwc":
        return shape[0] * shape[3], shape[1], shape[2]
    raise ValueError(f"not an image layout: {layout!r}")


def layout_words(layout: str) -> str:
    """How messages name an image layout: 'channels last (H, W, C)', 'a stack of channels-first frames (N, C, H, W)'."""
    return {"chw": "channels first (C, H, W)", "hwc": "channels last (H, W, C)",
            "nchw": "a stack of channels-first frames (N, C, H, W)",
            "nhwc": "a stack of channels-last frames (N, H, W, C)"}[layout]


def pixels_fix(expr: str, unit: Optional[bool], name: Optional[str] = None) -> str:
    """:func:`uint8_pixels`' words for float pixels when only their scale is known, not the space:
    in [0, 1] (``unit`` True), 0..255 (False), or either (None: both casts, the scaling first, told
    apart by the values of ``name``). A caller that has the space passes it to uint8_pixels instead."""
    return "return " + uint8_pixels(_UNIT if unit else _BYTE if unit is False else _ANY, expr, name=name)[1]


#: the spaces pixels_fix reads its ``unit`` as: float pixels in [0, 1], 0..255, of no known scale
_UNIT = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
_BYTE = gym.spaces.Box(0.0, 255.0, (1,), np.float32)
_ANY = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)


def box_range(space: gym.spaces.Box) -> tuple:
    """(low, high) of ``space`` as the network reads an image's range (nets.pixel_range): the smallest
    low and the largest high, floats (infinite where the Box is unbounded)."""
    low, high = np.asarray(space.low, dtype=np.float64), np.asarray(space.high, dtype=np.float64)
    return (float(low.min()), float(high.max())) if low.size else (-np.inf, np.inf)


def uint8_pixels(space: gym.spaces.Box, expr: str = "obs", values=None, name: Optional[str] = None,
                 tensor: bool = False, own_dtype: bool = False) -> tuple:
    """((low, high), words): the uint8 range the pixels of ``space`` are to hold and how to make the
    observation ``expr`` into them ("np.uint8 pixels LOW..HIGH as EXPR"), from the range ``space``
    declares, which the network maps to [0, 1] (nets.pixel_range). The advice of check-env, of
    train's image check and of Policy.act, so that all three say the same thing:

    * an integer Box (uint8, bool, uint16, ...) whose range fits in a uint8 keeps it: a cast, so a
      0/1 board Box(0, 1, ..., np.uint8) stays 0 and 1 (scaled by 255 the network would see 255
      where it trained on 1); float ``values`` in [0, 1] where the range is wider are scaled to it;
    * any other finite range is mapped onto 0..255 (a float image in [0, 1] by * 255; a uint16
      depth image 0..65535 by np.interp, as a cast would wrap 51951 to 239);
    * unbounded: the observed ``values`` (an observation of the space) tell [0, 1] from 0..255;
      with none, both casts, the scaling first (a bare cast of [0, 1] pixels makes them all 0),
      told apart by the values of ``name`` (``expr`` by default).

    ``tensor``: in torch's words (``.to(torch.uint8)``) for a caller that gave a tensor. ``own_dtype``:
    ``expr`` holds the space's own dtype (image_note's env obs), so an integer Box's values are
    integers, never [0, 1] floats to scale: an int32 Box(0, 255) is a cast."""
    lo, hi = box_range(space)
    integral = bool(np.issubdtype(space.dtype, np.integer) or space.dtype == np.bool_)
    unit = False if own_dtype and integral else None
    if values is not None:
        v = np.asarray(values, dtype=np.float64)
        v = v[np.isfinite(v)]
        unit = bool(v.min() >= 0 and v.max() <= 1) if v.size else None
    to_u8 = (lambda x: f"{x}.to(torch.uint8)") if tensor else (lambda x: f"{x}.astype(np.uint8)")
    cast = to_u8(expr)
    unit_to = lambda a, b: to_u8(f"({expr} * {b - a:g})" if a == 0 else f"({a:g} + {expr} * {b - a:g})")  # noqa: E731
    both = None
    if integral and 0 <= lo and hi <= 255:
        target = (int(lo), int(hi))
        if hi <= 1 or unit is False:
            way = cast
        elif unit:
            way = unit_to(lo, hi)
        else:
            way, both = unit_to(lo, hi), f"{cast} if it is {target[0]}..{target[1]}"
    elif np.isfinite(lo) and np.isfinite(hi) and hi > lo:
        target = (0, 255)
        if (lo, hi) == (0.0, 1.0) and not integral:
            way = unit_to(0, 255)
        elif (lo, hi) == (0.0, 255.0):
            way = cast
        elif tensor:
            shifted = f"({expr} - {lo:g})" if lo > 0 else f"({expr} + {-lo:g})" if lo < 0 else expr
            way = to_u8(f"({shifted} / {hi - lo:g} * 255)")
        else:
            way = to_u8(f"np.interp({expr}, ({lo:g}, {hi:g}), (0, 255))")
    else:  # the bounds do not show the scale
        target = (0, 255)
        if unit is None:
            way, both = unit_to(0, 255), f"{cast} if it is 0..255"
        else:
            way = unit_to(0, 255) if unit else cast
    words = f"{'torch' if tensor else 'np'}.uint8 pixels {target[0]}..{target[1]} as {way}"
    if both is not None:
        words += f" if {name or expr} is in [0, 1], or {both}"
    return target, words


def _as_image(shape: tuple, expr: str) -> Optional[tuple]:
    """(image shape, expression) for one reshaping that makes a Box of ``shape`` an image: a channel
    axis for (H, W), the stack merged into channels for a frame stack (N, H, W, C) or (N, C, H, W)
    (Gymnasium's FrameStackObservation) whose frames have another channel count than 1, 3 or 4, the
    shape itself for an image or a stack Proxima reads as one, the stack axis moved first for
    channels-last frames stacked on the last axis (H, W, C, N); None when none does."""

    def image(s: tuple) -> bool:
        return image_layout(gym.spaces.Box(0, 255, s, np.uint8)) is not None

    if len(shape) == 2 and image(shape + (1,)):
        return shape + (1,), f"{expr}[..., None]"
    if len(shape) in (3, 4) and image(shape):  # a float image or frame stack: only the dtype to change
        return shape, expr
    if len(shape) == 4:
        n, a, b, c = shape
        if c == 1 and image((n, a, b)):
            return (n, a, b), f"{expr}.squeeze(-1)"
        if a == 1 and image((n, b, c)):
            return (n, b, c), f"{expr}.squeeze(1)"
        if image((a, b, n * c)) and c < min(a, b):
            return (a, b, n * c), f"{expr}.transpose(1, 2, 0, 3).reshape{(a, b, n * c)}"
        if image((n * a, b, c)) and a < min(b, c):
            return (n * a, b, c), f"{expr}.reshape{(n * a, b, c)}"
        # channels-last frames stacked on the last axis (np.stack(frames, axis=-1)): the stack goes first,
        # Gymnasium's FrameStackObservation layout (tried last: a (N, H, W, 2) stack is merged above)
        if shape_layout((c, n, a, b)) == "nhwc":
            return (c, n, a, b), f"np.moveaxis({expr}, -1, 0)"
    return None


def image_note(space: gym.spaces.Space, expr: str = "obs", values=None, single: bool = True) -> Optional[tuple]:
    """(how Proxima reads it, what to do) for a Box that holds pixels but is not an image to
    :func:`image_layout`, else None: a uint8 Box of 2 or more dims (a grayscale (H, W), a frame
    stack, a cube), or a float Box of 3 or 4 dims that one reshaping makes an image. ``expr`` names
    the observation in the fix (``obs``, ``obs['image']``); ``values``, an observation of the space
    when the caller has one, tells float pixels in [0, 1] from 0..255 where the bounds do not
    (:func:`uint8_pixels`, whose range the suggested Box declares). Proxima does not guess these: it
    reads them as vectors, so the user is told here (check-env's note, train's note at the start of
    a run and in --dry-run, ``--encoder cnn``'s error). ``single``: the space is the whole observation,
    not a Dict key: a float image in [0, 1] (:func:`unit_image_layout`) is then an image to
    ``--encoder cnn``, which the note says."""
    if not isinstance(space, gym.spaces.Box) or image_layout(space) is not None:
        return None
    shape, u8 = tuple(space.shape), space.dtype == np.uint8
    fix = _as_image(shape, expr)
    # a uint8 (1, 128) stays a vector, and so does a float matrix: only what looks like pixels gets a note
    if not (u8 and (fix is not None or len(shape) >= 3)) and not (fix is not None and len(shape) in (3, 4)):
        return None
    from ..nets import CNN_MIN_SIZE  # nets imports this module: imported when a note is made

    size = int(np.prod(shape))
    (lo, hi), words = uint8_pixels(space, fix[1] if fix is not None else expr, values, expr, own_dtype=True)
    unit = single and unit_image_layout(space) is not None
    if u8:
        stacks = " (or a stack of such frames, (N, H, W, C) or (N, C, H, W), of 1, 3 or 4 channels)" if len(shape) == 4 else ""
        how = (f"uint8 Box {shape} is not an image to Proxima (an image is a uint8 Box (H, W, C) or (C, H, W) whose "
               f"channel axis, at one end, is smaller than the other two{stacks}), so it trains an MLP on its {size} values "
               f"flattened and unscaled ({lo}..{hi})")
    elif unit:
        how = (f"{np.dtype(space.dtype)} Box {shape} declares pixels in [0, 1]: --encoder cnn reads it as an image as it is, "
               f"but --encoder auto takes the CNN for uint8 images only, so it trains an MLP on its {size} values "
               f"flattened as they are")
    elif unit_image_layout(space) is not None:  # a Dict's key: the CNN reads a float image only as the whole observation
        how = (f"{np.dtype(space.dtype)} Box {shape} declares pixels in [0, 1], but a Dict key is an image to Proxima only as "
               f"uint8 (--encoder cnn reads a float image only as the whole observation), so it trains an MLP on its {size} "
               f"values flattened as they are")
    else:
        how = (f"{np.dtype(space.dtype)} Box {shape} has an image's shape but Proxima reads only uint8 Boxes as images, so it "
               f"trains an MLP on its {size} values flattened as they are")
    if fix is None:
        return how, "if it is an image, put its channels on an axis at one end, smaller than the other two"
    new, value = fix
    value = f"return {value}" if u8 else f"return {words}"  # uint8 pixels keep their range: only the shape changes
    change = ("add a channel axis" if len(shape) == 2 else "make it uint8" if new == shape
              else "put the stack axis first" if fix[1].startswith("np.moveaxis") else "merge the frame stack into channels")
    if unit:
        return how, (f"train with --encoder cnn, or (4x less memory, and --encoder auto takes the CNN from "
                     f"{CNN_MIN_SIZE}x{CNN_MIN_SIZE}) make it uint8: declare Box({lo}, {hi}, {new}, np.uint8) and {value}")
    # a 0..255 uint8 (H, W) is most often GrayscaleObservation's (keep_dim=False by default), whose own argument
    # fixes it; the space cannot tell where a frame came from: said as an if
    gray = (" (if it comes from Gymnasium's GrayscaleObservation, wrap it as GrayscaleObservation(env, keep_dim=True) instead)"
            if u8 and len(shape) == 2 and (lo, hi) == (0, 255) and expr == "obs" else "")
    return how, (f"to have it read as an image (pixels scaled to [0, 1], the CNN from {CNN_MIN_SIZE}x{CNN_MIN_SIZE}), "
                 f"{change}: declare Box({lo}, {hi}, {new}, np.uint8) and {value}{gray}")


def image_notes(layout: ObsLayout, encoder: Optional[str] = None) -> list:
    """The :func:`image_note` lines of an observation's layout, one per key that has one, as
    check-env words them ("observation_space['cam']: how; what to do"): train's note at the start
    of a run and in --dry-run, on pixels it reads as a vector. ``encoder``: the run's resolved one;
    under cnn a float image in [0, 1] is read as an image, and gets no note."""
    lines = []
    for part in layout.parts:
        at = "" if part.key is None else f"[{part.key!r}]"
        if encoder == "cnn" and not layout.is_dict and unit_image_layout(part.source) is not None:
            continue
        note = image_note(part.source, f"obs{at}", single=not layout.is_dict)
        if note:
            lines.append(f"observation_space{at}: {note[0]}; {note[1]}")
    return lines


def _where(key: Optional[str]) -> str:
    return f" at key '{key}'" if key is not None else ""


def _check_key(key, env_id: str) -> None:
    """A Dict key must be a string a network module can be named by: the agent keeps one encoder per
    key in an nn.ModuleDict and a checkpoint records the keys as strings, so an int key 0 would
    come back as '0' and no longer find the env's obs[0] (a KeyError mid-run or after loading)."""
    if not isinstance(key, str):
        raise EnvError(f"env '{env_id}': not supported: Dict observation key {key!r} ({type(key).__name__}); Proxima "
                       f"takes string keys: use {str(key)!r} in observation_space and in the obs reset() and step() return")
    if key == "" or "." in key:
        raise EnvError(f"env '{env_id}': not supported: Dict observation key {key!r}; a key names a network module, "
                       f"which cannot be empty or hold '.': rename it (e.g. {(key.replace('.', '_') or 'obs')!r})")


#: the spaces gymnasium.spaces.flatten_space makes a Box of that is worth training on: one-hot
#: Discrete values, Boxes flattened (a Text flattens too, but to character indices, and is left out)
_FLATTENS = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def _flattens(space: gym.spaces.Space) -> bool:
    if isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)):
        subs = list(space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces)
        return bool(subs) and all(_flattens(sub) for sub in subs)
    return isinstance(space, _FLATTENS)


def _env_call(env_id: str) -> str:
    """How a factory of the user's builds the env ``env_id`` names, for the FlattenObservation fix."""
    module, sep, name = str(env_id).partition(":")
    if sep and name.isidentifier():  # module:Class (or module:factory): resolve_env_fn calls the attribute
        return f"{module}.{name}(**kw)"
    if sep or env_id in gym.registry:
        return f"gymnasium.make({env_id!r}, **kw)"
    return "YourEnv(**kw)"


_NAMED = 4  # the parts of a Tuple an error names before saying how many more (a Tuple may have 40,000)


def _space_text(space: gym.spaces.Space, limit: int = 200) -> str:
    """``space`` on one line (a Box's repr of per-element bounds spans lines) of at most about ``limit``
    characters: a Tuple's or Dict's first _NAMED parts and how many more, anything else cut with '...'."""
    text = " ".join(str(space).split())
    if len(text) <= limit:
        return text
    if isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)):
        subs = list(space.spaces.items() if isinstance(space, gym.spaces.Dict) else enumerate(space.spaces))
        shown = [_space_text(sub, limit // (_NAMED + 1)) if isinstance(space, gym.spaces.Tuple)
                 else f"{name!r}: {_space_text(sub, limit // (_NAMED + 1))}" for name, sub in subs[:_NAMED]]
        more = f", and {len(subs) - _NAMED:,} more parts" if len(subs) > _NAMED else ""
        return f"{type(space).__name__}({', '.join(shown)}{more})"
    return text[:limit - 3] + "..."


def _parts_text(ids: list) -> str:
    """'0, 2' or '0, 1, 2, 3 and 19,996 more': a Tuple's part indices, the first _NAMED of them named."""
    named = ", ".join(map(str, ids[:_NAMED]))
    return named if len(ids) <= _NAMED else f"{named} and {len(ids) - _NAMED:,} more"


def _holds_image(space: gym.spaces.Space) -> bool:
    """Whether ``space`` is an image (image_layout) or a Tuple or Dict with one inside, at any depth."""
    if image_layout(space) is not None:
        return True
    if isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)):
        subs = space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces
        return any(_holds_image(sub) for sub in subs)
    return False


def _tuple_dict_fix(space: gym.spaces.Tuple, key: Optional[str], env_id: str) -> str:
    """'; what to do' for a Tuple observation with an image part (a uint8 Box image_layout reads as one), else
    '': FlattenObservation would make the whole Tuple one Box whose pixels an MLP reads raw (0..255, no CNN),
    where a Dict keeps the image at a key of its own (the CNN, scaled to [0, 1]) and the other parts flattened
    at another ('image' + 'vector', as the Dict keys Proxima reads one encoder per key of). An image inside a
    nested part, or more than _NAMED image parts, get the fix in words (code for them would be no one line)."""
    parts = list(space.spaces)
    holding = [i for i, sub in enumerate(parts) if _holds_image(sub)]
    if not holding:
        return ""
    images = [i for i in holding if image_layout(parts[i]) is not None]
    many = len(holding) > 1
    flat = f"Box({gym.spaces.flatdim(space)},)"  # flatten_space's shape, without building it (40,000 parts: seconds)
    if key is not None:  # a Dict key: its image parts become keys of that Dict
        return (f"; give its image part{'s' if many else ''} {_parts_text(holding)} a key of "
                f"{'their' if many else 'its'} own in the Dict (read by the CNN) and declare key {key!r} as the "
                f"other parts flattened (gymnasium.spaces.flatten_space of a Tuple of them; flattening it whole would "
                f"feed its pixels raw to an MLP)")
    image_set = set(images)
    if len(images) < len(holding) or len(images) > _NAMED:
        nested = [i for i in holding if i not in image_set]
        inside = (f" (part{'s' if len(nested) > 1 else ''} {_parts_text(nested)} hold{'' if len(nested) > 1 else 's'} "
                  f"{'its images' if len(nested) > 1 else 'it'} nested in a Tuple or Dict)") if nested else ""
        return (f"; make it a Dict with each image of part{'s' if many else ''} {_parts_text(holding)} at a key of its "
                f"own{inside}, read by the CNN (pixels scaled to [0, 1]), and the other parts flattened at one vector key "
                f"(gymnasium.wrappers.FlattenObservation would make it one {flat} an MLP reads "
                f"its pixels from unscaled)")
    rest = tuple(i for i in range(len(parts)) if i not in image_set)
    names = {i: "image" if len(images) == 1 else f"image{i}" for i in images}
    values = [f"{names[i]!r}: o[{i}]" for i in images]
    spaces = [f"{names[i]!r}: s[{i}]" for i in images]
    head = f"def as_dict(**kw): env = {_env_call(env_id)}; s = env.observation_space; "
    if rest:
        which = rest if len(rest) <= _NAMED else f"range(len(s)) if i not in {tuple(images)}"
        head += f"rest = gymnasium.spaces.Tuple([s[i] for i in {which}]); "
        keep = rest if len(rest) <= _NAMED else f"range(len(o)) if i not in {tuple(images)}"
        values.append(f"'vector': gymnasium.spaces.flatten(rest, tuple(o[i] for i in {keep}))")
        spaces.append("'vector': gymnasium.spaces.flatten_space(rest)")
    return (f"; make it a Dict, which keeps its image {'parts' if len(images) > 1 else 'part'} for the CNN (pixels "
            f"scaled to [0, 1]){' and the other parts flattened at one vector key' if rest else ''}: put "
            f"{head}return gymnasium.wrappers.TransformObservation(env, lambda o: {{{', '.join(values)}}}, "
            f"gymnasium.spaces.Dict({{{', '.join(spaces)}}})) in a module of yours and use MODULE:as_dict as the env "
            f"(gymnasium.wrappers.FlattenObservation would make it one {flat} an MLP reads "
            f"its pixels from unscaled)")


def _flatten_fix(space: gym.spaces.Space, key: Optional[str], env_id: str) -> str:
    """'; what to do' for an observation space FlattenObservation turns into a Box, else ''; for a Tuple with
    an image part, the Dict that keeps it an image (:func:`_tuple_dict_fix`)."""
    if not _flattens(space):
        return ""
    if isinstance(space, gym.spaces.Tuple):
        fix = _tuple_dict_fix(space, key, env_id)
        if fix:
            return fix
    flat = gym.spaces.flatten_space(space)
    if key is not None:  # FlattenObservation would flatten the whole Dict, image keys too
        return (f"; declare key {key!r} as {_space_text(flat)} (gymnasium.spaces.flatten_space of it) and return "
                f"gymnasium.spaces.flatten(that {type(space).__name__}, value) at that key")
    return (f"; gymnasium.wrappers.FlattenObservation makes it {_space_text(flat)}: put def flat(**kw): return "
            f"gymnasium.wrappers.FlattenObservation({_env_call(env_id)}) in a module of yours and use MODULE:flat as the env")


def _check_box(space: gym.spaces.Space, key: Optional[str], env_id: str) -> None:
    if isinstance(space, gym.spaces.Box):
        if int(np.prod(space.shape)) == 0:  # a scalar Box (shape ()) holds one value: flattened to (1,)
            raise EnvError(f"env '{env_id}': observation space {space}{_where(key)} is empty (shape {space.shape}); "
                           "declare one value or more")
        return
    kind = type(space).__name__
    if isinstance(space, gym.spaces.Dict) and key is not None:
        try:
            flat = f" as {gym.spaces.flatten_space(space)}"
        except (NotImplementedError, ValueError, TypeError):  # a key of a kind flatten_space cannot take
            flat = ""
        # flattening the key alone keeps its siblings (an image key keeps its CNN), the whole env loses them
        raise EnvError(f"env '{env_id}': not supported: nested Dict observation space{_where(key)} (one level of Dict of Box); "
                       f"declare key {key!r}{flat} (gymnasium.spaces.flatten_space of it) and return gymnasium.spaces.flatten("
                       f"that Dict, value) at that key, or, without image keys, make the env a def flat(**kw): return "
                       f"gymnasium.wrappers.FlattenObservation({_env_call(env_id)}) in a module of yours and use MODULE:flat")
    raise EnvError(f"env '{env_id}': not supported: {kind} observation space {_space_text(space)}{_where(key)} "
                   f"(supported: Box, images as uint8 Box, and Dict of Box){_flatten_fix(space, key, env_id)}")


def check_spaces(env_id: str, obs_space: gym.spaces.Space, act_space: gym.spaces.Space) -> None:
    """EnvError, one line, unless Proxima trains on these spaces (:func:`obs_layout`,
    :func:`check_action_space`): check-env's "spaces supported" and make_env's rule."""
    obs_layout(obs_space, env_id)
    check_action_space(act_space, env_id)


def _clipped_space(env: Optional[gym.Env]) -> Optional[gym.spaces.Box]:
    """The Box action space under a gymnasium.wrappers.ClipAction in ``env``'s wrappers (at any depth:
    CleanRL's make_env puts RecordEpisodeStatistics under it and NormalizeObservation over it), bounded
    on one side of an entry or more (a half-open Box([0, -inf], [inf, 2]) too), else None."""
    while isinstance(env, gym.Wrapper):
        inner = env.env
        if isinstance(env, gym.wrappers.ClipAction):
            space = getattr(inner, "action_space", None)
            if isinstance(space, gym.spaces.Box) and bounded(space).any():  # over Box(-inf, inf) a ClipAction clips nothing
                return space
        env = inner
    return None


def bounded(space: gym.spaces.Box) -> np.ndarray:
    """(2, prod(shape)) bool: whether each entry's low (row 0) and high (row 1) is a bound the policy's
    float32 samples can reach. An infinite one is none, and neither is one at or beyond float32's
    largest value: a float64 Box's "unbounded" +-finfo(float64).max, which the float32 cast of the
    bounds makes +-inf, and a float32 Box's +-finfo(float32).max, the same sentinel in float32 (as a
    bound its range's width overflows to inf: RescaleAction of it would divide by inf)."""
    limit = float(np.finfo(np.float32).max)
    sides = [np.broadcast_to(np.asarray(b, dtype=np.float64), space.shape).reshape(-1) for b in (space.low, space.high)]
    return np.stack([np.isfinite(b) & (np.abs(b) < limit) for b in sides])


class ClippedBox(gym.spaces.Box):
    """The unbounded Box a gymnasium.wrappers.ClipAction declares, remembering the Box under it
    (``inner``, bounded fully or on some sides): the action-scale note and the spaces line judge the range the env really takes.
    Otherwise a plain Box: equal to one, recorded in checkpoints as one (Box(-inf, inf))."""

    def __init__(self, declared: gym.spaces.Box, inner: gym.spaces.Box):
        super().__init__(declared.low, declared.high, declared.shape, declared.dtype)
        self.inner = inner


def proxima_action_space(space: gym.spaces.Space, env: Optional[gym.Env] = None) -> gym.spaces.Space:
    """``space``, the action space of ``env``, as Proxima holds it: a :class:`ClippedBox` where it is
    the unbounded Box of a gymnasium.wrappers.ClipAction over a Box bounded somewhere (fully or on
    one side, :func:`_clipped_space`), else ``space`` itself."""
    if isinstance(space, gym.spaces.Box) and not isinstance(space, ClippedBox) and not bounded(space).all():
        inner = _clipped_space(env)
        if inner is not None and tuple(inner.shape) == tuple(space.shape):
            return ClippedBox(space, inner)
    return space


def index_space(space: gym.spaces.Space) -> gym.spaces.Space:
    """The space the agent acts in for ``space``: MultiDiscrete([2] * prod(shape)) for a MultiBinary
    (one 2-way categorical per bit, flat as the agent's (N, K) actions), ``space`` itself otherwise."""
    if isinstance(space, gym.spaces.MultiBinary):
        return gym.spaces.MultiDiscrete(np.full(int(np.prod(space.shape)), 2, dtype=np.int64))
    return space


#: the most bits of a MultiBinary action space: one 2-way categorical each, its output layer 2 rows per bit;
#: 1,048,576 is far past any PPO task, and a checkpoint's record is held to it (a few bytes of a record
#: naming more made the loader build gigabytes before the weights were compared)
MAX_MULTIBINARY_BITS = 2**20


def check_action_space(space: gym.spaces.Space, env_id: str = "env") -> None:
    """EnvError, one line naming the space, unless the agent can act in ``space``: a Discrete, a
    MultiDiscrete, a MultiBinary or a Box (its bounds finite or not: the policy's Normal samples
    unbounded, and the clip to an infinite bound is a no-op), of one value or more (an empty one has
    no action distribution: the first update would fail inside torch)."""
    if not isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary, gym.spaces.Box)):
        raise EnvError(f"env '{env_id}': not supported yet: action space {space} (Discrete, MultiDiscrete, MultiBinary, "
                       f"Box){_composite_action_fix(space, env_id)}")
    if isinstance(space, gym.spaces.MultiBinary) and math.prod(space.shape) > MAX_MULTIBINARY_BITS:
        raise EnvError(f"env '{env_id}': action space {space} has {math.prod(space.shape):,} bits, more than the "
                       f"{MAX_MULTIBINARY_BITS:,} Proxima takes (one 2-way categorical per bit)")
    if isinstance(space, (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary, gym.spaces.Box)) and int(np.prod(space.shape)) == 0:
        raise EnvError(f"env '{env_id}': action space {space} is empty (shape {space.shape}); declare one action value "
                       "or more")


def _composite_action_fix(space: gym.spaces.Space, env_id: str) -> str:
    """'; what to do' for a Tuple or Dict action space, whose parts Proxima's one action head cannot sample
    together: Discrete parts are one MultiDiscrete (its nvec computed), Box parts one Box (flatten_space:
    their entries side by side), each with the factory that keeps the env as it is; a mix of discrete and
    continuous parts is split in the env. '' for any other space."""
    if not isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)) or not len(space.spaces):
        return ""
    parts = list(space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces)
    kind = type(space).__name__
    factory = "in a module of yours and use MODULE:{name} as the env"
    if all(isinstance(p, gym.spaces.Discrete) for p in parts):
        nvec = [int(p.n) for p in parts]
        starts = [int(p.start) for p in parts]
        multi = f"MultiDiscrete({nvec}" + (f", start={starts})" if any(starts) else ")")
        back = "tuple" if isinstance(space, gym.spaces.Tuple) else f"lambda a: dict(zip({list(space.spaces)!r}, a))"
        return (f"; a {kind} of Discrete parts is {multi} (one categorical per part): declare that and read action[i] as "
                f"part i in step(), or put def multi(**kw): return gymnasium.wrappers.TransformAction({_env_call(env_id)}, "
                f"{back}, gymnasium.spaces.{multi}) " + factory.format(name="multi"))
    if all(isinstance(p, gym.spaces.Box) for p in parts):
        flat = str(gym.spaces.flatten_space(space)).replace("\n", "")
        return (f"; its Box parts concatenate into one {flat} (gymnasium.spaces.flatten_space of it): declare that and "
                f"split the action in step(), or put def flat(**kw): env = {_env_call(env_id)}; return "
                "gymnasium.wrappers.TransformAction(env, lambda a: gymnasium.spaces.unflatten(env.action_space, a), "
                "gymnasium.spaces.flatten_space(env.action_space)) " + factory.format(name="flat"))
    entries = 0
    for p in parts:  # one Box entry per choice, the env rounding it; a Box part's entries as they are
        size = int(np.prod(p.shape)) if isinstance(p, (gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)) else 1
        entries += size if p.shape is not None else 1
    return (f"; its parts mix kinds that one policy head cannot sample together: split it in the env into one Box (each "
            "choice an entry the env rounds or thresholds) or one MultiDiscrete (each amount in steps), or put def "
            f"one_box(**kw): return gymnasium.wrappers.TransformAction({_env_call(env_id)}, to_parts, gymnasium.spaces."
            f"Box(-1.0, 1.0, ({entries},), np.float32)) in a module of yours, to_parts(a) mapping its {entries} entries "
            f"to the {kind}'s parts, and use MODULE:one_box as the env")


def obs_layout(space: gym.spaces.Space, env_id: str = "env") -> ObsLayout:
    """The layout of ``space``; EnvError naming the space (and Dict key) when it is not supported."""
    if isinstance(space, gym.spaces.Dict):
        if len(space.spaces) == 0:
            raise EnvError(f"env '{env_id}': Dict observation space has no keys")
        parts, offset = [], 0
        for key, sub in space.spaces.items():
            _check_key(key, env_id)
            _check_box(sub, key, env_id)
            size = int(np.prod(sub.shape))
            parts.append(ObsPart(key, tuple(sub.shape), image_layout(sub), offset, size, sub))
            offset += size
        all_u8 = all(sub.dtype == np.uint8 for sub in space.spaces.values())
        return ObsLayout(tuple(parts), (offset,), torch.uint8 if all_u8 else torch.float32, True)
    _check_box(space, None, env_id)
    layout = image_layout(space)
    size = int(np.prod(space.shape))
    source = space.declared if isinstance(space, FlatBox) else space  # the Box before tensor_space flattened it
    if layout is not None:
        return ObsLayout((ObsPart(None, tuple(space.shape), layout, 0, size, source),), tuple(space.shape), torch.uint8, False)
    return ObsLayout((ObsPart(None, tuple(space.shape), None, 0, size, source),), (size,), torch.float32, False)


class FlatBox(gym.spaces.Box):
    """The flat float32 Box of a vector observation (tensor_space) that remembers the Box the env
    declared (``declared``), so the agent's messages (``--encoder cnn``) name the user's (84, 84),
    not (7056,). Otherwise a plain Box: equal to one, recorded in checkpoints as one."""

    def __init__(self, declared: gym.spaces.Box, low, high, shape, dtype):
        super().__init__(low, high, shape, dtype)
        self.declared = declared


def tensor_space(space: gym.spaces.Space, layout: ObsLayout) -> gym.spaces.Space:
    """The space of one env's tensor: a flat float32 Box for vectors (bounds flattened), the image
    Box as it is, and the Dict itself (its keys packed by the layout)."""
    if layout.is_dict or layout.is_image:
        return space
    # a float64 Box's "unbounded" +-finfo(float64).max is beyond float32's range: the cast makes it
    # +-inf, which is what it means, and numpy's overflow warning would only alarm the user
    with np.errstate(over="ignore"):
        low, high = space.low.reshape(-1).astype(np.float32), space.high.reshape(-1).astype(np.float32)
    return FlatBox(space, low, high, layout.shape, np.float32)


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
    """The agent's actions for ``num`` envs as the env's action space defines them (:func:`space_actions`).

    The agent acts in index space: Discrete (num,) in 0..n-1, MultiDiscrete (num, nvec.size) in
    0..nvec-1, MultiBinary (num, prod(shape)) in 0..1, Box (num, prod(shape)) already clipped to the bounds. Here the space's ``start`` is
    added (Discrete(3, start=1) takes 1..3), then shape and dtype as :func:`space_actions` gives
    them. Policy.act returns these; Proxima's own loops add :func:`action_offset` on the device.
    """
    if isinstance(space, gym.spaces.Discrete):
        actions = actions.reshape(num) + int(space.start)
    elif isinstance(space, gym.spaces.MultiDiscrete):
        actions = actions.reshape(num, *space.nvec.shape) + np.asarray(space.start)
    return space_actions(actions, space, num)


def space_actions(actions: np.ndarray, space: gym.spaces.Space, num: int) -> np.ndarray:
    """Actions for ``num`` envs, given as ``space`` defines them (a Discrete's and MultiDiscrete's
    values with their ``start``), as each env's ``step`` takes them: a new array (never a view of
    the caller's), MultiDiscrete, MultiBinary and Box reshaped to the space's shape (a 2-D nvec, a
    MultiBinary((2, 3)), a (2, 2) Box), in the space's dtype (a MultiBinary's int8 0/1) (an integer or bool Box gets the nearest integer, not a truncation). A Box action
    is clipped to the bounds, after the cast too, in the space's dtype against the space's own
    bounds: a bound clipped in float32 and cast back to a float64 space (float32(-0.3) =
    -0.30000001) lies outside it, and an env that asserts ``action_space.contains(a)`` would refuse it.
    """
    if isinstance(space, gym.spaces.Discrete):
        return actions.reshape(num).astype(space.dtype)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return actions.reshape(num, *space.nvec.shape).astype(space.dtype)
    if isinstance(space, gym.spaces.MultiBinary):
        return actions.reshape(num, *space.shape).astype(space.dtype)
    a = actions.reshape(num, *space.shape)
    if np.issubdtype(space.dtype, np.integer) or np.dtype(space.dtype) == np.bool_:
        # a bool Box rounds as an integer Box(0, 1) does (True from 0.5): its bare cast is True for any value
        # above 0, half the policy's Gaussian around 0. Clipped in float64 before the cast: a float32 action at an int32 bound of 2**31 - 1 is 2**31,
        # which the cast would wrap to the other end of the range
        a = np.clip(np.rint(a.astype(np.float64)), space.low, space.high)
    return np.clip(a.astype(space.dtype), space.low, space.high)


def action_offset(space: gym.spaces.Space, device) -> Optional[torch.Tensor]:
    """What turns the agent's index actions into the space's values on ``device``: a Discrete's
    ``start`` (a 0-d tensor) or a MultiDiscrete's starts, flat as the agent's (nvec.size,) actions;
    None for a Box and where every start is 0 (every native env), so that those loops add nothing."""
    if isinstance(space, gym.spaces.Discrete):
        start = np.asarray(int(space.start))
    elif isinstance(space, gym.spaces.MultiDiscrete):
        start = np.asarray(space.start, dtype=np.int64).reshape(-1)
    else:
        return None
    if not start.any():
        return None
    return torch.as_tensor(start, dtype=torch.int64, device=device)


#: action_scale_note's rule: a Box entry whose range spans more than this, or less than MIN, is far
#: from the unit scale of the policy's samples
ACTION_WIDTH_MAX, ACTION_WIDTH_MIN = 100.0, 0.01


def action_scale_note(space: gym.spaces.Space, env_id: Optional[str] = None, native: bool = False) -> Optional[str]:
    """What to do about a Box action space far from the policy's scale, else None.

    The policy samples Box actions from a Normal around its mean (0 at the start) with std 1 (exp
    of a learned log-std starting at 0) and the env gets them clipped to the bounds, never rescaled
    (a rescaling would change every recorded run's results). So where 0 lies outside [low, high]
    every early action clips to the same bound, earns the same reward, and the policy gets no
    signal to move towards the range; where 0 is a bound of a float Box (Box(0, 1)), half of the
    early actions clip to that bound; where a range is much wider than 1 (> ACTION_WIDTH_MAX) or
    much narrower (< ACTION_WIDTH_MIN) the samples cover a sliver of it or clip most of the time.
    An integer Box with 0 on a bound gets the note too (Box(0, 4): the clipped half and the rounding
    make ~69% of the early actions 0); a bool Box, a switch, does not. One sentence naming every
    such entry (ACTION_NOTE_ENTRIES of each kind, then how many more), worst kind first, with the fix:
    Gymnasium's RescaleAction wrapper, spelled out as the ``module:function`` factory that applies it for
    ``env_id`` (a module:Class or registered id, which Proxima builds as it is).

    Unbounded sides (:func:`bounded`): an entry unbounded on both sides has no range to be off-scale,
    and a truly unbounded Box gets no note; one bounded on one side can still have 0 outside its range
    (Box(1, inf)) or on its bound (Box(0, inf)), whose fix is a shift (RescaleAction needs both bounds).
    A :class:`ClippedBox` (gymnasium.wrappers.ClipAction's Box(-inf, inf)) is judged by the Box under
    it, which its ClipAction clips the actions to.

    ``native``: the env is torch-native (a NativeEnv subclass), which no Gymnasium wrapper can wrap: the fix
    is then a Box(-1, 1) declared and the actions scaled (or shifted) to the range inside its _dynamics."""
    if not isinstance(space, gym.spaces.Box) or space.shape is None:
        return None
    clip = isinstance(space, ClippedBox)
    if clip:
        space = space.inner
    low = np.broadcast_to(np.asarray(space.low, dtype=np.float64), space.shape).reshape(-1)
    high = np.broadcast_to(np.asarray(space.high, dtype=np.float64), space.shape).reshape(-1)
    if low.size == 0:
        return None
    sides = bounded(space)
    both = sides.all(0)
    low, high = np.where(sides[0], low, -np.inf), np.where(sides[1], high, np.inf)  # +-finfo(float64).max: unbounded
    width = high - low
    no_zero = (low > 0) | (high < 0)
    wide = (width > ACTION_WIDTH_MAX) & ~no_zero & both
    narrow = (width < ACTION_WIDTH_MIN) & ~no_zero & both
    # a bool Box is a switch (0 and 1 are its only values); an integer Box(0, 4) rounds half its early samples
    # below 0 and a third more (|x| < 0.5) to 0: 69% of the first actions are 0, as a float Box(0, 1)'s half clip
    on_bound = ((low == 0) | (high == 0)) & (np.dtype(space.dtype).kind in "fiu") & ~(no_zero | wide | narrow)
    # one kind per entry, the worst first: a range without 0 clips every early action, not half of them
    kinds = [(no_zero, "0 lies outside {its} {ranges}, so the early actions all clip to one bound and the policy may "
                       "never learn"),
             (wide, "{its} {ranges} {are} far wider than the policy's samples (std 1 around 0), which reach only a "
                    "sliver of {it}"),
             (narrow, "{its} {ranges} {are} far narrower than the policy's samples (std 1 around 0), which mostly clip "
                      "to a bound"),
             (on_bound, "{its} {ranges} {have} 0 as a bound, and the policy's early actions are centred on 0, so half "
                        "of them clip to that bound")]
    whys = [_action_entries_why(template, np.flatnonzero(mask), low, high) for mask, template in kinds if mask.any()]
    if not whys:
        return None
    half_open = ((no_zero | on_bound) & ~both).any()
    if np.issubdtype(space.dtype, np.integer):  # RescaleAction of an integer Box keeps its dtype: only -1, 0, 1 remain
        fix = ("declare a float Box(-1, 1) and map it to the integers in the env, or use Discrete/MultiDiscrete if the "
               "values are choices")
    elif half_open:  # RescaleAction maps a finite range onto another: a range open on one side can only be shifted
        wrapper = " inside _dynamics" if native else " in the env (or in a gymnasium.wrappers.TransformAction)"
        fix = f"shift the actions{wrapper} so that 0 lies inside the range, away from its bound"
    elif native:  # a NativeEnv is no gymnasium.Env: RescaleAction cannot wrap it, its _dynamics scales
        fix = ("declare the Box as Box(-1, 1) of the same shape and scale the actions inside _dynamics: "
               "low + (action + 1) * (high - low) / 2 (a torch-native env takes no gymnasium.wrappers.RescaleAction)")
    else:
        fix = "wrap the env in gymnasium.wrappers.RescaleAction(env, np.float32(-1), np.float32(1))"
        fix += " under its gymnasium.wrappers.ClipAction" if clip else ""
        if env_id is not None and not clip:  # Proxima builds the env the id names: the wrapping takes a factory
            fix = (f"wrap it in gymnasium.wrappers.RescaleAction: put def rescaled(**kw): return gymnasium.wrappers."
                   f"RescaleAction({_env_call(env_id)}, np.float32(-1), np.float32(1)) in a module of yours and use "
                   "MODULE:rescaled as the env")
    shown = str(space).replace("\n", "")  # numpy prints a 2-D bound over several lines: a note is one
    if clip:
        return (f"action_space {shown} (under gymnasium.wrappers.ClipAction): {'; '.join(whys)}; ClipAction clips the "
                f"actions to those bounds and nothing rescales them: {fix}")
    return f"action_space {shown}: {'; '.join(whys)}; Proxima clips Box actions to the bounds but does not rescale them: {fix}"


#: how many entries of one kind action_scale_note names before "and N more": a (17,) Box stays one readable line
ACTION_NOTE_ENTRIES = 3


def _action_entries_why(template: str, idx: np.ndarray, low: np.ndarray, high: np.ndarray) -> str:
    """``template`` (action_scale_note's) filled in for the flat entries ``idx`` of a Box of ``low.size``."""
    span = lambda i: f"[{low[i]:g}, {high[i]:g}]"  # noqa: E731
    one = dict(its="its", are="is", have="has", it="it")
    if low.size == 1:
        return template.format(ranges=f"range {span(0)}", **one)
    if len(idx) == low.size and len({span(i) for i in idx}) == 1:  # a uniform Box: one range says it
        return template.format(ranges=f"range {span(idx[0])} (all {low.size} entries)", **one)
    if len(idx) == 1:
        return template.format(ranges=f"range entry {idx[0]} {span(idx[0])}", **one)
    named = [f"{i} {span(i)}" for i in idx[:ACTION_NOTE_ENTRIES]]
    listed = (f"{', '.join(named)} and {len(idx) - len(named)} more" if len(idx) > len(named)
              else f"{', '.join(named[:-1])} and {named[-1]}")
    return template.format(its="the", ranges=f"ranges of entries {listed}", are="are", have="have", it="them")


def spaces_summary(obs_space: gym.spaces.Space, act_space: gym.spaces.Space, encoder: str = "auto",
                   hidden_sizes=(64, 64), activation: str = "tanh", env_id: str = "env", native: bool = False) -> dict:
    """How Proxima reads ``obs_space`` and acts in ``act_space``, as meta.json's ``spaces`` records it
    and :func:`spaces_line` prints it: ``{"observation": "Box(4,) float32 -> 4 features", "policy":
    "MLP 64x64 tanh", "action": "Discrete(2) -> categorical over 2"}``. Read from what the agent
    builds (agent.Agent, nets): the encoder ``encoder`` resolves to (auto: the CNN for a uint8 image
    of at least 36x36), an image's (C, H, W) and its scaling by the declared range, a Dict's keys in
    the order they are packed, the lone CNN's linear heads (hidden_sizes unused there), Box actions
    clipped to the bounds and never rescaled. EnvError for spaces Proxima does not take. ``native``: the env is a
    NativeEnv, whose _dynamics gets a MultiBinary's bits flat as int64 (a Gymnasium env: in the space's dtype)."""
    from ..nets import CNN_FEATURES, _resolve_encoder, cnn_takes  # nets imports this module: imported when called

    layout = obs_layout(obs_space, env_id)
    check_action_space(act_space, env_id)
    kind = _resolve_encoder(encoder, layout)  # not resolve_encoder: a summary is no encoder built (encoders_resolved)
    net = "x".join(str(int(h)) for h in hidden_sizes)
    mlp = f"MLP {net} {activation}" if net else "linear actor and critic"
    if layout.is_dict:
        feats = sum(CNN_FEATURES if kind == "cnn" and cnn_takes(p) else p.size for p in layout.parts)
        keys = ", ".join(f"'{p.key}': {_part_reading(p, kind)}" for p in layout.parts)
        observation = f"Dict, keys packed in this order [{keys}] -> {feats} features"
        policy = mlp
    else:
        part = layout.parts[0]
        observation = _part_reading(part, kind)
        cnn = kind == "cnn" and cnn_takes(part)
        # agent.Agent: the lone CNN trunk feeds linear actor and critic heads, whatever hidden_sizes say
        policy = f"Nature CNN ({CNN_FEATURES} features), linear actor and critic heads" if cnn else mlp
    return {"observation": observation, "action": _action_reading(act_space, native), "policy": policy}


def spaces_line(summary: dict) -> str:
    """The one line of :func:`spaces_summary`: ``spaces: obs ..., POLICY; action ...``."""
    return f"spaces: obs {summary['observation']}, {summary['policy']}; action {summary['action']}"


def _box_text(box: gym.spaces.Box) -> str:
    """``Box(84, 84, 3) uint8``: the declared shape and dtype, without gymnasium's bounds."""
    shape = tuple(int(n) for n in box.shape)
    return f"Box{shape} {np.dtype(box.dtype).name}"


def _part_reading(part: ObsPart, encoder: str) -> str:
    """How the agent reads one key (or the Box): ``Box(4,) float32 -> 4 features``, ``Box(84, 84, 4)
    uint8 -> image (4, 84, 84) /255, CNN``."""
    from ..nets import cnn_image, cnn_takes, pixel_range

    box = part.source if isinstance(part.source, gym.spaces.Box) else None
    declared = _box_text(box) if box is not None else f"Box{tuple(part.shape)}"
    image = cnn_image(part)
    cnn = encoder == "cnn" and cnn_takes(part)
    if image is not None and (cnn or not image[2]):  # a float [0, 1] image is one to the CNN only
        layout, shape, unit = image
        low, high = pixel_range(part)
        scaled = "read as it is (0..1)" if unit else "/255" if (low, high) == (0.0, 255.0) else f"{low:g}..{high:g} scaled to [0, 1]"
        stack = f" (a stack of {shape[0]} frames)" if layout in STACKS else ""
        if not cnn:
            how = f", flattened to {part.size} features"
        elif part.key is not None:  # a lone image's CNN is the policy's own (spaces_summary names it)
            from ..nets import CNN_FEATURES

            how = f", CNN ({CNN_FEATURES} features)"
        else:
            how = ""
        return f"{declared} -> image {image_chw(layout, shape)}{stack} {scaled}{how}"
    flat = " flattened to" if box is not None and len(box.shape) != 1 else ""
    # a lone Box and a Dict's key alike reach the network as float32 (a Dict packs non-uint8 keys as float32)
    cast = "" if box is None or np.dtype(box.dtype) == np.float32 else ", as float32"
    return f"{declared} ->{flat} {part.size} features{cast}"


def _action_reading(space: gym.spaces.Space, native: bool = False) -> str:
    """How the policy acts in ``space``: ``Discrete(2) -> categorical over 2``, ``MultiDiscrete([3 3 2])
    -> 3 categoricals (3, 3, 2)``, ``Box(1,) [-2, 2] -> Gaussian, 1 dim, clipped to bounds``."""
    if isinstance(space, gym.spaces.Discrete):
        start = int(space.start)
        offset = f", plus start {start}" if start else ""
        return f"Discrete({int(space.n)}{f', start={start}' if start else ''}) -> categorical over {int(space.n)}{offset}"
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = tuple(int(n) for n in np.asarray(space.nvec).reshape(-1))
        starts = np.asarray(space.start).reshape(-1)
        offset = f", plus starts {tuple(int(s) for s in starts)}" if starts.any() else ""
        return (f"MultiDiscrete{tuple(int(n) for n in space.nvec.shape)} -> {len(nvec)} categoricals "
                f"{nvec}{offset}")
    if isinstance(space, gym.spaces.MultiBinary):  # index_space: one 2-way categorical per bit
        size = math.prod(int(n) for n in space.shape)
        return (f"MultiBinary{tuple(int(n) for n in space.shape)} -> {size} categorical{'s' if size != 1 else ''} "
                f"over 0/1, as {'int64' if native else np.dtype(space.dtype).name}")
    sides = bounded(space)
    low = np.broadcast_to(np.asarray(space.low, dtype=np.float64), space.shape).reshape(-1)
    high = np.broadcast_to(np.asarray(space.high, dtype=np.float64), space.shape).reshape(-1)
    low, high = np.where(sides[0], low, -np.inf), np.where(sides[1], high, np.inf)  # +-finfo.max read as unbounded
    spans = [f"[{a:g}, {b:g}]" for a, b in zip(low, high)]
    if len(set(spans)) == 1:
        bounds = spans[0]
    else:
        bounds = " ".join(spans[:ACTION_NOTE_ENTRIES]) + (f" and {len(spans) - ACTION_NOTE_ENTRIES} more"
                                                          if len(spans) > ACTION_NOTE_ENTRIES else "")
    dims = f"{low.size} dim" + ("s" if low.size != 1 else "") + (" (flattened)" if len(space.shape) > 1 else "")
    rounded = " rounded and" if np.dtype(space.dtype).kind in "iub" else ""
    # space_actions: clipped to the env's bounds, never rescaled (action_scale_note says why that matters)
    if isinstance(space, ClippedBox):
        inner = _action_reading(space.inner).rpartition(" -> ")[0][len(_box_text(space.inner)) + 1:]  # its bounds
        return f"{_box_text(space)} {bounds} -> Gaussian, {dims}, unclipped (gymnasium.wrappers.ClipAction clips to {inner})"
    if not sides.any():  # the clip is a no-op on every side: the env gets the sample as it is
        return f"{_box_text(space)} {bounds} -> Gaussian, {dims},{rounded} unbounded"
    partly = "" if sides.all() else " where bounded"
    return f"{_box_text(space)} {bounds} -> Gaussian, {dims},{rounded} clipped to bounds{partly}"
