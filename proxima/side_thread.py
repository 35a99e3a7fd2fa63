"""A second CPU thread for the critic: actor and critic computed side by side (``--threads 2``).

Why: on the CPU the two MLPs of a discrete-action agent are the iteration's work (86% of an update
at 4,096 CartPole envs, a one-off timing on the EPYC), they are the same size and independent until the loss joins them, and
torch's ops release the GIL while they run. A second intra-op thread splits every op instead, each
row block's matmul, bias add and tanh (10-400 us each), and pays OpenMP's fork and join on
every one: 0.85-1.2x of one thread at 4,096 envs on the 2-core EPYC (docs/performance.md). Here the
critic's forward and backward run on one persistent worker thread while the caller computes the
actor's; they meet twice a minibatch (before the loss, after the backward) and once per acting
step. Each thread keeps its own intra-op threads (``threads // 2``); with ``--threads 2`` both have
one, and every op computes what it computes on one thread, so a run is bit-identical to
``--threads 1`` (tests/unit/test_side_thread.py). Measured on the 2-core EPYC, whole processes
alternating: 1.34x (1.09-1.41) the training steps/s of ``--threads 1`` at 4,096 CartPole envs,
1.35x (1.02-1.42) at 1,024 (benchmarks/threads.py, benchmarks/results/threads-cpu.md;
docs/performance.md, "Two threads").

Used by the Trainer only where it pays and is exact: the CPU, a plain (not DistributedDataParallel)
``Agent`` that ``grad_cpu.BlockGradients`` covers (flat observation, Discrete action, MLPs), no
``--compile`` or ``--amp``, and ``threads`` >= 2 (``Trainer`` decides: ``pairs``). Elsewhere
``threads`` stays torch's intra-op thread count, as before.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import torch

#: the fewest rows (envs acting, minibatch rows) worth a hand-off to the other thread: waking it
#: costs tens of microseconds, more than a small batch's critic (docs/performance.md)
MIN_ROWS = 2048


class SideThread:
    """One worker thread that runs ``submit``'s callables in order, in the caller's grad mode.

    ``submit(fn, *args)`` returns a Future: ``.result()`` waits and re-raises what ``fn`` raised.
    ``intra_op``: torch's intra-op threads in the worker (OpenMP's count is per thread, so a
    worker started with the library's default would run its ops on every core).
    ``flush_denormal``: the caller's ``torch.set_flush_denormal`` (the x86 FTZ/DAZ bits live in each
    thread's MXCSR register: a worker without them computes other numbers, slower). ``close()`` ends
    the thread (idempotent); a closed SideThread refuses work with RuntimeError.
    """

    def __init__(self, intra_op: int = 1, flush_denormal: bool = False):
        self.intra_op, self.flush_denormal = int(intra_op), bool(flush_denormal)
        self.jobs = 0  #: callables submitted so far
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="proxima-critic", initializer=self._start)

    def _start(self) -> None:
        torch.set_num_threads(self.intra_op)
        torch.set_flush_denormal(self.flush_denormal)

    def submit(self, fn: Callable, *args) -> Future:
        # grad mode is thread-local: the worker would otherwise record graphs the caller turned off
        self.jobs += 1
        return self._pool.submit(_in_grad_mode, torch.is_grad_enabled(), fn, args)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _in_grad_mode(enabled: bool, fn: Callable, args: tuple):
    with torch.set_grad_enabled(enabled):
        return fn(*args)


def pairs(cfg, device: torch.device, model) -> bool:
    """Whether the Trainer computes ``model``'s actor and critic side by side (module docstring):
    ``cfg.threads`` >= 2 on the CPU, no ``--compile`` or ``--amp``, and a model that
    ``grad_cpu.BlockGradients`` covers (a plain discrete-action MLP ``Agent``, not DDP-wrapped)."""
    from .grad_cpu import BlockGradients

    if cfg.threads < 2 or device.type != "cpu" or cfg.compile or cfg.amp != "none":
        return False
    return BlockGradients.for_agent(model, cfg) is not None


def paired_policy_step(agent, side: SideThread) -> Callable:
    """``agent.policy_step`` with the critic's value on ``side`` while the caller samples the action:
    obs (N, F) -> action, logprob (N,), value (N,); the same ops, so the same numbers."""

    def policy_step(obs: torch.Tensor, generators=None):
        if obs.shape[0] < MIN_ROWS:
            return agent.policy_step(obs, generators)
        value = side.submit(agent.get_value, obs)
        action, logprob, _ = agent.policy(agent.features(obs), generators=generators)
        return action, logprob, value.result()

    return policy_step
