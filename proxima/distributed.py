"""torch.distributed wiring: process-group init/teardown, rank-aware logging, metric reduction.

Single-process runs get a context with world_size 1 whose methods are no-ops, so the trainer has
one code path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, module: torch.nn.Module) -> torch.nn.Module:
        """The module the update runs through (DDP averages gradients when world_size > 1)."""
        if self.world_size == 1:
            return module
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DDP(module, device_ids=ids)

    def reduce_metrics(self, metrics: dict) -> dict:
        """Tensors -> Python floats, once per iteration (the loop's one host read of metrics).

        Across ranks: episode sums/counts are summed, nonfinite is or-ed, the rest averaged.
        """
        names = list(metrics)
        vec = torch.stack([metrics[k].detach().float().reshape(()) for k in names])
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(vec, op=dist.ReduceOp.SUM)
            summed = {"ep_return_sum", "ep_length_sum", "ep_count", "nonfinite"}
            scale = torch.tensor([1.0 if k in summed else 1.0 / self.world_size for k in names], device=vec.device)
            vec = vec * scale
        values = vec.tolist()
        out = dict(zip(names, values))
        if "nonfinite" in out:
            out["nonfinite"] = bool(out["nonfinite"])
        return out


_CONTEXT: DistContext | None = None


def context() -> DistContext:
    """The current process's context; initializes the process group under torchrun."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = init() if "RANK" in os.environ and "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1 else DistContext()
    return _CONTEXT


def init() -> DistContext:
    import datetime

    import torch.distributed as dist

    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
        device, backend = torch.device("cuda", local), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    timeout = datetime.timedelta(seconds=float(os.environ.get("PROXIMA_DIST_TIMEOUT", "300")))
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=timeout)
    return DistContext(rank, world, local, device)


def shutdown() -> None:
    global _CONTEXT
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _CONTEXT = None
