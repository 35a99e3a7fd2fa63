"""Proxima: PPO on PyTorch with the whole data path on the device.

Public API::

    from proxima import PPOConfig, train, load, make_env
    run_dir, policy = train(PPOConfig(env_id="CartPole-v1", total_timesteps=100_000))
    policy = load(run_dir)             # the same policy, from a run directory or a checkpoint file
    action = policy.act(obs)           # obs: (B, obs_dim) tensor or numpy array
"""

import os as _os
import sys as _sys

# `python -m proxima ...` imports this package with the current directory first on sys.path; inside
# a stranger's run directory a shipped numpy.py or gymnasium.py would then run. The console script
# never searches it; an env module named on the command line (module:Class) is still found there
# (envs/gym_adapter.py).
if _sys.argv[:1] == ["-m"] and _sys.path and _sys.path[0] in ("", _os.getcwd()):
    _sys.path.pop(0)

from .config import ConfigError, PPOConfig  # noqa: E402

__version__ = "0.1.0"
__all__ = ["PPOConfig", "ConfigError", "UntrustedEnvError", "TrainingInterrupted", "train", "load", "make_env",
           "__version__"]

#: imported on first use, as make_env: their modules import torch or gymnasium (see __getattr__);
#: TrainingInterrupted (what train() raises on Ctrl-C) too, so the package's import stays what it was
_LAZY = {"make_env": "envs", "UntrustedEnvError": "envs.gym_adapter", "TrainingInterrupted": "signals"}


def __getattr__(name: str):
    # make_env and UntrustedEnvError (which load and evaluate raise) are imported on first use, not
    # with the package: importing them imports torch and gymnasium, and `proxima doctor` (this
    # package's import included) must run to diagnose either one that does not import (a CUDA wheel
    # missing libcudnn)
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value

    try:  # `import proxima; proxima.envs...`: a submodule, imported on first use as make_env is
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def train(config: PPOConfig, **kwargs):
    """Train PPO; return (run_dir: pathlib.Path, policy): the run's policy as load(run_dir) gives it
    (``policy.agent`` is the network). See proxima.trainer.train."""
    from .trainer import train as _train

    return _train(config, **kwargs)


def load(path, device="cpu", env_id=None, trust_env=False, env_kwargs=None):
    """Load a policy from a run directory or checkpoint file onto ``device`` ("cpu", "cuda", "cuda:1" or
    "auto", as --device takes them); see proxima.checkpoint.load_policy.

    A run's recorded env id is data: a ``module:Class`` one is evaluated (proxima.evaluate.evaluate)
    only when named here, ``env_id="module:Class"``, or with ``trust_env=True`` (eval's --env and
    --trust-run). ``env_kwargs``: the env's constructor arguments instead of the recorded ones."""
    from .checkpoint import load_policy

    return load_policy(path, device=device, env_id=env_id, trust_env=trust_env, env_kwargs=env_kwargs)
