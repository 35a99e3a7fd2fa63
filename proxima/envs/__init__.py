"""Batched environments: torch-native classics, an adapter for any Gymnasium env, and Atari
(EnvPool or Gymnasium's ALE, atari.py); observation spaces as tensors in spaces.py."""

from __future__ import annotations

from typing import Optional

import torch

from . import atari
from .base import BatchedEnv, EnvError, NativeEnv
from .classic import NATIVE_ENVS
from .gym_adapter import GymnasiumEnv, check_spaces
from .synthetic import LinearQuadratic, PixelQuadrant

NATIVE_ENVS.setdefault(LinearQuadratic.env_id, LinearQuadratic)  # benchmark task, no Gymnasium twin
NATIVE_ENVS.setdefault(PixelQuadrant.env_id, PixelQuadrant)  # the image task of the CNN tests

BACKENDS = ("auto", "native", "gymnasium", "envpool")

__all__ = ["BatchedEnv", "NativeEnv", "EnvError", "GymnasiumEnv", "NATIVE_ENVS", "make_env"]


def auto_backend(env_id: str, env_kwargs: Optional[dict] = None) -> str:
    """The backend ``--backend auto`` builds for ``env_id`` (make_env, and bench's tables, which name
    what ran): EnvPool for an Atari game when installed, else Gymnasium's ALE; the torch-native env
    when one exists and no constructor kwargs are given; else the Gymnasium adapter."""
    if atari.game_name(env_id) is not None:
        return "envpool" if atari.has_envpool() else "gymnasium"
    return "native" if env_id in NATIVE_ENVS and not env_kwargs else "gymnasium"


def make_env(env_id: str, num_envs: int, device="cpu", backend: str = "auto", vector: str = "sync", seed: Optional[int] = None,
             render_mode: Optional[str] = None, training: bool = True, env_kwargs: Optional[dict] = None) -> BatchedEnv:
    """Build N envs of ``env_id`` on ``device``.

    backend: ``auto`` picks the torch-native env when one exists, EnvPool for Atari ids when it is
    installed, else the Gymnasium adapter; ``native`` fails with EnvError when there is none;
    ``gymnasium`` forces the adapter (for Atari: Gymnasium's ALE with the same wrappers);
    ``envpool``: Atari through EnvPool. training: Atari's training rules (a lost life ends the
    episode, rewards clipped to their sign); False plays full games with raw rewards (evaluation).
    env_kwargs: keyword arguments of the env's constructor (``--env-kwargs``); Gymnasium envs only
    (with ``auto`` a native env is skipped when kwargs are given; Atari ids refuse them).
    """
    device = torch.device(device)
    if backend not in BACKENDS:
        raise EnvError(f"unknown backend '{backend}': use {', '.join(BACKENDS)}")
    if backend == "auto":
        backend = auto_backend(env_id, env_kwargs)
    game = atari.game_name(env_id)
    if game is not None and backend != "native":
        if env_kwargs:
            raise EnvError(f"--env-kwargs: the Atari id '{env_id}' takes its settings from the preset, not constructor arguments")
        return atari.make_atari(env_id, num_envs, device, backend, vector, seed, render_mode, training)
    if backend == "envpool":
        raise EnvError(f"--backend envpool runs Atari games (ids like Pong-v5), not '{env_id}'; use --backend auto")
    native = NATIVE_ENVS.get(env_id)
    if backend == "native" and native is None:
        raise EnvError(f"no native env for '{env_id}' (native: {', '.join(sorted(NATIVE_ENVS))}); use --backend gymnasium or auto")
    if backend == "native" and env_kwargs:
        raise EnvError(f"--env-kwargs: the native '{env_id}' takes no constructor arguments; use --backend gymnasium (or auto)")
    if native is not None and backend != "gymnasium" and not env_kwargs:
        env = native(num_envs, device=device, seed=seed)
        env.env_id = env_id
        return env
    return GymnasiumEnv(env_id, num_envs, device=device, vector=vector, seed=seed, render_mode=render_mode, env_kwargs=env_kwargs)
