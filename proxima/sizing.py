"""Refuse a run that cannot fit before anything is allocated: ``--num-envs 10**9`` is one line,
``--num-envs 1000000000: needs ~X GB on cpu, Y GB free``, not a minute of swapping and an OOM kill.

The estimate counts what grows with the batch T x N: the rollout buffers (obs and final_obs,
actions, log-probs, values, rewards, flags), the update's per-sample tensors (advantages, returns,
bootstrap values, the permutation, the critic's activations over the batch) and the envs' own state
(torch-native: a few numbers per env; Gymnasium: a Python object per env, counted as 20 KB). It is a
lower bound of the real footprint, so only runs that surely cannot fit are refused.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from .config import ConfigError, PPOConfig
from .diskspace import human_bytes

#: bytes of one Gymnasium env instance (a Python object with its spaces and RNG), a conservative guess
GYM_ENV_BYTES = 20_000
#: below this fraction of the free memory even the smallest per-sample cost cannot matter: no probe env
QUICK_FRACTION = 0.01


def free_memory(device: torch.device) -> Optional[int]:
    """Bytes free on ``device`` (cuda: mem_get_info; cpu: MemAvailable of /proc/meminfo), None if unknown."""
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except Exception:
            return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def estimate_bytes(cfg: PPOConfig, obs_size: int, act_size: int, native: bool) -> int:
    """Lower bound of the memory a run needs (bytes): per-sample buffers x T x N + per-env state x N."""
    hidden = sum(cfg.hidden_sizes)
    per_sample = (2 * obs_size * 4            # obs, final_obs (float32)
                  + act_size * 8              # actions (int64 or float32)
                  + 4 * 4 + 2                 # logprobs, values, rewards, raw_rewards; terminated, dones
                  + 3 * 4 + 8                 # advantages, returns, next values; the minibatch permutation
                  + hidden * 4)               # the critic's activations over the batch (bootstrap values)
    per_env = obs_size * 4 * 4 + 64 if native else GYM_ENV_BYTES
    return cfg.num_steps * cfg.num_envs * per_sample + cfg.num_envs * per_env


def network_bytes(cfg: PPOConfig, obs_size: int, act_size: int) -> int:
    """Lower bound of the actor's and critic's memory (bytes): float32 weights, their gradients and
    Adam's two moments (4 copies), plus one minibatch's hidden activations in both MLPs."""
    return sum(network_terms(cfg, obs_size, act_size))


def network_terms(cfg: PPOConfig, obs_size: int, act_size: int) -> tuple[int, int]:
    """network_bytes in its two parts: (weights with gradients and Adam state, one minibatch's activations)."""
    sizes = list(cfg.hidden_sizes)
    params = 0
    for out in (act_size, 1):  # the actor's head, then the critic's
        layers = [obs_size, *sizes, out]
        params += sum(a * b + b for a, b in zip(layers[:-1], layers[1:]))
    return 4 * 4 * params, 2 * minibatch_rows(cfg) * sum(sizes) * 4


def minibatch_rows(cfg: PPOConfig) -> int:
    return cfg.num_envs * cfg.num_steps // max(cfg.num_minibatches, 1)


def check_fits(cfg: PPOConfig, device: torch.device, probe=None) -> None:
    """Raise ConfigError when the run surely does not fit in the free memory of ``device``.

    probe(): (obs_size, act_size, native) of the env, called only when the batch is large enough
    to matter (building one env to learn its sizes is skipped for ordinary runs).
    """
    free = free_memory(device)
    if free is None:
        return
    smallest = estimate_bytes(cfg, 1, 1, native=True) + network_bytes(cfg, 1, 1)
    if smallest < QUICK_FRACTION * free:
        return
    obs_size, act_size, native = probe() if probe is not None else (1, 1, True)
    buffers, nets = estimate_bytes(cfg, obs_size, act_size, native), network_bytes(cfg, obs_size, act_size)
    if buffers + nets <= free:
        return
    if nets >= buffers:  # the networks are what does not fit: name the flags of their larger part
        weights, activations = network_terms(cfg, obs_size, act_size)
        if activations > weights:  # one minibatch's rows through both MLPs
            lower = "--num-envs or --num-steps" if cfg.num_steps > 1 else "--num-envs"
            raise ConfigError(f"one minibatch (--num-envs {cfg.num_envs} x --num-steps {cfg.num_steps} / --num-minibatches "
                              f"{cfg.num_minibatches} = {minibatch_rows(cfg):,} rows) needs ~{human_bytes(activations)} of "
                              f"activations on {device} (~{human_bytes(buffers + nets)} in all), {human_bytes(free)} free; "
                              f"raise --num-minibatches, or lower {lower}")
        raise ConfigError(f"--hidden-sizes {','.join(map(str, cfg.hidden_sizes))}: the actor and critic need ~{human_bytes(nets)} "
                          f"on {device} (weights, gradients, Adam state, activations), {human_bytes(free)} free; lower --hidden-sizes")
    # the critic's activations over the whole batch grow with the layer widths too
    wide = cfg.num_steps * cfg.num_envs * sum(cfg.hidden_sizes) * 4 >= buffers / 2
    lower = "--num-envs, --num-steps or --hidden-sizes" if wide else "--num-envs or --num-steps"
    raise ConfigError(f"--num-envs {cfg.num_envs} x --num-steps {cfg.num_steps}: needs ~{human_bytes(buffers + nets)} on {device}, "
                      f"{human_bytes(free)} free; lower {lower}")


def env_probe(cfg: PPOConfig):
    """A probe for check_fits: build one env to read its observation and action sizes."""

    def probe():
        from .envs import make_env

        env = make_env(cfg.env_id, 1, "cpu", cfg.backend, cfg.vector, seed=cfg.seed, env_kwargs=cfg.env_kwargs)
        try:
            obs = int(math.prod(env.single_observation_space.shape))
            act = int(math.prod(env.single_action_space.shape or (1,)))
            return obs, act, env.backend != "gymnasium"
        finally:
            env.close()

    return probe
