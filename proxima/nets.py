"""Network building blocks of the agent: orthogonal init, MLPs, and the observation encoders.

Encoders turn a batch of observations (B, *obs_shape) as the env's tensors hold them
(envs/spaces.py) into (B, F) float features: the Nature CNN (Mnih et al. 2015; CleanRL's
``ppo_atari`` trunk) for images, a flatten for vectors, one of those per key for a Dict (the CNN
for the image keys of at least 36x36, a flatten for the smaller ones). Pixels arrive as uint8 and
are scaled to [0, 1] here, on the device, so buffers can keep them as uint8: by the range their Box
declares (:func:`pixel_range`: 0..255 divided by 255, a 0/1 board kept as it is). A frame stack
(N, H, W, C) or (N, C, H, W) reaches the CNN as N * C channels, frame after frame. Under
``--encoder cnn`` a single float Box declared exactly (0, 1) of an image's shape, which the env's
tensors hold flat as float32, is reshaped into its image and read as it is (:func:`cnn_image`).
"""

from __future__ import annotations

import math
from typing import Optional

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from . import mlp_cpu, tanh_cpu
from .config import ConfigError
from .envs.spaces import STACKS, ObsLayout, ObsPart, image_chw, image_note, unit_image_layout
from .sightings import Sightings

#: Nature CNN (Mnih et al. 2015): conv 8x8/4, 4x4/2, 3x3/1; the smallest image it takes
CNN_MIN_SIZE = 36
CNN_FEATURES = 512
ENCODERS = ("auto", "cnn", "mlp")


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """Orthogonal weights with gain ``std``, constant bias (detail 2)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


class MLP(nn.Sequential):
    """Linear, activation, ..., Linear (an ``nn.Sequential``: parameter names ``0.weight``, ``2.weight``,
    ...). On the CPU a float32 (B, in) batch of more than one block (``kernel_rows``, 4,096 rows
    for 64-wide layers) runs through mlp_cpu's row-block kernel (autograd's ops but a W h^T last layer, cache-sized
    blocks, activations in place); every other input (fewer rows, CUDA, autocast, compile, vmap, a
    population's StackedLinear layers) through the plain modules. Under autocast (``--amp``) the last
    layer runs in float32, so the output is float32."""

    def __init__(self, *layers: nn.Module):
        super().__init__(*layers)
        #: batches of at most this many rows (one block) run the plain modules: the kernel's gain is
        #: keeping the blocks of a larger batch in the cache; for one block it would issue the same
        #: ops from Python, 30-250 us more per call
        self.kernel_rows = mlp_cpu.block_rows([m.out_features for m in self if isinstance(m, nn.Linear)] or [1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the compiler check first: torch.compile (and a CUDA graph) see only the plain modules;
        # then the cheap checks, so acting in a few envs or a preset's minibatch leaves at once
        if (not torch.compiler.is_compiling() and x.dim() == 2 and x.shape[0] > self.kernel_rows
                and x.device.type == "cpu"):
            plan = mlp_cpu.plan(self)
            if plan is not None and mlp_cpu.eligible(x, plan[0]):
                return mlp_cpu.mlp_forward(x, *plan)
        if torch.is_autocast_enabled(x.device.type):
            # --amp: the hidden layers in low precision, the last layer in float32. Its outputs are the
            # heads' logits, means and values: in bfloat16 the Gumbel noise and its arg-reduction
            # would sample from a distribution off the softmax the log-prob claims (ties to index 0),
            # and a value near -600 would round to a step of 4, a whole reward, in every GAE delta
            *body, last = self
            for module in body:
                x = module(x)
            with torch.autocast(x.device.type, enabled=False):
                return last(x.float())
        return super().forward(x)


def mlp(in_dim: int, hidden: list, out_dim: int, out_std: float, activation: str = "tanh") -> MLP:
    act = {"tanh": tanh_cpu.Tanh, "relu": nn.ReLU}[activation]
    layers, d = [], in_dim
    for h in hidden:
        layers += [layer_init(nn.Linear(d, h)), act()]
        d = h
    layers.append(layer_init(nn.Linear(d, out_dim), std=out_std))
    return MLP(*layers)


#: the (encoder, layout) of each resolve_encoder call, for encoders_resolved()
_RESOLVED = Sightings()


def encoders_resolved():
    """(encoder, layout) of each :func:`resolve_encoder` call inside the ``with``, in order: ``train
    --dry-run`` prints the encoder the run would record for auto (the Trainer writes the resolved
    one into config.yaml) and the run's note on pixels read as a vector from the one env its checks
    build (run_setup.preflight, which returns neither), rather than build the user's env twice."""
    return _RESOLVED.watch()


def resolve_encoder(encoder: str, layout: ObsLayout) -> str:
    """'cnn' or 'mlp' for ``--encoder``. Under cnn each image key of at least the CNN's 36x36
    (:func:`cnn_takes`) gets the Nature CNN and every other key is flattened; under mlp every key is
    flattened. auto: cnn when the observation holds an image the CNN takes, else mlp. ConfigError
    when cnn is asked of a space without an image or whose images are all smaller than the CNN takes."""
    kind = _resolve_encoder(encoder, layout)
    _RESOLVED.report((kind, layout))
    return kind


def _resolve_encoder(encoder: str, layout: ObsLayout) -> str:
    """resolve_encoder's choice, before encoders_resolved() is told of it."""
    if encoder not in ENCODERS:
        raise ConfigError(f"--encoder {encoder!r}: must be one of {', '.join(ENCODERS)}")
    if encoder == "auto":
        # uint8 images only: a float image in [0, 1] keeps the MLP it always had (--encoder cnn takes it),
        # so a float observation that merely has an image's shape and bounds is not read as one unasked
        return "cnn" if any(p.layout is not None and cnn_takes(p) for p in layout.parts) else "mlp"
    if encoder == "cnn":
        from .signals import from_python

        # train(PPOConfig(encoder='cnn')): the field the script set, not a flag it did not type
        cnn, mlp = ("encoder='cnn'", "encoder='mlp'") if from_python() else ("--encoder cnn", "--encoder mlp")
        images = [p for p in layout.parts if cnn_image(p) is not None]
        if not images:
            # the shapes the env declares (a flat Box reaches the agent flattened: (84, 84) as (7056,)),
            # and spaces.image_note's fix for a key that holds pixels Proxima does not read as an image (a Dict's
            # float image key: only uint8, since --encoder cnn reads no float key of a Dict, cnn_image)
            shapes = [tuple(p.source.shape if p.source is not None else p.shape) for p in layout.parts]
            fixes = [(f"at key '{p.key}': " if p.key is not None else "") + note[1] for p in layout.parts
                     if (note := image_note(p.source, "obs" if p.key is None else f"obs[{p.key!r}]", single=not layout.is_dict))]
            raise ConfigError(f"{cnn} needs an image observation (uint8 Box (H, W, C) or (C, H, W)); this env's "
                              f"observation has shape {shapes[0] if not layout.is_dict else shapes}; "
                              + "".join(f"{fix}; " for fix in fixes) + ("or " if fixes else "") + f"use {mlp}")
        if not any(cnn_takes(p) for p in images):  # a Dict's smaller images are flattened beside the CNN's
            hw = ["x".join(map(str, _image_hw(p))) for p in images]
            minimum = f"smaller than the Nature CNN's {CNN_MIN_SIZE}x{CNN_MIN_SIZE} minimum"
            if len(images) == 1:
                where = f" at key '{images[0].key}'" if images[0].key is not None else ""
                what = f"image{where} is {hw[0]}, {minimum}"
            else:
                what = f"every image is {minimum} (" + ", ".join(f"at key '{p.key}' {s}" for p, s in zip(images, hw)) + ")"
            raise ConfigError(f"{cnn}: {what}; use {mlp} or larger frames")
    return encoder


def cnn_image(part: ObsPart) -> Optional[tuple]:
    """(layout, shape, unit) of the image the CNN would read in ``part``, else None: a uint8 image or
    frame stack as the layout has it (``unit`` False: scaled by its declared range), or a single float
    Box declared exactly (0, 1) of an image's shape (spaces.unit_image_layout; ``unit`` True: already
    in [0, 1], read as it is), which reaches the agent flat. A Dict's float keys stay vectors: a
    checkpoint whose float key was flattened beside a CNN would otherwise no longer load."""
    if part.layout is not None:
        return part.layout, tuple(part.shape), False
    if part.key is None and part.source is not None:
        unit = unit_image_layout(part.source)
        if unit is not None:
            return unit, tuple(part.source.shape), True
    return None


def cnn_takes(part: ObsPart) -> bool:
    """Whether the Nature CNN reads ``part`` under ``--encoder cnn``: an image (:func:`cnn_image`) of at
    least CNN_MIN_SIZE x CNN_MIN_SIZE (a smaller image key of a Dict is flattened beside it)."""
    return cnn_image(part) is not None and min(_image_hw(part)) >= CNN_MIN_SIZE


def cnn_chw(part: ObsPart) -> tuple:
    """(C, H, W) of the CNN's input for the image ``part``: a frame stack's N frames of C channels are N * C
    channels (sizing's estimate of the CNN reads the same)."""
    layout, shape, _ = cnn_image(part)
    return image_chw(layout, shape)


def _image_hw(part: ObsPart) -> tuple:
    return cnn_chw(part)[1:]


#: the range most images declare, Box(0, 255, ..., np.uint8): scaled by 1/255 with no record in the
#: weights, as before pixels were scaled by their declared range
PIXELS_0_255 = (0.0, 255.0)


def pixel_range(part: ObsPart) -> tuple:
    """(low, high) of the pixels of the image ``part``, which the network maps to [0, 1]: its Box's
    declared bounds (the smallest low, the largest high, so every value lands in [0, 1]); 0..255
    when the part carries no Box. A 0/1 board (Box(0, 1, ..., np.uint8)) is read as 0 and 1, not
    as 0 and 1/255."""
    box = part.source
    if not isinstance(box, gym.spaces.Box):
        return PIXELS_0_255
    if part.layout is None and unit_image_layout(box) is not None:  # a float image in [0, 1]: as it is
        return 0.0, 1.0
    low, high = float(np.min(box.low)), float(np.max(box.high))
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:  # a constant image: shifted to 0
        return (low, low + 1.0) if math.isfinite(low) else PIXELS_0_255
    return low, high


def image_readings(layout: ObsLayout, encoder: Optional[str] = None) -> list:
    """One line per image key of ``layout`` saying how the agent reads it ("observation: image (3, 64, 64)
    channels-first, 0..255 scaled to [0, 1], CNN encoder"): train --dry-run's and check-env's, since
    nothing else shows the layout, the scaling or the encoder an image gets. ``encoder``: the one
    resolved (cnn, mlp), "auto" for the one --encoder auto would choose (check-env: no run's flags),
    None to leave it unsaid. Empty for an observation without an image."""
    said = encoder
    if encoder == "auto":
        encoder = _resolve_encoder("auto", layout)
    lines = []
    for part in layout.parts:
        image = cnn_image(part)
        if image is None or (image[2] and encoder != "cnn"):  # a float image is one to the CNN only
            continue
        kind, shape, unit = image
        low, high = pixel_range(part)
        where = "" if part.key is None else f"[{part.key!r}]"
        order = "channels-first" if kind in ("chw", "nchw") else "channels-last"
        if kind in STACKS:
            order = f"a stack of {shape[0]} {order} frames ({image_chw(kind, shape)[0]} channels)"
        scaled = "float 0..1 read as it is" if unit else f"{low:g}..{high:g} scaled to [0, 1]"
        if encoder is None:
            how = ""
        elif encoder == "cnn" and cnn_takes(part):
            how = ", CNN encoder"
        elif encoder == "cnn":
            how = f", flattened (smaller than the CNN's {CNN_MIN_SIZE}x{CNN_MIN_SIZE})"
        else:
            how = ", flattened into the MLP"
        if said == "auto" and how:
            how += " under --encoder auto"
        lines.append(f"observation{where}: image {shape} {order}, {scaled}{how}")
    return lines


class _Scaled(nn.Module):
    """Pixels to [0, 1] by their declared range (:func:`pixel_range`): x / 255 for 0..255, the
    common case, exactly as before the range was read; (x - low) / (high - low) for any other
    range, which is then recorded in the weights as the buffer ``pixel_range``, so a checkpoint
    written when every image was divided by 255 does not load silently into a network that scales
    its inputs differently: it lacks the buffer and fails with one line naming it."""

    def _set_range(self, part: ObsPart) -> None:
        low, high = pixel_range(part)
        self.low, self.scale = low, 1.0 / (high - low)
        if (low, high) != PIXELS_0_255:
            self.register_buffer("pixel_range", torch.tensor([low, high], dtype=torch.float32))

    def _scaled(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if self.low != 0.0:
            x = x - self.low
        # a float image in [0, 1] (and a 0/1 board) is scaled by 1: left as it is, bit for bit
        return x * self.scale if self.scale != 1.0 else x


class PixelInput(_Scaled):
    """(B, *image_shape) pixels (uint8, or float in a packed Dict; a float image in [0, 1] flat as
    (B, H * W * C)) -> (B, C, H, W) float in [0, 1], scaled once by the declared range (0..255: / 255).
    A frame stack's N frames become N * C channels, frame after frame, each frame's channels together
    (the order of Gymnasium's FrameStackObservation, oldest first)."""

    def __init__(self, part: ObsPart):
        super().__init__()
        self.layout, self.shape, _ = cnn_image(part)
        self.chw = image_chw(self.layout, self.shape)
        self._set_range(part)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        x = x.reshape(b, *self.shape)  # a view: the image's own shape (a flat float image's too)
        if self.layout == "hwc":
            x = x.permute(0, 3, 1, 2)
        elif self.layout == "nhwc":  # (B, N, H, W, C) -> (B, N, C, H, W): each frame's channels together
            x = x.permute(0, 1, 4, 2, 3)
        if self.layout in STACKS:  # uint8 still: the copy the merge makes is a quarter of a float one
            x = x.reshape(b, *self.chw)
        return self._scaled(x)


class NatureCNN(nn.Module):
    """The DQN / CleanRL Atari trunk: (B, *image_shape) pixels -> (B, 512) ReLU features."""

    def __init__(self, part: ObsPart):
        super().__init__()
        channels, h, w = cnn_chw(part)
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


class FlatInput(_Scaled):
    """(B, *shape) -> (B, prod(shape)) float32; pixels (an image read by an MLP) scaled to [0, 1] by
    their declared range (0..255: / 255), any other key as it is."""

    def __init__(self, part: ObsPart):
        super().__init__()
        self.pixels = part.layout is not None
        self.low, self.scale = 0.0, 1.0
        if self.pixels:
            self._set_range(part)
        if part.layout in STACKS:
            # before frame stacks were images, an MLP read them as a vector, unscaled: its checkpoint lacks this
            # record (and loads with one line, checkpoint.check_weight_shapes) rather than act on inputs / 255
            self.register_buffer("frame_stack", torch.tensor(part.shape, dtype=torch.float32))
        self.out_dim = part.size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1).float()
        return self._scaled(x) if self.pixels else x


class DictEncoder(nn.Module):
    """Packed (B, D) Dict observations -> each key's encoder on its slice, concatenated (B, F): under
    ``encoder`` cnn the Nature CNN for each image key it takes (:func:`cnn_takes`, 36x36 and up), a
    flatten for the others (vectors, smaller images); under mlp a flatten for every key."""

    def __init__(self, layout: ObsLayout, encoder: str):
        super().__init__()
        self.parts = layout.parts
        self.encoders = nn.ModuleDict({
            p.key: NatureCNN(p) if (encoder == "cnn" and cnn_takes(p)) else FlatInput(p) for p in layout.parts})
        self.out_dim = sum(e.out_dim for e in self.encoders.values())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        feats = [self.encoders[p.key](x[:, p.offset:p.offset + p.size].reshape(b, *p.shape)) for p in self.parts]
        return torch.cat(feats, dim=-1)




# ---------------------------------------------------------------------------------------------
# populations: P members' MLPs as batched matmuls
# ---------------------------------------------------------------------------------------------
class StackedLinear(nn.Module):
    """P independent ``nn.Linear`` layers as one: weight (P, out, in), bias (P, out); x (P, B, in) ->
    (P, B, out) by one batched matmul (``baddbmm``). The parameter names are nn.Linear's, so member
    p's slice ``weight[p]`` loads into a plain Linear."""

    def __init__(self, layers: list):
        super().__init__()
        self.weight = nn.Parameter(torch.stack([l.weight.detach() for l in layers]).clone())
        self.bias = nn.Parameter(torch.stack([l.bias.detach() for l in layers]).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias.unsqueeze(1), x, self.weight.transpose(1, 2))


def stack_mlp_agents(agents: list) -> nn.Module:
    """P agents of one shape whose networks are MLPs (no encoder) -> one agent of the same class
    whose every Linear is a StackedLinear and every other parameter is stacked on a new leading
    axis: its methods take (P, B, ...) inputs and return (P, B, ...) outputs, member p computing
    exactly what agents[p] computes (up to the rounding of batched matmuls)."""
    import copy

    stacked = copy.deepcopy(agents[0])
    linears = [dict((n, m) for n, m in a.named_modules() if isinstance(m, nn.Linear)) for a in agents]
    for name in linears[0]:
        parent, _, leaf = name.rpartition(".")
        setattr(stacked.get_submodule(parent) if parent else stacked, leaf, StackedLinear([lin[name] for lin in linears]))
    for name, _ in list(stacked.named_parameters()):  # the rest, e.g. actor_logstd (1, A) -> (P, 1, A)
        parent, _, leaf = name.rpartition(".")
        owner = stacked.get_submodule(parent) if parent else stacked
        if not isinstance(owner, StackedLinear):
            setattr(owner, leaf, nn.Parameter(torch.stack([a.get_parameter(name).detach() for a in agents]).clone()))
    return stacked
