"""RLHF with PPO: fine-tune a Hugging Face causal LM against a reward model or a reward function.

    from proxima.rlhf import RLHFConfig, train_rlhf
    run_dir = train_rlhf(RLHFConfig(policy="my-model/", reward="my_rewards:score", prompts="prompts.jsonl"))

The algorithm reuses the core ``proxima.ppo.compute_gae`` (on the token axis) and ``ppo_loss``
(masked to response tokens); see docs/rlhf.md and the RLHF section of docs/ppo_notes.md.
"""

from .config import ConfigError, RLHFConfig

__all__ = ["RLHFConfig", "ConfigError", "train_rlhf", "resume"]


def __getattr__(name: str):
    """train_rlhf and resume on first use (PEP 562): .api imports torch, which `proxima rlhf --help`
    (proxima.rlhf.cli, a module of this package) does not need."""
    if name in ("train_rlhf", "resume"):
        from . import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
