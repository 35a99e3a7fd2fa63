"""Proxima: PPO on PyTorch with the whole data path on the device.

Public API::

    from proxima import PPOConfig, train, load, make_env
    run_dir, agent = train(PPOConfig(env_id="CartPole-v1", total_timesteps=100_000))
    policy = load(run_dir)             # a run directory or a checkpoint file
    action = policy.act(obs)           # obs: (B, obs_dim) tensor or numpy array
"""

from .config import ConfigError, PPOConfig
from .envs import make_env

__version__ = "0.1.0"
__all__ = ["PPOConfig", "ConfigError", "train", "load", "make_env", "__version__"]


def train(config: PPOConfig, **kwargs):
    """Train PPO; return (run_dir: pathlib.Path, agent). See proxima.trainer.train."""
    from .trainer import train as _train

    return _train(config, **kwargs)


def load(path, device="cpu"):
    """Load a policy from a run directory or checkpoint file; see proxima.checkpoint.load_policy."""
    from .checkpoint import load_policy

    return load_policy(path, device=device)
