"""Sharded training with FSDP2 (``torch.distributed.fsdp.fully_shard``) under torchrun.

With ``--fsdp`` each of N processes holds 1/N of the policy's, the value model's and the frozen
reference's parameters, of their gradients and of Adam's state: every transformer block (the classes
a Hugging Face model lists in ``_no_split_modules``) and then the whole model are sharded, and a
block's parameters are gathered only while it runs. Gradients are reduce-scattered in the backward
(averaged over processes), so the plain gradient all-reduce of data parallelism is skipped.

Every process must run the same sequence of forwards: generation goes on until every process's
responses have ended (see ``generate(..., all_done=...)``). Checkpoints hold full (unsharded) state
dicts gathered on rank 0, so a sharded run resumes sharded, and its ``policy/`` loads anywhere.
"""

from __future__ import annotations

import torch
from torch import nn

from .config import ConfigError


def shard(model: nn.Module, blocks_of: nn.Module) -> nn.Module:
    """fully_shard every transformer block of ``blocks_of`` (a Hugging Face model), then ``model`` itself."""
    from torch.distributed.fsdp import fully_shard

    names = set(getattr(blocks_of, "_no_split_modules", None) or ())
    blocks = [m for m in blocks_of.modules() if type(m).__name__ in names]
    if not blocks:
        raise ConfigError(f"--fsdp: {type(blocks_of).__name__} names no transformer block class (_no_split_modules)")
    for block in blocks:
        fully_shard(block)
    fully_shard(model)
    return model


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
