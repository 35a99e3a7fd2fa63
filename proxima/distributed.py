"""torch.distributed wiring: process-group init/teardown, rank-aware helpers, metric reduction.

Under ``torchrun`` (``RANK``/``WORLD_SIZE`` set, ``WORLD_SIZE > 1``) :func:`context` joins the
process group; otherwise it returns a context with world_size 1 whose methods are no-ops, so the
trainer has one code path. See docs/distributed.md.

Backends: ``gloo`` on a machine without CUDA (or a torch build without NCCL); with CUDA ``cpu:gloo,cuda:nccl``, so gradients of a
CUDA model go through NCCL (one GPU per rank, chosen by ``LOCAL_RANK``) and the small CPU objects
(run directory name, checkpoint pieces) through gloo. Every collective has the timeout
``PROXIMA_DIST_TIMEOUT`` (seconds, default 300): a rank that stops answering ends the job instead of
hanging it; only the wait for rank 0's --eval-every evaluation is exempt (``from_main(patient=True)``).

Every collective here is called by all ranks at the same point of the loop, in the same order:
that is the contract that keeps ranks from waiting on each other forever.

Test hooks (read once, at init; used by tests/distributed):
  ``PROXIMA_TEST_FAIL_RANK=R PROXIMA_TEST_FAIL_ITER=I``  rank R raises at the start of iteration I.
  ``PROXIMA_DEBUG_DUMP_PARAMS=DIR``  every rank writes ``DIR/params-rank{R}.pt`` (agent weights,
  iteration, global step, run directory) when training ends, so a test can check the ranks hold identical weights.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional

import torch

from .signals import TrainingInterrupted, checkpoint_line, ignore_stops, torn_down

#: checkpoint keys that differ per rank; the checkpoint keeps rank 0's at the top level (what
#: ``proxima eval`` and ``load_policy`` read) and every rank's under ``"ranks"``
RANK_KEYS = ("env", "next_obs", "rng", "obs_normalizer", "reward_scaler")

#: report_failure's ``checkpoint`` for a failure before the training loop: its line names none
NOT_TRAINING = object()

#: seconds the other ranks wait for rank 0 in ``from_main(..., patient=True)`` (its evaluation):
#: a week, i.e. no limit a run would meet, but a finite number gloo's deadline arithmetic takes
PATIENT_TIMEOUT = 7 * 24 * 3600.0


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    fail_at: Optional[int] = None  # test hook: raise at the start of this iteration
    dump_params: Optional[str] = None  # test hook: folder for params-rank{R}.pt

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    # --- devices ---------------------------------------------------------------------------------
    def device_for(self, name: str) -> torch.device:
        """The device this rank trains on for ``--device name``: under torchrun a CUDA device means
        ``cuda:LOCAL_RANK`` (one GPU per rank; an explicit index is overridden), cpu stays cpu."""
        from .config import ConfigError
        from .device import resolve_device

        dev = resolve_device(name)
        if not self.enabled or dev.type != "cuda":
            return dev
        count = torch.cuda.device_count()
        if self.local_rank >= count:
            raise ConfigError(f"--device {name}: rank {self.rank} has LOCAL_RANK {self.local_rank} but this machine shows "
                              f"{count} GPU(s); start at most {count} processes per node (--nproc / --nproc-per-node)")
        if nccl_used():  # its CUDA tensors' collectives start NCCL (init joined before the device was known)
            check_nccl_ifname()
        return torch.device("cuda", self.local_rank)

    def wrap(self, module: torch.nn.Module) -> torch.nn.Module:
        """The module the update runs through (DDP averages gradients when world_size > 1).

        DDP broadcasts rank 0's parameters at construction, so all ranks start from the same
        weights; every backward then all-reduces (averages) the gradients.
        """
        if not self.enabled:
            return module
        from .accel import claim_cache_dir

        # before DDP's import of torch._dynamo, which sets the inductor cache to torch's /tmp folder: a
        # --compile rank would then compile cold each launch, not read Proxima's cache (accel.compile_cache_dir)
        claim_cache_dir()
        from torch.nn.parallel import DistributedDataParallel as DDP

        dev = next(module.parameters()).device
        ids = [dev.index] if dev.type == "cuda" else None
        return DDP(module, device_ids=ids, output_device=dev.index if dev.type == "cuda" else None)

    # --- collectives (every rank calls them at the same point) ------------------------------------
    def reduce_metrics(self, metrics: dict) -> dict:
        """Tensors -> Python floats, once per iteration (the loop's one host read of metrics).

        Across ranks: episode sums/counts (success_sum/success_count too) are summed, nonfinite is or-ed,
        the rest averaged.
        """
        names = list(metrics)
        vec = torch.stack([metrics[k].detach().float().reshape(()) for k in names])
        if self.enabled:
            import torch.distributed as dist

            dist.all_reduce(vec, op=dist.ReduceOp.SUM)
            summed = {"ep_return_sum", "ep_length_sum", "ep_count", "success_sum", "success_count", "nonfinite"}
            scale = torch.tensor([1.0 if k in summed else 1.0 / self.world_size for k in names], device=vec.device)
            vec = vec * scale
        values = vec.tolist()
        out = dict(zip(names, values))
        if "nonfinite" in out:
            out["nonfinite"] = bool(out["nonfinite"])
        return out

    def sync_normalizers(self, *modules) -> None:
        """Merge the running statistics (mean, var) of each given ObsNormalizer / RewardScaler (None:
        off) across ranks, once per iteration, so that all ranks normalize alike and the checkpoint's
        statistics (rank 0's, which eval uses) count every rank's envs. Nothing when not distributed.

        Each rank keeps its own ``count`` (ranks see equally many rows: equal --num-envs and steps)
        and after the merge holds the pooled rows' mean and a share of their summed squared
        deviations in proportion to its count: merging those shares again, with the rows each rank
        adds next, gives the pooled statistics of every row so far: with K ranks of equal counts,
        what one RunningMeanStd(epsilon=K * epsilon) fed all of them holds (the prior counted once per
        rank). Unequal counts merge exactly too (weighted by count). The reward scaler's per-env
        ``returns`` stay per rank. Two all-reduces of float64 tensors on the statistics' device, no
        host read.
        """
        stats = [m.rms for m in modules if m is not None]
        if not self.enabled or not stats:
            return
        import torch.distributed as dist

        with torch.no_grad():
            moments = [r.moments() for r in stats]  # (rows this rank has counted, their squared deviations)
            seen = [n for n, _ in moments]
            first = torch.cat([torch.cat([(r.mean * n).reshape(-1), n.reshape(1)]) for r, n in zip(stats, seen)])
            dist.all_reduce(first, op=dist.ReduceOp.SUM)
            means, totals, at = [], [], 0
            for r in stats:
                k = r.mean.numel()
                total = first[at + k].clamp_min(1e-300)  # no rows anywhere: never after an iteration
                means.append((first[at:at + k] / total).reshape(r.mean.shape))
                totals.append(total)
                at += k + 1
            # each rank's squared deviations about the pooled mean (parallel-axis theorem)
            second = torch.cat([(m2 + n * (r.mean - m).pow(2)).reshape(-1)
                                for r, (n, m2), m in zip(stats, moments, means)])
            dist.all_reduce(second, op=dist.ReduceOp.SUM)
            at = 0
            for r, n, m, total in zip(stats, seen, means, totals):
                k = r.mean.numel()
                m2 = second[at:at + k].reshape(r.mean.shape)
                r.set_moments(m, m2 * (n / total), r.count.clone())
                at += k

    def agree_stop(self, signum: int) -> int:
        """The stop signal every rank acts on this iteration: the largest signal number any rank has
        received (0: none). Ranks get a signal at slightly different times; without this one could
        stop (and checkpoint) an iteration before another and leave it waiting in a collective."""
        if not self.enabled:
            return signum
        import torch.distributed as dist

        t = torch.tensor([signum], dtype=torch.int64)  # CPU tensor: gloo
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def sync_kl(self, grad_step: Callable) -> Callable:
        """Wrap a grad step so that its ``approx_kl`` is the mean over ranks.

        ``ppo.update`` ends the epoch loop when approx_kl > target_kl; decided on per-rank values,
        one rank could stop while another runs the next minibatch and waits forever in DDP's
        gradient all-reduce. Averaged first, every rank makes the same decision (and the KL is
        that of the global minibatch). Only needed, and only used, when target_kl is set.
        """
        if not self.enabled:
            return grad_step
        import torch.distributed as dist

        world = self.world_size

        def step(mb: dict) -> dict:
            out = grad_step(mb)
            kl = out["approx_kl"].detach().float().clone()
            dist.all_reduce(kl, op=dist.ReduceOp.SUM)
            out["approx_kl"] = kl / world
            return out

        return step

    def from_main(self, fn: Callable[[], Any], patient: bool = False) -> Any:
        """Run ``fn`` on rank 0 and return its result on every rank (picklable values).

        An exception raised by ``fn`` on rank 0 stops every rank, so a bad checkpoint or an unwritable
        run directory does not leave the others waiting for a broadcast that never comes. Rank 0
        raises it; the others raise it too (report_failure stays silent for them), except in a
        process that ends with its command (exit_process: the CLI's ranks), where they wait for rank 0
        to exit and end quietly (FollowedMain, exit 143), so the user reads its error once. A stop
        (TrainingInterrupted) is raised on every rank.

        ``patient``: the other ranks wait for ``fn`` without the hang timeout (PROXIMA_DIST_TIMEOUT),
        for work of rank 0 that may rightly take longer (the --eval-every evaluation); see
        :meth:`_patient_group`.
        """
        if not self.enabled:
            return fn()
        import torch.distributed as dist

        group = self._patient_group() if patient else None

        payload: list = [None]
        error = None
        if self.is_main:
            try:
                payload = [("ok", fn())]
            except (Exception, TrainingInterrupted) as e:  # sent to the other ranks, re-raised here with its traceback
                # (a stop is a BaseException, signals.py: the other ranks stop with the same line, not a lost peer)
                error = e
                payload = [("error", _picklable(e))]
        dist.broadcast_object_list(payload, src=0, group=group)
        kind, value = payload[0]
        if kind == "error":
            if error is not None:
                _mark(error, _MAIN_WORK)
                raise error
            if _ENDS_WITH_COMMAND and not isinstance(value, TrainingInterrupted):
                self._follow_main_failure()
            _mark(value, _FOLLOWED)
            raise value
        return value

    def _follow_main_failure(self) -> NoReturn:
        """End this rank quietly after rank 0's failure in from_main, in a process that ends with its command.

        Rank 0 prints the error; had every rank raised it too, the user would read the same line once per
        rank (and each rank's "failed" line beside it). This rank waits for rank 0's process to end first:
        torchrun ends the job on the first rank to exit, and its SIGTERM would cut rank 0's line short.
        (A stop is not followed: every rank got the signal and says where it stopped.)
        """
        import torch.distributed as dist

        for sig in (signal.SIGTERM, signal.SIGINT):
            try:  # torchrun's teardown SIGTERM ends this rank silently, not as a stop with its own line
                signal.signal(sig, signal.SIG_DFL)
            except ValueError:  # not the main thread: the handlers stay
                pass
        try:  # rank 0 never sends: the wait ends when its process exits (its connections close) or times out
            dist.recv(torch.zeros(1), src=0)
        except Exception:
            pass
        # torchrun.TEARDOWN_CODES: the launcher's exit is then rank 0's own code (2 for a refusal)
        raise FollowedMain(128 + signal.SIGTERM)

    def _patient_group(self):
        """A second gloo group over all ranks whose collectives wait PATIENT_TIMEOUT, made the first
        time it is needed (every rank asks at the same point of the loop: an --eval-every iteration).

        The default group's timeout exists to end a job whose rank hangs; a collective that waits on
        purpose for rank 0's evaluation, which may take many minutes, must not trip it. A separate
        group keeps the short timeout on every training collective, and a rank that dies while the
        others wait here still ends the job (its closed connections end the wait, torchrun the rest).
        """
        group = getattr(self, "_patient", None)
        if group is None:
            import datetime

            import torch.distributed as dist

            group = self._patient = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=PATIENT_TIMEOUT))
        return group

    def gather_to_main(self, obj: Any) -> Optional[list]:
        """Every rank's ``obj`` (moved to CPU) as a list indexed by rank on rank 0; None elsewhere."""
        if not self.enabled:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.world_size if self.is_main else None
        dist.gather_object(to_cpu(obj), out, dst=0)
        return out

    # --- failures and test hooks ------------------------------------------------------------------
    def report_failure(self, exc: BaseException, checkpoint: Any = NOT_TRAINING) -> None:
        """One line naming the rank, before the traceback (torchrun then ends the other ranks).

        ``checkpoint``: the run's last checkpoint (None: none written yet; NOT_TRAINING, the default: the
        loop had not started), which a lost peer's line names with the command that continues the run; when
        proxima.torchrun is ending the job after another rank failed (signals.TEARDOWN_ENV), that line says so.

        Nothing for rank 0's error that another rank re-raised from from_main (rank 0 reports it),
        nor for a refusal of rank 0's from_main work, nor for a refusal of any rank in a process that
        ends with its command (exit_process): the command's own error line names it, and the same line
        twice otherwise. A lost peer's line says all there is to say: exit_process prints no traceback
        after it (_REPORTED)."""
        if not self.enabled or getattr(exc, _FOLLOWED, False):
            return
        if getattr(exc, _MAIN_WORK, False) or _ENDS_WITH_COMMAND:
            from .cli import _user_errors

            # the command's own error line names it (a full disk as rank 0 writes the checkpoint too):
            # "rank R failed: ..." above it would be the same line twice
            if isinstance(exc, _user_errors()):
                return
        first = (str(exc).strip().splitlines() or [""])[0][:400]
        text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
        where = "" if checkpoint is NOT_TRAINING else f"; {checkpoint_line(checkpoint)}"
        if isinstance(exc, BrokenPipeError) and stdout_closed():
            sys.stderr.write(f"proxima: rank {self.rank} stopped: its stdout was closed (the program reading it ended, "
                             f"as `| head` does; send it to a file to keep it): {text}{where}\n")
            _mark(exc, _REPORTED)
        elif is_peer_loss(exc) and is_timeout(exc):
            # the gloo/NCCL error names no peer; with two ranks there is only one it can be
            who = f"rank {1 - self.rank}" if self.world_size == 2 else "another rank"
            sys.stderr.write(f"proxima: rank {self.rank} stopped: {who} did not reach the same collective within "
                             f"PROXIMA_DIST_TIMEOUT={dist_timeout():g} s (it hangs, e.g. in an env step, or is that much "
                             f"slower; raise PROXIMA_DIST_TIMEOUT if it is only slow): {text}{where}\n")
            _mark(exc, _REPORTED)
        elif is_peer_loss(exc):
            # the SIGTERM that torchrun ends the job with may be read before or after the collective's error
            torn = _await_teardown()
            sys.stderr.write(lost_contact_line(self.rank, self.world_size, f"{text}{where}", torn,
                                               killed_peers() if torn else {}) + "\n")
            _mark(exc, _REPORTED)
        else:
            sys.stderr.write(f"proxima: rank {self.rank} failed: {text}\n")
        sys.stderr.flush()

    def check_test_failure(self, iteration: int) -> None:
        """Test hook: PROXIMA_TEST_FAIL_RANK / PROXIMA_TEST_FAIL_ITER (see the module docstring)."""
        if self.fail_at is not None and iteration == self.fail_at:
            raise RuntimeError(f"test failure injected on rank {self.rank} at iteration {iteration} "
                               "(PROXIMA_TEST_FAIL_RANK / PROXIMA_TEST_FAIL_ITER)")

    def dump_parameters(self, module: torch.nn.Module, iteration: int, global_step: int, run_dir) -> None:
        """Test hook: PROXIMA_DEBUG_DUMP_PARAMS=DIR writes DIR/params-rank{R}.pt (this rank's view)."""
        if not self.dump_params:
            return
        folder = Path(self.dump_params)
        folder.mkdir(parents=True, exist_ok=True)
        torch.save({"rank": self.rank, "world_size": self.world_size, "iteration": iteration, "global_step": global_step,
                    "run_dir": str(run_dir), "params": {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}},
                   folder / f"params-rank{self.rank}.pt")


def lost_contact_line(rank: int, world: int, text: str, torn: bool, killed: dict) -> str:
    """report_failure's line for a rank whose peer is gone: ``torn``, torchrun is ending the job after a
    failure (signals.torn_down); ``killed``, {rank: signal name} of the ranks it saw killed by a signal
    (killed_peers), which printed no error to point to: a SIGKILL is most often the out-of-memory killer; an
    exit code there (an int): a rank its env or code ended (sys.exit, os._exit), without an error line of Proxima's."""
    from .torchrun import KILLED_NOTE

    def said(r, name) -> str:
        if isinstance(name, int):
            return f"rank {r} exited {name} without an error line from Proxima (its env or code ended the process)"
        return f"rank {r} was killed by {name}" + (f" ({KILLED_NOTE})" if name == "SIGKILL" else "")

    if killed:
        why = "; ".join(said(r, name) for r, name in sorted(killed.items()))
        why += ", and torchrun is ending the job"
    else:
        who = f"rank {1 - rank}" if world == 2 else "another rank"
        why = f"{who} failed, and torchrun is ending the job" if torn else "it failed or was stopped"
        why += "; its error is above"
    return f"proxima: rank {rank} stopped: lost contact with another rank ({why}): {text}"


def _rank_neutral(name: str, value):
    """A setting's value as it acts on every rank: a CUDA --device's index is not rank 0's for the others, since
    each rank trains on cuda:LOCAL_RANK (DistContext.device_for), so ``cuda:0`` and ``cuda:1`` agree."""
    if name == "device" and isinstance(value, str) and value.startswith("cuda:"):
        return "cuda"
    return value


#: NaN as _comparable gives it: one object, so that NaN agrees with NaN
_NAN = object()


def _comparable(value):
    """``value`` as two ranks' settings are compared: a NaN (which never equals itself, and gather_object's pickling
    makes every rank's its own object) as one marker, a tuple as a list (``(64, 64)`` from Python is ``[64, 64]``),
    through lists and dicts (--env-kwargs)."""
    if isinstance(value, float) and value != value:
        return _NAN
    if isinstance(value, (list, tuple)):
        return [_comparable(v) for v in value]
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    return value


def settings_differ_line(given: Optional[list], python: Optional[bool] = None) -> Optional[str]:
    """The warning for ranks that were given other settings than rank 0 (``given``: every rank's config as a dict,
    by rank, gather_to_main's list; None off rank 0): each field that differs, as its flag (``python``, by default
    signals.from_python(): as ``PPOConfig.name``), with rank 0's value and the first other rank's. Every rank trains
    with rank 0's settings (trainer.train: resolve_start runs on rank 0 alone), so another rank's flags were silently
    ignored; a --device index is not among them (_rank_neutral), nor NaN against NaN or a tuple against the same
    list (_comparable). None when all agree."""
    if not given or len(given) < 2:
        return None
    if python is None:
        from .signals import from_python

        python = from_python()
    first = given[0] or {}
    differ: dict = {}  # field: the ranks whose value is not rank 0's
    for rank, other in enumerate(given[1:], start=1):
        other = other or {}
        for name in sorted(set(first) | set(other)):
            if (_comparable(_rank_neutral(name, first.get(name, "(none)")))
                    != _comparable(_rank_neutral(name, other.get(name, "(none)")))):
                differ.setdefault(name, []).append(rank)
    if not differ:
        return None
    parts = []
    for name, ranks in list(differ.items())[:6]:
        r = ranks[0]
        more = f" (and on {len(ranks) - 1} more rank{'s' if len(ranks) > 2 else ''})" if len(ranks) > 1 else ""
        field = f"PPOConfig.{name}" if python else f"--{name.replace('_', '-')}"
        parts.append(f"{field} is {first.get(name, '(none)')} on rank 0 but "
                     f"{(given[r] or {}).get(name, '(none)')} on rank {r}{more}")
    if len(differ) > 6:
        parts.append(f"and {len(differ) - 6} more setting(s)")
    same = "the same PPOConfig" if python else "the same command"
    return (f"proxima: warning: the ranks were not started with the same settings: {'; '.join(parts)}; every rank trains "
            f"with rank 0's (start every rank with {same})")


def _await_teardown(seconds: float = 1.0) -> bool:
    """torn_down(SIGTERM), under proxima.torchrun after waiting up to ``seconds`` for its marker: a collective
    that waited on a rank that died fails at once, a moment before torchrun (which looks at its ranks every
    0.1 s) creates it with which rank failed and how (killed_peers). No wait for a torchrun started by hand."""
    import time

    from .signals import TEARDOWN_ENV

    path = os.environ.get(TEARDOWN_ENV)
    deadline = time.monotonic() + seconds
    while path and time.monotonic() < deadline:
        try:
            if os.path.getsize(path) == 0:  # just created: its text follows at once (torchrun._write_marker)
                time.sleep(0.02)
            break
        except OSError:
            time.sleep(0.05)
    return torn_down(signal.SIGTERM)


def stdout_closed() -> bool:
    """Whether this process's stdout is a pipe whose reader has gone (a write raises BrokenPipeError): poll
    reports POLLERR for it. False where it cannot tell."""
    import select

    try:
        poll = select.poll()
        poll.register(sys.__stdout__.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no stdout, no poll (Windows)
        return False


def killed_peers(environ=None) -> dict:
    """{rank: signal name} of the ranks of this machine that proxima.torchrun saw killed by a signal as it
    began ending the job (the ``LOCAL_RANK EXITCODE`` lines it writes into signals.TEARDOWN_ENV's file,
    torchrun.failed_text); {} without that file or such a line (a torchrun started by hand). A rank that exited
    with a code Proxima never exits with (torchrun.OWN_CODES: its env's or the user's sys.exit/os._exit) is there
    too, as that code (an int): it printed no error line of Proxima's to point to either."""
    from .signals import TEARDOWN_ENV
    from .torchrun import OWN_CODES

    environ = os.environ if environ is None else environ
    path = environ.get(TEARDOWN_ENV)
    try:
        base = int(environ.get("RANK", 0)) - int(environ.get("LOCAL_RANK", 0))  # torchrun numbers a node's ranks in a row
        with open(path or "", encoding="ascii", errors="replace") as f:
            text = f.read(4096)
    except (OSError, ValueError):
        return {}
    killed = {}
    for line in text.splitlines():
        try:
            local, code = (int(word) for word in line.split())
        except ValueError:
            continue
        if code < 0:
            try:
                killed[base + local] = signal.Signals(-code).name
            except ValueError:
                killed[base + local] = f"signal {-code}"
        elif code > 0 and code not in OWN_CODES:
            killed[base + local] = code
    return killed


def local_state(state: dict, rank: int) -> dict:
    """A loaded checkpoint as rank ``rank`` restores it: its own env, RNG and normalizer pieces
    (``state["ranks"][rank]``) over rank 0's top-level ones. Unchanged when the checkpoint has no
    per-rank pieces (single-process runs, or a world size that does not match: the trainer then
    reports the mismatch)."""
    check_rank_pieces(state)
    ranks = state.get("ranks")
    if not ranks or rank >= len(ranks) or len(ranks) != state.get("world_size", 1):
        return state
    return {**state, **ranks[rank]}


def check_rank_pieces(state: dict) -> None:
    """CheckpointError when a checkpoint of a multi-process run holds no per-rank pieces
    (``"ranks"``): resumed, every rank would take rank 0's env state and next observation and
    replay the same env streams. A best.pt written before best.pt gathered every rank is such a
    file; it still evaluates (rank 0's policy and normalizer are complete)."""
    from .checkpoint import CheckpointError

    world = state.get("world_size", 1)
    if not isinstance(world, int) or isinstance(world, bool) or world <= 1 or state.get("ranks"):
        return
    path = Path(str(state.get("path", "checkpoint")))
    run = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    evaluate = f"proxima eval {run} --best" if path.name == "best.pt" else f"proxima eval {path}"
    raise CheckpointError(f"{path}: holds only rank 0's env and RNG state of a {world}-process run, so it cannot be "
                          f"resumed (every rank would replay rank 0's envs); it is for evaluation ({evaluate}); resume "
                          f"from the run's periodic checkpoints, {run}/checkpoints/step_N.pt (proxima resume {run})")


def to_cpu(obj: Any) -> Any:
    """Tensors anywhere in nested dicts/lists/tuples moved to the CPU (for object collectives)."""
    if torch.is_tensor(obj):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


class FollowedMain(SystemExit):
    """How a rank ends after rank 0 failed in from_main, under exit_process: quietly, rank 0 said why."""


#: attributes from_main sets on the error it raises: rank 0's own, and its copy on another rank
_MAIN_WORK = "_proxima_main_work"
_FOLLOWED = "_proxima_followed_main"
#: set by report_failure on a lost peer's error: its line is the whole story (the traceback is gloo's
#: internals, not this rank's code), so exit_process prints none after it
_REPORTED = "_proxima_reported_lost_peer"


def _mark(exc: BaseException, name: str) -> None:
    try:
        setattr(exc, name, True)
    except Exception:  # an exception type that takes no attributes: reported as before
        pass


def _picklable(exc: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__} on rank 0: {exc}")


def is_peer_loss(exc: BaseException) -> bool:
    """Whether ``exc`` is a collective's error for another rank that is gone or silent (it failed, was
    stopped, or hangs past the process-group timeout): nothing this rank's own code or env did. Never an
    OSError (torch's are RuntimeErrors): a BrokenPipeError's "Broken pipe" is this rank's stdout or an env's pipe."""
    import torch.distributed as dist

    if isinstance(exc, OSError):
        return False
    if isinstance(exc, getattr(dist, "DistNetworkError", ())) or isinstance(exc, getattr(dist, "DistBackendError", ())):
        return True
    text = str(exc)
    return any(s in text for s in ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
                                   "ProcessGroupGloo", "ProcessGroupNCCL", "Timed out waiting", "NCCL error"))


_is_peer_loss = is_peer_loss  # the former name


def is_timeout(exc: BaseException) -> bool:
    """Whether a peer loss (is_peer_loss) is the process-group timeout: a rank that did not answer, not one that left."""
    text = str(exc).lower()
    return "timed out" in text or "timeout" in text


#: PROXIMA_DIST_TIMEOUT's range: a timedelta keeps milliseconds (less is 0, which fails every collective
#: at once), and a week (PATIENT_TIMEOUT, the one wait meant to have no practical limit) is past any hang
#: worth waiting for
DIST_TIMEOUT_RANGE = (0.001, PATIENT_TIMEOUT)


def dist_timeout() -> float:
    """PROXIMA_DIST_TIMEOUT: the seconds every collective waits (default 300; unset or empty: the
    default). ConfigError naming the variable for any other text than a number of seconds in
    DIST_TIMEOUT_RANGE: read as it was, "abc" and "nan" raised in every rank, and "0" timed out in C++.
    The launcher checks it before torchrun starts (launch._check); a rank checks it again here, for
    a torchrun started by hand."""
    import math

    from .config import ConfigError

    raw = os.environ.get("PROXIMA_DIST_TIMEOUT", "")
    if not raw.strip():
        return 300.0
    low, high = DIST_TIMEOUT_RANGE
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and low <= seconds <= high):
        raise ConfigError(f"PROXIMA_DIST_TIMEOUT={raw!r}: must be a number of seconds from {low:g} to {high:,.0f} (a week); "
                          "unset it for the default, 300")
    return seconds


#: the variable gloo reads for the interface(s) its connections use (torch splits it at commas: one device each)
GLOO_IFNAME_ENV = "GLOO_SOCKET_IFNAME"


def interface_addresses() -> "set[str] | None":
    """The names of the network interfaces with an IPv4 or IPv6 address here, as gloo looks an
    interface up (getifaddrs: the first IPv4 or IPv6 address of that name); None where that list cannot be
    read (no getifaddrs through ctypes): nothing can be checked."""
    import ctypes
    import ctypes.util
    import socket

    class Sockaddr(ctypes.Structure):
        _fields_ = [("head", ctypes.c_uint8 * 2)]  # Linux: a 16-bit family; the BSDs and macOS: length, family

    class Ifaddrs(ctypes.Structure):
        pass

    Ifaddrs._fields_ = [("next", ctypes.POINTER(Ifaddrs)), ("name", ctypes.c_char_p), ("flags", ctypes.c_uint),
                        ("addr", ctypes.POINTER(Sockaddr))]
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        head = ctypes.POINTER(Ifaddrs)()
        if libc.getifaddrs(ctypes.byref(head)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    found: set = set()
    try:
        node = head
        while node:
            item = node.contents
            if item.addr and item.name:
                raw = bytes(item.addr.contents.head)
                family = raw[1] if sys.platform == "darwin" or "bsd" in sys.platform else int.from_bytes(raw, sys.byteorder)
                if family in (socket.AF_INET, socket.AF_INET6):
                    found.add(item.name.decode(errors="replace"))
            node = item.next
    finally:
        libc.freeifaddrs(head)
    return found


def check_socket_ifname(environ=None) -> None:
    """ConfigError when GLOO_SOCKET_IFNAME (a name, or several separated by commas) names an interface
    that has no IPv4 or IPv6 address here, by gloo's own lookup (interface_addresses): every rank failed
    in init_process_group with a C++ traceback ("Unable to find address for: bogus0"). The launcher
    checks it before torchrun starts (launch._check), a rank again as it joins (join_group), doctor too.
    Unset or empty: gloo picks the interface itself, nothing to check."""
    from .config import ConfigError

    environ = os.environ if environ is None else environ
    raw = environ.get(GLOO_IFNAME_ENV, "")
    if not raw:
        return
    found = interface_addresses()
    if found is None:
        return
    missing = [name for name in raw.split(",") if name not in found]
    if not missing:
        return
    which = "that name" if missing == [raw] else f"the name {missing[0]!r}"
    have = ", ".join(sorted(found)) or "none"
    raise ConfigError(f"{GLOO_IFNAME_ENV}={raw!r}: no network interface of {which} with an address here (interfaces "
                      f"with one: {have}); name one of them (several: comma-separated), or unset it for gloo's own choice")


#: the variable NCCL reads for the interface(s) its sockets use (its bootstrap and, without InfiniBand, its traffic)
NCCL_IFNAME_ENV = "NCCL_SOCKET_IFNAME"


def nccl_interfaces(spec: str, found) -> list:
    """The interfaces of ``found`` that NCCL_SOCKET_IFNAME's ``spec`` selects, read as NCCL reads it: names
    separated by commas, each a prefix (``eth`` selects eth0, eth1...), all exact names after a leading ``=``
    (``=eth0``), all but those after a leading ``^`` (``^docker,lo``; ``^=eth0``: all but eth0 itself); an
    entry's ``:PORT`` is no part of its name. A spec of no names (``,``, ``=``, ``:80``) selects every interface
    and ``^`` (``^=``, ``^,``) none, as NCCL's matchIfList matches any interface against an empty list. Sorted."""
    exclude = spec.startswith("^")
    rest = spec[1:] if exclude else spec
    exact = rest.startswith("=")
    names = [name for name in (entry.split(":", 1)[0] for entry in (rest[1:] if exact else rest).split(",")) if name]

    def named(interface: str) -> bool:
        return not names or any(interface == name if exact else interface.startswith(name) for name in names)

    return sorted(i for i in found if named(i) != exclude)


def check_nccl_ifname(environ=None) -> None:
    """ConfigError when NCCL_SOCKET_IFNAME selects no interface with an IPv4 or IPv6 address here
    (nccl_interfaces, of interface_addresses): NCCL fails every rank's first GPU collective ("Bootstrap :
    no socket interface found"). Checked where NCCL is used, for a run on CUDA: a rank that joins with it
    (join_group's ``cuda``) or resolves its CUDA device (DistContext.device_for), the launcher for a --device
    that resolves to CUDA where NCCL is (launch._check_nccl), doctor there. Unset or empty: NCCL picks."""
    from .config import ConfigError

    environ = os.environ if environ is None else environ
    raw = environ.get(NCCL_IFNAME_ENV, "")
    found = interface_addresses() if raw else None
    if found is None or nccl_interfaces(raw, found):
        return
    have = ", ".join(sorted(found)) or "none"
    raise ConfigError(f"{NCCL_IFNAME_ENV}={raw!r}: selects no network interface with an address here (interfaces with "
                      f"one: {have}); name one of them (NCCL reads prefixes, '=' for exact names, '^' to leave them out; "
                      "several: comma-separated), or unset it for NCCL's own choice")


def nccl_used() -> bool:
    """Whether a torchrun rank here would join with NCCL (init, rlhf.dist: CUDA present, NCCL built in)."""
    import torch.distributed as dist

    return torch.cuda.is_available() and dist.is_nccl_available()


def lost_peer(exc: BaseException) -> bool:
    """A peer loss (is_peer_loss) in a process that is in a process group: the error of a rank that
    another one left, which says nothing about this rank's env or config (run_setup.diagnose_failure)."""
    if not is_peer_loss(exc):
        return False
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


# ------------------------------------------------------------------------------------------------
_CONTEXT: DistContext | None = None
_OWNS_GROUP = False
#: set by exit_process: this process ends when its command returns or raises (a torchrun rank of the CLI),
#: so a rank that follows rank 0's failure may end quietly instead of raising rank 0's error again
_ENDS_WITH_COMMAND = False


def context() -> DistContext:
    """The current process's context; initializes the process group under torchrun."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = init() if joins_group() else DistContext(**_test_hooks(0))
    return _CONTEXT


def _test_hooks(rank: int) -> dict:
    fail_at = None
    if os.environ.get("PROXIMA_TEST_FAIL_RANK", "") != "" and int(os.environ["PROXIMA_TEST_FAIL_RANK"]) == rank:
        fail_at = int(os.environ.get("PROXIMA_TEST_FAIL_ITER", "0"))
    return {"fail_at": fail_at, "dump_params": os.environ.get("PROXIMA_DEBUG_DUMP_PARAMS") or None}


#: seconds the start-up waits at least (the store's connection, the ranks' meeting in it), whatever
#: PROXIMA_DIST_TIMEOUT says: that is the hang timeout of the collectives, and the ranks reach the store
#: seconds apart (each imports torch first); with PROXIMA_DIST_TIMEOUT=0.001 no rank could connect
JOIN_MIN_TIMEOUT = 60.0


def join_group(backend: str, timeout=None, cuda: bool = False) -> None:
    """init_process_group over torchrun's env:// store (MASTER_ADDR/MASTER_PORT, RANK, WORLD_SIZE), its
    keys under this attempt's own prefix: torch's agent keeps one store for all attempts of a
    --max-restarts job, so a restarted rank read the dead attempt's gloo addresses and hung connecting
    to them. ``timeout``: the group's (a timedelta), None for torch's default; the store's connection and
    its waits take at least JOIN_MIN_TIMEOUT. PPO's init and RLHF's rlhf.dist.init both join through here.
    GLOO_SOCKET_IFNAME is checked first (check_socket_ifname), and NCCL_SOCKET_IFNAME (check_nccl_ifname) for
    ``cuda``, a run whose tensors are on CUDA with a backend of NCCL: NCCL starts at the first collective of
    CUDA tensors, so a --device cpu run never reads it (PPO's init joins before its device is known:
    DistContext.device_for checks it then)."""
    import datetime

    import torch.distributed as dist

    check_socket_ifname()
    if cuda and "nccl" in backend:
        check_nccl_ifname()
    wait = timeout if timeout is not None else dist.distributed_c10d.default_pg_timeout
    wait = max(wait, datetime.timedelta(seconds=JOIN_MIN_TIMEOUT))
    try:
        store, rank, world = next(dist.rendezvous("env://", timeout=wait))
    except Exception:  # "MASTER_ADDR expected, but not set": a WORLD_SIZE left in the shell says so in its words
        check_world_size()
        raise
    store.set_timeout(wait)  # as init_process_group's own env:// path does
    store = dist.PrefixStore(f"proxima/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
    # gloo connects the ranks to each other (connectFullMesh) within the group's timeout too: the start-up's,
    # then the collectives' own (torch's private setter; without it, the collectives keep the start-up's)
    set_later = timeout is not None and timeout < wait and hasattr(dist.distributed_c10d, "_set_pg_timeout")
    extra = {} if timeout is None else {"timeout": wait if set_later else timeout}
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world, **extra)
    if set_later:
        dist.distributed_c10d._set_pg_timeout(timeout)


def init() -> DistContext:
    """Join the torchrun process group (env:// rendezvous: MASTER_ADDR/MASTER_PORT, set by torchrun)."""
    global _OWNS_GROUP
    import datetime

    import torch.distributed as dist

    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
    from .accel import claim_cache_dir

    claim_cache_dir()  # first: on CUDA the trainer's deterministic switch imports torch._dynamo too (DistContext.wrap)
    device = torch.device("cpu")
    backend = "gloo"
    if torch.cuda.is_available():
        backend = cuda_backend("cpu:gloo,cuda:nccl", rank)  # CPU objects through gloo, CUDA tensors through NCCL
        if local < torch.cuda.device_count():
            torch.cuda.set_device(local)
            device = torch.device("cuda", local)
    timeout = datetime.timedelta(seconds=dist_timeout())
    if not dist.is_initialized():
        from .config import ConfigError

        try:
            join_group(backend, timeout)
        except ConfigError:  # the command's own line (check_socket_ifname)
            raise
        except Exception as e:  # one line, not one C++ traceback per rank (exit_process prints none after it)
            report_join_failure(rank, e)
            raise
        _OWNS_GROUP = True
    return DistContext(rank, world, local, device, **_test_hooks(rank))


def report_join_failure(rank: int, exc: BaseException) -> None:
    """Write join_failure_line for a rank that could not join the process group, and mark ``exc`` as reported,
    so exit_process prints no traceback after it (the caller raises it on): PPO's init and rlhf.dist's alike."""
    sys.stderr.write(join_failure_line(rank, exc) + "\n")
    sys.stderr.flush()
    _mark(exc, _REPORTED)


def join_failure_line(rank: int, exc: BaseException) -> str:
    """``proxima: rank R failed: ...`` for a rank that could not join the process group (join_group): the
    error's first line, without gloo's "[enforce fail at FILE:LINE]", and where to look."""
    import re

    first = (str(exc).strip().splitlines() or [""])[0]
    first = re.sub(r"^\[enforce fail at [^\]]*\]\s*", "", first)[:400]
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    at = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    return (f"proxima: rank {rank} failed: could not join the process group (store at MASTER_ADDR:MASTER_PORT {at}): "
            f"{text}; check that every node reaches that address and that {GLOO_IFNAME_ENV} / NCCL_SOCKET_IFNAME, "
            "if set, name this machine's interface to the others (docs/distributed.md, Multi-node)")


def cuda_backend(nccl: str, rank: int) -> str:
    """The process-group backend for ranks on CUDA: ``nccl`` (the backend string that uses it) when this
    torch build has NCCL, else gloo, with a note from rank 0 (the PPO trainer's init and rlhf.dist)."""
    import torch.distributed as dist

    if dist.is_nccl_available():
        return nccl
    # asking for nccl in a build without it fails at init ("doesn't have NCCL built in");
    # gloo moves CUDA tensors too, only slower (proxima doctor's hint)
    if rank == 0:
        print("proxima: note: this torch build has no NCCL; the ranks exchange GPU tensors through gloo "
              "(slower; a torch build with NCCL uses it)", file=sys.stderr)
    return "gloo"


def shutdown() -> None:
    """Leave the process group (only one this module created) and forget the context."""
    global _CONTEXT, _OWNS_GROUP

    if _OWNS_GROUP:
        leave_process_group()
    _OWNS_GROUP = False
    _CONTEXT = None


def leave_process_group() -> None:
    """Tear the process group down while the interpreter is fully alive (call it on every rank).

    The barrier keeps a rank from closing its connections while another still has a collective in
    flight; the collection frees cyclic garbage (a DDP wrapper, finished work objects) that would
    otherwise hold the process group until interpreter shutdown.
    """
    import gc

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        gc.collect()
        dist.destroy_process_group()


def exit_process(main: Callable[[], Optional[int]]) -> NoReturn:
    """Run ``main`` and end the process with its exit status (``proxima``, ``python -m proxima``,
    ``python -m proxima.rlhf``).

    A torchrun rank (``WORLD_SIZE > 1``) ends with ``os._exit`` once its output is flushed: its run
    directory is complete and closed by then, and skipping interpreter finalization avoids a race
    in which a gloo worker thread drops the last reference to a tensor while Python shuts down,
    which aborts the rank ("terminate called without an active exception", SIGABRT) after a run
    that succeeded. An error is printed as its traceback, except a lost peer whose one line
    report_failure printed (the rest is gloo's internals, and the failed rank's own lines say why).
    Other processes exit the ordinary way.

    Once ``main`` has returned, a stop signal ends the process with main's status (signals.ignore_stops):
    the command is done, and a Slurm job's SIGUSR1 during the second or more of interpreter shutdown that
    follows a run ended it 138 with no line, so its job script requeued a finished run.
    """
    global _ENDS_WITH_COMMAND

    if not is_torchrun_rank():
        code = main()
        ignore_stops(code)
        raise SystemExit(code)
    _ENDS_WITH_COMMAND = True
    stop_with_parent()
    try:
        code = main()
        ignore_stops(code)
    except SystemExit as e:
        code = e.code
    except BaseException as e:  # the traceback as Python would print it, then the same status
        if not getattr(e, _REPORTED, False):
            import traceback

            traceback.print_exc()
        code = 1
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code or 0)


#: set by proxima.torchrun to its own pid for the ranks it starts (they inherit its environment): a rank
#: whose torchrun died before the rank could read its parent pid is told apart from one whose parent lives
TORCHRUN_PID_ENV = "PROXIMA_TORCHRUN_PID"


def stop_with_parent() -> None:
    """Have the kernel send this rank SIGTERM when torchrun (its parent) dies, even by SIGKILL
    (PR_SET_PDEATHSIG, Linux): a stop like any other, the ranks agree on it and rank 0 checkpoints.
    Without it, a torchrun killed alone left its ranks training on as orphans, holding the run's lock.
    A parent gone before the request took effect, even before this rank first read its parent pid
    (TORCHRUN_PID_ENV names the torchrun that started it), sends the signal now. Elsewhere: nothing.

    The kernel sends it when the *thread* that forked the rank exits, not the process. torchrun's agent
    starts the ranks (LocalElasticAgent._start_workers, subprocess.Popen) from the thread that runs
    agent.run(): the main thread of torchrun (proxima.torchrun._run calls torch's main there), which
    waits in that call for the ranks to finish and returns only once they are stopped, so it lives as
    long as the job: the signal never comes early."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM)) != 0:  # 1: PR_SET_PDEATHSIG
            return
    except (OSError, AttributeError):
        return
    now = os.getppid()
    if now != parent or _torchrun_gone(now):
        os.kill(os.getpid(), signal.SIGTERM)


def _torchrun_gone(parent: int) -> bool:
    """Whether the torchrun named in TORCHRUN_PID_ENV is not ``parent`` and no longer runs: this rank was
    orphaned (reparented to init or a subreaper) before it read its parent. A name left in the environment
    by another launcher, whose process still runs, is not taken for this rank's."""
    try:
        recorded = int(os.environ.get(TORCHRUN_PID_ENV) or 0)
    except ValueError:
        return False
    if recorded <= 0 or recorded == parent:
        return False
    try:
        os.kill(recorded, 0)
    except ProcessLookupError:
        return True
    except OSError:  # there, another user's
        return False
    return False


def _several_processes(environ) -> bool:
    """WORLD_SIZE > 1 in ``environ`` (an unreadable one is not): is_torchrun_rank's, joins_group's and
    stray_world_size's one test."""
    try:
        return int(environ.get("WORLD_SIZE") or 1) > 1
    except ValueError:
        return False


def is_torchrun_rank() -> bool:
    """True in a process torchrun started as one of several ranks (WORLD_SIZE > 1)."""
    return _several_processes(os.environ)


def joins_group(environ=None) -> bool:
    """Whether this process's run is one rank of several (context() joins the process group): RANK is set and
    WORLD_SIZE > 1. A WORLD_SIZE without RANK trains as one process; ``train --dry-run`` asks here too, so it
    refuses and counts processes as the run does (cli._torchrun_world)."""
    environ = os.environ if environ is None else environ
    return "RANK" in environ and _several_processes(environ)


def stray_world_size(environ=None) -> Optional[str]:
    """The line for a WORLD_SIZE above 1 in a process that no torchrun started (no TORCHELASTIC_RUN_ID, and no
    MASTER_ADDR/MASTER_PORT of a launcher of its own): one left in the shell, which made a plain run try to join
    a process group at '?:?' (or --nproc say it already ran under torchrun). None otherwise."""
    environ = os.environ if environ is None else environ
    if not _several_processes(environ) or environ.get("TORCHELASTIC_RUN_ID"):
        return None
    if environ.get("MASTER_ADDR") and environ.get("MASTER_PORT"):  # a launcher that sets the env:// variables (srun)
        return None
    return (f"WORLD_SIZE={environ.get('WORLD_SIZE')} is set but this process was not started by torchrun (no "
            "MASTER_ADDR/MASTER_PORT): unset WORLD_SIZE and RANK (or use --nproc K to start K processes)")


def under_launcher_line(environ=None) -> str:
    """The refusal of --nproc in a process that runs under torchrun (launch.under_torchrun), or seems to: a WORLD_SIZE
    and RANK left in the shell (stray_world_size) look the same, and --nproc cannot tell them from a launcher's."""
    environ = os.environ if environ is None else environ
    line = "--nproc: this process already runs under torchrun; drop --nproc"
    if stray_world_size(environ) is None:
        return line + " (torchrun sets the process count)"
    return (f"{line}, or, if WORLD_SIZE={environ.get('WORLD_SIZE')} was only left in the shell (MASTER_ADDR/MASTER_PORT, "
            "which torchrun sets, are not set), unset WORLD_SIZE and RANK")


def check_world_size(environ=None) -> None:
    """ConfigError with stray_world_size's line, when there is one."""
    line = stray_world_size(environ)
    if line is not None:
        from .config import ConfigError

        raise ConfigError(line)

