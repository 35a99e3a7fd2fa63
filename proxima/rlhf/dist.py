"""Data parallelism under torchrun: every process generates from its own prompts, gradients are averaged.

Plain all-reduces of the gradients rather than DistributedDataParallel: the policy and value model
have separate optimizers, micro-batches accumulate before one reduce per minibatch, and LoRA freezes
most parameters; averaging the gradients of the trainable parameters covers all three.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as tdist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device_type: str) -> Dist:
    """Join the torchrun process group when WORLD_SIZE > 1 (gloo on CPU; nccl on CUDA, or gloo with a
    note in a torch build without NCCL, as the PPO trainer does)."""
    from ..distributed import cuda_backend, is_torchrun_rank

    if not is_torchrun_rank():  # the same test as the entry points' exit_process
        return Dist()
    if not tdist.is_initialized():
        rank = int(os.environ.get("RANK", "0"))
        tdist.init_process_group(backend=cuda_backend("nccl", rank) if device_type == "cuda" else "gloo")
    return Dist(tdist.get_rank(), tdist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def shutdown(d: Dist, clean: bool = True) -> None:
    """Leave the process group. ``clean``: every rank got here at the same point, after its last
    collective (see proxima.distributed.leave_process_group); False on the way out of an error, where
    a barrier could wait for a rank that is still in another collective."""
    if not d.enabled:
        return
    if clean:
        from ..distributed import leave_process_group

        leave_process_group()
    elif tdist.is_initialized():
        tdist.destroy_process_group()


def broadcast_parameters(module: torch.nn.Module, d: Dist) -> None:
    """Start every process from rank 0's weights (same seed gives the same init; this makes it certain)."""
    if d.enabled:
        for p in module.parameters():
            tdist.broadcast(p.data, src=0)


def average_gradients(params: list, d: Dist) -> None:
    """One all-reduce of all gradients, flattened into a single buffer, divided by the process count."""
    if not d.enabled:
        return
    for p in params:
        if p.grad is None:  # every process must send the same buffer layout
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params]
    flat = _flatten_dense_tensors(grads)
    tdist.all_reduce(flat)
    flat /= d.world_size
    for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
        g.copy_(synced)


def mean_across(values: torch.Tensor, d: Dist) -> torch.Tensor:
    """Mean of a tensor over processes (metrics, the KL that drives the adaptive coefficient)."""
    if d.enabled:
        values = values.clone()
        tdist.all_reduce(values)
        values /= d.world_size
    return values


def any_across(flag: bool, d: Dist, device: torch.device) -> bool:
    """True on every process when it is True on any (a stop signal seen by one process stops all)."""
    if not d.enabled:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
    return bool(t.item() > 0)


def all_across(flag: bool, d: Dist, device: torch.device) -> bool:
    """True on every process when it is True on all of them."""
    return not any_across(not flag, d, device)


def gather_objects(obj, d: Dist) -> list:
    if not d.enabled:
        return [obj]
    out = [None] * d.world_size
    tdist.all_gather_object(out, obj)
    return out


def broadcast_object(obj, d: Dist):
    if not d.enabled:
        return obj
    box = [obj]
    tdist.broadcast_object_list(box, src=0)
    return box[0]
