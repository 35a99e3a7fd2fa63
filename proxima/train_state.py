"""What a PPO run is made of on disk: the TrainState a checkpoint holds, and the run directory.

``capture(trainer)`` gathers the whole TrainState of DESIGN.md (agent, optimizer, LR schedule
position, normalizer statistics, native env state and generators, RNG states, counters, config,
versions); ``restore(trainer, state)`` puts a loaded one back; ``save(trainer)`` writes it through
checkpoint.py (atomic, every rank's pieces gathered under torchrun). ``open_run_dir`` writes
``config.yaml`` and ``meta.json`` of a new run (a resume adds to meta.json's ``resumes``). The trainer
calls these; the loop lives there.
"""

from __future__ import annotations

import json
import math
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import torch

from . import checkpoint as ckpt
from .rundir import holds_text
from .config import PPOConfig

if TYPE_CHECKING:
    from .trainer import Trainer


def versions() -> dict:
    import platform

    import gymnasium

    from . import __version__

    return {"proxima": __version__, "python": platform.python_version(), "torch": str(torch.__version__),
            "gymnasium": gymnasium.__version__, "numpy": np.__version__}


def started_now() -> str:
    """A time meta.json records (a run's ``started``, a resume's, a population's, an RLHF run's): local time
    with its UTC offset, 2026-12-08T06:13:36+09:00, so that a start in Tokyo and a resume in a UTC
    container compare (readers take the naive strings of older runs too: datetime.fromisoformat)."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


def machine_record(device, threads: Optional[int] = None) -> Optional[dict]:
    """meta.json's ``machine``: doctor's report of this machine for the run's own device (a cuda:1 run
    must not hold a context on GPU 0), without the test build; None where doctor fails (best-effort)."""
    try:
        from .doctor import collect

        return collect(device=device, threads=threads, test_build=False)
    except Exception:  # noqa: BLE001 - a record, never a reason for a run to fail
        return None


def git_commit() -> Optional[str]:
    """The commit Proxima runs from: HEAD of the git checkout holding this package; else (an installed
    copy, e.g. in the container image) $PROXIMA_GIT_COMMIT, which the image's build sets from its
    PROXIMA_GIT_COMMIT build argument, when it is 7 to 40 hex digits (anything else is ignored); else None."""
    return git_state()[0]


def git_state() -> tuple:
    """(commit, dirty) of the code Proxima runs from, as meta.json records them (``git_commit``,
    ``git_dirty``): the commit as git_commit() says; ``dirty`` True when a tracked file of the package's
    own checkout differs from that commit (``git status --porcelain --untracked-files=no``), False when
    none does, None outside a checkout (the image's recorded commit included), without git, or when
    git fails or takes over 5 s: a run never waits long on, or fails for, this record."""
    import re
    import subprocess

    here = Path(__file__).resolve().parent
    commit, dirty = "", None
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=5)
        top, commit = (out.stdout.splitlines() + ["", ""])[:2] if out.returncode == 0 else ("", "")
        # the checkout must be Proxima's own: an installed copy in a venv inside the user's project
        # would otherwise record the project's commit
        if not top or Path(top).resolve() != here.parent:
            commit = ""
        if commit:
            # --no-optional-locks: a status must not take index.lock (it would refresh the index), which
            # would fail a git command the user runs in the checkout meanwhile
            out = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"],
                                 cwd=here, capture_output=True, text=True, timeout=5)
            dirty = bool(out.stdout.strip()) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    if commit:
        return commit, dirty
    recorded = os.environ.get("PROXIMA_GIT_COMMIT", "").strip()
    return (recorded.lower() if re.fullmatch(r"[0-9a-fA-F]{7,40}", recorded) else None), None


def git_record() -> dict:
    """meta.json's ``git_commit`` and ``git_dirty`` (git_state)."""
    commit, dirty = git_state()
    return {"git_commit": commit, "git_dirty": dirty}


def where_started() -> dict:
    """meta.json's ``host`` and ``cwd``: where a start or resume ran, so that its recorded command (whose
    relative paths, --config c.yaml or --env-id mymod:Env, are the working directory's) can be run again,
    and a run shared by a cluster's hosts says which one trained each part. ``cwd`` is None when the
    working directory was removed under the process."""
    import socket

    try:
        cwd: Optional[str] = os.getcwd()
    except OSError:
        cwd = None
    return {"host": socket.gethostname(), "cwd": cwd}


def default_run_dir(cfg: PPOConfig) -> Path:
    safe_env = cfg.env_id.replace("/", "_").replace(":", "_")
    return Path("runs") / f"{safe_env}__{cfg.seed}__{datetime.now().strftime('%Y%m%d-%H%M%S')}"


# ------------------------------------------------------------------------------------------------
def best_on_disk(run_dir: Path) -> Optional[float]:
    """The mean eval return RUN/checkpoints/best.pt holds, or None (no file, or one that does not load):
    a resumed run only replaces best.pt with a better policy, even when it resumes from a checkpoint
    older than best.pt (after a crash), which knows a lower best."""
    path = ckpt.best_checkpoint_path(run_dir)
    if not path.is_file():
        return None
    try:
        best = ckpt.load_checkpoint(path).get("best_eval")
    except ckpt.CheckpointError:
        return None
    # a damaged value (NaN, inf, not a number) counts as none: NaN would never be beaten, and best.pt never replaced
    return float(best) if _finite_number(best) else None


def _finite_number(x) -> bool:
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:  # an int beyond any float: not a mean return either
        return False


def best_eval(state: dict) -> Optional[float]:
    """A checkpoint's ``best_eval`` (--eval-every: the best mean eval return so far; None before the
    first evaluation, or in checkpoints written before it was recorded). CheckpointError naming the
    file when it is neither None nor a finite number: a resumed run compares each evaluation's mean
    with it (``mean > best``), which is never true of NaN or inf, so best.pt would never be written again."""
    best = state.get("best_eval")
    if best is not None and not _finite_number(best):
        raise ckpt.CheckpointError(f"{state.get('path', 'checkpoint')}: best_eval is {ckpt._one_line(repr(best), 60)}, not a "
                                   "finite mean return (or None, before the first --eval-every evaluation); the "
                                   "checkpoint is damaged or was edited")
    return None if best is None else float(best)


def capture(t: "Trainer") -> dict:
    """The whole TrainState: everything needed to continue as if never stopped; with ``eval_pending``
    when a stop left an --eval-every evaluation due (trainer.Trainer.run: the resume runs it first)."""
    state = {
        "format": ckpt.FORMAT, "schema_version": ckpt.SCHEMA_VERSION, "versions": versions(),
        "config": t.cfg.to_dict(), "iteration": t.iteration, "global_step": t.global_step,
        "elapsed": t.elapsed, "world_size": t.dist.world_size,
        "spaces": {"observation": ckpt.space_to_dict(t.env.single_observation_space),
                   "action": ckpt.space_to_dict(t.env.single_action_space)},
        "agent": t.agent.state_dict(), "optimizer": t.optimizer.state_dict(),
        "lr_schedule": {"lr": float(t.optimizer.param_groups[0]["lr"]), "base_lr": t.cfg.lr, "anneal": t.cfg.anneal_lr,
                        "iteration": t.iteration, "num_iterations": t.num_iterations},
        "obs_normalizer": t.obs_norm.state_dict() if t.obs_norm is not None else None,
        "reward_scaler": t.reward_scaler.state_dict() if t.reward_scaler is not None else None,
        "grad_scaler": t.scaler.state_dict() if t.scaler is not None else None,
        "env_backend": t.env.backend,
        "env": t.env.state_dict() if t.env.can_save_state else None,
        "next_obs": t.next_obs,
        "rng": ckpt.rng_state(),
        "best_eval": getattr(t, "best_eval", None),  # --eval-every: the best mean eval return so far (best.pt)
        # --stop-return's window (trainer.ReturnTarget): [[return sum, episodes], ...] of recent iterations
        "return_window": [[float(r), int(c)] for r, c in t.return_window],
    }
    pending = getattr(t, "eval_pending", None)
    if pending is not None:  # only then: every other checkpoint stays as earlier versions wrote it
        state["eval_pending"] = pending
    if getattr(t, "stopped_by_callback", False):  # train()'s callback ended the run short of its total: the report says so
        state["stopped_by_callback"] = True  # a resume trains on, and its checkpoints no longer hold it
    return state


def _int_count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_counters(state: dict, batch: int) -> None:
    """CheckpointError naming the file and the field when a checkpoint's counters are not what a run
    writes: ``iteration`` and ``global_step`` integers >= 0 with global_step = iteration x batch x
    world_size (every iteration adds one batch per process, also after --total-timesteps extended the
    run or --stop-return stopped it), ``world_size`` an integer >= 1, ``elapsed`` a finite number >= 0.
    A negative or inconsistent counter would resume at the wrong learning rate, or truncate metrics.csv."""
    path = state.get("path", "checkpoint")
    for key in ("iteration", "global_step"):
        if key not in state:
            raise ckpt.CheckpointError(f"{path}: incomplete checkpoint (missing '{key}')")
        if not _int_count(state[key]) or state[key] < 0:
            raise ckpt.CheckpointError(f"{path}: {key} is {ckpt._one_line(repr(state[key]), 60)}, not an integer >= 0")
    world = state.get("world_size", 1)
    if not _int_count(world) or world < 1:
        raise ckpt.CheckpointError(f"{path}: world_size is {ckpt._one_line(repr(world), 60)}, not an integer >= 1")
    elapsed = state.get("elapsed", 0.0)
    if not isinstance(elapsed, (int, float)) or isinstance(elapsed, bool) or not np.isfinite(elapsed) or elapsed < 0:
        raise ckpt.CheckpointError(f"{path}: elapsed is {ckpt._one_line(repr(elapsed), 60)}, not a number of seconds >= 0")
    if state["global_step"] != state["iteration"] * batch * world:
        raise ckpt.CheckpointError(f"{path}: global_step {state['global_step']:,} does not match iteration {state['iteration']:,} "
                                   f"(each iteration trains num_envs x num_steps x processes = {batch * world:,} steps); "
                                   "the checkpoint is damaged or was edited")


def _check_like(path, field: str, value, like) -> None:
    """CheckpointError when ``value`` is not shaped as ``like`` (what this run's own state holds):
    the same keys, tensors of the same shape and dtype. A tensor of another shape would broadcast
    into this run's buffers or fail deep inside them."""
    if isinstance(like, torch.Tensor):
        if not isinstance(value, torch.Tensor):
            raise ckpt.CheckpointError(f"{path}: {field} is {ckpt._describe(value)}, not a tensor")
        if tuple(value.shape) != tuple(like.shape) or value.is_floating_point() != like.is_floating_point() or value.is_complex():
            raise ckpt.CheckpointError(f"{path}: {field} is a {str(value.dtype).replace('torch.', '')} tensor of shape "
                                       f"{tuple(value.shape)}; this run's is {str(like.dtype).replace('torch.', '')} "
                                       f"{tuple(like.shape)}")
        if value.is_floating_point() and value.numel() and not bool(torch.isfinite(value).all()) and field == "next_obs":
            raise ckpt.CheckpointError(f"{path}: next_obs holds non-finite values (NaN or inf)")
    elif isinstance(like, dict):
        if not isinstance(value, dict):
            raise ckpt.CheckpointError(f"{path}: {field} is {ckpt._describe(value)}, not a mapping")
        for key, sub in like.items():
            if key not in value:
                raise ckpt.CheckpointError(f"{path}: incomplete checkpoint (missing '{field}.{key}')")
            _check_like(path, f"{field}.{key}", value[key], sub)
    elif isinstance(like, (list, tuple)) and any(isinstance(v, (torch.Tensor, dict)) for v in like):
        if not isinstance(value, (list, tuple)) or len(value) != len(like):
            raise ckpt.CheckpointError(f"{path}: {field} is not a list of {len(like)} entries")
        for i, (v, sub) in enumerate(zip(value, like)):
            _check_like(path, f"{field}[{i}]", v, sub)


def _tensors(field: str, value, depth: int = 4):
    """(field, tensor) for each tensor in ``value`` and the dicts and lists it holds, ``depth`` levels
    deep (an optimizer's state_dict: ``optimizer.state.0.exp_avg``, ``optimizer.param_groups[0].lr``)."""
    if isinstance(value, torch.Tensor):
        yield field, value
    elif depth and isinstance(value, dict):
        for key, sub in value.items():
            yield from _tensors(f"{field}.{key}", sub, depth - 1)
    elif depth and isinstance(value, (list, tuple)):
        for i, sub in enumerate(value):
            yield from _tensors(f"{field}[{i}]", sub, depth - 1)


def check_resumable(state: dict) -> dict:
    """``state`` when what a resume restores beyond the policy is sound, else CheckpointError naming
    the file and the tensor: the normalizers' statistics (checkpoint.check_statistics) and the optimizer's
    moments finite (NaN moments make the first update's loss NaN). load_checkpoint checks the
    policy's weights; this needs no trainer, so a loader may call it to fall back to an older file."""
    path = state.get("path", "checkpoint")
    for key in ("obs_normalizer", "reward_scaler"):
        if isinstance(state.get(key), dict):
            ckpt.check_statistics(path, key, state[key])
    for field, value in _tensors("optimizer", state.get("optimizer")):
        ckpt.check_finite_tensor(path, field, value)
        if not value.is_floating_point():  # Adam's state is floating point; an int one would be cast without a word
            raise ckpt.CheckpointError(f"{path}: {field} has dtype {ckpt._dtype_name(value)}; Proxima writes the optimizer's "
                                       "state as floating point; the checkpoint is damaged or was edited")
        # a second moment is a mean of squares: a negative one gives NaN steps, which a resume would blame on --lr
        if field.endswith((".exp_avg_sq", ".step")) and value.numel() and bool((value < 0).any()):
            raise ckpt.CheckpointError(f"{path}: {field} holds {int((value < 0).sum())} negative value(s) of {value.numel()} "
                                       "(it is >= 0); the checkpoint is damaged or was edited (an earlier checkpoint of the run may be intact)")
    return state


#: Adam's settings a run's optimizer is built with (trainer.Trainer: eps 1e-5, torch's betas), compared
#: with a checkpoint's param_groups: load_state_dict would otherwise train on with an edited value
_ADAM_FIXED = ("betas", "eps", "weight_decay", "amsgrad", "maximize")


def check_optimizer_settings(t: "Trainer", path, saved) -> None:
    """CheckpointError naming the file and the field when the optimizer state's param_groups hold
    settings other than those this run's optimizer is built with, its learning rate other than the
    recorded config's lr (without --anneal-lr; with it each iteration sets it from the schedule), or
    moments of another dtype than the parameters'."""
    groups = saved.get("param_groups") if isinstance(saved, dict) else None
    if not isinstance(groups, list) or len(groups) != 1 or not isinstance(groups[0], dict):
        return  # not an Adam state_dict: load_state_dict names it
    from .signals import from_python

    group, own = groups[0], t.optimizer.param_groups[0]
    for key in _ADAM_FIXED:
        if key not in group or key not in own:
            continue
        value = tuple(group[key]) if isinstance(group[key], (list, tuple)) else group[key]
        mine = tuple(own[key]) if isinstance(own[key], (list, tuple)) else own[key]
        if value != mine:
            raise ckpt.CheckpointError(f"{path}: optimizer.param_groups[0].{key} is {ckpt._one_line(repr(group[key]), 60)}; "
                                       f"Proxima's optimizer uses {mine!r}; the checkpoint is damaged or was edited")
    lr = group.get("lr")
    lr = float(lr) if torch.is_tensor(lr) and lr.numel() == 1 and lr.is_floating_point() else lr
    if not t.cfg.anneal_lr and isinstance(lr, float) and np.float32(lr) != np.float32(t.cfg.lr):
        raise ckpt.CheckpointError(f"{path}: optimizer.param_groups[0].lr is {lr!r}; the run's recorded lr is {t.cfg.lr!r} "
                                   f"({'with anneal_lr=False' if from_python() else 'without --anneal-lr'} it stays so); the checkpoint is damaged or was edited")
    params = own["params"]
    for index, entry in (saved.get("state") or {}).items():
        if not (isinstance(index, int) and 0 <= index < len(params) and isinstance(entry, dict)):
            continue  # load_state_dict names it
        for key in ("exp_avg", "exp_avg_sq"):
            if torch.is_tensor(entry.get(key)) and entry[key].dtype != params[index].dtype:
                raise ckpt.CheckpointError(f"{path}: optimizer.state.{index}.{key} has dtype {ckpt._dtype_name(entry[key])}; "
                                           f"Proxima writes it as its parameter's {ckpt._dtype_name(params[index])}; the "
                                           "checkpoint is damaged or was edited")


class SoundState(dict):
    """A loaded checkpoint that check_consistent passed, as checkpoint.load_sound returns it: its weights
    fit its recorded config and spaces, and its counters agree with a batch of ``counted`` steps (its
    recorded num_envs x num_steps; None when the config gives none, and they were not checked).
    resumed_config and restore do not check those again for the same batch (a second pass over the
    file's data); restore under torchrun does, each rank checking the state it received. Only
    check_consistent makes one: a loaded file is a plain dict."""

    counted: Optional[int] = None


def check_consistent(state: dict) -> SoundState:
    """``state`` as a SoundState, or CheckpointError naming the file and the field unless a checkpoint
    agrees with itself: its counters with its recorded batch (check_counters), its weights with the
    network its recorded config and spaces give, and its next observation with num_envs and the
    recorded observation space. What restore would refuse of the file alone, found without a trainer:
    a resume of a run directory (checkpoint.load_sound) then falls back to an older checkpoint instead
    of failing on every try."""
    from .envs import EnvError
    from .envs.spaces import obs_layout

    path, cfg = state.get("path", "checkpoint"), state["config"]
    sound = SoundState(state)
    num_envs, num_steps = cfg.get("num_envs"), cfg.get("num_steps")
    if _int_count(num_envs) and _int_count(num_steps) and num_envs > 0 and num_steps > 0:  # else from_dict names it
        check_counters(state, num_envs * num_steps)
        sound.counted = num_envs * num_steps
    # what restore reads of every run (and of a normalized one, its statistics): found missing only there,
    # a resume from this file would first have moved the run's newer checkpoints aside
    needed = ["optimizer", "rng"] + ["obs_normalizer"] * bool(cfg.get("norm_obs")) + ["reward_scaler"] * bool(cfg.get("norm_reward"))
    for key in needed:
        if state.get(key) is None:
            raise ckpt.CheckpointError(f"{path}: incomplete checkpoint (missing '{key}')")
    ckpt.check_agent_weights(state)
    obs = state.get("next_obs")
    if not isinstance(obs, torch.Tensor) or not _int_count(num_envs):
        return sound  # absent where restore does not read it; not a tensor: restore names it
    try:
        layout = obs_layout(ckpt.space_from_dict(state["spaces"]["observation"], f"{path}: spaces.observation"))
    except EnvError:  # check_agent_weights built an agent from it: not reached
        return sound
    shape = (num_envs, *layout.shape)
    if tuple(obs.shape) != shape or obs.is_floating_point() != layout.dtype.is_floating_point or obs.is_complex():
        raise ckpt.CheckpointError(f"{path}: next_obs is a {str(obs.dtype).replace('torch.', '')} tensor of shape "
                                   f"{tuple(obs.shape)}; its num_envs ({num_envs}) and spaces.observation give "
                                   f"{str(layout.dtype).replace('torch.', '')} {shape}; the checkpoint is damaged or was edited")
    return sound


def counters_checked(state: dict, batch: int) -> bool:
    """Whether check_counters(state, batch) already passed on this very state (a SoundState)."""
    return isinstance(state, SoundState) and state.counted == batch


def _check_loadable(t: "Trainer", path, state: dict) -> None:
    """CheckpointError naming the file and the tensor before anything is loaded: the agent's weights
    and the normalizers' statistics of this run's shapes (the first weight that differs named with
    both shapes, as eval names it), and sound (check_resumable)."""
    if isinstance(state.get("agent"), dict):
        own = t.agent.state_dict()
        ckpt.check_weight_shapes(path, {k: tuple(v.shape) for k, v in own.items()}, state["agent"], {k: v.dtype for k, v in own.items()})
    for key, module in (("obs_normalizer", t.obs_norm), ("reward_scaler", t.reward_scaler)):
        if module is not None and key in state:
            _check_like(path, key, state[key], module.state_dict())
    check_resumable(state)


def _set_rng(path, rng) -> None:
    try:
        ckpt.set_rng_state(rng)
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError, OverflowError) as e:
        raise ckpt.CheckpointError(f"{path}: rng is not a recorded RNG state ({type(e).__name__}: {ckpt._one_line(e, 120)})") from None


def restore(t: "Trainer", state: dict) -> None:
    """Put a loaded TrainState back into ``t`` (this rank's pieces under torchrun).

    A checkpoint that does not fit the run raises CheckpointError naming the file and the problem.
    """
    from .distributed import local_state

    state = local_state(state, t.dist.rank)  # this rank's env, RNG and normalizer pieces
    path = state.get("path", "checkpoint")
    # load_sound checked this very state in this process; under torchrun each rank checks what it received
    sound = isinstance(state, SoundState) and not t.dist.enabled
    # the file against itself, then the env: an env that changed its spaces since the run trained is
    # named as such, an edited spaces entry as the file's fault, neither as weights that do not fit this run
    if not sound:
        ckpt.check_agent_weights(state)
    changed = ckpt.env_spaces_mismatch(path, t.cfg.env_id, state["spaces"], t.env.single_observation_space,
                                       t.env.single_action_space)
    if changed:
        raise ckpt.CheckpointError(changed)
    _check_loadable(t, path, state)
    check_optimizer_settings(t, path, state.get("optimizer"))
    try:
        t.agent.load_state_dict(state["agent"])
        # into the optimizer's own lr and moment tensors (a compiled or graph-captured step holds them)
        t.optimizer.load_state_dict(state["optimizer"])
        if t.obs_norm is not None:
            t.obs_norm.load_state_dict(state["obs_normalizer"])
        if t.reward_scaler is not None:
            t.reward_scaler.load_state_dict(state["reward_scaler"])
        if t.scaler is not None and state.get("grad_scaler"):
            t.scaler.load_state_dict(state["grad_scaler"])
    except KeyError as e:
        raise ckpt.CheckpointError(f"{path}: incomplete checkpoint (missing {e})") from None
    except (RuntimeError, ValueError, TypeError) as e:
        raise ckpt.CheckpointError(f"{path}: does not match this run's config ({str(e).splitlines()[0][:160]})") from None
    from .run_setup import check_processes

    check_processes({**state, "path": path}, t.dist.world_size, launcher=False)
    batch = t.steps_per_iteration // t.dist.world_size
    if not (sound and counters_checked(state, batch)):
        check_counters(state, batch)
    if "rng" not in state:
        raise ckpt.CheckpointError(f"{path}: incomplete checkpoint (missing 'rng')")
    t.iteration, t.global_step = state["iteration"], state["global_step"]
    t.elapsed = float(state.get("elapsed", 0.0))
    t.last_checkpoint = Path(path) if "path" in state else None
    # what config.yaml says of a resume that trains nothing (open_run_dir): the run's own config, not this resume's flags
    t.checkpoint_config = state.get("config") if isinstance(state.get("config"), dict) else None
    t.return_window = return_window(state)
    t.best_eval = best_eval(state)
    recorded = state.get("env_backend", t.env.backend)
    # only an env that saves its state writes one: a file holding one under another backend's name was
    # edited, and would lose the bit-identical resume without a word (only the note below)
    if not isinstance(recorded, str) or (state.get("env") is not None and recorded != t.env.backend):
        raise ckpt.CheckpointError(f"{path}: env_backend is {ckpt._one_line(repr(recorded), 40)}, but the file holds the env "
                                   f"state its recorded config's {t.env.backend} env writes; the checkpoint is damaged or was edited")
    if state.get("env") is not None and t.env.can_save_state and recorded == t.env.backend:
        if "next_obs" not in state:
            raise ckpt.CheckpointError(f"{path}: incomplete checkpoint (missing 'next_obs')")
        # shapes first: a tensor of another shape would broadcast into this run's buffers (or fail inside them)
        _check_like(path, "next_obs", state["next_obs"], t.next_obs)
        _check_like(path, "env", state["env"], t.env.state_dict())
        try:
            t.env.load_state_dict(state["env"])
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as e:
            raise ckpt.CheckpointError(f"{path}: env does not hold this run's env state ({type(e).__name__}: "
                                       f"{ckpt._one_line(e, 120)})") from None
        t.next_obs.copy_(state["next_obs"])  # in place: the rollout's graph holds this buffer
        _set_rng(path, state["rng"])
    else:
        # Gymnasium envs cannot save their state: restart episodes (told once)
        if t.dist.is_main:
            print(f"proxima: note: {t.env.backend} envs cannot restore their state; resumed run restarts episodes", file=sys.stderr)
        _set_rng(path, state["rng"])
        # async workers' global RNGs too (seeded at their start from the run's seed alone): else every resume's
        # episodes would draw the np.random numbers of the run's start
        reseed_workers = getattr(t.env, "reseed_workers", None)
        if reseed_workers is not None:
            reseed_workers(t.iteration)
        t.next_obs.copy_(t.env.reset(seed=t.cfg.seed + 10_000 * t.dist.rank + t.iteration))
        if t.obs_norm is not None:  # new observations, counted as a fresh run's reset obs is
            t.obs_norm.count_reset(t.next_obs)
        if t.reward_scaler is not None:  # new episodes: their discounted returns start at 0 (the statistics stay)
            t.reward_scaler.returns.zero_()


def return_window(state: dict) -> list:
    """A checkpoint's ``return_window`` as [(return sum, episodes)]; [] for checkpoints written
    before it was recorded. CheckpointError when it is not a list of number pairs."""
    window = state.get("return_window") or []
    try:
        pairs = [(float(r), int(c)) for r, c in window]
    except (TypeError, ValueError):
        raise ckpt.CheckpointError(f"{state.get('path', 'checkpoint')}: return_window is not a list of "
                                   "[return sum, episodes] pairs") from None
    if any(c < 0 for _, c in pairs):
        raise ckpt.CheckpointError(f"{state.get('path', 'checkpoint')}: return_window holds a negative episode count")
    return pairs


def save(t: "Trainer") -> Optional[Path]:
    """Write a checkpoint (rank 0); under torchrun every rank calls this at the same iteration:
    the per-rank pieces (env, RNG, normalizers) are gathered into rank 0's checkpoint, and every
    rank returns once it is on disk."""
    if not t.dist.enabled:
        return ckpt.save_train_state(t.run_dir, capture(t), t.cfg.keep_checkpoints)
    from .distributed import RANK_KEYS

    state = capture(t)
    pieces = t.dist.gather_to_main({k: state[k] for k in RANK_KEYS})

    def write():
        state["ranks"] = pieces
        return ckpt.save_train_state(t.run_dir, state, t.cfg.keep_checkpoints)

    return t.dist.from_main(write)


# ------------------------------------------------------------------------------------------------
def _drop_link(path: Path) -> None:
    if path.is_symlink():
        path.unlink()


def open_run_dir(t: "Trainer", resumed: bool, trains: bool = True) -> None:
    """Rank 0: create the run directory; a new run also gets config.yaml and meta.json, a resumed
    one's config.yaml is replaced (atomically) when a resume changed a field (--total-timesteps), and
    its meta.json, which describes the first start, gets an entry in ``resumes`` (record_resume).
    A resume's config.yaml records the run directory's absolute path (however the run was named); one
    that trains nothing (``trains`` False: a complete or --stop-return-ended run) records the
    checkpoint's config, not its flags (_resumed_config). A resume whose best_eval has no best.pt
    left in the run gets it back from a checkpoint, or forgets that value (_mend_lost_best).

    A write that fails (disk full) raises StorageError naming the file and the free space; the
    trainer then removes the new run's directory (rundir.RunSession.discard_fresh)."""
    if not t.dist.is_main:
        return
    from .atomic import write_atomic
    from .diskspace import write_error

    # a new run's meta.json is gathered before config.yaml is written (doctor.collect takes ~0.2 s):
    # a kill between the two files must not leave a config.yaml without the meta.json that marks the
    # folder as a run's (rundir.holds_a_run), which --resume auto would refuse to restart
    meta = None if resumed else _run_meta(t)
    path = t.run_dir / "checkpoints"
    try:
        path.mkdir(parents=True, exist_ok=True)
        from .config import dump_yaml

        path = t.run_dir / "config.yaml"
        if resumed:
            if trains or getattr(t, "eval_pending", None) is not None:
                path = ckpt.best_checkpoint_path(t.run_dir)
                _mend_lost_best(t)
                path = t.run_dir / "config.yaml"
            # a loose checkpoint resumed into a new --run-dir: that run has no meta.json yet (below), and needs config.yaml
            fresh = not (t.run_dir / "meta.json").exists()
            # ... or a run whose meta.json was deleted (config.yaml with it, or not: its checkpoints say it is a
            # run's own directory): its record starts again here, saying so
            lost_meta = fresh and (path.exists() or bool(ckpt.list_checkpoints(t.run_dir)))
            # the flags a resume may change (an extended --total-timesteps): config.yaml says what runs now
            text = dump_yaml(_resumed_config(t, trains or fresh))
            if not holds_text(path, text):
                write_atomic(path, text)  # never through a link planted at config.yaml or a temp name
            if not fresh:
                path = t.run_dir / "meta.json"
                # a resume that trains records what it trains with; one of a complete run (nothing to
                # train, its evaluation shown from eval.json) leaves the run's files as they are
                if trains:
                    record_resume(path, _resume_entry(t))
                else:  # it writes no checkpoint, whose write would prune: --keep-checkpoints K prunes here
                    path = t.run_dir / "checkpoints"
                    _prune_untrained(t)
                return
        else:
            _drop_link(path)  # a new run's directory was claimed empty: never write through a link planted since
            with open(path, "w") as f:
                f.write(dump_yaml(t.cfg.to_dict()))
        meta = meta if meta is not None else _run_meta(t)
        path = t.run_dir / "meta.json"
        if resumed and lost_meta:
            # the first start's command, versions and machine are gone: what follows is this resume's, and says so
            meta["recreated_at_step"] = int(t.global_step)
            print(f"proxima: note: {path} was missing; recreated from this resume at step {t.global_step:,} (the first "
                  "start's command, versions and machine are not known)", file=sys.stderr)
        _drop_link(path)
        with open(path, "w") as f:
            json.dump(meta, f, indent=2, default=str)
    except OSError as e:
        raise write_error(path, e, "could not start the run") from None
    if not resumed and not getattr(t, "quiet", False):  # once, at a new run's start: what its policy takes and outputs
        from .envs.spaces import spaces_line

        spaces = meta["spaces"]
        line = (spaces_line(spaces) if "error" not in spaces
                else f"spaces: not described ({spaces['error']}); meta.json records the error")
        print(f"proxima: {line}", file=sys.stderr)


def _prune_untrained(t: "Trainer") -> None:
    """A resume that trains nothing (a complete run) with --keep-checkpoints K: prune_untrained for the run, its note
    naming the checkpoints folder as the resume named it."""
    folder = None if t.last_checkpoint is None else Path(t.last_checkpoint).parent
    prune_untrained(t.run_dir, t.cfg.keep_checkpoints, folder)


def prune_untrained(run_dir: Path, keep: int, folder: Optional[Path] = None, members: Sequence[Path] = ()) -> None:
    """A resume that trains nothing (a complete run or population) with --keep-checkpoints K: the checkpoints of
    ``run_dir`` (then of each of a population's ``members``, as save_population prunes them: the population's first)
    pruned to the newest K, as a resume that trains prunes them before its first write (checkpoint.prune_checkpoints:
    best.pt and the newest stay, a checkpoints/ leading out of the run is refused, a link is removed, never what it
    points to), with a note naming how many went (``folder``: RUN/checkpoints as the resume named it); nothing for
    K 0 (keep every one) or where every folder holds K or fewer."""
    folders = [Path(run_dir), *members]
    before = [len(ckpt.list_checkpoints(d)) for d in folders]
    if keep <= 0 or all(n <= keep for n in before):
        return
    for d in folders:
        ckpt.prune_checkpoints(d, keep)
    gone = [n - len(ckpt.list_checkpoints(d)) for n, d in zip(before, folders)]
    from .signals import from_python

    given = f"keep_checkpoints={keep}" if from_python() else f"--keep-checkpoints {keep}"
    folder = folder if folder is not None else Path(run_dir) / "checkpoints"
    if not members:
        print(f"proxima: note: {given}: removed the run's {gone[0]} oldest checkpoint(s) from {folder}, "
              f"keeping the newest {keep} (the run trains nothing more, and writes no checkpoint)", file=sys.stderr)
        return
    print(f"proxima: note: {given}: removed the population's {gone[0]} oldest checkpoint(s) from {folder} and "
          f"{sum(gone[1:])} from its {len(members)} members' checkpoints folders, keeping the newest {keep} of each "
          "(the population trains nothing more, and writes no checkpoint)", file=sys.stderr)


def run_spaces(t: "Trainer") -> dict:
    """meta.json's ``spaces``: how the run reads its env's spaces (spaces.spaces_summary) with the
    encoder it built (cfg.encoder, resolved by then) and its hidden sizes and activation; where describing
    them raised, ``{"error": "<Type>: <its first line>"}`` (a meta.json entry never stops a run)."""
    from .envs.spaces import spaces_summary

    cfg = t.cfg
    try:
        return spaces_summary(t.env.single_observation_space, t.env.single_action_space, cfg.encoder,
                              cfg.hidden_sizes, cfg.activation, cfg.env_id, native=getattr(t.env, "backend", None) == "native")
    except Exception as e:  # a description never stops a run (an odd native env's spaces, a bug in the helper)
        text = (str(e).strip().splitlines() or [""])[0]
        return {"error": f"{type(e).__name__}: {text}" if text else type(e).__name__}


def _resumed_config(t: "Trainer", trains: bool) -> dict:
    """The config.yaml a resume writes (where the file does not already say it). The run directory is
    absolute: resumed by its name (relative to where that command ran) or from a checkpoint file, the
    file says the same. A resume that trains nothing writes no checkpoint, so config.yaml says what the
    checkpoint holds (an edit there is undone, as the resume's note says), not the flags given to it
    (--keep-checkpoints 1 ran nothing, and the next resume would take it for an edit), but for
    eval_episodes: an end-of-run evaluation recomputed with another --eval-episodes (eval.json) has
    its count recorded (docs/reliability.md); and the file's run_dir stays as it is, so a resume of an
    untouched complete run writes nothing, from whatever directory it is run."""
    from .config import RESUME_SAFE
    from .run_setup import read_run_config

    here = Path(t.run_dir).resolve()
    values = {**t.cfg.to_dict(), "run_dir": str(here)}
    # a pending --eval-every evaluation rewrites the checkpoint with this resume's config (Trainer._run_pending_eval)
    if trains or (getattr(t, "eval_pending", None) is not None and t.cfg.eval_every):
        return values
    recorded = getattr(t, "checkpoint_config", None) or {}
    for key in RESUME_SAFE:
        if key not in ("eval_episodes", "run_dir") and key in recorded and key in values:
            values[key] = recorded[key]
    if t.cfg.eval_episodes <= 0 and "eval_episodes" in recorded:  # --eval-episodes 0 evaluates nothing
        values["eval_episodes"] = recorded["eval_episodes"]
    on_file = read_run_config(t.run_dir)[0]
    # a relative run_dir names the directory from where the run was started, which this command need not
    # be run from: resolved here, it told another directory and the file was rewritten for nothing trained
    if on_file is not None:
        values["run_dir"] = on_file.run_dir
    return values


def _mend_lost_best(t: "Trainer") -> None:
    """A resumed run's best_eval is the mean return of the policy in RUN/checkpoints/best.pt. When no
    best.pt is there (a resume from an explicitly older checkpoint set aside the newer best.pt that
    had replaced the one this value was: checkpoint.set_aside_newer; a removed file; a loose checkpoint
    in a new --run-dir), an evaluation that only equals it would write none, and the run would have no
    best.pt at all while `proxima eval --best` and the report look for one. A checkpoint still in the
    run that scored that value (_scored_best) becomes best.pt again, as the run had it; else the best
    starts afresh, so the next evaluation writes best.pt. OSError (a full disk) propagates."""
    from .atomic import write_atomic

    path = ckpt.best_checkpoint_path(t.run_dir)
    if t.best_eval is None or os.path.lexists(path):
        return
    name = t.last_checkpoint.name if getattr(t, "last_checkpoint", None) is not None else "the checkpoint"
    gone = (f"proxima: note: {name} records a best eval return of {t.best_eval:.2f}, but {path} that held it is not there "
            "(set aside with the newer checkpoints, or removed)")
    source = _scored_best(Path(t.run_dir), t.global_step, t.best_eval)
    if source is not None:
        write_atomic(path, source.read_bytes())  # never through a link planted at best.pt
        print(f"{gone}: {source.name}, which scored it, is best.pt again", file=sys.stderr)
        return
    t.best_eval = None
    if t.cfg.eval_every:
        print(f"{gone}: the resumed run's best starts afresh, and its next --eval-every evaluation writes best.pt",
              file=sys.stderr)


def _scored_best(run_dir: Path, step: int, best: float) -> Optional[Path]:
    """The run's checkpoint of the first step up to ``step`` whose evaluation scored ``best``
    (metrics.csv's eval/mean_return, written in full precision), recording it as its best_eval: the
    policy best.pt held, written in the same iteration; None when metrics.csv names none whose file is
    still there (kept checkpoints are pruned) and loads."""
    from .logger import read_csv_rows
    from .rundir import RunDirError

    try:
        rows, _ = read_csv_rows(run_dir / "metrics.csv")
    except (OSError, RunDirError):
        return None
    header = list(rows[0]) if rows else []
    if "global_step" not in header or "eval/mean_return" not in header:
        return None
    at, score = header.index("global_step"), header.index("eval/mean_return")
    kept = {p.name: p for p in ckpt.list_checkpoints(run_dir)}
    for cells in rows[1:]:
        cells = list(cells)
        if len(cells) != len(header):
            continue
        try:
            k, value = int(cells[at]), float(cells[score])
        except ValueError:
            continue
        source = kept.get(ckpt.checkpoint_path(run_dir, k).name) if 0 < k <= step and value == best else None
        if source is None:
            continue
        try:
            state = ckpt.load_checkpoint(source)
        except ckpt.CheckpointError:
            continue
        # a checkpoint that still records the evaluation as due was written before it ran
        if state.get("global_step") == k and state.get("best_eval") == best and "eval_pending" not in state:
            return source
    return None


def _run_meta(t: "Trainer") -> dict:
    """meta.json of a run: its kind, command, start time, versions, device, commit, how it reads its env's
    spaces (run_spaces) and machine facts."""
    from .config import preset_applied
    from .rundir import python_command

    # from Python (argv None) the process's argv is a script's or a notebook kernel's, no command that trains
    meta = {"kind": "ppo", "command": t.argv if t.argv is not None else python_command(),
            "started": started_now(), "versions": versions(),
            "device": str(t.device), "world_size": t.dist.world_size, **git_record(), **where_started(),
            "env_backend": t.env.backend, "spaces": run_spaces(t),
            # the preset config.yaml's values came from (Pendulum-v1/default), "none" for --preset none, else None
            "preset": preset_applied(t.cfg)}
    if getattr(t, "init_from_record", None):  # --init-from: the file it started from, its step and env (init_from.py)
        meta["init_from"] = t.init_from_record
    # --threads: this thread's count is a side thread's threads // 2 by now
    machine = machine_record(t.device, threads=t.cfg.threads)
    if machine is not None:
        meta["machine"] = machine
        if str(t.device).split(":")[0] == "cpu":
            meta["machine"].update(tanh_record(t.cfg))
    return meta


def tanh_record(cfg) -> dict:
    """The CPU tanh a CPU run computes with: ``{"cpu_tanh": ...}``, tanh_cpu.MODE, except under --amp
    or --compile, whose acting and update steps keep torch.tanh (bfloat16 would round the sigmoid
    form's small values to 0; inductor writes its own): "torch" there, and ``cpu_tanh_eager``: MODE
    where it differs, which the parts outside those steps (evaluation; under --compile the bootstrap
    values too) still compute with. doctor's MODE alone recorded "sigmoid" for a bf16 run that never
    computed it."""
    from .tanh_cpu import MODE

    if cfg is None or (getattr(cfg, "amp", "none") in (None, "none") and not getattr(cfg, "compile", False)):
        return {"cpu_tanh": MODE}
    return {"cpu_tanh": "torch", **({"cpu_tanh_eager": MODE} if MODE != "torch" else {})}


def _resume_entry(t: "Trainer") -> dict:
    from .rundir import python_command

    return resume_entry(t.global_step, t.argv if t.argv is not None else python_command(), device=str(t.device), cfg=t.cfg)


def resume_entry(step: int, argv=None, device: Optional[str] = None, cfg=None) -> dict:
    """One entry of meta.json's ``resumes``: what trains from ``step`` on (the first start's record
    at the top of meta.json says what trained before); ``argv``: the command, the one this process
    was started with when None (launch.typed_command).
    ``device``: the device it trains on (--device may change on resume), recorded when given, as the
    first start's is; on the CPU the entry also records the CPU tanh it computes with (tanh_record of
    ``cfg``, the resumed run's config: "torch" under --amp or --compile; MODE without a config)."""
    from .launch import typed_command

    cpu = device is not None and str(device).split(":")[0] == "cpu"
    entry = {"started": started_now(), "step": int(step),
             "command": argv if argv is not None else typed_command(), "versions": versions()}
    if device is not None:
        entry["device"] = str(device)
    if cpu:  # the CPU tanh (chosen by the CPU's maker) is part of what makes a resume bit-identical: beside the
        entry.update(tanh_record(cfg))  # first start's machine.cpu_tanh, and record_resume notes a change
    return {**entry, **git_record(), **where_started()}


class _DamagedMeta(Exception):
    pass


def record_resume(path: Path, entry: dict, note_tanh: bool = True) -> bool:
    """Append ``entry`` to the ``resumes`` list of the meta.json at ``path``, rewritten atomically (never
    through a link); whether it was. A meta.json that is not a JSON object (or whose ``resumes`` is not
    a list) is left as it is, with a note: the run's record is damaged, not its checkpoints, and the
    resume goes on. An entry recorded before with a step at or past ``entry``'s gets ``"abandoned": true``
    (kept, in its place): this resume continues from an older checkpoint, and what that one trained is
    on the timeline set aside (checkpoints/abandoned-TIME), not in the run's history any more (one at
    the same step trained nothing that this one keeps: it went back to that checkpoint too). The
    oldest entries give way (counted in ``resumes_dropped``) before the file would
    outgrow what a run's meta.json may be when read back (rundir._read_json_file), where the run
    would no longer count as one. OSError (a full disk) propagates, as for config.yaml."""
    from .atomic import write_atomic
    from .rundir import _LOCK_MAX_BYTES, _read_json_file

    try:
        meta = _read_json_file(path, _DamagedMeta)  # never through a link out of the run, never blocking: a run directory is data
        if meta is None:
            return False  # gone since it was seen: nothing to add to
        resumes = meta.get("resumes", [])
        if not isinstance(resumes, list):
            raise _DamagedMeta(f"{path}: resumes is not a list (a {type(resumes).__name__}); the run directory's "
                               "meta.json was damaged or edited")
    except _DamagedMeta as e:
        print(f"proxima: note: {e}; this resume is not recorded in it", file=sys.stderr)
        return False
    machine = meta.get("machine")
    before = machine.get("cpu_tanh") if isinstance(machine, dict) else None
    if note_tanh and before in ("torch", "sigmoid", "numpy") and entry.get("cpu_tanh") not in (None, before):
        print(f"proxima: note: the run started with the CPU tanh '{before}' and resumes with '{entry['cpu_tanh']}' (another "
              "kind of CPU, or PROXIMA_CPU_TANH): it trains on validly, not bit for bit as it would have", file=sys.stderr)
    step = entry.get("step")
    if _int_count(step):
        # `proxima report` would otherwise show that timeline's devices and versions as changes the run went
        # through, its steps going backwards (report._abandoned reads older meta.json files the same way)
        for old in resumes:
            if isinstance(old, dict) and _int_count(old.get("step")) and old["step"] >= step:
                old["abandoned"] = True
    resumes = resumes + [entry]
    dropped = meta.get("resumes_dropped")
    dropped = dropped if _int_count(dropped) and dropped > 0 else 0
    while True:
        meta["resumes"] = resumes
        if dropped:
            meta["resumes_dropped"] = dropped
        text = json.dumps(meta, indent=2, default=str)
        if len(text.encode("utf-8")) <= _LOCK_MAX_BYTES * 3 // 4 or len(resumes) <= 1:
            break
        resumes, dropped = resumes[1:], dropped + 1
    write_atomic(path, text)
    return True
