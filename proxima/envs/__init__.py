"""Batched environments: torch-native classics, an adapter for any Gymnasium env, and Atari
(EnvPool or Gymnasium's ALE, atari.py); observation spaces as tensors in spaces.py."""

from __future__ import annotations

import contextvars
import numbers
import re
from typing import Optional

from . import atari
from ..config import ConfigError
from .base import BatchedEnv, EnvError, NativeEnv, env_seed
from .classic import NATIVE_ENVS
from .gym_adapter import GymnasiumEnv, backend_words
from .spaces import check_spaces
from .synthetic import LinearQuadratic, PixelQuadrant

NATIVE_ENVS.setdefault(LinearQuadratic.env_id, LinearQuadratic)  # benchmark task, no Gymnasium twin
NATIVE_ENVS.setdefault(PixelQuadrant.env_id, PixelQuadrant)  # the image task of the CNN tests

BACKENDS = ("auto", "native", "gymnasium", "envpool")
#: Gymnasium vectorizations (--vector): one process, or one subprocess per env
VECTORS = ("sync", "async")

__all__ = ["BatchedEnv", "NativeEnv", "EnvError", "GymnasiumEnv", "NATIVE_ENVS", "make_env"]


def names_registered_id(given: str, recorded: str) -> bool:
    """Whether ``given`` is Gymnasium's ``module:EnvId`` form of ``recorded``, a registered id without
    a module: a run trained from Python after ``import myenvs`` records ``MyReg-v0``, which a command
    line can only build as ``myenvs:MyReg-v0`` (nothing else imports the module that registers it)."""
    module, sep, name = str(given).partition(":")
    return bool(sep and module) and ":" not in str(recorded) and name == str(recorded)


def same_env(given: str, recorded: str) -> bool:
    """Whether the env id a user names (``--env``, train's ENV_ID) is the env a run recorded: the same
    id, or its ``module:EnvId`` form (names_registered_id)."""
    return str(given) == str(recorded) or names_registered_id(given, recorded)


def same_game(given: str, recorded: str) -> bool:
    """Whether two ids name one Atari game (``Pong-v5``, ``ALE/Pong-v5``, ``pong-v5``): its settings
    (--env-kwargs: sticky actions, the action set) belong to the game, whichever spelling builds it."""
    from . import atari

    try:
        a, b = atari.game_name(str(given)), atari.game_name(str(recorded))
    except EnvError:  # not a game this machine can name: building it says why
        return False
    return a is not None and b is not None and a.lower() == b.lower()


def check_registers(given: str) -> None:
    """EnvError unless ``given`` (``module:EnvId``, named by the user, so imported) builds the registered
    id EnvId: importing the module must register it, and the module must have no attribute of that
    name, which resolve_env_fn would build instead (without the registration's wrappers and kwargs)."""
    import gymnasium as gym

    from .gym_adapter import _import_env_module, import_failure_line

    module_name, _, name = str(given).partition(":")
    try:
        module = _import_env_module(module_name)
    except Exception as e:  # not found, or the user's module failed as it was imported
        raise EnvError(import_failure_line(e, module_name, given)) from None
    if getattr(module, name, None) is not None:
        raise EnvError(f"--env {given}: module '{module_name}' has an attribute '{name}', which {given} builds instead of "
                       f"the registered env id '{name}' the run trains; resume it from Python after `import {module_name}` "
                       "(train(None, resume=RUN))")
    if name not in gym.registry:
        raise EnvError(f"--env {given}: importing module '{module_name}' did not register env id '{name}', which the run "
                       "trains; name the module whose import registers it (gymnasium.register)")


def unregistered(env_id: str) -> bool:
    """True for an env id without a module that this process cannot build: no native env, no Atari
    game, not in Gymnasium's registry. A run trained from Python on an id its own code registered
    records it so; read elsewhere, nothing has registered it."""
    import gymnasium as gym

    env_id = str(env_id)
    if ":" in env_id or env_id in NATIVE_ENVS or env_id in gym.registry:
        return False
    try:
        return atari.game_name(env_id) is None
    except EnvError:  # an Atari id refused with its own line when built
        return False


#: a recorded entry point shown in a line: "module.sub:Attr" only (the checkpoint is data)
_ENTRY_POINT = re.compile(r"^[A-Za-z_][\w.]{0,150}:[A-Za-z_][\w.]{0,100}$")


def registered_entry_point(env_id: str) -> Optional[str]:
    """'module:attr' of the registration a plain env id builds, when code other than Gymnasium's own
    registered it; None otherwise. Checkpoints record it (checkpoint.save_train_state), so a process
    in which the id is not registered can say which module most likely registers it."""
    import gymnasium as gym

    if ":" in str(env_id):
        return None
    spec = gym.registry.get(str(env_id))
    entry = getattr(spec, "entry_point", None)
    if entry is None:
        return None
    text = entry if isinstance(entry, str) else f"{getattr(entry, '__module__', '')}:{getattr(entry, '__qualname__', '')}"
    if text.split(":")[0].split(".")[0] == "gymnasium":
        return None
    return text if _ENTRY_POINT.match(text) else None


def unregistered_line(env_id: str, source, how: str, entry_point=None, kwargs: bool = False) -> str:
    """The line for a run's recorded ``env_id`` that is not registered here (unregistered): it names
    the module to give, from the recorded ``entry_point`` when there is one (the module of its class,
    which usually registers it too; not '__main__', a script, which no command line can import).
    ``how``: the flag or command with ``{env}`` where the id to give goes (``--env {env}``)."""
    import shlex

    module = None
    if isinstance(entry_point, str) and _ENTRY_POINT.match(entry_point):
        module = entry_point.partition(":")[0]

    def give(env: str) -> str:  # the id comes from the run's file: quoted, a pasted command cannot run what it hides
        return how.replace("{env}", shlex.quote(env))

    kept = " (the run's env kwargs are kept)" if kwargs else ""
    line = f"{source}: env id '{env_id}' is not registered in this process"
    if module == "__main__":
        return (f"{line} (the script that trained the run registered it, entry point {entry_point}); move that class and "
                f"its gymnasium.register call into a module and name it: {give(f'MODULE:{env_id}')}{kept}")
    if module is not None:
        return (f"{line} (the code that trained the run registered it, entry point {entry_point}); name the module whose "
                f"import registers it, most likely: {give(f'{module}:{env_id}')}{kept}")
    return (f"{line} (the code that trained the run registered it); name the module whose import registers it: "
            f"{give(f'MODULE:{env_id}')}{kept}")


def auto_backend(env_id: str, env_kwargs: Optional[dict] = None, imported_only: bool = True) -> str:
    """The backend ``--backend auto`` builds for ``env_id`` (make_env, and bench's tables, which name
    what ran): EnvPool for an Atari game when installed, else Gymnasium's ALE; the torch-native env
    when one exists and no constructor kwargs are given; else the Gymnasium adapter.

    imported_only: a ``module:Class`` is found native only in a module already imported, so a run
    directory's recorded id runs no code (plot, report). False imports the module, for an id the
    user typed or one about to be built anyway (the --vector note, the sizing of a run or an
    evaluation): a module not yet imported otherwise reads as "gymnasium". A module that fails to
    import then reads as not native; the build that follows names its error."""
    from .gym_adapter import user_native_class

    if atari.game_name(env_id) is not None:
        return "envpool" if atari.has_envpool() else "gymnasium"
    try:
        native = user_native_class(env_id, imported_only=imported_only) is not None
    except EnvError:
        native = False
    if native:  # a user's own NativeEnv, kwargs or not
        return "native"
    return "native" if env_id in NATIVE_ENVS and not env_kwargs else "gymnasium"


def make_env(env_id: str, num_envs: int, device="cpu", backend: str = "auto", vector: str = "sync", seed: Optional[int] = None,
             render_mode: Optional[str] = None, training: bool = True, env_kwargs: Optional[dict] = None) -> BatchedEnv:
    """Build N envs of ``env_id`` on ``device``. ``reset(seed=None)`` returns the observations alone,
    (N, *obs_shape), not Gymnasium's ``(obs, info)`` pair; ``step(actions)`` returns Gymnasium's five
    (obs, reward, terminated, truncated, info), batched as tensors.

    backend: ``auto`` picks the torch-native env when one exists, EnvPool for Atari ids when it is
    installed, else the Gymnasium adapter; ``native`` fails with EnvError when there is none;
    ``gymnasium`` forces the adapter (for Atari: Gymnasium's ALE with the same wrappers);
    ``envpool``: Atari through EnvPool. training: Atari's training rules (a lost life ends the
    episode, rewards clipped to their sign); False plays full games with raw rewards (evaluation).
    env_kwargs: keyword arguments of the env's constructor (``--env-kwargs``); Gymnasium envs and a
    user's own native env (``module:Class`` of a NativeEnv subclass, docs/native_envs.md) only (with
    ``auto`` a built-in native env is skipped when kwargs are given); an Atari id takes the few ALE
    settings of atari.ATARI_KWARGS (sticky actions, full action space, time limit) on either backend.
    num_envs: an integer of 1 or more; device: as ``load`` takes it (cpu, cuda, cuda:1, auto, or a
    torch.device); vector: "sync" or "async"; seed: None or an integer from 0 to 2**64 - 1; env_id: a string (an env
    object is refused saying to give its id); each refused with one ConfigError line. A native env built here
    refuses actions outside its action space in ``step()`` (NativeEnv.check_actions; the trainer turns it off).
    seed: seeds the envs' random draws (start states, Gymnasium's ``np_random``); ``reset(seed=...)``
    re-seeds them. None draws a seed from the OS's entropy, as Gymnasium does, so unseeded envs play
    different episodes on every build (native and Gymnasium backends; EnvPool's Atari uses seed 0).
    Training and evaluation always pass one (the run's ``--seed``, evaluation's ``--seed``).
    Its refusals name this call's arguments (``backend='auto'``), never a flag, unless a command builds the env.
    """
    from ..signals import _PYTHON_CALLER, hold_python_unless_held

    # a script's own call: no run, load() or command has said who the caller is (hold_python_unless_held)
    own = _OWN_CALL.set(_OWN_CALL.get() or _PYTHON_CALLER not in contextvars.copy_context())
    release = hold_python_unless_held()  # a script's own call, as load() holds it: not the CLI's flag words
    try:
        return _make_env(env_id, num_envs, device, backend, vector, seed, render_mode, training, env_kwargs)
    except (RuntimeError, MemoryError) as e:  # num_envs=10**12: not torch's 'can't allocate memory' from deep in a build
        if isinstance(e, MemoryError) or re.search(r"(?i)\bto allocate\b|out of memory", str(e)):
            raise ConfigError(memory_refusal(e, num_envs, device)) from None
        raise
    finally:
        _OWN_CALL.reset(own)
        release()


#: true while make_env runs as a script's own call (own_call)
_OWN_CALL: contextvars.ContextVar = contextvars.ContextVar("proxima_make_env_own_call", default=False)


def own_call() -> bool:
    """Whether the env being built is a script's own make_env() call, outside any run, load() or command: its
    refusals then name make_env's arguments (``env_kwargs``, ``seed=``), where a run from Python names PPOConfig's
    fields (``PPOConfig.env_kwargs``, ``PPOConfig.seed``) and a command its flags (signals.from_python)."""
    return _OWN_CALL.get()


def memory_refusal(error: BaseException, num_envs, device) -> str:
    """make_env's line for envs whose state does not fit in memory, naming the bytes torch asked for where it says."""
    asked = re.search(r"(?i)allocate (\d+) bytes|allocate ([\d.]+ [KMGTP]iB)", str(error))
    size = ""
    if asked and asked.group(1):
        size = f" (one buffer alone is {int(asked.group(1)) / 2**30:.4g} GiB)"
    elif asked:
        size = f" (one buffer alone is {asked.group(2)})"
    return (f"make_env(num_envs={num_envs}): the envs' state does not fit in the memory of device={str(device)!r}{size}; "
            "use fewer envs")


def _make_env(env_id, num_envs, device, backend, vector, seed, render_mode, training, env_kwargs) -> BatchedEnv:
    """make_env's body, in the caller's words (signals.from_python)."""
    import torch

    from ..config import ConfigError
    from ..device import resolve_device

    if not isinstance(env_id, str):  # gym.make(...) given: not re's TypeError on the env object
        from ..trainer import env_id_refusal

        raise ConfigError(env_id_refusal(env_id, call="make_env"))

    # checked here, not by each backend: a native env of 0 envs builds empty, a string or negative count
    # fails deep inside with torch's or Gymnasium's own error
    if isinstance(num_envs, bool) or not isinstance(num_envs, numbers.Integral) or num_envs < 1:
        raise ConfigError(f"make_env(num_envs={num_envs!r}): must be an integer of 1 or more (the number of envs to build)")
    num_envs = int(num_envs)  # numpy's integers too
    # "auto" and an unusable "cuda" as load() and --device take them, refused in this call's words (device='cuda'):
    # the run's own builds pass the torch.device already resolved, so only a Python caller's value is refused here
    if not isinstance(device, (str, torch.device)):  # None, np.array(['cpu']): torch's many-line TypeError
        raise ConfigError(f"make_env(device={' '.join(repr(device).split())}): must be a string (cpu, cuda, cuda:1, auto) "
                          "or a torch.device")
    device = resolve_device(device, arg="device")
    if not isinstance(backend, str) or backend not in BACKENDS:  # an array: numpy's 'truth value is ambiguous'
        raise EnvError(f"unknown backend {' '.join(repr(backend).split())}: use {', '.join(BACKENDS)}")
    if not isinstance(vector, str) or vector not in VECTORS:  # 'asyn' built a SyncVectorEnv
        raise ConfigError(f"make_env(vector={' '.join(repr(vector).split())}): must be one of {', '.join(map(repr, VECTORS))}")
    seed = env_seed(seed, "make_env")  # numpy's integers as the int; 1.5, '1', True, -1 and 2**64 refused
    if ":" in str(env_id) and backend != "envpool":
        from .gym_adapter import build_user_native, native_class_line, user_native_class

        # a user's own NativeEnv subclass (module:Class): built as the native classics are, its kwargs its constructor's
        cls = user_native_class(env_id)
        if cls is not None and backend == "gymnasium":
            raise EnvError(native_class_line(env_id))
        if cls is not None:
            env = build_user_native(cls, env_id, num_envs, device, seed, env_kwargs)
            env.check_actions = True  # a caller's own actions: refused outside the space (the trainer turns it off)
            return env
    game = atari.game_name(env_id)
    if game is not None and backend != "native":  # make_atari resolves auto itself: its missing-package line names EnvPool under auto only
        return atari.make_atari(env_id, num_envs, device, backend, vector, seed, render_mode, training, env_kwargs)
    if backend == "auto":
        backend = auto_backend(env_id, env_kwargs)
    # from Python (make_env's caller, PPOConfig's fields) backend='envpool', from the CLI --backend envpool
    if backend == "envpool":
        raise EnvError(f"{backend_words('envpool')} runs Atari games (ids like Pong-v5), not '{env_id}'; use "
                       f"{backend_words('auto')}")
    native = NATIVE_ENVS.get(env_id)
    if backend == "native" and native is None:
        raise EnvError(f"no native env for '{env_id}' (native: {', '.join(sorted(NATIVE_ENVS))}); use "
                       f"{backend_words('gymnasium', 'auto')}")
    if backend == "native" and env_kwargs:
        from ..signals import from_python

        raise EnvError(f"{'env_kwargs' if from_python() else '--env-kwargs'}: the native '{env_id}' takes no constructor "
                       f"arguments; use {backend_words('gymnasium', 'auto', paren=True)}")
    if native is not None and backend != "gymnasium" and not env_kwargs:
        env = native(num_envs, device=device, seed=seed)
        env.env_id = env_id
        env.check_actions = True  # a caller's own actions: refused outside the space (the trainer turns it off)
        return env
    return GymnasiumEnv(env_id, num_envs, device=device, vector=vector, seed=seed, render_mode=render_mode, env_kwargs=env_kwargs)
