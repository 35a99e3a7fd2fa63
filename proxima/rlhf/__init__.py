"""RLHF with PPO: fine-tune a Hugging Face causal LM against a reward model or a reward function.

    from proxima.rlhf import RLHFConfig, train_rlhf
    run_dir = train_rlhf(RLHFConfig(policy="my-model/", reward="my_rewards:score", prompts="prompts.jsonl"))

The algorithm reuses the core ``proxima.ppo.compute_gae`` (on the token axis) and ``ppo_loss``
(masked to response tokens); see docs/rlhf.md and the RLHF section of PPO_NOTES.md.
"""

from .api import resume, train_rlhf
from .config import ConfigError, RLHFConfig

__all__ = ["RLHFConfig", "ConfigError", "train_rlhf", "resume"]
