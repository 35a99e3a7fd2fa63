"""One PPO iteration as three parts over static buffers, and their replay as CUDA graphs.

``Trainer.train_iteration`` runs the same three parts in every mode. Each is a function of no
arguments that reads and writes only tensors living as long as the trainer (static buffers):

    rollout     T steps of policy, env step, autoreset, episode statistics and buffer writes
                (``ppo.collect_rollout``); the last obs is copied into ``trainer.next_obs``
    advantages  V(s_{t+1}) of every step (``ppo.next_values``), ``ppo.compute_gae`` and the explained variance, written
                into static (T, N) advantage and return tensors that the update's batch views
    update      every epoch and minibatch of ``ppo.update`` (forward, loss, backward, clip, Adam);
                its metrics are copied into static scalars

Eager (the default, and always on CPU) calls them. With ``--cudagraphs`` each part is captured once
into a ``torch.cuda.CUDAGraph`` after ``WARMUP`` eager calls on a side stream and replayed from then
on: one replay launches all T steps, or all E x M minibatch steps, so an iteration is three graph
launches from Python (plus the learning-rate fill and the once-per-iteration reads of the trainer),
whatever T, E and M are. ``--compile`` composes with it: the acting step and the minibatch step are
compiled by inductor (fused elementwise chains, no inductor CUDA graphs of its own) and the compiled
kernels are what the capture records.

Why by hand rather than ``torch.compile(mode="reduce-overhead")`` (cudagraph trees): the backward
pass and the optimizer step split a compiled minibatch step into several graphs, T steps and E x M
minibatches multiply the replays, and tree outputs are overwritten by the next replay (the crash
"accessing tensor output of CUDAGraphs that has been overwritten" that ``ppo.update`` met while
summing its metrics). Here the loops sit inside the captured region, and inputs and outputs are our
own static buffers, never a graph's temporaries.

What capture needs from the code it records, and the rest of Proxima keeps to it: state updated in
place (native envs, normalizers, episode statistics, the optimizer's tensor learning rate); random
numbers from generators (the default CUDA generator and the env's own, which the graph registers);
no host reads (``forbid_host_sync``) and no tensors made from Python numbers (``forbid_host_tensors``)
inside the parts; fused, capturable Adam. Parts that cannot be captured stay eager: the rollout of a
Gymnasium (host) env, and the update when ``--target-kl`` needs its per-minibatch host check. A
part whose capture fails anyway runs eagerly from then on, after ``recover_from_failed_capture``
has undone what the failed capture left (current stream, allocator pool routing, generators in
capture mode; when that fails too, the generators get fresh states and every part runs eagerly);
``Replay.state`` and ``part_states`` say which parts really replay, so that
``proxima bench --json`` and the benchmark scripts never report eager figures as graph replays.
"""

from __future__ import annotations

import sys
from typing import Callable, Optional

import torch

from . import ppo

#: eager calls of each part before its capture (lazy init: optimizer state, cuBLAS workspaces, compilation)
WARMUP = 2


class IterationParts:
    """The rollout, advantages and update parts of one trainer, over its static buffers."""

    def __init__(self, trainer):
        self.t = trainer
        ro = trainer.rollout
        self.advantages_buf = torch.zeros_like(ro.values)  # (T, N)
        self.returns_buf = torch.zeros_like(ro.values)     # (T, N)
        self.batch = ro.flatten(self.advantages_buf, self.returns_buf)  # (T*N, ...) views: fixed addresses
        self.explained_variance = torch.zeros((), dtype=torch.float32, device=trainer.device)
        self.metrics: Optional[dict] = None  # static scalars, made by the first update

    def rollout(self) -> None:
        t = self.t
        last = ppo.collect_rollout(t._env_guard(), t.policy_step, t.rollout, t.next_obs, t.obs_norm, t.reward_scaler)
        t.next_obs.copy_(last)

    @torch.no_grad()
    def advantages(self) -> None:
        t, ro, cfg = self.t, self.t.rollout, self.t.cfg
        # ppo2 treated truncation as termination; the default bootstraps from V(final_obs)
        terminated = ro.terminated if cfg.bootstrap_truncation else ro.dones

        def value_of(obs):  # (k, N, *obs_shape) -> (k, N)
            return t.agent.get_value(obs.reshape(-1, *obs.shape[2:])).reshape(obs.shape[:2]).float()

        if t.autocast is not None:  # --amp: the rollout's values came from the same autocast, one GAE one precision
            from .trainer import _autocast_fn

            value_of = _autocast_fn(value_of, t.autocast)

        # off the CPU the critic runs over every final obs: no more rows at once than the update's
        # minibatch (ppo.update's b // num_minibatches), whose activations the memory check counts
        next_values = ppo.next_values(ro.values, ro.final_obs, ro.dones, terminated, value_of,
                                      max_rows=ro.values.numel() // cfg.num_minibatches)
        advantages, returns = ppo.compute_gae(ro.rewards, ro.values, next_values, terminated, ro.dones, cfg.gamma, cfg.gae_lambda)
        self.advantages_buf.copy_(advantages)
        self.returns_buf.copy_(returns)
        self.explained_variance.copy_(ppo.explained_variance(self.batch["values"], self.batch["returns"]))

    def update(self) -> None:
        t = self.t
        out = ppo.update(t.agent, t.optimizer, self.batch, t.cfg, grad_step=t.grad_step)
        if self.metrics is None:
            self.metrics = {k: torch.zeros_like(v) for k, v in out.items()}
        for k, v in out.items():
            self.metrics[k].copy_(v)


class Replay:
    """``fn`` (no arguments, static buffers only) run eagerly ``warmup`` times on a side stream,
    then captured into a CUDA graph and replayed on every later call.

    A capture that fails leaves the part eager for the rest of the run, says so once on stderr and
    keeps the reason in ``fallback`` (``state`` reads it: benchmarks must not label eager numbers as
    graph replays). ``group``: the Replays of one trainer (a list each appends itself to), which a
    failure whose generators had to be given fresh states turns all eager (recover_from_failed_capture)."""

    def __init__(self, fn: Callable[[], None], device: torch.device, warmup: int = WARMUP,
                 generators: tuple = (), pool=None, group: Optional[list] = None):
        self.fn, self.device, self.warmup, self.generators, self.pool = fn, device, warmup, generators, pool
        self.calls = 0
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.fallback: Optional[str] = None  # why the capture failed, when it did
        self.group = group if group is not None else []
        self.group.append(self)

    @property
    def state(self) -> str:
        """'graph' (replayed), 'warm-up' (not captured yet) or 'eager: capture failed (REASON)'."""
        if self.graph is not None:
            return "graph"
        if self.fallback is not None:
            return f"eager: capture failed ({self.fallback})"
        return "warm-up"

    def __call__(self) -> None:
        if self.graph is not None:
            self.graph.replay()
            return
        if self.fallback is not None:  # the capture failed: eager, as without --cudagraphs
            self.fn()
            return
        current = torch.cuda.current_stream(self.device)
        if self.calls < self.warmup:
            self.calls += 1
            side = torch.cuda.Stream(self.device)
            side.wait_stream(current)
            with torch.cuda.stream(side):
                self.fn()
            current.wait_stream(side)
            return
        # a pool of our own when none is shared: its id is what a failed capture must release (below)
        pool = self.pool if self.pool is not None else torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        register = getattr(graph, "register_generator_state", None)
        for generator in self.generators:
            if register is not None:  # newer torch registers generators met during capture by itself
                register(generator)
        torch.cuda.synchronize(self.device)
        failure = None
        try:
            with torch.cuda.graph(graph, pool=pool):
                self.fn()
        except Exception as e:  # noqa: BLE001 - any capture failure: keep training, eagerly, and say so
            failure = capture_error(e)
        if failure is not None:
            # capture only records, so nothing of this call has run yet: run it eagerly, from now on always
            del graph  # its destructor drops what the failed capture registered (generator capture states, newer torch)
            fresh_states = recover_from_failed_capture(self.device, current, pool, self.generators)
            name = getattr(self.fn, "__name__", "part")
            if fresh_states:
                # graphs captured before hold the generators' old states: their replays would draw
                # numbers the eager parts draw again, and a checkpoint would save neither stream
                for other in self.group:
                    if other is not self:
                        other.graph = None
                        other.fallback = f"dropped: the {name}'s capture failed ({failure})"
                print(f"proxima: note: could not capture the {name} as a CUDA graph ({failure}), nor take the "
                      "random generators out of capture mode; every part runs eagerly", file=sys.stderr, flush=True)
            else:
                print(f"proxima: note: could not capture the {name} as a CUDA graph ({failure}); it runs eagerly",
                      file=sys.stderr, flush=True)
            self.graph, self.fallback = None, failure
            self.fn()
            return
        self.graph = graph
        graph.replay()  # capture records the work; this runs it


def capture_error(e: BaseException) -> str:
    """Why a capture failed: the error's first line (at most 200 characters). When the part itself
    raised inside the capture, ``torch.cuda.graph``'s exit raises again from ``capture_end`` (the
    capture was invalidated) and that second error hides the first: both are named, the part's first
    (at most 300 characters in all)."""
    def line(x: BaseException) -> str:
        return ((str(x).strip().splitlines() or [type(x).__name__])[0])[:200]

    cause = e.__context__ if e.__context__ is not None and e.__context__ is not e else None
    return f"{line(cause)}; then: {line(e)}"[:300] if cause is not None else line(e)


def recover_from_failed_capture(device: torch.device, stream, pool, generators: tuple = ()) -> bool:
    """Undo what a failed ``torch.cuda.graph`` capture leaves behind, so that the eager calls after
    it run as they would have without the attempt. ``torch.cuda.graph.__exit__`` calls
    ``capture_end`` before it leaves its stream context, and ``capture_end`` raises (the capture was
    invalidated) before it ends the caching allocator's routing to the graph's pool and before the
    RNG generators leave capture mode. Left like that, the capture stream would stay current for
    the rest of the process, and torch < 2.13 would refuse the next random number drawn outside a
    capture ("Offset increment outside graph capture encountered unexpectedly"). Each step is
    best-effort: one that does not apply to this torch (or was already done) is skipped.

    True when the generators were given fresh states (the last resort, below): graphs captured
    before still hold the old ones, and the caller must stop replaying them (Replay.group)."""
    torch.cuda.set_stream(stream)  # the stream that was current before the capture
    index = device.index if device.index is not None else torch.cuda.current_device()
    end_pool = getattr(torch._C, "_cuda_endAllocateToPool", None) or getattr(torch._C, "_cuda_endAllocateCurrentStreamToPool", None)
    if end_pool is not None and pool is not None:
        try:
            end_pool(index, pool)
        except Exception:  # noqa: BLE001 - capture_end got that far: nothing is routed to the pool any more
            pass
    # The generators leave capture mode through a capture that ends: an empty one (one kernel on a
    # scratch scalar) on a fresh stream, with the same generators registered, takes the very
    # generator states the other parts' graphs replay with in and out of capture mode. Should that
    # fail too, each generator gets a fresh copy of its state (same seed and offset, not capturing),
    # which the other parts' graphs do not share: the caller drops them (the True returned).
    fresh = False
    try:
        scratch = torch.zeros((), device=device)
        resync = torch.cuda.CUDAGraph()
        register = getattr(resync, "register_generator_state", None)
        for generator in generators:
            if register is not None:
                register(generator)
        with torch.cuda.graph(resync, stream=torch.cuda.Stream(device)):
            scratch.add_(1)
        torch.cuda.synchronize(device)
        del resync
    except Exception:  # noqa: BLE001
        torch.cuda.set_stream(stream)
        fresh = True
        for generator in (torch.cuda.default_generators[index], *generators):
            try:
                generator.graphsafe_set_state(generator.clone_state())
            except Exception:  # noqa: BLE001 - a torch without graph-safe generator states
                pass
    torch.cuda.set_stream(stream)
    torch.cuda.synchronize(device)
    return fresh


PARTS = ("rollout", "advantages", "update")


def part_states(parts: dict) -> dict:
    """{part name: 'graph' | 'warm-up' | 'eager: capture failed (...)' | 'eager'} for the callables
    ``parts`` ({name: callable}); 'eager' is a part never meant to be captured (no --cudagraphs, a
    Gymnasium env's rollout, the update under --target-kl)."""
    return {name: fn.state if isinstance(fn, Replay) else "eager" for name, fn in parts.items()}


def trainer_graph_states(trainer) -> dict:
    """``part_states`` of a Trainer's three parts."""
    return part_states({name: getattr(trainer, f"_{name}") for name in PARTS})


def build_parts(trainer) -> tuple:
    """(parts, rollout, advantages, update): the three callables train_iteration runs, each eager or
    replayed as a CUDA graph (``--cudagraphs``), and the IterationParts that own their buffers."""
    parts = IterationParts(trainer)
    rollout, advantages, update = parts.rollout, parts.advantages, parts.update
    if trainer.cfg.cudagraphs:
        device = trainer.device
        env_gen = getattr(trainer.env, "generator", None)
        generators = (env_gen,) if isinstance(env_gen, torch.Generator) and env_gen.device.type == "cuda" else ()
        pool = torch.cuda.graph_pool_handle()  # one memory pool: the parts run one after another
        group: list = []  # they share the default CUDA generator: one failure can leave them all on fresh states
        if trainer.env.backend == "native":  # a Gymnasium env steps on the host: not capturable
            rollout = Replay(parts.rollout, device, generators=generators, pool=pool, group=group)
        advantages = Replay(parts.advantages, device, pool=pool, group=group)
        if trainer.cfg.target_kl is None:  # target_kl reads approx_kl on the host after each minibatch
            update = Replay(parts.update, device, pool=pool, group=group)
    return parts, rollout, advantages, update
