"""Speed switches around the unchanged PPO core: ``--compile`` and ``--cudagraphs``.

Both wrap the two hot functions the trainer calls, never the modules themselves, so parameters
and state dicts keep their names (no ``_orig_mod.`` prefixes) and checkpoints move freely between
compiled and eager runs:

* the acting step ``policy_step(obs) -> action, logprob, value`` of collect_rollout;
* the minibatch step ``grad_step(mb) -> metrics``: forward and loss in one graph, backward and the
  clip in another (a graph break at ``loss.backward()``), Adam's step eager between them (accelerate).

No shape changes between iterations (fixed N, T, minibatch size) and a learning rate held as a
tensor mean the compiled code is built once. ``--cudagraphs`` is not a compile mode: graphs.py
captures whole parts of the iteration (eager or compiled) into CUDA graphs of its own.
"""

from __future__ import annotations

import os
import tempfile
import types
from pathlib import Path

import torch

from . import ppo


def compile_cache_dir() -> Path:
    """Where inductor keeps compiled kernels between launches, as an absolute path: $TORCHINDUCTOR_CACHE_DIR
    when set, else ~/.cache/proxima/inductor ($XDG_CACHE_HOME in place of ~/.cache when it is absolute;
    the XDG spec says to ignore a relative one). A second launch of the same run reads its kernels from
    here instead of compiling them again; ``proxima doctor`` prints the path."""
    env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if env:
        # inductor makes it absolute against the cwd of the process that compiles: say that folder
        return Path(os.path.abspath(env))
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return Path(os.path.abspath(base / "proxima" / "inductor"))


def holds_kernels(path: Path) -> bool:
    """Whether inductor's cache folder ``path`` holds compiled graphs: its ``fxgraph`` folder has an
    entry. One directory read, no scan: the folder itself (and ``precompiled_headers``, ``locks``)
    exists as soon as torch._inductor is imported or setup_compile_cache runs, before any kernel."""
    try:
        with os.scandir(path / "fxgraph") as entries:
            return next(entries, None) is not None
    except OSError:  # missing, not a folder, unreadable: inductor will compile
        return False


def compiling_note() -> str:
    """The text of --compile's note before the first compiled iteration (after ``proxima: note: ``),
    which says which case this launch is: an empty cache compiles (72.6 s for CartPole's first
    iteration on a 2-core CPU), a filled one reads kernels (10-14 s: dynamo still traces both steps
    and inductor loads and checks each graph). Filled means any kernel, not this run's: a changed
    model or shape compiles again, which the note says rather than pay for a scan."""
    path = compile_cache_dir()
    if holds_kernels(path):
        return (f"--compile: compiling the rollout and update steps, reading kernels cached in {path}: ~10-20 s on "
                "a CPU (a model or shape not compiled before compiles again: about a minute)")
    return (f"--compile: compiling the rollout and update steps; the first launch compiles: about a minute on a CPU "
            f"(its kernels are cached in {path}; a later launch reads them: ~10-20 s)")


def precompiled_header_dir() -> Path:
    """Where --compile keeps the C++ compiler's precompiled headers: ``precompiled_headers`` inside
    compile_cache_dir()."""
    return compile_cache_dir() / "precompiled_headers"


def _cache_source() -> str:
    """The setting that chose compile_cache_dir(), for an error to name."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return "TORCHINDUCTOR_CACHE_DIR"
    return "XDG_CACHE_HOME" if os.path.isabs(os.environ.get("XDG_CACHE_HOME", "")) else "HOME"


def compile_cache_problem(keep: bool = True) -> str:
    """"" when compile_cache_dir() can be created and written, else one line naming the folder, the
    reason and the setting to change. Creates the folder and writes (and removes) a file in it:
    inductor's own os.makedirs failed inside ``import torch._inductor.codecache``, which left
    torch._dynamo half imported, and the next import died with an unrelated AssertionError.
    ``keep=False`` (doctor): the folders this call created are removed again."""
    path = compile_cache_dir()
    missing = [p for p in (path, *path.parents) if not os.path.lexists(p)]
    try:
        os.makedirs(path, exist_ok=True)
        if not path.is_dir():
            raise NotADirectoryError(20, "Not a directory")
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        source = _cache_source()
        shown = f"{source}={os.environ.get(source, '')}" if source != "HOME" else f"HOME={Path.home()}"
        return (f"the compile cache {path} cannot be created or written ({e.strerror or type(e).__name__}; "
                f"from {shown}): set TORCHINDUCTOR_CACHE_DIR (or XDG_CACHE_HOME) to a writable folder")
    finally:
        if not keep:
            for folder in missing:  # innermost first; a folder someone else filled meanwhile stays
                try:
                    os.rmdir(folder)
                except OSError:
                    break
    return ""


def claim_cache_dir() -> None:
    """Set $TORCHINDUCTOR_CACHE_DIR to compile_cache_dir() when it is unset or empty and that folder can
    be created and written, before anything imports torch._dynamo: that import sets the variable to
    torch's /tmp/torchinductor_<user> (and fixes its dynamo cache there), and setup_compile_cache then
    keeps a value it finds. Building DistributedDataParallel imports it, so a --nproc or torchrun rank
    calls this before the wrap (distributed.DistContext.wrap). A user's own value is kept; a folder
    that cannot be written leaves torch's default (--compile names the problem, setup_compile_cache)."""
    if not os.environ.get("TORCHINDUCTOR_CACHE_DIR") and not compile_cache_problem():
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(compile_cache_dir())


def setup_compile_cache() -> Path:
    """Point inductor's on-disk caches at compile_cache_dir() for the rest of the process: kernels
    through $TORCHINDUCTOR_CACHE_DIR (set when unset or empty), precompiled headers through
    precompiled_header_dir(). Returns the header folder. ConfigError (one line: the folder and the
    variable to set) when the folder cannot be created or written, checked before torch._inductor
    is imported."""
    from .config import ConfigError

    problem = compile_cache_problem()
    if problem:
        raise ConfigError(f"--compile: {problem}, or drop --compile")
    # a stable on-disk cache (torch's default lives under /tmp, which many machines wipe at boot);
    # set before the first compilation reads it. An empty value is set too: inductor would make
    # "" absolute, the current directory
    if not os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(compile_cache_dir())
    headers = precompiled_header_dir()
    # not wrapped: a failed import leaves torch._dynamo half imported, and swallowing it here only
    # moved the traceback to the first compiled call, under an unrelated error
    from torch._inductor import codecache

    # torch (2.13) has no setting for the header folder: codecache computes the private _HEADER_DIR
    # once, at import, under tempfile.gettempdir() whatever $TORCHINDUCTOR_CACHE_DIR says, and
    # _precompile_header reads it (and _HEADER_LOCK_DIR) at each call. Left there, a wiped /tmp makes
    # the next --compile run build its headers again (a reviewer's CartPole run: 33 s against 13.7 s
    # warm). Private names, so only set when both exist as strings: another torch keeps its folder.
    names = ("_HEADER_DIR", "_HEADER_LOCK_DIR")
    if all(isinstance(getattr(codecache, name, None), str) for name in names):
        if codecache._HEADER_DIR != str(headers):
            codecache._HEADER_DIR = str(headers)
            codecache._HEADER_LOCK_DIR = str(headers / "locks")
            # it memoizes each header's path: one built in the old folder would be reused from there
            clear = getattr(getattr(codecache, "_precompile_header", None), "cache_clear", None)
            if callable(clear):
                clear()
    return headers


def mode_options(mode: str) -> dict:
    """inductor's options for ``--compile-mode MODE``: what torch.compile(mode=MODE) would apply
    (torch._inductor.list_mode_options), as a new dict. "default" is {} without importing inductor;
    any other mode imports torch._inductor, which creates its cache folder at import: done here
    under compile_cache_dir() (the folder setup_compile_cache later points inductor at), and the
    caller makes sure that folder is writable (compile_cache_problem) first."""
    if mode in (None, "default"):
        return {}
    # inductor fixes some cache paths when it is first imported: the ones a later
    # setup_compile_cache would give, not torch's /tmp default
    saved = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not saved:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(compile_cache_dir())
    try:
        from torch._inductor import list_mode_options
    finally:
        if saved is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        elif not saved:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved
    return dict(list_mode_options(mode))


def compile_options(cfg) -> dict:
    """The options every torch.compile of a trainer gets: its --compile-mode's (mode_options) and,
    under --deterministic, inductor's ``fallback_random``: random numbers drawn through torch's own
    generator, so a compiled run samples exactly what the eager run samples (compiled == eager,
    resume exact). Passed per call, not through the process-wide inductor config: torch.compile's
    wrappers with equal options compare equal and share their compiled code, so a switch flipped
    globally let a deterministic trainer reuse kernels compiled for an earlier non-deterministic one
    in the same process (and draw other numbers)."""
    options = mode_options(cfg.compile_mode)
    if cfg.deterministic:
        options["fallback_random"] = True
    return options


def own_code(fn):
    """``fn`` (a function or a bound method) with a copy of its code object: dynamo keeps compiled
    code and counts recompiles per code object, so without a copy every Trainer in a process shares
    Agent.policy_step's and ppo's grad_step's, and after torch's recompile_limit (8) of them (bench
    over 9 sizes, a train() loop over num_envs) the next one ran eager under a "compiled" label. A
    copy's cache entries die with the Trainer that holds it (torch.compile's isolate_recompiles keeps
    a dead region's entries, up to accumulated_recompile_limit for the whole process)."""
    if isinstance(fn, types.MethodType):
        return types.MethodType(own_code(fn.__func__), fn.__self__)
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__, copy.__qualname__ = fn.__kwdefaults__, fn.__qualname__
    copy.__dict__.update(fn.__dict__)
    return copy


def watched(fn, name: str, eager: set):
    """``fn`` that adds ``name`` to ``eager`` whenever it runs eagerly: torch.compiler.is_compiling()
    is True while dynamo traces it, so the branch is gone from the compiled code and taken only where
    dynamo left the frame to Python (a recompile limit hit, a frame it skipped). Its own code object
    (own_code): each Trainer's step a frame of its own."""

    def step(*args, **kwargs):
        if not torch.compiler.is_compiling():
            eager.add(name)
        return fn(*args, **kwargs)

    return own_code(step)


def eager_fallback(trainer) -> list:
    """The names of the trainer's compiled steps that ran eagerly after all (``watched``), in the
    order accelerate compiled them; [] when all ran compiled or the trainer does not compile. Call
    it after the steps ran (bench: after the warm-up)."""
    eager = getattr(trainer, "compiled_eager", None) or set()
    return [name for name in ("policy_step", "grad_step") if name in eager]


def accelerate(trainer):
    """Return (policy_step, grad_step) for the trainer's agent and optimizer, compiled with
    compile_options(trainer.cfg), each from a code object of its own (own_code) in a recompile region
    of its own (isolate_recompiles), so no other Trainer's compilations count against its limit.
    Sets ``trainer.compiled_eager``: the names of the steps that ran eagerly after all (eager_fallback).

    Process-wide: $TORCHINDUCTOR_CACHE_DIR is set for the rest of the process when unset, and
    inductor's precompiled headers go inside that folder (setup_compile_cache). Neither is put back:
    inductor reads the variable whenever it loads or writes a kernel, and kernels compiled here and
    loaded later must stay in one place. Inductor's global config is left alone."""
    cfg = trainer.cfg
    setup_compile_cache()
    options = compile_options(cfg)

    trainer.compiled_eager = eager = set()

    def compiled(fn, name=None):
        # torch refuses mode= and options= together: the mode's own options are in ``options``.
        # A fresh dict each call: torch.compile pops keys of its own from the one it gets.
        # isolate_recompiles for the frames without a code of their own: a module (DDP's forward),
        # and a nested one dynamo compiles on its own after a graph break in it
        if name is not None:
            fn = watched(own_code(fn), name, eager)
        return torch.compile(fn, options=dict(options) if options else None, dynamic=False, isolate_recompiles=True)

    policy_step = compiled(trainer.policy_step, "policy_step")  # autocast-wrapped under --amp
    eager_step = ppo.make_grad_step(trainer.model, trainer.optimizer, cfg, trainer.autocast, trainer.scaler)
    if trainer.dist.world_size > 1:
        # DDP's gradient hooks do not trace well inside a compiled region: compile the forward only
        trainer.model = compiled(trainer.model)
        return policy_step, ppo.make_grad_step(trainer.model, trainer.optimizer, cfg, trainer.autocast, trainer.scaler)
    # Adam's fused kernel has no fake (meta) implementation for inductor to trace: its step runs
    # eagerly between the compiled graphs, as torch.optim.Adam(fused=True) does under torch.compile
    trainer.optimizer.step = torch.compiler.disable(trainer.optimizer.step)
    grad_step = compiled(eager_step, "grad_step")
    return policy_step, grad_step
