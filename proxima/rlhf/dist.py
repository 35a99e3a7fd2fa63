"""Data parallelism under torchrun: every process generates from its own prompts, gradients are averaged.

Plain all-reduces of the gradients rather than DistributedDataParallel: the policy and value model
have separate optimizers, micro-batches accumulate before one reduce per minibatch, and LoRA freezes
most parameters; averaging the gradients of the trainable parameters covers all three.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as tdist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from .config import ConfigError

#: seconds a rank other than 0 that failed waits for rank 0's error, to end quietly when it is the same, and
#: rank 0 with its own error waits for the other ranks to end (end_after_failure)
SAME_ERROR_WAIT = 2.0
#: the store's key counting the ranks that ended with an error, and under it/R rank R's own error line
_FAILED = "proxima_rlhf_failed"
#: the process group's store (torchrun's rendezvous store), kept by init_distributed: it outlives the group
_STORE = None
#: process groups this process has joined: every rank joins in the same order, so the count tells one run's
#: keys in the store from those of an earlier run of the same job (a script that trains twice)
_JOINED = 0
#: whether this rank has raised PeerEnded in this group: torchrun's teardown then only ends what is under way
_ENDED = False


class PeerEnded(BaseException):
    """Raised by a rank's signal handler (:func:`leave_at_teardown`) at torchrun's SIGTERM after another rank
    recorded its failure. torchrun kills a rank 30 s after that SIGTERM, so a rank with no collective coming
    soon (loading a model, in a slow reward) must end then, not at its next collective. A BaseException, as
    TrainingInterrupted is: it lands wherever the rank is, and an ``except Exception`` there (the reward
    wrapper's, a library's) must not take it for its own failure. :func:`end_after_failure` turns it into the
    LostContact line once the caller has taken back what it must (a new run's files and lock)."""


class LostContact(ConfigError):
    """A collective of this rank failed because another rank is gone (it failed or was stopped) or did not
    answer: one line naming this rank; the other rank's own line says why. A ConfigError so that both
    entry points (`proxima rlhf`, `proxima resume`) print it as their one error line, exit 2."""


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
    """Join the torchrun process group when WORLD_SIZE > 1: gloo on CPU; on CUDA, as the PPO trainer does
    (proxima.distributed.init), gloo for CPU tensors and the object collectives, nccl for CUDA tensors (gloo
    alone, with a note, in a torch build without NCCL), with this process's GPU (LOCAL_RANK) made current."""
    from ..distributed import cuda_backend, is_peer_loss, is_timeout, is_torchrun_rank, join_group, report_join_failure

    if not is_torchrun_rank():  # the same test as the entry points' exit_process
        return Dist()
    global _STORE, _JOINED, _ENDED
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cuda" and torch.cuda.is_available() and local < torch.cuda.device_count():
        # before the group starts: NCCL work without a current device runs on cuda:0 on every rank (the
        # checkpoints' object collectives: a duplicate-GPU error, or a hang)
        torch.cuda.set_device(local)
    if not tdist.is_initialized():
        rank = int(os.environ.get("RANK", "0"))
        try:
            # each --max-restarts attempt under its own keys (join_group): a restarted job hung on the dead one's
            join_group(cuda_backend("cpu:gloo,cuda:nccl", rank) if device_type == "cuda" else "gloo",
                       cuda=device_type == "cuda")
        except ConfigError:  # the command's own line (check_socket_ifname)
            raise
        except Exception as e:
            if isinstance(e, RuntimeError) and is_peer_loss(e) and not is_timeout(e):
                # another rank ended (a refusal of its own) while this one was still connecting
                lost = lost_contact(e, Dist(rank, int(os.environ["WORLD_SIZE"])))
                raise LostContact(f"{lost} (while joining the process group)") from None
            # the store or a peer not reached: one line per rank, as the PPO trainer's (exit_process prints no
            # traceback after it)
            report_join_failure(rank, e)
            raise
    _JOINED += 1
    _ENDED = False
    try:
        _STORE = tdist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - without it a rank takes torchrun's teardown for a stop, as it did before
        _STORE = None
    return Dist(tdist.get_rank(), tdist.get_world_size(), local)


def prompt_share_refusal(prompts: str, count: int, world: int) -> str:
    """The line refusing ``count`` prompts (file ``prompts``) for ``world`` processes: a rank's share would be empty."""
    return (f"--prompts {prompts}: {count} prompt(s) for {world} processes, each of which draws from its own share "
            f"(prompts rank, rank + {world}, ...); give at least {world} prompts, or train with fewer processes")


def check_prompt_share(prompts: str) -> None:
    """Under torchrun (WORLD_SIZE > 1), before any rank joins the process group: refuse a prompts file with
    fewer prompts than processes (the trainer refuses it too, for the Python API, once the group exists).
    Refused after joining, rank 0 could exit while another rank was still connecting, which then failed with
    gloo's traceback, exit 1. Every rank reads the file itself; rank 0 raises the ConfigError (its command's
    one line, exit 2), the others wait for torchrun's SIGTERM, which follows rank 0's exit, so that the line
    is printed once (a rank whose file differs from rank 0's raises it after PROXIMA_DIST_TIMEOUT)."""
    from ..distributed import dist_timeout, is_torchrun_rank
    from .data import load_prompts

    if not is_torchrun_rank():
        return
    world, count = int(os.environ["WORLD_SIZE"]), len(load_prompts(prompts))
    if count >= world:
        return
    error = ConfigError(prompt_share_refusal(prompts, count, world))
    if int(os.environ.get("RANK", "0")) != 0:
        try:  # ended silently by torchrun's teardown, counted as such (proxima.torchrun.TEARDOWN_CODES)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except ValueError:  # not the main thread
            pass
        time.sleep(dist_timeout())
    raise error


def shutdown(d: Dist, clean: bool = True) -> None:
    """Leave the process group. ``clean``: every rank got here at the same point, after its last
    collective (see proxima.distributed.leave_process_group); False on the way out of an error, where
    a barrier could wait for a rank that is still in another collective."""
    global _STORE, _ENDED
    if not d.enabled:
        return
    _STORE, _ENDED = None, False
    if clean:
        from ..distributed import leave_process_group

        leave_process_group()
    elif tdist.is_initialized():
        tdist.destroy_process_group()


def lost_contact(exc: BaseException, d: Dist) -> Optional[LostContact]:
    """The LostContact line for ``exc`` when it is a collective's error for another rank that is gone or silent
    (proxima.distributed.is_peer_loss, the PPO trainer's test, in its words), else None."""
    from ..distributed import _await_teardown, is_peer_loss, is_timeout, killed_peers, lost_contact_line

    def line(text: str, torn: bool) -> LostContact:  # the PPO trainer's line: a rank killed by a signal is named
        said = lost_contact_line(d.rank, d.world_size, text, torn, killed_peers() if torn else {})
        return LostContact(said.removeprefix("proxima: "))  # the entry point says its own name

    if isinstance(exc, PeerEnded) and d.enabled:
        return line("torchrun's teardown (SIGTERM) ended this rank", True)
    if not d.enabled or not isinstance(exc, RuntimeError) or not is_peer_loss(exc):  # torch's are RuntimeErrors
        return None
    first = (str(exc).strip().splitlines() or [""])[0][:400]
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    if is_timeout(exc):
        # the gloo/NCCL error names no peer; with two ranks there is only one it can be
        who = f"rank {1 - d.rank}" if d.world_size == 2 else "another rank"
        return LostContact(f"rank {d.rank} stopped: {who} did not reach the same collective within the process group's "
                           f"timeout (it hangs, e.g. in a reward, or is that much slower): {text}")
    # the SIGTERM that torchrun ends the job with may be read before or after the collective's error
    return line(text, _await_teardown())


def end_after_failure(d: Dist, exc: BaseException) -> BaseException:
    """Leave the process group after ``exc`` ended this rank's run; returns what the caller raises instead.

    A collective's error for a lost peer, and PeerEnded, become the one line of :func:`lost_contact`. Any error
    is recorded in the store first, so that the other ranks take torchrun's SIGTERM, which follows this rank's
    exit, for the teardown it is (:func:`teardown_signal`) and end at once with their own line
    (:func:`leave_at_teardown`) rather than as a stop. In a process that ends with its command (the CLI's ranks)
    SIGTERM is ignored from here until it exits, so that its own line is printed whichever rank exits first;
    and a rank whose error is word for word rank 0's (a bad input every rank refuses alike), given up to
    SAME_ERROR_WAIT seconds to arrive, ends quietly, exit 2, while rank 0 with its own error waits as long for
    the others to end: the line is printed once when the ranks reach it within SAME_ERROR_WAIT of each other (a
    rank much later than that ends with the lost-contact line instead). A stop (TrainingInterrupted) or
    KeyboardInterrupt only leaves the group."""
    if not d.enabled:
        return exc
    from .. import distributed

    ends = distributed._ENDS_WITH_COMMAND
    if ends:  # before the others can learn that this rank ended (and exit, whereupon torchrun signals it)
        try:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        except ValueError:  # not the main thread
            pass
    lost = lost_contact(exc, d)
    own = isinstance(exc, Exception) and lost is None
    store, said, failed = _STORE, f"{type(exc).__name__}: {exc}", f"{_FAILED}/{_JOINED}"
    try:
        if store is not None and own:
            store.set(f"{failed}/{d.rank}", said)
        if store is not None and isinstance(exc, Exception):
            store.add(failed, 1)
    except Exception:  # noqa: BLE001 - the store went with the job: nobody is left to tell
        store = None
    shutdown(d, clean=False)
    if own and ends and d.rank > 0 and store is not None:
        key, deadline = f"{failed}/0", time.monotonic() + SAME_ERROR_WAIT
        try:
            while not store.check([key]) and time.monotonic() < deadline:
                time.sleep(0.05)
            if store.check([key]) and store.get(key).decode("utf-8", "replace") == said:
                return SystemExit(2)
        except Exception:  # noqa: BLE001 - the store went with the job: this rank says it
            pass
    elif own and ends and store is not None:
        # rank 0's exit brings torchrun's teardown, which ends a rank still on its way to the same error with a
        # lost-contact line (leave_at_teardown): the same SAME_ERROR_WAIT for every rank to have ended
        deadline = time.monotonic() + SAME_ERROR_WAIT
        try:
            while store.add(failed, 0) < d.world_size and time.monotonic() < deadline:
                time.sleep(0.05)
        except Exception:  # noqa: BLE001 - the store went with the job: nobody is left to wait for
            pass
    return lost or exc


def teardown_signal(signum: int) -> bool:
    """Whether ``signum`` is torchrun's SIGTERM to the other ranks after a rank failed (end_after_failure
    recorded it): not a stop to checkpoint at (a checkpoint's collectives would fail), but the end of this rank
    (:func:`leave_at_teardown`). For the signal handlers of a rank's loop and setup (loop.RankGuard, api's
    _RankOutside)."""
    if signum != signal.SIGTERM:
        return False
    if _ENDED:  # a repeat while this rank is on its way out: no store to ask, which may have gone with the job
        return True
    if _STORE is None:
        return False
    try:
        return _STORE.add(f"{_FAILED}/{_JOINED}", 0) > 0
    except Exception:  # noqa: BLE001 - no store to ask: a signal as any other
        return False


def leave_at_teardown() -> None:
    """Raise PeerEnded, once per process group: for a signal handler that found torchrun's teardown
    (:func:`teardown_signal`). A repeat returns, and the handler ignores it: the rank is already leaving, and a
    second exception would cut its cleanup short."""
    global _ENDED
    if _ENDED:
        return
    _ENDED = True
    raise PeerEnded()


def broadcast_parameters(module: torch.nn.Module, d: Dist, via: Optional[torch.device] = None) -> None:
    """Start every process from rank 0's weights (same seed gives the same init; this makes it certain).
    ``via``: the device the backend sends from (NCCL takes no CPU tensor); a weight elsewhere (on the host,
    where --fsdp keeps the models until they are sharded) goes through it one tensor at a time."""
    if d.enabled:
        for p in module.parameters():
            if via is None or p.device == via:
                tdist.broadcast(p.data, src=0)
            else:
                sent = p.data.to(via)
                tdist.broadcast(sent, src=0)
                p.data.copy_(sent)
                del sent


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


def max_across(value: float, d: Dist, device: torch.device) -> float:
    """The largest of a number over processes (a step's wall-clock time: the slowest process's)."""
    if not d.enabled:
        return value
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
    return float(t.item())


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
