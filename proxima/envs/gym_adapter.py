"""Any Gymnasium env (registered id or ``module:ClassName``) as a BatchedEnv.

Gymnasium steps on the host in numpy; this adapter is the one place where arrays cross to torch.
It uses Gymnasium's vector envs in same-step autoreset mode, so the contract (final_obs, separate
terminated/truncated) is the same as for the native envs.
"""

from __future__ import annotations

import contextlib
import decimal
import difflib
import importlib
import json
import math
import numbers
import os
import random
import re
import reprlib
import shlex
import signal
import sys
import traceback
import warnings
from pathlib import Path
from typing import Callable, NoReturn, Optional, Union

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector.async_vector_env import AsyncState

from .. import warnings_guard
from ..config import install_hint
from ..shared_change import SharedChange
from ..sightings import Sightings
from .base import BatchedEnv, EnvError, NativeEnv
from .spaces import (ObsLayout, box_range, check_spaces, obs_layout, pack_numpy, proxima_action_space, space_actions,
                     tensor_space, uint8_pixels)

#: extras that provide an env family; used to say what to install when an env cannot be built.
EXTRAS = {"box2d": ("LunarLander", "BipedalWalker", "CarRacing"), "mujoco": ("HalfCheetah", "Hopper", "Walker2d", "Ant", "Humanoid", "Swimmer", "Reacher", "Pusher", "InvertedPendulum", "InvertedDoublePendulum")}


def _extra_for(env_id: str) -> Optional[str]:
    for extra, prefixes in EXTRAS.items():
        if env_id.split("/")[-1].startswith(prefixes):
            return extra
    return None


def missing_extra(env_id: str) -> Optional[str]:
    """The line _build gives an env of EXTRAS whose extra is not installed, found without building it,
    else None: a new run says it before its config's arithmetic (a LunarLander-v3 batch larger than
    --total-timesteps was refused first, and box2d said to be missing only once that was fixed)."""
    from ..doctor import module_found, module_name

    extra = _extra_for(env_id) if not imports_code(env_id) else None
    if extra is None:
        return None
    # the module the extra's envs import as they are built (doctor's package of that name)
    return None if module_found(module_name(extra)) else f"env '{env_id}' needs an optional dependency: {install_hint(extra)}"


def check_extra_installed(env_id: str, backend: str) -> None:
    """EnvError (missing_extra's line) for a new run of an env whose extra is not installed, built through
    Gymnasium (``backend`` auto or gymnasium): said before the config's arithmetic, which the flags fixed for it
    would not make train. The CLI's train (and --dry-run), train() and the populations check it first alike."""
    missing = missing_extra(env_id) if backend in ("auto", "gymnasium") else None
    if missing:
        raise EnvError(missing)


def imports_code(env_id: str) -> bool:
    """True for an env id that names a module to import (``module:Class``, Gymnasium's
    ``module:EnvId``): building it runs that module's code."""
    return ":" in str(env_id)


class UntrustedEnvError(EnvError):
    """An env id read from a file (checkpoint, config.yaml) that would import a module."""


def refuse_recorded_env(env_id: str, source, command: str = "eval") -> None:
    """Raise UntrustedEnvError when ``env_id``, read from ``source`` (a checkpoint or config.yaml),
    would import code: a stranger's run directory must stay data. The user names it on the command
    line (``--env``) or trusts the run (``--trust-run``) to run it; a resume from Python (signals.from_python:
    ``command`` "resume" or "train --resume" for train(), "train_population" for train_population()) names
    the call's arguments: train()'s env_id=, train_population()'s config (it takes no env_id), trust_run=True."""
    if imports_code(env_id):
        from ..signals import from_python

        # the id and path come from the file: quoted, a pasted command cannot run what they hide ($(...), ;)
        env, path = shlex.quote(env_id), shlex.quote(str(source))
        if from_python() and command == "train_population":
            how = (f"name it in train_population()'s config, PPOConfig(env_id={env_id!r}) (train_population takes no "
                   "env_id), if you trust that module (or trust_run=True to trust this run's files)")
        elif from_python() and command in ("resume", "train --resume"):
            how = f"give train() env_id={env_id!r} if you trust that module (or trust_run=True to trust this run's files)"
        elif command == "train":
            how = f"name it on the command line (proxima train {env} --config {path}) if you trust that module"
        elif command == "train --resume":  # train's ENV_ID argument is its --env
            how = (f"name it on the command line (proxima train {env} --resume ...) if you trust that module "
                   "(or --trust-run to trust this run's files)")
        else:
            how = f"pass --env {env} to `proxima {command}` if you trust that module (or --trust-run to trust this run's files)"
        raise UntrustedEnvError(f"{source}: the recorded env '{env_id}' would import and run module '{env_id.partition(':')[0]}'; "
                                f"not done for an env id read from a file: {how}")


#: folders no env module is imported from (run directories and checkpoint folders given to eval/resume)
_DATA_DIRS: list = []


def treat_as_data(folder) -> None:
    """Never import an env module from ``folder`` or below (a run directory or a checkpoint's folder
    given to eval/resume), even when it is the current directory: whoever made the folder decides
    what it holds, its run files included, so every such folder is data. A folder the user put on
    PYTHONPATH (an absolute entry) is searched all the same (_import_env_module), which is how a
    project keeping its own env module beside its checkpoints names it."""
    path = os.path.realpath(folder)
    if path not in _DATA_DIRS:
        _DATA_DIRS.append(path)


def _data_dir_of(entry: str) -> Optional[str]:
    """The run directory (treat_as_data) that ``entry`` (a sys.path entry, "" the current directory) is in, else None."""
    path = os.path.realpath(entry or os.getcwd())
    return next((d for d in list(_DATA_DIRS) if path == d or path.startswith(d.rstrip(os.sep) + os.sep)), None)


def _inside_data_dir(entry: str) -> bool:
    return _data_dir_of(entry) is not None


def _on_pythonpath() -> set:
    """The real paths of the folders the user named on PYTHONPATH: naming a folder there is their
    consent to import from it, run directory or not. A relative entry ("." in a shell's profile)
    names no folder, only wherever the command runs, a downloaded run's included: not counted."""
    return {os.path.realpath(e) for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(e)}


class SkippedModuleError(ModuleNotFoundError):
    """The env's module was not found because the folder that holds it is in a run directory (treat_as_data)."""

    def __init__(self, e: ModuleNotFoundError, folder: str, run_dir: str):
        super().__init__(str(e), name=e.name, path=e.path)
        self.folder, self.run_dir = folder, run_dir


def _skipped_holder(module_name: str, skipped: list) -> Optional[tuple]:
    """(folder, run directory) of the first skipped sys.path entry that holds ``module_name``'s top package or module."""
    from importlib.machinery import PathFinder

    top = module_name.partition(".")[0]
    for entry in skipped:
        with contextlib.suppress(Exception):  # a finder's trouble is no reason to hide the plain import error
            if PathFinder.find_spec(top, [entry or os.getcwd()]) is not None:
                return os.path.realpath(entry or os.getcwd()), _data_dir_of(entry)
    return None


_paths_added: list = []  # folders _import_env_module put on sys.path while a run was going on


def _take_paths_off():
    def undo() -> None:
        for folder in _paths_added:
            with contextlib.suppress(ValueError):  # the caller took it off already
                sys.path.remove(folder)
        _paths_added.clear()
    return undo


#: Hold, for a run, the folder _import_env_module puts on sys.path for a ``module:Class`` env; once the
#: last run going on releases it, the folder leaves sys.path (train() and Trainer hold it: a script run
#: from another folder would otherwise import its later modules from the run's current directory
#: first). Until then it stays: envs built later in the run (the evaluation's, an env whose own imports
#: run in its constructor) and AsyncVectorEnv workers started by spawn or forkserver, which take the
#: parent's sys.path as they start and import the module again to unpickle the env factory (fork's
#: inherit the imported module), find it. ``hold_env_module_path()`` returns the release.
_module_path = SharedChange(_take_paths_off)
hold_env_module_path = _module_path.hold


def _import_env_module(module_name: str):
    """Import the module of a ``module:Class`` env id from the current directory or sys.path;
    sys.path entries inside a run directory given to eval/resume are skipped for the import, unless
    the user put them on PYTHONPATH. A module found only in a skipped folder raises SkippedModuleError."""
    cwd = os.getcwd()
    with _module_path.lock:
        if cwd not in sys.path and "" not in sys.path and not _inside_data_dir(cwd):
            sys.path.insert(0, cwd)  # the user's own env module, next to where they run proxima
            if _module_path.held:
                _paths_added.append(cwd)  # outside a run (make_env, load) it stays, as the env built may import on
    if not _DATA_DIRS:
        return importlib.import_module(module_name)
    explicit = _on_pythonpath()
    saved = sys.path[:]
    skipped = [e for e in saved if _inside_data_dir(e) and os.path.realpath(e or cwd) not in explicit]
    if cwd not in saved and "" not in saved and _inside_data_dir(cwd) and os.path.realpath(cwd) not in explicit:
        skipped.append(cwd)  # the folder the user's own module is looked for in first, had it not been a run's
    sys.path[:] = [e for e in saved if e not in skipped]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        own = e.name is not None and (e.name == module_name or module_name.startswith(e.name + "."))
        holder = _skipped_holder(module_name, skipped) if own else None
        if holder is None:
            raise
        raise SkippedModuleError(e, *holder) from None
    finally:
        sys.path[:] = saved


_RESUMES_CHECKED = 4  # the last few resumes' folders: a meta.json may list thousands, each one a folder to look in


def _recorded_cwd_holding(module_name: str) -> Optional[str]:
    """The working directory a run being read (treat_as_data's folders) was trained or last resumed in, as its
    meta.json records it (``cwd``), where that is not the current directory and holds ``module_name``'s top
    module or package (found, not imported: a recorded path is data), else None. Read only on the way to an
    import error: eval and resume of a ``module:Class`` run from another folder fail there. Only the last
    _RESUMES_CHECKED resumes and the first cwd are looked in, each folder once (however it is spelled), by a
    stat of ``<top>.py`` and ``<top>/__init__.py``: never a listing, never an importer cached for the process."""
    from ..rundir import read_run_json

    here = os.path.realpath(os.getcwd())
    top = module_name.partition(".")[0]
    for run_dir in list(_DATA_DIRS):
        try:
            meta = read_run_json(Path(run_dir) / "meta.json", root=run_dir)
        except Exception:  # no meta.json (a loose checkpoint's folder), or a damaged one: nothing to name
            continue
        if not isinstance(meta, dict):
            continue
        resumes = meta.get("resumes") if isinstance(meta.get("resumes"), list) else []
        recorded = [r.get("cwd") for r in reversed(resumes[-_RESUMES_CHECKED:]) if isinstance(r, dict)]
        seen = {here}
        for cwd in recorded + [meta.get("cwd")]:
            if not isinstance(cwd, str) or not os.path.isabs(cwd):
                continue
            with contextlib.suppress(Exception):  # an odd path's trouble is no reason to hide the plain import error
                real = os.path.realpath(cwd)
                if real in seen:
                    continue
                seen.add(real)
                if os.path.isfile(os.path.join(real, top + ".py")) or os.path.isfile(
                        os.path.join(real, top, "__init__.py")):
                    return os.path.normpath(cwd)
    return None


def file_as_module_line(module_name: str, env_id: str) -> Optional[str]:
    """The line for a ``module:Class`` env whose module part is a file path (``myenvs.py:Env``,
    ``envs/cart.py:Env``), naming the module form to use instead; None for a module name. Python
    imports modules by dotted name from the folders on sys.path, never by file path."""
    if not (module_name.endswith(".py") or "/" in module_name or os.sep in module_name):
        return None
    attr = env_id.partition(":")[2]
    path = Path(module_name[:-3] if module_name.endswith(".py") else module_name)
    folder, stem = path.parent, path.name
    if str(folder) in ("", "."):
        fix = f"{stem}:{attr}"
    elif path.is_absolute() or ".." in folder.parts:  # no dotted name reaches it from here
        fix = f"{stem}:{attr} with its folder on PYTHONPATH (PYTHONPATH={shlex.quote(str(folder))})"
    else:  # a package path from here (folders with __init__.py), or the folder on PYTHONPATH
        fix = (f"{'.'.join(folder.parts + (stem,))}:{attr} (a package: pkg.sub.envs:Name) or, with PYTHONPATH="
               f"{shlex.quote(str(folder))}, {stem}:{attr}")
    return (f"env '{env_id}': '{module_name}' is a file path, but the part before ':' is a module name, "
            f"imported from the current directory or PYTHONPATH: use {fix}")


def import_failure_line(e: Exception, module_name: str, env_id: str) -> str:
    """The line for a ``module:Class`` env whose import failed. Only when the module itself (or a
    package above it) was not found is the path to blame; an import inside the user's module that
    fails is named with its file:line (user_frame): a dependency that is not installed, or a name
    its module lacks; any other exception its code raised as it was imported too (raised_at)."""
    own = isinstance(e, ModuleNotFoundError) and e.name is not None and (
        e.name == module_name or module_name.startswith(e.name + "."))
    if own and file_as_module_line(module_name, env_id) is not None:  # 'myenvs.py': myenvs imported, then no 'py' in it
        return file_as_module_line(module_name, env_id)
    if own and isinstance(e, SkippedModuleError):
        inside = "it is" if e.folder == e.run_dir else f"it is inside {e.run_dir},"
        return (f"cannot import module '{module_name}' for env '{env_id}': not imported from {e.folder}: {inside} the "
                f"folder of the run or checkpoint being read (run directories are never searched: a downloaded run must "
                f"not supply the code its env id names); if the module is yours, name the folder: "
                f"PYTHONPATH={shlex.quote(e.folder)}")
    if own:
        trained_in = _recorded_cwd_holding(module_name)
        if trained_in is not None:  # eval/resume from another folder than the run's: name it, never import from it unasked
            shown = trained_in
            if not trained_in.isprintable():  # shown escaped, a cd or PYTHONPATH= of it would not run as printed
                shown, how = ascii(trained_in), "its name holds control characters and cannot be shown as a command"
            elif _inside_data_dir(trained_in):
                how = f"PYTHONPATH={shlex.quote(trained_in)}"
            else:
                how = f"cd {shlex.quote(trained_in)}, or PYTHONPATH={shlex.quote(trained_in)}"
            return (f"cannot import module '{module_name}' for env '{env_id}': {e} here ({os.getcwd()}); the run was "
                    f"trained in {shown}, which holds it: run this from there or name that folder ({how})")
        return f"cannot import module '{module_name}' for env '{env_id}': {e} (is it in the current directory or on PYTHONPATH?)"
    if isinstance(e, ModuleNotFoundError) and e.name:
        return (f"cannot import module '{module_name}' for env '{env_id}': it imports '{e.name}'{user_frame(e)}, which is "
                "not installed")
    message = (e.msg or str(e)) if isinstance(e, SyntaxError) and raised_at(e) else str(e)  # its str() says '(f.py, line 2)'
    return f"importing '{module_name}' for env '{env_id}' raised {type(e).__name__}: {' '.join(message.split())}{raised_at(e)}"


def raised_at(e: BaseException) -> str:
    """' (file.py:LINE)' of ``e`` in the user's code: a SyntaxError's own file and line (the file that
    failed to compile has no frame of its own, the traceback ends at the import of it), else user_frame's."""
    if isinstance(e, SyntaxError) and e.filename and not str(e.filename).startswith("<") and e.lineno:
        return f" ({Path(e.filename).name}:{e.lineno})"
    return user_frame(e)


# check-env's --steps default and most: defined with its parser, which imports neither torch nor the checker
from ..check_env_cli import CHECK_STEPS, MAX_CHECK_STEPS  # noqa: E402


def check_env_cmd(env_id: str, env_kwargs: Optional[dict] = None, steps: int = 0, seed: Optional[int] = None) -> str:
    """``proxima check-env ENV --env-kwargs JSON``, the command that checks the env a run built: without
    the run's kwargs check-env would build another env, which may well pass. ``steps``: the env step a
    failure came at, given as --steps when beyond check-env's default 200 (which would pass an env that
    fails at step 300), with ``seed``, the env's reset seed, as --seed."""
    kwargs = f" --env-kwargs {shlex.quote(json.dumps(env_kwargs))}" if env_kwargs else ""
    return f"proxima check-env {shlex.quote(str(env_id))}{kwargs}{check_env_flags(steps, seed)}"


def check_env_flags(steps: int = 0, seed: Optional[int] = None) -> str:
    """' --steps N --seed S' of check_env_cmd, only for a failure beyond check-env's default steps (which
    reach one before it): --seed where known, the env's own reset seed."""
    from ..config import MAX_SEED

    if steps <= CHECK_STEPS:
        return ""
    flags = f" --steps {min(int(steps), MAX_CHECK_STEPS)}"
    if seed is not None and 0 <= int(seed) <= MAX_SEED:
        flags += f" --seed {int(seed)}"
    return flags


def _env_module(env_id: str):
    """The module of a ``module:Class`` env id, imported (_import_env_module), or one EnvError line."""
    module_name = env_id.partition(":")[0]
    if "/" in module_name or os.sep in module_name:  # no module's name: importlib would say less (or raise TypeError)
        raise EnvError(file_as_module_line(module_name, env_id))
    before = None if module_name in sys.modules else set(gym.registry)
    try:
        module = _import_env_module(module_name)
    except Exception as e:  # not found, or the user's code failed at import time
        raise EnvError(import_failure_line(e, module_name, env_id)) from None
    if before is not None:  # what its import registered: the ids a 'did you mean' of module:ID may name
        _REGISTERED_BY.setdefault(module_name, set()).update(set(gym.registry) - before)
    return module


#: {module name: the env ids its import registered (gymnasium.register)}, as _env_module saw them
_REGISTERED_BY: dict = {}


def _is_batched(cls) -> bool:
    from .base import BatchedEnv

    return isinstance(cls, type) and issubclass(cls, BatchedEnv)


def user_native_class(env_id: str, imported_only: bool = False) -> Optional[type]:
    """The BatchedEnv subclass (a user's own torch-native env, NativeEnv's) that a ``module:Class`` id
    names, else None. Imports the module (EnvError when that fails); ``imported_only``: looks only in
    a module this process has imported already, running no code (auto_backend, which plot and report
    call on a run's recorded id, and which must not import what a downloaded run names)."""
    env_id = str(env_id)
    if ":" not in env_id:
        return None
    module_name, _, attr = env_id.partition(":")
    module = sys.modules.get(module_name) if imported_only else _env_module(env_id)
    cls = getattr(module, attr, None) if module is not None else None
    return cls if _is_batched(cls) else None


def backend_words(value: str, other: Optional[str] = None, paren: bool = False) -> str:
    """``--backend VALUE`` in a command's lines, ``backend='VALUE'`` for a Python caller (make_env's argument,
    PPOConfig's field: signals.from_python); with ``other``, ``--backend VALUE or OTHER`` or ``backend='VALUE'
    or backend='OTHER'`` (``paren``: the other in parentheses)."""
    from ..signals import from_python

    python = from_python()
    first = f"backend={value!r}" if python else f"--backend {value}"
    if other is None:
        return first
    second = f"backend={other!r}" if python else other
    return f"{first} (or {second})" if paren else f"{first} or {second}"


def native_class_line(env_id: str) -> str:
    """The line for a user's torch-native env (a BatchedEnv subclass) asked of the Gymnasium adapter."""
    return (f"'{env_id}' is a torch-native env (a BatchedEnv subclass), not a gymnasium.Env: it runs on "
            f"{backend_words('auto', 'native')}, not {backend_words('gymnasium')}")


#: how ``proxima train`` (and resume) sets each argument Proxima passes a native env's constructor itself
NATIVE_SET_BY = {"num_envs": "use --num-envs", "device": "use --device", "seed": "use --seed"}
#: ... and how ``proxima eval`` does (one env per episode)
_EVAL_SET_BY = {"num_envs": "eval builds one env per episode: use --episodes", "device": "use --device",
                "seed": "use --seed"}
#: ... and a Python caller (PPOConfig's fields)
_PYTHON_SET_BY = {k: f"set PPOConfig.{k}" for k in NATIVE_SET_BY}
#: ... and a script's own make_env() call (its arguments: envs.own_call)
_MAKE_ENV_SET_BY = {k: f"use make_env's {k}= argument" for k in NATIVE_SET_BY}


def env_kwargs_words() -> str:
    """How a line names the env's constructor arguments: ``--env-kwargs`` in a command's lines,
    ``PPOConfig.env_kwargs`` for a run from Python, ``env_kwargs`` (the argument) for a script's own make_env()."""
    from . import own_call
    from ..signals import from_python

    if not from_python():
        return "--env-kwargs"
    return "env_kwargs" if own_call() else "PPOConfig.env_kwargs"


def _native_set_by() -> dict:
    """NATIVE_SET_BY in the words of the caller: ``proxima eval``'s flags, PPOConfig's fields, make_env's
    arguments, or train's flags."""
    from . import own_call
    from ..evaluate import command_in_use
    from ..signals import from_python

    if command_in_use() == "eval":
        return _EVAL_SET_BY
    if not from_python():
        return NATIVE_SET_BY
    return _MAKE_ENV_SET_BY if own_call() else _PYTHON_SET_BY


def build_user_native(cls: type, env_id: str, num_envs: int, device, seed: Optional[int],
                      env_kwargs: Optional[dict] = None, set_by: Optional[dict] = None):
    """``cls(num_envs, device=device, seed=seed, **env_kwargs)``, as make_env builds the native classics
    (env_kwargs: the constructor's own keyword arguments), or one EnvError line. ``set_by``: for each
    of num_envs, device and seed, what the running command takes instead of --env-kwargs setting it
    (check-env's own words); by default the words of the command or Python caller that runs."""
    # Proxima passes these itself: from --env-kwargs they met a raw "got multiple values" TypeError
    set_by = set_by or _native_set_by()
    taken = [k for k in set_by if k in (env_kwargs or {})]
    if taken:
        given = env_kwargs_words() if set_by is _PYTHON_SET_BY or set_by is _MAKE_ENV_SET_BY else "--env-kwargs"
        is_it = "is set by Proxima; drop it" if len(taken) == 1 else "are set by Proxima; drop them"
        raise EnvError(f"{given}: {', '.join(repr(k) for k in taken)} of env '{env_id}' {is_it}: "
                       f"{'; '.join(set_by[k] for k in taken)}")
    def construct():
        try:
            return cls(num_envs, device=device, seed=seed, **dict(env_kwargs or {}))
        except TypeError as e:
            # __init__(self) or __init__(self, num_envs) without device/seed: a native constructor's own hint; every
            # other failure (an unknown --env-kwargs key, SystemExit, the user's exception) is _build's line, as for Gymnasium
            if _native_signature_error(e) and unknown_kwarg_line(env_id, e, env_kwargs) is None:
                raise EnvError(f"building env '{env_id}' raised TypeError: {e}{user_frame(e)}; {NATIVE_SIGNATURE_FIX}") from e
            raise

    env = _build(construct, env_id, env_kwargs)
    if isinstance(env, NativeEnv) and "generator" not in vars(env):
        raise EnvError(f"env '{env_id}': {cls.__name__}.__init__ did not call NativeEnv.__init__ (self.generator, "
                       "self.state and the episode counters are unset); call super().__init__(num_envs, device=device, "
                       "seed=seed) first in __init__ (docs/native_envs.md)")
    for name in ("single_observation_space", "single_action_space"):
        if not isinstance(getattr(env, name, None), gym.spaces.Space):
            raise EnvError(f"env '{env_id}': {name} is {'missing' if getattr(env, name, None) is None else 'no gymnasium Space'}; "
                           f"set it in __init__ (a gymnasium.spaces Space of one env)")
    check_spaces(env_id, env.single_observation_space, env.single_action_space)
    env.env_id = env_id
    env._check_obs_space()  # a Dict observation refused as the env is built, before anything reads its spaces
    overridden = type(env).overridden_contract() if isinstance(env, NativeEnv) else None
    if overridden:  # its Gymnasium-style tuples failed later as "got tuple at reset" or "'tuple' has no .clone"
        raise EnvError(f"env '{env_id}': {overridden}")
    return env


#: what a native env's constructor must look like, for the TypeError of one that does not take Proxima's arguments
NATIVE_SIGNATURE_FIX = ("a native env's constructor takes (num_envs, device='cpu', seed=None) and your own keyword arguments, "
                        "and calls super().__init__(num_envs, device=device, seed=seed) first (docs/native_envs.md)")


def _native_signature_error(e: TypeError) -> bool:
    """Whether ``e`` is a native constructor refusing what Proxima passes: too few or too many positional
    arguments, or no ``device`` or ``seed`` keyword (``def __init__(self, num_envs)``)."""
    m = _UNEXPECTED_KWARG.match(str(e).strip())
    return "positional argument" in str(e) or (m is not None and m.group("arg") in ("device", "seed"))


def resolve_env_fn(env_id: str, render_mode: Optional[str] = None, env_kwargs: Optional[dict] = None) -> Callable[[], gym.Env]:
    """Return a factory for one env, or raise EnvError with a one-line fix.

    ``module:ClassName`` imports the module and calls the class; Gymnasium's ``module:EnvId`` form
    imports the module (which registers its ids) and makes the registered id. ``env_kwargs`` go to
    the constructor (``--env-kwargs``); ``render_mode`` (a video's ``rgb_array``) overrides theirs,
    as a run trained with ``{"render_mode": null}`` is recorded with the same kwargs.
    """
    kwargs = dict(env_kwargs or {})
    if render_mode:
        kwargs["render_mode"] = render_mode
    if ":" in env_id:
        module_name, _, attr = env_id.partition(":")
        module = _env_module(env_id)
        cls = getattr(module, attr, None)
        if _is_batched(cls):
            raise EnvError(native_class_line(env_id))
        if cls is None and attr in gym.registry:  # Gymnasium's module:EnvId: the import registered the id
            return _make_registered(attr, kwargs)
        if cls is None and module_name == "__main__":  # a run a script trained, read by another process
            raise EnvError(script_env_line(env_id))
        if cls is None:
            names = env_names(module, module_name)
            # 'Const-v0' of an id registered under a namespace, 'myns/Const-v0': its own name is what was typed
            named = [n for n in names if isinstance(n, str) and n.rpartition("/")[2].lower() == attr.lower()]
            close = list(dict.fromkeys([*named, *close_names(attr, names)]))[:3]
            hint = f"; did you mean {', '.join(f'{module_name}:{c}' for c in close)}?" if close else ""
            raise EnvError(f"module '{module_name}' has no attribute '{attr}', nor did importing it register an env id "
                           f"'{attr}' (env '{env_id}'){hint}")
        if not (isinstance(cls, type) and issubclass(cls, gym.Env)) and not callable(cls):
            raise EnvError(f"'{env_id}' is not a gymnasium.Env class")

        def make_user_env() -> gym.Env:
            try:
                env = cls(**kwargs)
            except TypeError:
                if not render_mode:
                    raise
                env = cls(**{k: v for k, v in kwargs.items() if k != "render_mode"})  # a constructor without render_mode
            if callable(env) and not isinstance(env, gym.Env):
                raise EnvError(thunk_line(env_id, env))
            if not isinstance(env, gym.Env):
                vector = ("; return one env: Proxima builds --num-envs copies itself (--vector async for subprocesses)"
                          if isinstance(env, gym.vector.VectorEnv) else "")
                raise EnvError(f"'{env_id}' did not return a gymnasium.Env (got {type(env).__name__}){vector}")
            return env

        return make_user_env
    if env_id not in gym.registry:
        from .classic import NATIVE_ENVS

        if env_id in NATIVE_ENVS:  # reached the adapter by --backend gymnasium, or by --env-kwargs under auto
            raise EnvError(native_only_line(env_id, env_kwargs))
        module_hint = _module_id_hint(env_id)
        if module_hint is not None:  # `proxima check-env myenvs`: the module of the env, not an id
            raise EnvError(f"unknown env id '{env_id}'; {module_hint}")
        dotted = _dotted_id_hint(env_id)
        if dotted is not None:  # `proxima check-env trunc.Const`: a Python path where module:Name is meant
            raise EnvError(f"unknown env id '{env_id}'; did you mean {shlex.quote(dotted)}? (an env of your own module is "
                           "given as module:Name, with a colon)")
        close = difflib.get_close_matches(env_id, sorted(suggestable_ids(env_id)), n=3, cutoff=0.6)
        # an id the user's own module registers is only in the registry once that module is imported:
        # in a process that has not (the command line), naming the module is the fix, typo or not (MyWalk-v0
        # is close to Walker2d-v5, and was offered that alone)
        module = f"with that module, MODULE:{env_id}, which imports it first"
        hint = (f"; did you mean {', '.join(close)}? If your own module registers it (gymnasium.register), give it {module}"
                if close else f"; see `proxima presets` or gymnasium's registry; an id your own module registers "
                f"(gymnasium.register) is given {module}")
        raise EnvError(f"unknown env id '{env_id}'{hint}")

    return _make_registered(env_id, kwargs)


#: bytes of a module's source _module_id_hint reads with ast: ast holds some 200 bytes per byte of source (a
#: 52.8 MB module took 10.6 GB and minutes), so a bigger one is named without its class list
MODULE_HINT_BYTES = 1 << 20
#: env classes _module_id_hint names at most (then "and N more"): a module of thousands is no one-line error
MODULE_HINT_CLASSES = 20


def _module_id_hint(env_id: str) -> Optional[str]:
    """For an env id that is the name of an importable top-level module (``myenvs``, found beside the user
    or on sys.path, nothing imported: its source is read, not run): what to give instead, ``myenvs:ClassName``
    with the public env classes it defines (its classes whose bases end in Env or Wrapper, or are such a class
    of its own). The source is parsed as bytes (a BOM or a ``coding:`` line honoured), up to MODULE_HINT_BYTES;
    a bigger file, or one ast cannot parse (a syntax error, nesting past its limits), gets the line without the
    class list. A module of the standard library or site-packages (``random``, ``numpy``) is named only where
    it defines such a class: else the id is no module of the user's. None for any other id."""
    import ast
    from importlib.machinery import PathFinder

    if not env_id.isidentifier():
        return None
    try:
        spec = PathFinder.find_spec(env_id, [os.getcwd(), *sys.path])
    except Exception:  # noqa: BLE001 - an odd sys.path entry: no hint, the usual line
        return None
    origin = getattr(spec, "origin", None)
    if spec is None or not isinstance(origin, str) or not origin.endswith(".py"):
        return None
    envs: list = []
    seen: set = set()  # membership of the classes so far: a module of 10**4 classes is no quadratic scan
    try:
        with open(origin, "rb") as f:
            source = f.read(MODULE_HINT_BYTES + 1)
        if len(source) <= MODULE_HINT_BYTES:
            for node in ast.parse(source).body:
                if isinstance(node, ast.ClassDef):
                    bases = [ast.unparse(b).rpartition(".")[2] for b in node.bases]
                    if any(b in seen or (b.endswith(("Env", "Wrapper")) and b != "VectorEnv") for b in bases):
                        envs.append(node.name)
                        seen.add(node.name)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError, MemoryError, RecursionError):
        envs = []  # ``x = ---...1``, ``1 + 1 + ...``: past ast's limits, named without the class list
    envs = [name for name in envs if not name.startswith("_")]  # a private base class is no env to train
    if not envs and _installed_module(origin):  # `proxima check-env random`: the stdlib's, no env of the user's
        return None
    head = f"'{env_id}' is a module ({origin}), not an env id: name the env class in it, {env_id}:ClassName"
    if envs:
        more = f" and {len(envs) - MODULE_HINT_CLASSES:,} more" if len(envs) > MODULE_HINT_CLASSES else ""
        return (f"{head}, e.g. {shlex.quote(f'{env_id}:{envs[0]}')} "
                f"(its env classes: {', '.join(envs[:MODULE_HINT_CLASSES])}{more})")
    return f"{head}, or a factory function that returns one env, {env_id}:function"


def _dotted_id_hint(env_id: str) -> Optional[str]:
    """``trunc:Const`` for the env id ``trunc.Const`` (``pkg.mod.Const``: ``pkg.mod:Const``) where that module is
    found (beside the user or on sys.path) and defines or imports ``Const`` at its top level; None otherwise.
    Nothing is imported: the module's source is read with ast, as _module_id_hint reads it (an id may come from
    a run's files, which never import a module)."""
    import ast
    from importlib.machinery import PathFinder

    module_name, _, attr = env_id.rpartition(".")
    parts = module_name.split(".")
    if not module_name or not attr.isidentifier() or not all(p.isidentifier() for p in parts):
        return None
    try:
        path, spec = [os.getcwd(), *sys.path], None
        for part in parts:  # a package's submodule, found in its folder without importing the package
            spec = PathFinder.find_spec(part, path)
            if spec is None:
                return None
            path = list(spec.submodule_search_locations or [])
        origin = getattr(spec, "origin", None)
        if not isinstance(origin, str) or not origin.endswith(".py"):
            return None
        with open(origin, "rb") as f:
            source = f.read(MODULE_HINT_BYTES + 1)
        if len(source) > MODULE_HINT_BYTES:
            return None
        body = ast.parse(source).body
    except Exception:  # noqa: BLE001 - an odd sys.path entry, an unreadable or unparsable file: the usual line
        return None
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
            return f"{module_name}:{attr}"
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == attr for a in node.names):
            return f"{module_name}:{attr}"
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == attr for t in targets):
                return f"{module_name}:{attr}"
    return None


def _installed_module(origin: str) -> bool:
    """Whether the file ``origin`` is of the standard library or an installed package (site-packages),
    not in the current directory."""
    import site
    import sysconfig

    where = Path(origin).resolve()
    if Path.cwd().resolve() in (where.parent, where.parent.parent):  # myenvs.py, myenvs/__init__.py here
        return False
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    with contextlib.suppress(Exception):  # an odd or old site module: the sysconfig paths alone
        roots.update(site.getsitepackages())
        roots.add(site.getusersitepackages())
    for root in roots:
        if not root:
            continue
        try:
            where.relative_to(Path(root).resolve())
            return True
        except (ValueError, OSError):
            continue
    return False


def env_names(module, module_name: str) -> list:
    """What ``module_name:NAME`` could build: the module's public classes and functions (not its imports of
    modules), and the ids whose registration names an entry point in it (gymnasium.register at its import)."""
    names = [k for k, v in vars(module).items() if not k.startswith("_") and callable(v)]
    for env_id, spec in list(gym.registry.items()):
        entry = spec.entry_point
        where = entry.partition(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", None)
        if where == module_name or env_id in _REGISTERED_BY.get(module_name, ()):  # its entry point, or its import's
            names.append(env_id)
    return names


def script_env_line(env_id: str) -> str:
    """The line for a ``__main__:Class`` env id this process cannot build: '__main__' is whatever script
    a process runs, so the class exists only in the process of the script that defined it (a run it
    trained, read by eval, resume or report, names it). The fix is the one unregistered_line gives a
    class the script registered (gymnasium.register): a module."""
    attr = str(env_id).partition(":")[2]
    return (f"env '{env_id}' names a class of a script ('__main__' is whatever script a process runs), found only in that "
            f"script's own process: this process's '__main__' has no '{attr}'; move that class into a module and name it: "
            f"{shlex.quote(f'MODULE:{attr}')} (eval takes it with --env)")


def script_env_note(env_id: str) -> Optional[str]:
    """The note a run trained on a ``__main__:Class`` env gets (trainer._note_built_env), while the script
    that defines the class can still be changed: eval, resume and report run in another process,
    where script_env_line is all they can say. None for any other env id."""
    module, _, attr = str(env_id).partition(":")
    if module != "__main__" or not attr:
        return None
    return (f"env '{env_id}' is a class of the script this process runs ('__main__'), which no other process can import: "
            f"`proxima eval`, `proxima train --resume` and `proxima report` of this run will not build it; move that class "
            f"into a module and name it: {shlex.quote(f'MODULE:{attr}')}")


def from_ale_py(spec) -> bool:
    """Whether a registry entry is one of ale-py's (``Pong-v4``, ``ALE/Pong-v5``)."""
    entry = spec.entry_point
    name = entry if isinstance(entry, str) else getattr(entry, "__module__", "") or ""
    return name.split(":")[0].split(".")[0] == "ale_py"


def suggestable_ids(env_id: Optional[str] = None) -> set:
    """The ids a "did you mean" may name: Gymnasium's registry and the native envs, with ale-py's
    entries as the Atari ids Proxima accepts: ``ALE/Pong-v5`` and ``Pong-v5`` (and so every game of
    atari.known_games: KNOWN_GAMES, and EnvPool's and ale-py's lists where installed); its v0/v4 ids
    (``Pong-v4``, ``PongNoFrameskip-v4``) are refused (atari.older_atari_id_line), so never offered.
    ``env_id``: the id to suggest for; one that is no ``-v5`` id gets the games Proxima knows by name
    only, as importing ale-py and EnvPool for their lists takes seconds (a typo of CartPole-v1 needs none)."""
    from .atari import KNOWN_GAMES, game_ids
    from .classic import NATIVE_ENVS

    # the games too: ale-py registers its ids only once imported, EnvPool's never are
    games = game_ids() if env_id is None or str(env_id).lower().endswith("-v5") else {
        f"{p}{g}-v5" for g in KNOWN_GAMES for p in ("", "ALE/")}
    ids = set(NATIVE_ENVS) | games
    for env_id, spec in gym.registry.items():
        if not from_ale_py(spec):
            ids.add(env_id)
        elif env_id.startswith("ALE/") and env_id.endswith("-v5"):
            ids.update((env_id, env_id[len("ALE/"):]))
    return ids


def native_only(env_id: str) -> bool:
    """True for an id of a torch-native env that Gymnasium has no registration of (PixelQuadrant-v0,
    LinearQuadratic-v0): the adapter and check-env cannot build it."""
    from .classic import NATIVE_ENVS  # filled in by proxima.envs (its synthetic envs), imported before this runs

    return ":" not in str(env_id) and env_id in NATIVE_ENVS and env_id not in gym.registry


def native_only_line(env_id: str, env_kwargs: Optional[dict] = None) -> str:
    """What to do when the adapter is asked for a native-only id: make_env sends it here under
    ``--backend gymnasium``, or under ``auto`` when --env-kwargs are given (``native`` with kwargs
    is refused before); the native env takes no constructor arguments, so with kwargs the fix is
    to drop them."""
    use = backend_words("native", "auto", paren=True)
    if env_kwargs:
        from ..signals import from_python

        kwargs = "env_kwargs" if from_python() else "--env-kwargs"
        return (f"'{env_id}' is a torch-native env with no Gymnasium version, which {kwargs} asks for (the native "
                f"env takes no constructor arguments): drop {kwargs} and use {use}")
    return f"'{env_id}' is a torch-native env with no Gymnasium version: use {use}"


def _make_registered(env_id: str, kwargs: dict) -> Callable[[], gym.Env]:
    """kwargs: the constructor's, render_mode among them when one is asked for (resolve_env_fn)."""
    def make_registered() -> gym.Env:
        return gym.make(env_id, **kwargs)

    return make_registered


_CREATOR_NOTE = " was raised from the environment creator for "
_UNEXPECTED_KWARG = re.compile(r"^(?P<fn>[\w.<>]+)\(\) got an unexpected keyword argument '(?P<arg>[^']+)'$")
_MISSING_ARGS = re.compile(r"^(?P<fn>[\w.<>]+)\.__init__\(\) missing \d+ required (?:positional |keyword-only )?arguments?: "
                           r"'(?P<arg>[^']+)'")
_FACTORY_MISSING = re.compile(r"^(?P<fn>[\w.<>]+)\(\) missing \d+ required (?:positional |keyword-only )?arguments?: (?P<args>.*)$")


def missing_kwarg_hint(e: BaseException, env_id: str = "") -> str:
    """'; give it with --env-kwargs ...' when ``e`` is an env class's constructor missing a required
    argument (the first named), or the ``module:function`` factory of ``env_id`` called without its
    required arguments (all named: CleanRL's make_env(env_id, idx, capture_video, run_name)), which only
    --env-kwargs can give; else ''."""
    if not isinstance(e, TypeError):
        return ""
    m = _MISSING_ARGS.match(str(e).strip())
    if m is not None:
        return f"; give the env's constructor its arguments with --env-kwargs (e.g. --env-kwargs '{{\"{m.group('arg')}\": ...}}')"
    m = _FACTORY_MISSING.match(str(e).strip())
    factory = env_id.partition(":")[2] if ":" in env_id else ""
    if m is None or not factory or m.group("fn").rpartition(".")[2] != factory or _raised_inside(e, factory):
        return ""
    from ..signals import from_python

    names = re.findall(r"'([^']+)'", m.group("args"))
    if set(names) == set(CLEANRL_MAKE_ENV_ARGS):  # given them, it would return its thunk, refused next (thunk_line)
        return ("; this is CleanRL's make_env(env_id, idx, capture_video, run_name), which returns a thunk for its vector "
                "env: give a function that returns the env (e.g. def make(): return make_env('CartPole-v1', 0, False, "
                "'x')()) as module:make")
    if from_python():  # a script sets the field (or make_env's argument), never types the flag
        return (f"; give the factory its arguments with {env_kwargs_words()} "
                f"(e.g. env_kwargs={{{', '.join(f'{n!r}: ...' for n in names)}}})")
    example = ", ".join(f'"{n}": ...' for n in names)
    return f"; give the factory its arguments with --env-kwargs (e.g. --env-kwargs '{{{example}}}')"


#: the arguments of CleanRL's make_env, whose result is a thunk, not an env
CLEANRL_MAKE_ENV_ARGS = ("env_id", "idx", "capture_video", "run_name")


def _raised_inside(e: BaseException, name: str) -> bool:
    """Whether ``e`` was raised inside a function called ``name`` (a call within the factory missing its
    arguments), not by the call of it: Python binds the arguments before the callee's frame exists, so
    the factory's frame is in the traceback only when it ran. Any frame, not the last alone: a factory
    ``make`` whose helper calls gym.make() without an id fails in the helper's frame. Proxima's own frames
    are not the factory's."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == name and not os.path.abspath(code.co_filename).startswith(package + os.sep):
            return True
        tb = tb.tb_next
    return False


def thunk_line(env_id: str, returned) -> str:
    """The line for a ``module:function`` factory that returned a function, not an env: CleanRL's make_env
    returns a thunk for its vector env to call."""
    name = getattr(returned, "__qualname__", None) or type(returned).__name__
    return (f"'{env_id}' returned a function ({name}), not a gymnasium.Env: CleanRL's make_env returns a thunk: give a "
            f"function that returns the env (e.g. def make(): return make_env('CartPole-v1', 0, False, 'x')()), or call "
            f"the thunk in your factory")


def creator_error(e: BaseException) -> BaseException:
    """The constructor's own exception: gym.make re-raises a TypeError of the env's constructor as
    "<message> was raised from the environment creator for <id> with kwargs (...)"; its cause is the original."""
    if _CREATOR_NOTE in str(e):
        cause = e.__cause__
        if isinstance(cause, BaseException) and str(cause) and str(e).startswith(str(cause)):
            return cause
        return type(e)(str(e).partition(_CREATOR_NOTE)[0])
    return e


def unknown_kwarg_line(env_id: str, e: BaseException, env_kwargs: Optional[dict]) -> Optional[str]:
    """'--env-kwargs: env 'CartPole-v1' takes no argument 'foo' (CartPoleEnv.__init__)' when ``e``
    is the constructor refusing a key of --env-kwargs; else None."""
    if not env_kwargs or not isinstance(e, TypeError):
        return None
    m = _UNEXPECTED_KWARG.match(str(creator_error(e)).strip())
    if m is None or m.group("arg") not in env_kwargs:
        return None
    close = close_names(m.group("arg"), constructor_params(env_id))
    given = env_kwargs_words()  # a script set the field or make_env's argument, never typed the flag
    fix = f"did you mean {', '.join(repr(c) for c in close)}?" if close else f"drop it from {given}"
    return f"{given}: env '{env_id}' takes no argument '{m.group('arg')}' ({m.group('fn')}); {fix}"


def close_names(word: str, names, n: int = 3) -> list:
    """The ``names`` a typo of ``word`` most likely meant, as difflib finds them for env ids (resolve_env_fn),
    compared ignoring case: 'Md' means 'MD' (difflib's ratio of the two as typed is 0.5, under its cutoff)."""
    by_lower: dict = {}
    for name in sorted(set(names)):
        by_lower.setdefault(name.lower(), name)
    return [by_lower[c] for c in difflib.get_close_matches(word.lower(), list(by_lower), n=n, cutoff=0.6)]


def constructor_params(env_id: str) -> list:
    """The keyword arguments the constructor (class or factory) of ``env_id`` takes by name: a
    ``module:Class`` id's attribute of its module, imported already (nothing is imported here), or a
    registered id's entry point; [] where none can be read (a C extension, a ``**kwargs`` factory)."""
    import inspect

    try:
        module_name, _, attr = env_id.rpartition(":")
        target = getattr(sys.modules.get(module_name), attr, None) if module_name else None
        if target is None and attr in gym.registry:
            entry = gym.registry[attr].entry_point
            target = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
        if target is None:
            return []
        named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        params = [p.name for p in inspect.signature(target).parameters.values() if p.kind in named]
    except Exception:  # a hint only: whatever the user's object is, the line goes out without it
        return []
    # Proxima passes a native env's own (build_user_native refuses them from --env-kwargs)
    return [p for p in params if not (_is_batched(target) and p in ("num_envs", "device", "seed"))]


def _probe(env_fn: Callable[[], gym.Env], env_id: str, env_kwargs: Optional[dict] = None) -> gym.Env:
    """Build one env; a failure is one EnvError line. Gymnasium's warnings while building (a
    DeprecationWarning in ANSI colours for HalfCheetah-v4, ...) are held back: shown as usual once
    the env is built, dropped when building fails, so the error stays the one line."""
    with warnings_guard.catch_warnings(record=True) as held:
        warnings.simplefilter("always")
        try:
            env = _build(env_fn, env_id, env_kwargs)
        except EnvError:
            held.clear()
            raise
    for w in held:  # built: the warnings the user would have seen, through the filters as they were
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    return env


def _probe_spaces(probe: gym.Env, env_id: str, env_kwargs: Optional[dict]) -> tuple:
    """(observation_space, action_space) of the built ``probe``, or _build's one EnvError line ending
    'reading observation_space': a property that raises, or a wrapper chain deeper than Python's stack
    (each Wrapper asks the one below it), printed a traceback. The probe is closed when either fails."""
    try:
        return tuple(_build(lambda: getattr(probe, name), env_id, env_kwargs, reading=name)
                     for name in ("observation_space", "action_space"))
    except EnvError:
        with contextlib.suppress(Exception):
            probe.close()
        raise


def _build(env_fn: Callable[[], gym.Env], env_id: str, env_kwargs: Optional[dict], index: Optional[int] = None,
           reading: str = "") -> gym.Env:
    """``env_fn()``, or one EnvError line; ``index``: the vector env's env being built, named with the
    user's line that raised (one env of N can fail where the probe did not: a port, a file, a licence);
    ``reading``: the attribute of the built env that ``env_fn`` reads, named at the end of the line."""
    building = f"building env '{env_id}'" if index is None else f"building env {index} of '{env_id}'"
    try:
        return env_fn()
    except gym.error.DependencyNotInstalled as e:
        extra = _extra_for(env_id)
        hint = install_hint(extra) if extra else str(e)
        raise EnvError(f"env '{env_id}' needs an optional dependency: {hint}") from None
    except EnvError:
        raise
    except SystemExit as e:
        raise EnvError(f"{building} ended the process: {exit_text(e)}{user_frame(e)}; {EXIT_FIX}") from None
    except Exception as e:
        line = None if reading else unknown_kwarg_line(env_id, e, env_kwargs)
        if line is not None:
            raise EnvError(line) from None
        e = creator_error(e)
        # an attribute read is no constructor call: no --env-kwargs hint
        hint = f" reading {reading}" if reading else missing_kwarg_hint(e, env_id)
        if index is None:  # the API keeps the constructor's traceback (the line names its frame all the same, as step()'s)
            raise EnvError(f"{building} raised {type(e).__name__}: {e}{user_frame(e)}{hint}") from e
        raise EnvError(f"{building} raised {type(e).__name__}: {' '.join(str(e).split())}{user_frame(e)}{hint}") from e


#: float32's largest value: Proxima trains in float32, and Gymnasium's vector env casts a wider
#: float into a float32 Box's buffer (1e39 becomes inf, and the env would be blamed for an inf)
F32_MAX = float(np.finfo(np.float32).max)
#: obs dtypes whose every value casts to float32 as a number: taken at a glance by EnvCalls
_CASTS_TO_F32 = frozenset(np.dtype(t) for t in (np.float32, np.float16, np.bool_, np.int8, np.int16, np.int32, np.int64,
                                                 np.uint8, np.uint16, np.uint32, np.uint64))
#: the kinds of number (numpy's dtype.kind) a declared dtype's kind holds as they are: the vector env copies an obs
#: into a buffer of the declared dtype, where a float in an integer or bool Box loses its fraction (under
#: --vector sync numpy refuses the copy with a TypeError) and an int in a bool Box becomes True. A signed int in an
#: unsigned Box is numpy's TypeError under sync too, and under async its shared memory wrapped -1 to 255 and 300
#: to 44 without a word: refused under both, as check-env does
_KINDS_HELD = {"f": "biuf", "i": "biu", "u": "bu", "b": "b"}


def kind_casts(dtype, declared) -> bool:
    """Whether numbers of ``dtype`` keep their kind in the ``declared`` dtype: floats only in a float Box, ints
    in an integer or float Box, bools anywhere. proxima train's rule for every obs (EnvCalls), and check-env's
    obs dtype rule for a list, whose Python numbers have a kind but no width of their own."""
    return np.dtype(dtype).kind in _KINDS_HELD.get(np.dtype(declared).kind, "")


def int_range_fault(values: np.ndarray, declared) -> Optional[tuple]:
    """(entry, value, what the cast makes of it, a dtype that holds the values) for the first integer of ``values``
    outside the integer dtype ``declared``'s range, else None. Both vector envs copy an obs into a buffer of the
    declared dtype with numpy's same_kind casting, which lets int16 into int8 and uint16 into uint8 through and
    wraps what does not fit (300 becomes 44; uint8 200 in int8, -56) without a word."""
    declared = np.dtype(declared)
    if values.dtype.kind not in "iu" or declared.kind not in "iu" or np.can_cast(values.dtype, declared, "safe") or not values.size:
        return None
    limits = np.iinfo(declared)
    lo, hi = values.min(), values.max()
    if lo >= limits.min and hi <= limits.max:
        return None
    i = int(np.flatnonzero(((values < limits.min) | (values > limits.max)).reshape(-1))[0])
    value = values.reshape(-1)[i]
    kind = "i" if lo < 0 else declared.kind  # the declared kind, unless it has no room for the negatives
    wider = [np.dtype(f"{kind}{n}") for n in (2, 4, 8) if n > declared.itemsize]
    if lo >= 0:  # then an unsigned dtype, of the declared width too, holds what no signed one does (uint64 above int64's max)
        wider += [np.dtype(f"u{n}") for n in (2, 4, 8) if n >= declared.itemsize]
    holds = next((f"np.{t}" for t in wider if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max), "a float dtype")
    return i, int(value), int(value.astype(declared)), holds


#: reward types EnvCalls.step takes at a glance (once within float32's range); any other gets the full check
_FAST_REWARDS = (float, int, np.float64, np.float32)
#: terminated/truncated types EnvCalls.step takes at a glance; a 0-d bool array gets the full check
_FAST_FLAGS = (bool, np.bool_)
#: the rule for terminated/truncated and the reward, proxima train's (EnvCalls) and check-env's alike, as
#: Gymnasium's env checker has it: a flag is a bool (0/1, None or "False" would be read by truth value: the
#: string ends every episode, None none), a reward a real number but not a bool
FLAG_RULE = "a bool (Python or numpy, or a 0-d bool array; not 0/1, None or a string)"
REWARD_RULE = "a real scalar (float, int or numpy scalar, or a 0-d array of one; not a bool)"
#: what to do about an env that calls sys.exit() in reset() or step()
EXIT_FIX = "raise an exception instead (Proxima names the env and step it came from)"


def is_flag(flag) -> bool:
    """FLAG_RULE: a Python or numpy bool, or a 0-d bool array (train's EnvCalls and check-env alike)."""
    return isinstance(flag, (bool, np.bool_)) or (isinstance(flag, np.ndarray) and flag.shape == () and flag.dtype == np.bool_)


def exit_text(e: SystemExit) -> str:
    """'sys.exit('license expired') (exit status 1)': what an env's SystemExit would have ended the process with."""
    code = e.code
    status = 0 if code is None else code if isinstance(code, int) else 1
    return f"sys.exit({'' if code is None else ' '.join(repr(code).split())[:120]}) (exit status {status})"


def image_bounds(part) -> Optional[tuple]:
    """(low, high) of the image ``part`` (an ObsPart) where a uint8 value can fall outside the range the
    network scales it by (nets.pixel_range), each None where none can (low 0, high 255); None for a
    0..255 image (the common case: nothing to check) or a part that is no image. EnvCalls refuses a
    value beyond it: an image declared Box(0, 1, ..., np.uint8) whose env returns 0..255 pixels would
    otherwise feed the network values up to 255 with no word (check-env and --debug-checks say so).
    A float Box(0, 1) of an image's shape is not checked here: it is an image only under --encoder cnn,
    chosen after the env is built, and a grid of probabilities under any other encoder trained as it was."""
    if part.layout is None or part.source is None:
        return None
    from ..nets import pixel_range

    low, high = pixel_range(part)
    low = math.ceil(low) if low > 0 else None
    high = math.floor(high) if high < 255 else None
    return None if low is None and high is None else (low, high)


def beyond_float32(x) -> bool:
    """A finite real number (a Python int of any size too) beyond float32's range: Proxima's float32
    rollouts would hold it as inf."""
    try:
        return math.isfinite(x) and abs(x) > F32_MAX
    except OverflowError:  # an int no float holds: 10**400
        return True


def tensor_numpy(x: torch.Tensor) -> tuple:
    """(array, None): a torch tensor's values as np.asarray reads them (a CPU tensor's memory, shared),
    which is how check-env reads an env's obs; (None, what it is) where numpy cannot read it: a tensor
    on another device (a GPU), one that requires grad, a dtype numpy lacks (bfloat16)."""
    if x.device.type != "cpu":
        return None, f"a torch tensor on {x.device}"
    try:
        return np.asarray(x), None
    except Exception as e:
        return None, f"a torch tensor that numpy cannot read ({type(e).__name__}: {' '.join(str(e).split())[:120]})"


#: the fix for a tensor numpy cannot read (tensor_numpy)
TENSOR_FIX = "return numpy arrays (tensor.detach().cpu().numpy())"


def number_text(x) -> str:
    """A number in a message, '1e+300' and an int of 400 digits alike ('1.00e+400')."""
    try:
        return f"{float(x):g}"
    except OverflowError:
        return format(decimal.Decimal(int(x)), ".3g")


class _ShortRepr(reprlib.Repr):
    """reprlib's bounded repr, also for a subclass of a builtin (a list subclass of 10**6 items is cut as
    a list is, not built whole by its own repr)."""

    def __init__(self):
        super().__init__()
        self.maxlevel, self.maxstring, self.maxlong, self.maxother = 2, 40, 40, 60
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = self.maxfrozenset = self.maxdeque = 6

    def repr1(self, x, level):
        for base in type(x).__mro__:
            if base is not object and hasattr(self, "repr_" + base.__name__):
                return getattr(self, "repr_" + base.__name__)(x, level)
        text = repr(x)  # reprlib's own repr_instance hides a raising __repr__ as '<B instance at 0x...>'
        return text if len(text) <= self.maxother else text[:self.maxother - 3] + "..."


def _short_repr(value) -> str:
    """An env's value, as the one-time note shows it: at most 60 characters, built without the value's
    whole repr (a 10**6-item list at every episode end), and '<unprintable TYPE>' where no repr can be
    made (a __repr__ that raises, an int past Python's digit limit): a logging value must not stop training."""
    try:
        return " ".join(_ShortRepr().repr(value).split())[:60]
    except Exception:  # noqa: BLE001 - the env's own __repr__: anything it raises
        return f"<unprintable {type(value).__name__}>"


class EnvCalls(gym.Wrapper):
    """Each env of the vector env: its exceptions and what it returns, named by env index and step.

    An exception from the user's ``reset``/``step`` becomes one EnvError naming the env index, its
    step, the exception and the user's line that raised it (the last frame outside Proxima,
    site-packages and the standard library; under ``--vector async`` too: the worker's EnvError
    reaches the main process as it is), not a traceback through Gymnasium's vector env.

    What it returns, at reset and at every step, where a fault was a ValueError deep in Gymnasium's
    vector env, a wrong number later, or check-env's diagnosis of an env (its own, seed 0) that may
    never show it: ``step`` 5 values (check-env's words for the old gym API); every observation
    part's shape against the declared space (a Dict: a dict holding each declared key), numbers
    (not strings or objects) of a kind the declared dtype holds (kind_casts: floats, a list's
    too, in an integer or bool Box are check-env's obs dtype fault, which the vector env would
    truncate or refuse with numpy's TypeError), ints within an integer Box's dtype range (int_range_fault: the
    vector env's cast would wrap uint16 300 in a uint8 Box to 44), within float32's range where the space is
    narrower than the obs (the vector env casts into a buffer of the space's dtype: float64 1e39
    would become inf), an image's dtype (float pixels in [0, 1] cast to uint8 would silently become zeros; what casts safely to
    uint8, as check-env's obs dtype rule says, goes on: uint8, and a bool mask as uint8 0/1); ``reset``
    (obs, info) as check-env reads it (checker.reset_returns: a tuple or list of 2; an obs returned
    alone, a 2-vector or a 2-key dict too, is named so, not unpacked into obs and info); the reward
    REWARD_RULE within float32's range; ``terminated`` and ``truncated`` FLAG_RULE (check-env's rules);
    ``info`` a dict. One line naming the env index and its step; a ``sys.exit()`` in the env's
    ``reset``/``step`` too, which would end the trainer's process with no word of the env (in an
    AsyncVectorEnv worker it ends the worker, named by the main process with its exit code). A
    torch tensor in the obs goes on as the numpy array np.asarray makes of it (check-env reads it so);
    one numpy cannot read (on a GPU, requiring grad) is such a line.

    At an episode's end ``step`` returns a copy of the obs: the vector env keeps that object as
    final_obs while it resets the env, and an env that returns its own buffer and zeroes it in
    reset() would otherwise turn the last state into the reset state (bootstrapped from it).

    ``info`` goes on to the vector env only with ``keep_info`` (a subclass whose _episode_stats reads
    it): Gymnasium's stacking of it fails on values whose shape varies from env to env. The one key
    the trainer reads, ``is_success`` of an episode's last step (charts/success_rate, as SB3's Monitor
    reads it), goes on always, as 0.0 or 1.0 (_success_flag); earlier steps' values are not read. So do,
    for an env with Gymnasium's RecordEpisodeStatistics among its wrappers, that wrapper's return and
    length of an episode that ends (recorded_episode), which GymnasiumEnv logs. This runs for every Gymnasium env step: for a plain Box the
    check is a tuple unpack, a few type checks and a shape compare (~0.2 us against CartPole's ~6 us
    step with its wrappers).
    """

    def __init__(self, env: gym.Env, index: int, layout: ObsLayout, env_id: str, check_cmd: Optional[str] = None,
                 keep_info: bool = False, in_worker: bool = False, seed: Optional[int] = None):
        super().__init__(env)
        # the vector env resets env i with seed + i: check-env's --seed of the suggested command
        self.seed = None if seed is None else int(seed) + index
        self.index, self.env_id, self.steps, self.keep_info = index, env_id, 0, keep_info
        # the env's own RecordEpisodeStatistics (its info key), whose figures of an episode go on at its end
        self._recorded_key = recorded_stats_key(env)
        # called with no arguments when an episode ends, before the vector env's same-step autoreset
        # (GymnasiumEnv.on_episode_end: a video's final frame)
        self.at_episode_end: Optional[Callable[[], None]] = None
        # a sys.exit() in the trainer's own process is made this env's one line; in an AsyncVectorEnv worker it
        # ends the worker, which the main process names with its exit code (GymnasiumEnv._workers_ended)
        self.in_worker = in_worker
        self.check_cmd = check_cmd or check_env_cmd(env_id)
        self.is_dict = layout.is_dict
        self.parts = layout.parts
        # each part's dtypes taken at a glance: those that cast to float32 as they are and whose kind the declared
        # dtype holds, and the declared one (the vector env's buffer holds it unchanged; pack_numpy judges its values).
        # An integer or bool Box takes only what casts safely: the vector env's cast of a wider int wraps what does not fit
        declared = [np.dtype(getattr(p.source, "dtype", np.float32)) for p in layout.parts]
        self._dtypes = [frozenset(d for d in _CASTS_TO_F32 | {dt} if (kind_casts(d, dt) if dt.kind == "f" else np.can_cast(d, dt, "safe")))
                        for dt in declared]
        # what else goes at a glance: True, in a float Box, floats within float32's range; in an integer Box,
        # (kinds, min, max): ints of a kind it holds within its dtype's range (an int64 obs in an int32 Box, a common one)
        self._wider = [True if dt.kind == "f" else
                       (tuple(_KINDS_HELD[dt.kind].replace("b", "")), int(np.iinfo(dt).min), int(np.iinfo(dt).max))
                       if dt.kind in "iu" else None for dt in declared]
        # each image's declared range where a uint8 can fall outside it (image_bounds; None for 0..255):
        # the network scales the image by that range, so a value beyond it reaches the network outside [0, 1]
        self._bounds = [image_bounds(p) for p in layout.parts]
        # a plain Box: (declared shape, is an image), compared with the obs's without a loop
        self._box = None if layout.is_dict else (layout.parts[0].shape, layout.parts[0].layout is not None)
        # step()'s fast path: the declared shape of a plain Box that is not an image (None: always the full check)
        self._shape = layout.parts[0].shape if self._box is not None and not self._box[1] else None
        # a shape-() Box's actions reach each env from the vector env's (N,) batch as numpy scalars; the env gets
        # what action_space.sample() gives, a 0-d ndarray (contains() of a scalar warns "Casting input x")
        space = env.action_space
        self._scalar_action = space.dtype if isinstance(space, gym.spaces.Box) and space.shape == () else None

    def proxima_built(self) -> bool:
        """True: GymnasiumEnv asks each AsyncVectorEnv worker this once built (an _Unbuilt raises its EnvError)."""
        return True

    def proxima_reseed(self, seed: Optional[int], resumed_at: int) -> None:
        """GymnasiumEnv.reseed_workers' call in each AsyncVectorEnv worker (_seed_worker); a sync env's global
        RNGs are the main process's, which the resume restores."""
        if self.in_worker:
            _seed_worker(seed, self.index, resumed_at)

    def _bad(self, what: str, when: str, fix: str) -> EnvError:
        return EnvError(f"env '{self.env_id}': env {self.index} returned {what} at {when}; {fix} (check with: {self.check_with()})")

    def check_with(self) -> str:
        """The check-env command that reaches this env's step: check-env's default 200 steps certify an env
        that breaks later. The run's --env-kwargs ride in check_cmd, which GymnasiumEnv builds."""
        return f"{self.check_cmd}{check_env_flags(self.steps, self.seed)}"

    @staticmethod
    def _casts(x, dtypes: frozenset, wider) -> bool:
        """At a glance: ``x``'s values reach Proxima's float32 as they are (a dtype of ``dtypes``, or, in a float
        Box (``wider`` True), floats within float32's range; ~2 us for a float64 obs in a float32 Box, which the
        vector env casts; in an integer Box (``wider`` (kinds, min, max)), ints within its dtype's range). False
        for a dtype that is not numpy's (a torch tensor's: _check_part reads it as numpy)."""
        dtype = getattr(x, "dtype", None)
        if dtype in dtypes:
            return True
        if wider is True:
            return getattr(dtype, "kind", None) == "f" and np.abs(x).max() <= F32_MAX
        return (wider is not None and getattr(dtype, "kind", None) in wider[0]
                and (x.size == 0 or (wider[1] <= x.min() and x.max() <= wider[2])))

    def _check(self, obs, when: str):
        """``obs`` if it is right, with a torch tensor (of a part) read as numpy; else EnvError."""
        box = self._box
        if box is not None:  # the common case first: one getattr, one tuple compare, one set lookup
            if (getattr(obs, "shape", None) != box[0] or not self._casts(obs, self._dtypes[0], self._wider[0])
                    or (box[1] and obs.dtype != np.uint8)):
                obs = self._check_part(obs, self.parts[0], self._dtypes[0], when)
            if self._bounds[0] is not None:
                self._check_bounds(obs, self.parts[0], self._bounds[0], when)
            return obs
        if not isinstance(obs, dict):
            keys = ", ".join(repr(p.key) for p in self.parts)
            raise self._bad(f"an observation of type {type(obs).__name__}", when,
                            f"the observation space is a Dict: return a dict with the keys {keys}")
        given = obs
        for part, dtypes, wider, bounds in zip(self.parts, self._dtypes, self._wider, self._bounds):
            if part.key not in obs:
                raise self._bad(f"an observation without the key '{part.key}'", when,
                                f"the observation space declares it: return obs['{part.key}'] too")
            x = obs[part.key]
            if (getattr(x, "shape", None) != part.shape or not self._casts(x, dtypes, wider)
                    or (part.layout is not None and x.dtype != np.uint8)):
                y = self._check_part(x, part, dtypes, when)
                if y is not x:  # a tensor read as numpy: in a dict of our own, the env's stays as it gave it
                    obs = dict(obs) if obs is given else obs
                    obs[part.key] = y
                x = y
            if bounds is not None:
                self._check_bounds(x, part, bounds, when)
        return obs

    def _check_bounds(self, x: np.ndarray, part, bounds: tuple, when: str) -> None:
        """EnvError when the uint8 image ``x`` (checked already: a numpy array of the part's shape) holds a
        value outside ``bounds`` (image_bounds): a max and/or a min of a uint8 array, ~2 us for 64x64x3."""
        low, high = bounds
        value = side = None
        if high is not None and x.size and x.max() > high:
            value, side = x.max(), "high"
        elif low is not None and x.size and x.min() < low:
            value, side = x.min(), "low"
        if value is None:
            return
        where = f" at key '{part.key}'" if part.key is not None else ""
        declared = "observation_space" + (f"['{part.key}']" if part.key is not None else "")
        lo, hi = box_range(part.source)
        value = int(value)
        from ..nets import pixel_range

        scale_lo, scale_hi = pixel_range(part)
        fed = (value - scale_lo) / (scale_hi - scale_lo)
        raise self._bad(f"an image value {value}{where}, {'above' if side == 'high' else 'below'} its declared {side} "
                        f"{number_text(hi if side == 'high' else lo)}", when,
                        f"the network scales this image by {declared}'s range {number_text(lo)}..{number_text(hi)} to "
                        f"[0, 1], so {value} would reach it as {fed:.4g}: declare Box(0, 255, {part.shape}, np.uint8) for "
                        f"0..255 pixels, or return values within {number_text(lo)}..{number_text(hi)}")

    def _check_part(self, x, part, dtypes: frozenset, when: str):
        """The slow path: ``x`` (one part of the obs) did not pass at a glance; raise if it is wrong, else
        return it (a torch tensor as the numpy array the vector env then reads)."""
        where = f" at key '{part.key}'" if part.key is not None else ""
        if isinstance(x, torch.Tensor):  # an env of a torch project: read as check-env reads it (np.asarray)
            x, what = tensor_numpy(x)
            if x is None:
                raise self._bad(f"{what}{where}", when, TENSOR_FIX)
        shape = getattr(x, "shape", None)
        if shape is None:  # a list or a Python number: the shape numpy gives it
            try:
                shape = np.shape(x)
            except Exception:
                shape = None
        shape = None if shape is None else tuple(shape)
        if part.layout is not None:
            dtype = getattr(x, "dtype", type(x).__name__)
            if isinstance(x, np.ndarray) and dtype == np.bool_ and shape == part.shape:
                # a mask (frame > 0): it casts safely to uint8 (0/1), the rule of check-env's obs dtype and of
                # every other part here; the vector env's buffer is uint8, cast here so no backend need do it
                return x.astype(np.uint8)
            if dtype != np.uint8 or shape != part.shape:
                # the range the network maps to [0, 1]: a 0/1 board Box(0, 1) is not to be scaled to 0..255
                (lo, hi), _ = uint8_pixels(part.source) if part.source is not None else ((0, 255), "")
                raise self._bad(f"an image{where} of dtype {dtype} shape {shape}", when,
                                f"the observation space declares uint8 {part.shape} (return np.uint8 pixels {lo}..{hi} of that shape)")
            return x
        declared = "observation_space" + (f"['{part.key}']" if part.key is not None else "")
        if shape != part.shape:
            got = f"shape {shape}" if shape is not None else type(x).__name__
            raise self._bad(f"an observation{where} of {got}", when, f"{declared} declares shape {part.shape}: return an array of that shape")
        values = np.asarray(x)
        if values.dtype.kind not in "biuf":  # strings, objects: the vector env's cast fails or makes nonsense
            raise self._bad(f"an observation{where} of dtype {values.dtype}", when,
                            f"{declared} holds numbers: return a numeric array")
        dtype = np.dtype(getattr(part.source, "dtype", np.float32))
        if not kind_casts(values.dtype, dtype):  # check-env's obs dtype fault, in its words
            from .checker import _dtype_fix

            name = "obs" + (f"['{part.key}']" if part.key is not None else "")
            name = name if isinstance(x, np.ndarray) else f"np.asarray({name})"
            raise self._bad(f"an observation{where} of dtype {values.dtype}", when,
                            f"obs dtype: {declared}.dtype is {dtype}, and {values.dtype} "
                            f"{_dtype_fix(values, part.source, name)}")
        fault = int_range_fault(values, dtype)
        if fault is not None:
            i, value, wrapped, holds = fault
            limits = np.iinfo(dtype)
            raise self._bad(f"an observation value {value}{where} (entry {i}) outside {dtype}'s range [{limits.min}, "
                            f"{limits.max}]", when, f"{declared}.dtype is {dtype}, and the vector env's cast would make it "
                            f"{wrapped}: declare a wider dtype ({holds}) or clip/scale the values in the env")
        if values.dtype not in dtypes and values.dtype.kind == "f":  # a float wider than the space: cast before Proxima sees it
            big = np.isfinite(values) & (np.abs(values) > F32_MAX)
            if big.any():
                i = int(np.flatnonzero(big.reshape(-1))[0])
                raise self._bad(f"an observation value {number_text(values.reshape(-1)[i])}{where} (entry {i}) beyond float32's "
                                f"range (+-{F32_MAX:.3g})", when, "Proxima trains in float32: scale it down in the env")
        return x

    def _check_reward(self, reward, when: str) -> None:
        """REWARD_RULE (check-env's "reward type") within float32's range; NaN/inf go on to the trainer's guard."""
        fix = "step() returns the reward as one number (float(reward))"
        if isinstance(reward, np.ndarray):
            if reward.ndim or reward.dtype.kind not in "iuf":
                raise self._bad(f"a reward of shape {reward.shape} dtype {reward.dtype}", when,
                                fix + (f": {REWARD_RULE}" if reward.dtype == np.bool_ else ""))
        elif isinstance(reward, (bool, np.bool_)):  # a number to Python, but no reward to Gymnasium's checker nor to check-env
            raise self._bad(f"a reward of type {type(reward).__name__} ({reward})", when, f"{fix}: {REWARD_RULE}")
        elif not isinstance(reward, numbers.Real):  # None, a string, a complex, a list
            raise self._bad(f"a reward of type {type(reward).__name__} ({' '.join(repr(reward).split())[:40]})", when, fix)
        if beyond_float32(reward):
            raise self._bad(f"a reward of {number_text(reward)}, beyond float32's range (+-{F32_MAX:.3g})", when,
                            "Proxima trains in float32: scale it down in the env")

    def _check_flag(self, flag, name: str, when: str) -> None:
        """FLAG_RULE (check-env's "terminated type"/"truncated type"): the vector env reads a flag by its truth
        value, so "False" (a string) would end every episode after one step and None never end one."""
        if is_flag(flag):
            return
        if isinstance(flag, np.ndarray):
            what = f"{name} of shape {flag.shape} dtype {flag.dtype}"
        else:
            what = f"{name} of type {type(flag).__name__} ({' '.join(repr(flag).split())[:40]})"
        raise self._bad(what, when, f"step() returns {name} as {FLAG_RULE}")

    def _exited(self, e: SystemExit, when: str) -> EnvError:
        return EnvError(f"env '{self.env_id}': env {self.index} ended the process with {exit_text(e)}{user_frame(e)} at {when}; "
                        f"{EXIT_FIX}")

    def _raised(self, e: Exception, when: str) -> EnvError:
        at = user_frame(e)
        message = " ".join(str(e).split())
        hint = ""
        missing = RESET_KWARG.search(message) if isinstance(e, TypeError) and when.startswith("reset") else None
        if missing:  # an old-gym reset(self) or reset(self, seed=None)
            hint = f"; reset() must take {missing.group(1)}, as Gymnasium's vector envs call it: {RESET_FIX}"
        return EnvError(f"env '{self.env_id}': env {self.index} raised {type(e).__name__}: {message}{at} at {when}{hint}")

    def reset(self, **kwargs):
        when = f"reset (after env step {self.steps})"
        if kwargs.get("seed") is not None:  # check-env's --seed: an evaluation's is episode_seeds', not seed + index
            self.seed = int(kwargs["seed"])
        try:
            out = self.env.reset(**kwargs)
        except EnvError:
            raise
        except Exception as e:
            raise self._raised(e, when) from e  # the Python API keeps the env's own traceback (the CLI prints one line)
        except SystemExit as e:  # in the trainer's process (--vector sync) it would end the run with no word of the env
            if self.in_worker:
                raise
            raise self._exited(e, when) from None
        if type(out) is tuple and len(out) == 2 and type(out[1]) is dict:  # the common case at a glance
            obs, info = out
        else:  # check-env's rule and words: an obs returned alone (a 2-vector, a 2-key dict) is not unpacked as (obs, info)
            from .checker import NO_OBS, reset_returns

            obs, info, violation = reset_returns(out, self.observation_space, f"at {when}")
            if violation is not None:
                if obs is not NO_OBS and obs is not out:  # (obs, info) with info no dict
                    raise self._bad(f"info of type {type(info).__name__}", when,
                                    "reset() returns (obs, info) with info a dict (return {} for none)")
                raise EnvError(f"env '{self.env_id}' breaks the env contract at env {self.index}: {violation} "
                               f"(check with: {self.check_with()})")
        return self._check(obs, when), (info if self.keep_info else {})

    def step(self, action):
        if self._scalar_action is not None:
            action = np.asarray(action, self._scalar_action)
        try:
            out = self.env.step(action)
        except EnvError:
            raise
        except (Exception, SystemExit) as e:
            if isinstance(e, SystemExit) and self.in_worker:
                raise
            shown = " ".join(str(action).split())
            when = f"env step {self.steps + 1} (action {shown[:60] + '...' if len(shown) > 60 else shown})"
            raise (self._exited(e, when) if isinstance(e, SystemExit) else self._raised(e, when)) from e
        self.steps += 1
        # the common case in a few operations (a plain non-image Box, an ndarray obs of a dtype that casts,
        # a float reward in range, bool flags, a dict info): this runs for every env step; anything else takes the full check
        try:
            obs, reward, terminated, truncated, info = out
            fast = (type(info) is dict and type(terminated) in _FAST_FLAGS and type(truncated) in _FAST_FLAGS
                    and self._shape is not None and obs.shape == self._shape and self._casts(obs, self._dtypes[0], self._wider[0])
                    and type(reward) in _FAST_REWARDS and -F32_MAX <= reward <= F32_MAX)
        except Exception:
            fast = False
        if not fast:
            obs = self._check_step(out)
            _, reward, terminated, truncated, info = out
        if terminated or truncated:  # the vector env keeps this obs object as final_obs, then resets the env:
            obs = _own(obs, self.parts)  # an env that returns its own buffer and zeroes it in reset() would change it
            if self.at_episode_end is not None:  # the env is still in its final state: the reset comes after this returns
                self.at_episode_end()
            kept = info if self.keep_info else {}
            if "is_success" in info:
                flag = self._success_flag(info["is_success"])
                kept = {**{k: v for k, v in kept.items() if k != "is_success"}, **({} if flag is None else {"is_success": flag})}
            if self._recorded_key is not None and self._recorded_key in info:  # the wrapper saw this end (not a
                # lost life outside it): its figures, as two scalars the vector env stacks; NaN where unreadable
                recorded = recorded_episode(info[self._recorded_key]) or (math.nan, 0)
                kept = {**kept, _RECORDED_RETURN: recorded[0], _RECORDED_LENGTH: recorded[1]}
            return obs, reward, terminated, truncated, kept
        return obs, reward, terminated, truncated, (info if self.keep_info else {})

    def _success_flag(self, value) -> Optional[float]:
        """success_flag(value), keeping what an unusable value was (``bad_success``) for the vector env's note."""
        flag = success_flag(value)
        if flag is not None and math.isnan(flag):
            self.bad_success = f"{unusable_success(value)} at env step {self.steps}"
        return flag

    def _check_step(self, out):
        """The checked obs of ``out`` (what step returned; _check), or EnvError."""
        when = f"env step {self.steps}"
        if not isinstance(out, (tuple, list)) or len(out) != 5:
            from .checker import step_returns_violation  # the old gym API's 4 values, in check-env's words

            raise EnvError(f"env '{self.env_id}' breaks the env contract at env {self.index}: "
                           f"{step_returns_violation(out, f'at step {self.steps}')} (check with: {self.check_with()})")
        if not isinstance(out[4], dict):
            raise self._bad(f"info of type {type(out[4]).__name__}", when, "step() returns info as a dict (return {} for none)")
        obs = self._check(out[0], when)
        self._check_reward(out[1], when)
        self._check_flag(out[2], "terminated", when)
        self._check_flag(out[3], "truncated", when)
        return obs


#: where Proxima's own code lives: an exception's location skips its frames
_PROXIMA_DIR = str(Path(__file__).resolve().parents[1]) + os.sep


def _library_dirs() -> tuple:
    import sysconfig

    paths = sysconfig.get_paths()
    dirs = {paths.get("stdlib"), paths.get("platstdlib"), os.path.dirname(os.__file__)}
    return tuple(str(Path(d).resolve()) + os.sep for d in dirs if d)


_LIBRARY_DIRS = _library_dirs()


def _is_library(filename: str) -> bool:
    """A frame of Proxima, an installed package (site-packages, dist-packages), the standard library
    or frozen/generated code, rather than the user's env."""
    if filename.startswith("<") or not filename.endswith(".py"):  # numpy's random is a .pyx frame with no real path
        return True
    path = os.path.realpath(filename) if os.path.isabs(filename) else filename
    parts = Path(path).parts
    return (path.startswith(_PROXIMA_DIR) or "site-packages" in parts or "dist-packages" in parts
            or path.startswith(_LIBRARY_DIRS))


def success_flag(value) -> Optional[float]:
    """``info["is_success"]`` of an episode's last step as a float in [0, 1]: a bool, a number in [0, 1]
    (a partial success, averaged as SB3's Monitor does), numpy's or torch's, or any of them in a
    one-element array; None where not reported (as SB3 reads it). Anything else is NaN, which the
    vector env leaves out of the rate with one note (_count_successes), and check-env notes: the key
    feeds a logging column only, so a value the rate cannot use must not stop an env that trains."""
    if value is None:
        return None
    v = value
    if (isinstance(v, np.ndarray) and v.size == 1) or (isinstance(v, torch.Tensor) and v.numel() == 1):
        v = v.reshape(()).item()
    if isinstance(v, (bool, np.bool_)):
        return float(v)
    if isinstance(v, numbers.Real) and 0 <= v <= 1:  # NaN fails both comparisons
        return float(v)
    return math.nan


def unusable_success(value) -> str:
    """"'yes' (str)": an info["is_success"] that success_flag makes NaN, as the notes show it."""
    return f"{_short_repr(value)} ({type(value).__name__})"


def user_frame(e: BaseException) -> str:
    """' (file.py:LINE)' of the line that raised ``e`` in the user's code: the last frame of its
    traceback outside Proxima, site-packages and the standard library (a user's env that calls
    numpy names its own line, not numpy's); when there is none (a registered Gymnasium env), the
    last frame outside Proxima; '' when there is none of either."""
    tb = traceback.extract_tb(e.__traceback__)
    frame = next((f for f in reversed(tb) if not _is_library(f.filename)), None)
    if frame is None:
        frame = next((f for f in reversed(tb) if not os.path.realpath(f.filename).startswith(_PROXIMA_DIR)
                      and not f.filename.startswith("<")), None)
    return f" ({Path(frame.filename).name}:{frame.lineno})" if frame is not None else ""


def count_episodes(returns: np.ndarray, lengths: np.ndarray, reward: np.ndarray, done: np.ndarray) -> tuple:
    """Host-side episode statistics of N envs: add this step's ``reward`` to the running ``returns``
    and ``lengths`` (N,) (updated in place), return (return, length) (N,) of the episodes that ended
    (``done``), 0 elsewhere, and restart the counters of those envs."""
    returns += reward
    lengths += 1
    ep_ret = np.where(done, returns, 0.0)
    ep_len = np.where(done, lengths, 0)
    returns[done] = 0
    lengths[done] = 0
    return ep_ret, ep_len


#: the info keys under which EnvCalls passes on, at an episode's end, the return and length that the env's own
#: RecordEpisodeStatistics recorded (GymnasiumEnv._episode_stats logs them in place of the summed rewards)
_RECORDED_RETURN, _RECORDED_LENGTH = "proxima_recorded_return", "proxima_recorded_length"


def recorded_stats_key(env) -> Optional[str]:
    """The info key (``stats_key``, default "episode") of the innermost Gymnasium RecordEpisodeStatistics
    among ``env``'s wrappers, None without one. Innermost: the one nearest the game, under any
    reward-changing wrapper (CleanRL's ClipReward(RecordEpisodeStatistics(env))), records its score."""
    key = None
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.RecordEpisodeStatistics):
            key = getattr(env, "_stats_key", "episode")
        env = env.env
    return key


def recorded_episode(stats) -> Optional[tuple]:
    """(return float, length int) of RecordEpisodeStatistics' ``info[key]`` ({"r", "l", "t"}) at an
    episode's end; None where it is not that (a user's env may put anything under the key): the
    adapter's own sums stand in for it then."""
    if not isinstance(stats, dict):
        return None
    r, length = stats.get("r"), stats.get("l")
    if isinstance(r, np.ndarray) and r.size == 1:
        r = r.reshape(()).item()
    if isinstance(length, np.ndarray) and length.size == 1:
        length = length.reshape(()).item()
    if (not isinstance(r, numbers.Real) or isinstance(r, (bool, np.bool_)) or not math.isfinite(r) or abs(r) > F32_MAX
            or not isinstance(length, numbers.Integral) or isinstance(length, (bool, np.bool_)) or length < 1):
        return None
    return float(r), int(length)


#: the action space of each GymnasiumEnv built, for action_spaces_built()
_BUILT_ACTION_SPACES = Sightings()


def action_spaces_built():
    """The action spaces of the Gymnasium-backed envs built inside the ``with``, in order: ``train
    --dry-run`` prints a run's note on a Box range (trainer._note_action_scale) from the one env its
    checks build (run_setup.preflight, which returns none of it), rather than build the user's env
    a second time. The native envs' Box ranges never call for that note."""
    return _BUILT_ACTION_SPACES.watch()


class GymnasiumEnv(BatchedEnv):
    """N copies of a Gymnasium env in a Sync/AsyncVectorEnv (same-step autoreset), as tensors."""

    backend = "gymnasium"
    can_save_state = False

    def __init__(self, env_id: str, num_envs: int, device="cpu", vector: str = "sync", seed: Optional[int] = None,
                 render_mode: Optional[str] = None, env_fn: Optional[Callable[[], gym.Env]] = None,
                 env_kwargs: Optional[dict] = None):
        """env_fn: a factory for one env (default: resolved from ``env_id`` and ``env_kwargs``; Atari
        passes its wrapped ALE)."""
        self.env_id = env_id
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self._seed = seed
        env_fn = env_fn if env_fn is not None else resolve_env_fn(env_id, render_mode, env_kwargs)
        probe = _probe(env_fn, env_id, env_kwargs)
        obs_space, act_space = _probe_spaces(probe, env_id, env_kwargs)
        probe.close()
        check_spaces(env_id, obs_space, act_space)
        # a gymnasium.wrappers.ClipAction's Box(-inf, inf) remembers the Box it clips to (the action-scale note's)
        declared, act_space = act_space, proxima_action_space(act_space, probe)
        self._raw_obs_space = obs_space
        self.layout = obs_layout(obs_space, env_id)
        self.single_observation_space = tensor_space(obs_space, self.layout)
        self.single_action_space = act_space
        _BUILT_ACTION_SPACES.report(act_space)
        self._built_key = _built_key(env_id, env_kwargs)
        note = script_env_note(env_id)
        # Gymnasium's Normalize* wrappers in the env's own stack: their statistics start afresh with these envs
        # (an evaluation's result says so: evaluate.normalizer_note)
        self.normalize_wrappers = normalize_wrappers(probe)
        # the returns an evaluation sums are of NormalizeReward's scaled rewards (evaluate.rewards_scaled_note)
        self.rewards_scaled = rewards_scaled(probe)
        # ... and of a TransformReward's or ClipReward's (a factory's own clip or scale): evaluate.rewards_transformed_note
        self.rewards_transformed = rewards_transformed(probe)
        _BUILT[self._built_key] = {"action_space": act_space, "wrappers": self.normalize_wrappers, "spread": [],
                                   "notes": [note] if note else []}
        # read here, in this process: an AsyncVectorEnv's worker would pickle its env's spec to tell it, which
        # fails on a factory's lambdas (TransformObservation's) and prints the worker's traceback
        self.probe_time_limit = time_limit_of(probe)
        # the float64 parts whose spread across the envs' first observations float32 may lose: told once, from
        # the first reset (no step pays for it); one env has no spread to judge
        self._spread_parts = [p for p in self.layout.parts if isinstance(p.source, gym.spaces.Box)
                              and spread_dtype(p.source.dtype)]
        if self.num_envs < 2:
            self._spread_parts = []
        cls = gym.vector.AsyncVectorEnv if vector == "async" else gym.vector.SyncVectorEnv
        self.check_cmd = check_env_cmd(env_id, env_kwargs)
        # the envs' info reaches the vector env only where _episode_stats reads it (Atari's game statistics): EnvCalls
        keep_info = type(self)._episode_stats is not GymnasiumEnv._episode_stats
        env_fns = [_checked(env_fn, i, self.layout, env_id, self.check_cmd, keep_info, seed, env_kwargs, (obs_space, declared))
                   for i in range(self.num_envs)]
        built: list = []  # SyncVectorEnv drops the envs it built when a later one raises: kept here to close them
        if vector != "async":
            env_fns = [_kept(fn, built) for fn in env_fns]
        # from the constructor on: it already asks the workers for their spaces
        self._unquiet = _quiet_worker_env_errors() if vector == "async" else (lambda: None)
        self._worker_gone = False  # an AsyncVectorEnv worker ended: close() ends the rest without waiting
        try:
            self.envs = cls(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        except BaseException as e:
            self._unquiet()
            for env in built:
                with contextlib.suppress(Exception):  # the line that matters is the one below
                    env.close()
            if isinstance(e, EnvError) or not isinstance(e, Exception):  # an EnvError: one env's constructor (_checked)
                raise
            raise EnvError(f"building {self.num_envs} x '{env_id}' ({vector}) raised {type(e).__name__}: {e}") from None
        finally:
            built.clear()  # the vector env holds its envs; the factories it keeps would hold them too
        if vector == "async":
            try:  # a worker whose env's constructor raised holds the EnvError (_Unbuilt): raised here, the others closed
                self.envs.call("proxima_built")
            except BaseException:
                self.close()
                raise
        self._ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self._ep_length = np.zeros(self.num_envs, dtype=np.int64)
        # the env records its episodes (RecordEpisodeStatistics): their figures are logged; without, no step looks for them.
        # Public: an evaluation that sums the rewards itself takes the episodes' figures from info where this is True
        self.records_episodes = recorded_stats_key(probe) is not None
        self._index_range = _start_range(act_space)
        self._started = False
        self._steps = 0  # vector steps since construction (for error messages)
        # finished episodes that reported info["is_success"], and the successes among them, since take_successes:
        # Python numbers, added on the host where the vector env's arrays are (no tensor per step)
        self._success_sum, self._success_count = 0.0, 0
        #: {env index: its info["is_success"] as a float in [0, 1]} of the episodes that ended at the last step and
        #: reported a usable one: what an evaluation reads of each env's first episode (evaluate.first_episodes)
        self.episode_successes: dict = {}
        #: what the values feed, for the note on one no rate can use: make_eval_env names the evaluation's
        self.success_column = "charts/success_rate"

    def _obs(self, obs) -> torch.Tensor:
        """(N, *obs_shape) tensor: float32 vectors, uint8 pixels, or packed Dict keys (spaces.py)."""
        return torch.as_tensor(self._pack(obs, self.num_envs, "reset"), device=self.device)

    def _pack(self, obs, num: int, when: str) -> np.ndarray:
        """pack_numpy, its EnvError (a value beyond float32's range) naming this env and ``when``."""
        try:
            return pack_numpy(obs, self.layout, num)
        except EnvError as e:
            raise EnvError(f"env '{self.env_id}': {e} (at {when})") from None
        except (ValueError, TypeError) as e:  # what EnvCalls' checks let through (values that are no numbers)
            raise EnvError(f"env '{self.env_id}': the observations at {when} cannot be read as {self.layout.dtype} "
                           f"{self.layout.shape} arrays ({type(e).__name__}: {' '.join(str(e).split())}); "
                           f"check with: {self.check_cmd}") from None

    def _raise_failure(self, e: BaseException, when: str) -> NoReturn:
        """Raise what the user sees of ``e``, raised by the vector env at ``when`` ('reset', 'vector step
        23'): one line for a worker gone and for results Gymnasium could not read (what EnvCalls' checks
        let through), ``e`` itself otherwise. A worker gone: from now on close() does not wait on the workers."""
        if isinstance(e, (EOFError, ConnectionError)):  # an AsyncVectorEnv worker is gone
            self._worker_gone = True
            raise EnvError(f"env '{self.env_id}' (--vector async): {self._workers_ended(when)}") from None
        # at reset, what EnvCalls' checks let through is left to the trainer's check-env diagnosis
        if isinstance(e, (ValueError, TypeError)) and when != "reset":
            raise EnvError(f"env '{self.env_id}': Gymnasium's vector env could not read the envs' results at {when} "
                           f"({type(e).__name__}: {' '.join(str(e).split())[:200]}); check with: {self.check_cmd}") from None
        raise e

    def _workers_ended(self, when: str) -> str:
        """'the worker process of env 1 ended at vector step 23 (exit code 3: ...)': which ended, from their exit codes."""
        from multiprocessing.connection import wait

        processes = getattr(self.envs, "processes", [])
        ready = wait([p.sentinel for p in processes], timeout=1.0)
        for p in processes:
            if p.sentinel in ready:  # exiting: its pipes close a moment before it can be reaped for its exit code
                p.join(timeout=5)
        ended = [(i, p.exitcode) for i, p in enumerate(processes) if p.exitcode is not None]
        if not ended:
            return f"a worker process ended at {when}: killed by a signal to the whole process group, or out of memory?"
        envs = ", ".join(str(i) for i, _ in ended)
        who = f"the worker process of env {envs}" if len(ended) == 1 else f"the worker processes of envs {envs}"
        return f"{who} ended at {when} ({_exit_reason(ended[0][1])})"

    def reseed_workers(self, resumed_at: int) -> None:
        """Reseed each AsyncVectorEnv worker's global RNGs for a resume at iteration ``resumed_at`` (train_state.restore,
        before it restarts the episodes): a worker seeded only by the run's seed and its index would replay the
        np.random numbers of the run's start after every resume. No-op under sync (the main process's restored
        streams continue) and for ``resumed_at`` 0, a fresh run's seeding."""
        if not isinstance(self.envs, gym.vector.AsyncVectorEnv) or not resumed_at:
            return
        try:
            self.envs.call("proxima_reseed", self._seed, int(resumed_at))
        except BaseException as e:
            self._raise_failure(e, "resume")

    def reset(self, seed: Union[int, list, None] = None) -> torch.Tensor:
        """``seed``: an int (env i gets ``seed + i``, Gymnasium's convention) or a list of one per env
        (evaluate.episode_seeds); None: the constructor's seed on the first reset, else no reseed."""
        seed = self._seed if seed is None and not self._started else seed
        self._started = True
        try:
            obs, _ = self.envs.reset(seed=seed)
        except BaseException as e:
            self._raise_failure(e, "reset")
        self._ep_return[:] = 0
        self._ep_length[:] = 0
        packed = self._obs(obs)
        if self._spread_parts:
            self._note_spread(obs)
        return packed

    def _note_spread(self, obs) -> None:
        """float64_spread_note of each float64 part across the envs' first observations, for the run's notes."""
        parts, self._spread_parts = self._spread_parts, []
        notes = []
        for part in parts:
            spread = Float64Spread(part.source.dtype)
            try:
                spread.add(np.asarray(obs if part.key is None else obs[part.key]).reshape(self.num_envs, -1))
            except (ValueError, TypeError, KeyError):  # what the obs checks let through: not this note's to name
                continue
            name = "obs" if part.key is None else f"obs[{part.key!r}]"
            note = float64_spread_note(name, part.shape, spread, f"across the {self.num_envs} envs' first observations")
            if note:
                notes.append(f"env '{self.env_id}': {note} (`{self.check_cmd}` judges it over more steps)")
        record = _BUILT.get(self._built_key)
        if record is not None:
            record["spread"] = notes

    def step(self, action: torch.Tensor):
        # the space's own values (a start included: BatchedEnv's contract), flat or shaped, as each env takes
        # them: a copy in the space's shape and dtype, Box actions clipped to the bounds
        a = action.detach().cpu().numpy() if isinstance(action, torch.Tensor) else np.asarray(action)
        a = space_actions(a, self.single_action_space, self.num_envs)
        if self._index_range is not None:
            self._check_start(a)
        if self.episode_successes:
            self.episode_successes = {}
        try:
            obs, reward, terminated, truncated, info = self.envs.step(a)
        except BaseException as e:
            self._raise_failure(e, f"vector step {self._steps + 1}")
        reward = np.asarray(reward, dtype=np.float64)
        done = np.logical_or(terminated, truncated)
        ep_ret, ep_len = self._episode_stats(reward, done, info)
        self._steps += 1
        next_obs = self._pack(obs, self.num_envs, f"vector step {self._steps}")
        final = next_obs.copy()
        if done.any():
            self._count_successes(info.get("final_info"), done)
            mask = info.get("_final_obs", done)
            for i in np.flatnonzero(mask):
                final[i] = self._pack(_one(info["final_obs"][i], self.layout), 1, f"env {i}'s final obs, vector step {self._steps}")[0]
        dev = self.device
        out_info = {
            "final_obs": torch.as_tensor(final, device=dev),
            "episode_return": torch.as_tensor(ep_ret, dtype=torch.float32, device=dev),
            "episode_length": torch.as_tensor(ep_len, device=dev),
        }
        return (
            torch.as_tensor(next_obs, device=dev),
            torch.as_tensor(reward, dtype=torch.float32, device=dev),
            torch.as_tensor(np.asarray(terminated, dtype=bool), device=dev),
            torch.as_tensor(np.asarray(truncated, dtype=bool), device=dev),
            out_info,
        )

    def _check_start(self, a: np.ndarray) -> None:
        """EnvError for actions outside a Discrete/MultiDiscrete space whose start is not 0 (step takes the
        space's values): the agent's index from 0, passed as it is, would reach the env as another action."""
        low, high = self._index_range
        flat = a.reshape(self.num_envs, -1)
        bad = (flat < low) | (flat > high)
        if bad.any():
            i = int(np.flatnonzero(bad.any(1))[0])
            space = self.single_action_space
            raise EnvError(f"env '{self.env_id}': action {' '.join(str(a[i]).split())} for env {i} at vector step "
                           f"{self._steps + 1} is outside its action space {space}: step() takes the space's values "
                           f"(from its start); add the start to the agent's indices from 0 (env.action_offset), as "
                           f"Policy.act and Proxima's loops do")

    def _count_successes(self, final_info, done: np.ndarray) -> None:
        """Add the finished episodes that reported is_success (EnvCalls passes it on, as a float in [0, 1],
        at an episode's end only). Same-step autoreset puts the last step's info under ``final_info`` (the
        info beside it is the new episode's reset info); its ``_is_success`` mask says which envs reported.
        A value EnvCalls could not read (NaN) is left out, with one note a run (_SUCCESS_NOTE). Each usable value
        is also kept by env index in ``episode_successes`` until the next step."""
        if not final_info or "is_success" not in final_info:
            return
        reported = np.asarray(final_info.get("_is_success", done), dtype=bool) & done
        if reported.any():
            values = np.asarray(final_info["is_success"], dtype=np.float64)
            unread = reported & np.isnan(values)
            if unread.any() and not _SUCCESS_NOTE["said"]:
                _SUCCESS_NOTE["said"] = True
                i = int(np.flatnonzero(unread)[0])
                envs = getattr(self.envs, "envs", None)  # a SyncVectorEnv's EnvCalls hold the value; a worker's are away
                what = getattr(envs[i], "bad_success", None) if envs is not None else None
                from ..terminal import printable  # the env's own text: no escape reaches the terminal

                print(printable(f"proxima: note: env '{self.env_id}': env {i}'s info['is_success'] "
                                f"{'= ' + what if what else f'at vector step {self._steps}'} is no bool or number in "
                                f"[0, 1]: such values are left out of {self.success_column} (this note is not repeated)"),
                      file=sys.stderr, flush=True)
            reported &= ~unread
            self._success_sum += float(np.sum(values[reported]))
            self._success_count += int(reported.sum())
            self.episode_successes = {int(i): float(values[i]) for i in np.flatnonzero(reported)}

    def take_successes(self) -> tuple:
        """(successes, finished episodes that reported info["is_success"]) since the last call, and start
        counting afresh: the trainer takes them once per iteration (charts/success_rate)."""
        out = (self._success_sum, self._success_count)
        self._success_sum, self._success_count = 0.0, 0
        return out

    def continue_step_count(self, steps: int) -> None:
        """Count each env's steps on from ``steps`` (a resumed run: the steps each env had taken), so
        an env's error names the env step an uninterrupted run would. Best effort: a vector env that
        cannot set it keeps counting from 0."""
        if not isinstance(self.envs, gym.vector.SyncVectorEnv):
            return  # an async worker that fails set_attr may close its pipe: not worth that for a message
        try:
            self.envs.set_attr("steps", int(steps))
        except AttributeError:
            pass

    def _episode_stats(self, reward: np.ndarray, done: np.ndarray, info: dict):
        """(return, length) (N,) of the episodes that ended this step, 0 elsewhere: the rewards summed here,
        or, for an env with Gymnasium's RecordEpisodeStatistics among its wrappers, that wrapper's ``r`` and
        ``l`` (CleanRL's info["episode"]): the game's score where reward-changing wrappers (ClipReward) sit
        outside it. They come in the vector env's ``final_info`` (same-step autoreset: the step's own info
        is the next episode's reset info), with a mask of the envs that gave them.

        With the wrapper, only the ends it reported are episodes here (CleanRL's rule): an end it did not
        see (a life lost under an EpisodicLife outside it) ends the agent's episode (GAE, bootstrapping)
        but logs nothing, its row 0, as the native Atari envs count games (Rollout.add_episode_stats).
        A reported end whose figures are unreadable (recorded_episode: NaN here) logs the rewards
        summed since the last end instead."""
        ep_ret, ep_len = count_episodes(self._ep_return, self._ep_length, reward, done)
        if self.records_episodes and done.any():
            final = info.get("final_info") or {}
            mask = np.zeros_like(done)
            if _RECORDED_RETURN in final:
                mask = np.asarray(final.get("_" + _RECORDED_RETURN, done), dtype=bool) & done
                recorded = np.asarray(final[_RECORDED_RETURN], dtype=np.float64)
                readable = mask & ~np.isnan(recorded)
                ep_ret = np.where(readable, recorded, ep_ret)
                ep_len = np.where(readable, np.asarray(final[_RECORDED_LENGTH], dtype=np.int64), ep_len)
            ep_ret, ep_len = np.where(mask, ep_ret, 0.0), np.where(mask, ep_len, 0)
        return ep_ret, ep_len

    def on_episode_end(self, index: int, fn: Callable[[], None]) -> bool:
        """Have ``fn()`` called each time env ``index``'s episode ends, inside the vector env's step after the
        env's own step and before its same-step autoreset, so ``render(index)`` there shows the final state
        (evaluate's video: L + 1 frames for an episode of L steps, as on the native envs). False where the
        env cannot be reached (an AsyncVectorEnv's, in a worker process, which renders no frames either)."""
        envs = getattr(self.envs, "envs", None)  # a SyncVectorEnv's, in this process
        env = envs[index] if envs is not None else None
        if not isinstance(env, EnvCalls):
            return False
        env.at_episode_end = fn
        return True

    def render(self, index: int = 0):
        """Env ``index``'s rgb_array frame; None where there is none to give (an AsyncVectorEnv, whose
        envs live in worker processes, an env built without render_mode='rgb_array', an env whose
        render() is not implemented). EnvError with the env's own reason when its render() raises
        anything else, e.g. Gymnasium's DependencyNotInstalled (``pygame is not installed, run
        `pip install "gymnasium[classic-control]"```)."""
        if not hasattr(self.envs, "envs"):
            return None
        try:
            return self.envs.envs[index].render()
        except NotImplementedError:  # gymnasium.Env.render's default
            return None
        except gym.error.DependencyNotInstalled as e:
            if "pygame" in str(e):  # Gymnasium's own hint is a bare pip, and names a different extra per env family
                from ..config import install_hint

                raise EnvError(f"env '{self.env_id}' cannot render: pygame is not installed; the video extra has it: "
                               f"{install_hint('video')}") from None
            raise EnvError(f"env '{self.env_id}' cannot render: {e}") from None
        except Exception as e:
            raise EnvError(f"env '{self.env_id}' cannot render: its render() raised {type(e).__name__}: {e}") from None

    def close(self) -> None:
        try:
            self._close_envs()
        finally:
            self._unquiet()  # after the workers' last results were read: their notes were hidden up to here

    def _close_envs(self) -> None:
        # a call that failed partway (a worker gone, results it could not read, a Ctrl-C) may leave an AsyncVectorEnv
        # with some workers' results read and not others: a graceful close would wait for them again, on pipes that
        # stay empty; terminate=True ends the workers instead. After one env raised, Gymnasium has read every pipe
        # and is back in its DEFAULT state: the healthy workers close their envs (the user's close() runs)
        envs = self.envs
        partway = isinstance(envs, gym.vector.AsyncVectorEnv) and (
            self._worker_gone or getattr(envs, "_state", AsyncState.DEFAULT) != AsyncState.DEFAULT)
        terminate = {"terminate": True} if partway else {}
        try:
            with warnings_guard.catch_warnings():  # "Calling `close` while waiting for a pending call to `step`": a worker died mid-step
                warnings.filterwarnings("ignore", message=".*Calling `close` while waiting")
                self.envs.close(**terminate)
        except (EOFError, ConnectionError):  # a worker already gone: end the rest, never wait on it again
            for process in getattr(self.envs, "processes", []):
                if process.is_alive():
                    process.kill()
                process.join(timeout=5)
            self.envs.closed = True  # AsyncVectorEnv.__del__ would wait on the dead pipe once more
        # AsyncVectorEnv.close leaves its error queue's pipe and each worker's sentinel open until the
        # object is collected, which an exception's traceback can put off indefinitely: released now
        for process in getattr(self.envs, "processes", []):
            try:
                process.close()
            except ValueError:  # still running (a kill that did not take): left to the collector
                pass
        queue = getattr(self.envs, "error_queue", None)
        if queue is not None:
            queue.close()
            for end in (getattr(queue, "_reader", None), getattr(queue, "_writer", None)):  # close() leaves them (3.11)
                if end is not None:
                    end.close()


#: AsyncVectorEnv's notes around a worker's EnvError, as warnings.filterwarnings would file them
_WORKER_ERROR_FILTERS = tuple(("ignore", re.compile(message, re.I), UserWarning, None, 0) for message in (
    r"(\x1b\[\d+m)?ERROR: Received the following error from Worker",
    r"(\x1b\[\d+m)?ERROR: Raising the last exception back",
    r"(\x1b\[\d+m)?ERROR: Traceback[\s\S]*proxima\.envs\.base\.EnvError"))
_quiet_added: list = []  # the filters of _WORKER_ERROR_FILTERS that were not there before


def _add_worker_error_filters():
    for item in reversed(_WORKER_ERROR_FILTERS):
        if item not in warnings.filters:  # the caller's own equal filter is the caller's to keep
            warnings.filterwarnings(item[0], message=item[1].pattern, category=item[2])
            _quiet_added.append(item)

    def undo() -> None:
        for item in _quiet_added:
            with contextlib.suppress(ValueError):  # the caller's resetwarnings() took it already
                warnings.filters.remove(item)
        _quiet_added.clear()
        getattr(warnings, "_filters_mutated", lambda: None)()  # what the module's own functions call
    return undo


_worker_error_filters = SharedChange(_add_worker_error_filters)


def _quiet_worker_env_errors() -> Callable[[], None]:
    """Hide AsyncVectorEnv's warnings around a worker's EnvError (EnvCalls' line reaches the main
    process and is what the user sees): its traceback and its "Received the following error" and
    "Raising the last exception" notes. Any other exception's traceback still shows. Returns the
    undo, which GymnasiumEnv.close calls.

    The filters are process-wide while an async env is open, and go when the last one closes: the
    user's own AsyncVectorEnv after a run says what its workers raised. Not warnings.catch_warnings
    around the calls that warn (the constructor, reset, step, close): it swaps the process's whole
    filter list, on every step, and is not thread-safe: two runs in two threads put back each
    other's lists and could leave a filter for good."""
    return _worker_error_filters.hold()


def _exit_reason(code: int) -> str:
    """Why a worker process ended, from its exit code (minus the signal's number for a signal)."""
    if code >= 0:
        return f"exit code {code}: did the env call sys.exit() or os._exit()?"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    if -code == signal.SIGKILL:
        return f"killed by {name}: out of memory (the kernel's OOM killer), or killed by hand?"
    return f"killed by {name}"


def _start_range(space: gym.spaces.Space) -> Optional[tuple]:
    """(low, high) flat arrays of a Discrete or MultiDiscrete space with a start that is not 0, else None:
    GymnasiumEnv.step checks those actions (a Box's are clipped; a start of 0 keeps its step as fast as ever)."""
    if not isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return None
    start = np.asarray(space.start, dtype=np.int64).reshape(-1)
    if not start.any():
        return None
    n = np.asarray(space.n if isinstance(space, gym.spaces.Discrete) else space.nvec, dtype=np.int64).reshape(-1)
    return start, start + n - 1


def _own(obs, parts):
    """A copy of a checked obs (of a Dict: each declared key's part, the rest as it is), which the env
    cannot change after returning it."""
    if isinstance(obs, dict):
        keys = {p.key for p in parts}
        return {k: np.array(v) if k in keys else v for k, v in obs.items()}
    return np.array(obs)


def _one(obs, layout: ObsLayout):
    """One env's obs with a leading batch axis of 1 (a dict of arrays for a Dict space)."""
    if layout.is_dict:
        return {k: np.asarray(v)[None] for k, v in obs.items()}
    return np.asarray(obs)[None]


def _checked(env_fn: Callable[[], gym.Env], index: int, layout: ObsLayout, env_id: str,
             check_cmd: Optional[str] = None, keep_info: bool = False, seed: Optional[int] = None,
             env_kwargs: Optional[dict] = None, spaces: Optional[tuple] = None) -> Callable[[], gym.Env]:
    """The factory of env ``index``: the user's env in EnvCalls; a constructor that raises is one EnvError
    naming the index and the user's line. ``spaces``: the probe's (observation, action) spaces, which an
    AsyncVectorEnv worker whose env could not be built declares (_Unbuilt)."""
    parent = os.getpid()

    def make() -> gym.Env:
        worker = os.getpid() != parent
        if worker:  # an AsyncVectorEnv worker: see _worker_signals, _seed_worker
            _worker_signals()
            _seed_worker(seed, index)
        try:
            env = _build(env_fn, env_id, env_kwargs, index)
        except EnvError as e:
            if not worker or spaces is None:
                raise
            return _Unbuilt(e, *spaces)
        return EnvCalls(env, index, layout, env_id, check_cmd, keep_info, in_worker=worker, seed=seed)

    return make


def _kept(make: Callable[[], gym.Env], built: list) -> Callable[[], gym.Env]:
    def keep() -> gym.Env:
        env = make()
        built.append(env)
        return env

    return keep


class _Unbuilt(gym.Env):
    """An AsyncVectorEnv worker's stand-in for an env whose constructor raised ``error``: Gymnasium's worker
    builds its env outside its error handling, so an exception there would end the worker with a traceback,
    the main process would see only a pipe reset, and the envs the other workers built would never be closed.
    The worker runs on instead, and its first call (GymnasiumEnv's proxima_built) hands ``error`` to the main
    process through Gymnasium's error queue, as a step's EnvError goes."""

    def __init__(self, error: EnvError, observation_space: gym.spaces.Space, action_space: gym.spaces.Space):
        self.error, self.observation_space, self.action_space = error, observation_space, action_space

    def proxima_built(self) -> NoReturn:
        raise self.error

    def reset(self, *, seed=None, options=None):
        raise self.error

    def step(self, action):
        raise self.error


def _seed_worker(seed: Optional[int], index: int, resumed_at: int = 0) -> None:
    """Seed an AsyncVectorEnv worker's global RNGs (numpy's, Python's random, torch's CPU generator) from the
    run's seed and the env's index (with no seed, from the OS): a forked worker starts with the main process's
    states, so envs drawing from np.random would all draw the same numbers (a spawned one would draw anew each
    run). --vector sync envs share the main process's streams, which the trainer seeds, as before.
    ``resumed_at``: the iteration a resume starts from (GymnasiumEnv.reseed_workers), whose restarted episodes
    draw anew, as its reset(seed + iteration) does, and alike on every resume from that checkpoint; 0 (a fresh run)
    seeds as before."""
    entropy = None if seed is None else [int(seed) % (1 << 128), index]  # SeedSequence takes no negative seed
    # a spawn key (the stream SeedSequence.spawn gives its child k), not a third entropy word: [seed, index, k]
    # are also the words of run seed + (index << 32)'s env k
    spawn_key = (int(resumed_at),) if resumed_at else ()
    words = np.random.SeedSequence(entropy, spawn_key=spawn_key).generate_state(10)
    np.random.seed(words[:4])
    # words of its own: both are MT19937, and the same words would make random.random() equal np.random.rand()
    random.seed(int.from_bytes(words[4:8].tobytes(), "little"))
    torch.random.default_generator.manual_seed(int(words[8]) | int(words[9]) << 32)


def _worker_signals() -> None:
    """An AsyncVectorEnv worker leaves SIGINT to its parent: a Ctrl-C reaches the whole process
    group, and the trainer finishes the iteration and checkpoints, which needs the workers alive (a
    forked worker would otherwise run the trainer's handler, or die of KeyboardInterrupt). SIGTERM
    keeps its default, so that Process.terminate() and multiprocessing's exit still end a worker;
    a SIGTERM to the whole group ends the workers too, and the trainer says so (exit 143)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # a closed terminal's SIGHUP reaches the group as a Ctrl-C does: a stop of the trainer's
    # (signals.stop_signals), which needs the workers alive for its checkpoint; a forked worker would
    # otherwise run the trainer's handler
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # SIGUSR1/SIGUSR2, a scheduler's warning before its time limit (Slurm's --signal=USR1@120 reaches every
    # process of the job step), are the trainer's stops as well: not the workers' (their default kills them)
    for name in ("SIGUSR1", "SIGUSR2"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)


# --- what a run is told about the env it built (trainer._note_built_env, check-env's notes) -------

#: Float64Spread.lost's rule: a float64 entry whose float32 rounding step at its magnitude is more than this
#: share of its spread keeps too little of it once cast (the rounding noise, step / sqrt(12), is then ~0.3% of it)
SPREAD_SHARE = 0.01


def spread_dtype(dtype) -> bool:
    """Whether an observation Box of ``dtype`` can hold a spread that float32 rounds away: float64 and
    integers of 4 bytes or more (an int64 timestamp, 1.7e9 + t: float32 values there are 128 apart)."""
    dtype = np.dtype(dtype)
    return (dtype.kind == "f" and dtype.itemsize > 4) or (dtype.kind in "iu" and dtype.itemsize >= 4)


class Float64Spread:
    """The spread of each entry of a float64 (or wide integer: spread_dtype) observation part over the
    observations given to ``add``, and whether float32, which Proxima casts observations to before
    --norm-obs normalizes them, keeps it. Sums are taken about the first observation, so that an offset
    of 1e6 costs them no precision. ``dtype``: the part's, which the note names."""

    def __init__(self, dtype=np.float64):
        self.n = 0
        self.dtype = np.dtype(dtype)

    def add(self, rows) -> None:
        """``rows``: k observations of the part, (k, *shape)."""
        rows = np.asarray(rows, dtype=np.float64)
        rows = rows.reshape(len(rows), -1)
        with np.errstate(over="ignore", invalid="ignore"):  # beyond float32's range: its own check names it
            f32 = rows.astype(np.float32)
        if self.n == 0:
            self.first = rows[0].copy()
            self.s1, self.s2 = np.zeros_like(self.first), np.zeros_like(self.first)
            self.lo, self.hi = rows[0].copy(), rows[0].copy()
            self.lo32, self.hi32 = f32[0].copy(), f32[0].copy()
        d = rows - self.first
        self.s1 += d.sum(0)
        self.s2 += (d * d).sum(0)
        self.lo, self.hi = np.minimum(self.lo, rows.min(0)), np.maximum(self.hi, rows.max(0))
        self.lo32, self.hi32 = np.minimum(self.lo32, f32.min(0)), np.maximum(self.hi32, f32.max(0))
        self.n += len(rows)

    def lost(self) -> list:
        """[(flat index, mean, std, float32 step at the mean, whether float32 made every value one)] for the
        entries that vary in float64 but keep too little of it in float32 (SPREAD_SHARE's rule)."""
        if self.n < 2:
            return []
        with np.errstate(over="ignore", invalid="ignore"):
            shift = self.s1 / self.n
            mean = self.first + shift
            std = np.sqrt(np.maximum(self.s2 / self.n - shift * shift, 0.0))
            step = np.spacing(np.abs(mean).astype(np.float32)).astype(np.float64)
            varies = np.isfinite(mean) & (self.hi > self.lo)
            one = self.hi32 == self.lo32
            lost = varies & (one | (step > SPREAD_SHARE * std))
        return [(int(i), float(mean[i]), float(std[i]), float(step[i]), bool(one[i])) for i in np.flatnonzero(lost)]


def float64_spread_note(name: str, shape: tuple, spread: Float64Spread, over: str) -> Optional[str]:
    """The note on a float64 or wide-integer observation part (``name``: obs, obs['pos']) whose spread float32 loses
    (Float64Spread.lost), naming its first such entry; ``over``: the observations the spread is of
    ('over the 201 observations check-env read'). None when float32 keeps every entry's spread."""
    lost = spread.lost()
    if not lost:
        return None
    i, mean, std, step, one = lost[0]
    idx = np.unravel_index(i, shape) if len(shape) else ()
    at = f"{name}[{', '.join(str(int(k)) for k in idx)}]" if idx else name
    more = f" (and {len(lost) - 1} more of its entries)" if len(lost) > 1 else ""
    kept = f": the float32 values are all {float(np.float32(mean)):g}" if one else ""
    return (f"{at} is {spread.dtype} and varies by std {std:.3g} around {mean:.7g} {over}{more}, but Proxima casts observations to "
            f"float32 before --norm-obs normalizes them, and float32 values there are {step:.3g} apart, so the network "
            f"sees little or none of that variation{kept}; subtract the offset in the env (or in a "
            f"gymnasium.wrappers.TransformObservation of a module:function factory) so that the values vary around 0")


#: whether the note on an info["is_success"] no rate can use (GymnasiumEnv._count_successes) was printed: once a
#: process, not again by the end-of-run evaluation of the run that printed it; each run starts afresh (reset_success_note)
_SUCCESS_NOTE = {"said": False}


def reset_success_note() -> None:
    """Let the next unusable info["is_success"] be noted again (a new run: trainer.train)."""
    _SUCCESS_NOTE["said"] = False


#: a reset() without a ``seed`` or ``options`` parameter (gym 0.21's ``def reset(self)``), as Python words the TypeError
RESET_KWARG = re.compile(r"unexpected keyword argument '(seed|options)'")
#: the fix for it, in train's and check-env's words
RESET_FIX = "def reset(self, *, seed=None, options=None), calling super().reset(seed=seed) first (it seeds self.np_random)"


def time_limit_of(env) -> Optional[int]:
    """max_episode_steps of the outermost gymnasium.wrappers.TimeLimit in ``env``'s stack (the wrapper that
    truncates, not a spec that may outlive it), None where there is none."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            return env._max_episode_steps
        env = env.env
    return None


#: Gymnasium's normalization wrappers, by the flag that does their work with statistics a checkpoint keeps
NORMALIZE_WRAPPERS = {"NormalizeObservation": "--norm-obs", "NormalizeReward": "--norm-reward"}


def normalize_wrappers(env) -> list:
    """The names (NORMALIZE_WRAPPERS) of Gymnasium's normalization wrappers among ``env``'s wrappers,
    outermost first: their running statistics live in the env, so checkpoints do not hold them."""
    found = []
    while isinstance(env, gym.Wrapper):
        for name in NORMALIZE_WRAPPERS:
            cls = getattr(gym.wrappers, name, None)
            if cls is not None and isinstance(env, cls) and name not in found:
                found.append(name)
        env = env.env
    return found


def rewards_scaled(env) -> bool:
    """Whether the episode returns of ``env`` (its rewards summed, or its innermost RecordEpisodeStatistics'
    figures where it has one: recorded_stats_key) are of rewards a gymnasium.wrappers.NormalizeReward scaled:
    one below that RecordEpisodeStatistics, or anywhere in a stack without one. CleanRL's stack records
    the game's rewards inside its NormalizeReward: not scaled."""
    scaled = False
    while isinstance(env, gym.Wrapper):  # outermost first: the last RecordEpisodeStatistics met is the innermost
        if isinstance(env, gym.wrappers.RecordEpisodeStatistics):
            scaled = False  # a NormalizeReward outside it scales none of its figures
        elif isinstance(env, gym.wrappers.NormalizeReward):
            scaled = True
        env = env.env
    return scaled


def rewards_transformed(env) -> list:
    """The class names of the gymnasium.wrappers.TransformReward wrappers (ClipReward is one; SB3 and CleanRL code
    clips or scales with them: ``TransformReward(env, lambda r: np.clip(r, -10, 10))``) whose rewards the episode
    returns of ``env`` sum, outermost first, by rewards_scaled's rule: those below its innermost
    RecordEpisodeStatistics, or every one in a stack without one; [] when none does. The adapter records
    no statistics of its own: without a recorder inside them, the returns it logs are of the transformed rewards."""
    names: list = []
    while isinstance(env, gym.Wrapper):  # outermost first: a recorder met drops what sits outside it
        if isinstance(env, gym.wrappers.RecordEpisodeStatistics):
            names = []
        elif isinstance(env, gym.wrappers.TransformReward) and type(env).__name__ not in names:
            names.append(type(env).__name__)
        env = env.env
    return names


def normalize_wrappers_note(env_id: str, names: list, norm_obs: Optional[bool] = None, norm_reward: Optional[bool] = None) -> str:
    """What to do about the normalization wrappers ``names`` of the env ``env_id`` builds: use the flags,
    whose statistics are checkpointed. ``norm_obs``/``norm_reward``: the run's flags (None: check-env's
    words, which know of no run), a flag that is on doubles the wrapper's work."""
    wrappers = " and ".join(f"gymnasium.wrappers.{n}" for n in names)
    flags = " and ".join(NORMALIZE_WRAPPERS[n] for n in names)
    twice = [NORMALIZE_WRAPPERS[n] for n, on in (("NormalizeObservation", norm_obs), ("NormalizeReward", norm_reward))
             if n in names and on]
    doubled = f"; with {' and '.join(twice)} the run normalizes a second time" if twice else ""
    return (f"env '{env_id}' is wrapped in {wrappers}, whose running statistics are not saved in checkpoints (eval and "
            f"resume start them afresh, so the policy sees other inputs than it trained on){doubled}: drop the "
            f"wrapper and use {flags}, whose statistics are checkpointed")


#: what the Gymnasium envs built in this process showed of themselves, by (env id, --env-kwargs): their
#: action space, normalization wrappers, float64 spread note and other notes (script_env_note's);
#: trainer._note_built_env prints them (train, train --dry-run), which gets the run's config but not
#: the env (--dry-run's is closed by then)
_BUILT: dict = {}


def _built_key(env_id: str, env_kwargs: Optional[dict]) -> tuple:
    return str(env_id), json.dumps(env_kwargs or {}, sort_keys=True, default=repr)


def built_env(env_id: str, env_kwargs: Optional[dict] = None) -> Optional[dict]:
    """What the last Gymnasium env built for ``env_id`` with ``env_kwargs`` showed ({"action_space",
    "wrappers", "spread", "notes"}), taken: a note is printed once; None when none was built since."""
    return _BUILT.pop(_built_key(env_id, env_kwargs), None)


#: registered_action_space's answers: an env built once per id and process
_REGISTERED_SPACES: dict = {}


def registered_action_space(env_id: str) -> Optional[gym.spaces.Space]:
    """The action space of the registered id ``env_id`` built without arguments (what its preset was
    tuned on), None when it is no registered id or does not build here."""
    if env_id not in gym.registry:
        return None
    if env_id not in _REGISTERED_SPACES:
        try:
            with warnings_guard.quiet_warnings():
                env = gym.make(env_id, disable_env_checker=True)
            _REGISTERED_SPACES[env_id] = env.action_space
            env.close()
        except Exception:
            _REGISTERED_SPACES[env_id] = None
    return _REGISTERED_SPACES[env_id]
