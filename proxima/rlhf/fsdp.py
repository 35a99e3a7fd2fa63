"""Sharded training with FSDP2 (``torch.distributed.fsdp.fully_shard``) under torchrun.

With ``--fsdp`` each of N processes holds 1/N of the policy's, the value model's and the frozen
reference's parameters, of their gradients and of Adam's state: every transformer block (the classes
a Hugging Face model lists in ``_no_split_modules``) and then the whole model are sharded, and a
block's parameters are gathered only while it runs. Gradients are reduce-scattered in the backward
(averaged over processes), so the plain gradient all-reduce of data parallelism is skipped.

Every process loads its models whole on the host; only its own shards are copied to its device
(``take_weights``, ``shard``, ``place_shards``), so a GPU never holds an unsharded model.

Every process must run the same sequence of forwards: generation goes on until every process's
responses have ended (see ``generate(..., all_done=...)``). Checkpoints hold full (unsharded) state
dicts gathered on rank 0, so a sharded run resumes sharded, and its ``policy/`` loads anywhere.
"""

from __future__ import annotations

import torch
from torch import nn

from .config import ConfigError


def _blocks(blocks_of: nn.Module) -> list:
    names = set(getattr(blocks_of, "_no_split_modules", None) or ())
    blocks = [m for m in blocks_of.modules() if type(m).__name__ in names]
    if not blocks:
        raise ConfigError(f"--fsdp: {type(blocks_of).__name__} names no transformer block class (_no_split_modules)")
    return blocks


def check_blocks(models: list) -> None:
    """ConfigError unless every Hugging Face model of ``models`` names its transformer block classes."""
    for m in models:
        _blocks(m)


def mesh(device: torch.device, world_size: int):
    """The 1-D device mesh of every process, on ``device``'s type (the shards' device)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (world_size,))


def shard(model: nn.Module, blocks_of: nn.Module, device_mesh=None) -> nn.Module:
    """fully_shard every transformer block of ``blocks_of`` (a Hugging Face model), then ``model`` itself."""
    from torch.distributed.fsdp import fully_shard

    for block in _blocks(blocks_of):
        fully_shard(block, mesh=device_mesh)
    fully_shard(model, mesh=device_mesh)
    return model


def share(copies: int, processes: int) -> int:
    """Whole model-size copies one of ``processes`` processes holds of ``copies`` sharded copies (at least 1)."""
    return max(1, -(-copies // processes))


def take_weights(model: nn.Module) -> dict:
    """Every parameter and buffer of ``model`` under each name it has (a tied weight under both), as tensors
    that keep its data on the host. ``model`` becomes a skeleton on the meta device whose tied weights stay
    tied (``model.to("meta")`` unties them); shard() and place_shards() turn it into this process's shards
    on the device, so the device never holds one of its weights whole."""
    entries = []
    for prefix, module in model.named_modules(remove_duplicate=False):
        for kind in ("_parameters", "_buffers"):
            for name, tensor in getattr(module, kind).items():
                if tensor is not None:
                    entries.append((module, kind, name, f"{prefix}.{name}" if prefix else name, tensor))
    held = {full: tensor.detach() for _, _, _, full, tensor in entries}
    skeletons: dict = {}
    for module, kind, name, _, tensor in entries:
        if id(tensor) not in skeletons:
            empty = torch.empty_like(tensor, device="meta")
            if kind == "_parameters":
                empty = nn.Parameter(empty, requires_grad=tensor.requires_grad)
            skeletons[id(tensor)] = empty
        getattr(module, kind)[name] = skeletons[id(tensor)]
    return held


def place_shards(model: nn.Module, held: dict, device: torch.device) -> None:
    """Give the sharded skeleton ``model`` storage on ``device`` and fill it from ``held`` (take_weights):
    each parameter with this process's slice of the host's weight only, each buffer whole."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    model.to_empty(device=device)
    with torch.no_grad():
        for name, p in model.named_parameters():
            full = held[name]
            if isinstance(p, DTensor):
                shape, offset = compute_local_shape_and_global_offset(full.shape, p.device_mesh, p.placements)
                p.to_local().copy_(full[tuple(slice(o, o + n) for o, n in zip(offset, shape))])
            else:
                p.copy_(full)
        for name, b in model.named_buffers():
            b.copy_(held[name])


def is_sharded(model: nn.Module) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def local_numel(models: list) -> int:
    """Parameter elements this process holds (its shards under FSDP)."""
    total = 0
    for m in models:
        for p in m.parameters():
            total += p.to_local().numel() if hasattr(p, "to_local") else p.numel()
    return total


def full_numel(models: list) -> int:
    return sum(p.numel() for m in models for p in m.parameters())


_FULL = dict(full_state_dict=True, cpu_offload=True)


def full_model_state(model: nn.Module) -> dict:
    """The trainable parameters, unsharded, on the CPU of rank 0 (collective: every process calls it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    names = {n for n, p in model.named_parameters() if p.requires_grad}
    state = get_model_state_dict(model, options=StateDictOptions(**_FULL))
    return {k: v for k, v in state.items() if k in names}


def load_full_model_state(model: nn.Module, state: dict) -> None:
    """Shard a full state dict (every process holds it) into the sharded model."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=False))


def full_optimizer_state(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(model, opt, options=StateDictOptions(**_FULL))


def load_full_optimizer_state(model: nn.Module, opt: torch.optim.Optimizer, state: dict) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, opt, state, options=StateDictOptions(full_state_dict=True))


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """A DTensor (a sharded parameter, or clip_grad_norm_'s total norm) as a plain tensor; collective."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t
