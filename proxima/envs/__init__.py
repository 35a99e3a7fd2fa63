"""Batched environments: torch-native classics and an adapter for any Gymnasium env."""

from __future__ import annotations

from typing import Optional

import torch

from .base import BatchedEnv, EnvError, NativeEnv
from .classic import NATIVE_ENVS
from .gym_adapter import GymnasiumEnv, check_spaces
from .synthetic import LinearQuadratic

NATIVE_ENVS.setdefault(LinearQuadratic.env_id, LinearQuadratic)  # benchmark task, no Gymnasium twin

__all__ = ["BatchedEnv", "NativeEnv", "EnvError", "GymnasiumEnv", "NATIVE_ENVS", "make_env"]


def make_env(env_id: str, num_envs: int, device="cpu", backend: str = "auto", vector: str = "sync", seed: Optional[int] = None,
             render_mode: Optional[str] = None, env_kwargs: Optional[dict] = None) -> BatchedEnv:
    """Build N envs of ``env_id`` on ``device``.

    backend: ``auto`` picks the torch-native env when one exists, else the Gymnasium adapter;
    ``native`` fails with EnvError when there is none; ``gymnasium`` forces the adapter.
    env_kwargs: keyword arguments of the env's constructor (``--env-kwargs``); Gymnasium envs only
    (with ``auto`` a native env is skipped when kwargs are given).
    """
    device = torch.device(device)
    if backend not in ("auto", "native", "gymnasium"):
        raise EnvError(f"unknown backend '{backend}': use auto, native or gymnasium")
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
