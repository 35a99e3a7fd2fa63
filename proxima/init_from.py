"""``--init-from PATH``: a new run that starts from another run's weights (fine-tuning, training on
at another learning rate: SB3's ``PPO.load(...).learn()``).

Only the policy is carried over: the network's weights and, under ``--norm-obs``, the observation
normalizer's statistics. The optimizer, the learning-rate schedule, the step counters, the RNGs and
the reward scaler start afresh, as in any new run; a resume of the new run reads its own checkpoints
(``init_from`` is then history in its config.yaml). The checkpoint is data: its weights are loaded
with ``weights_only`` and its env id is never imported.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from .config import ConfigError

#: config fields that shape the network: a checkpoint whose values differ holds another network
NETWORK_FIELDS = ("hidden_sizes", "activation", "encoder", "norm_obs")


def load_initial_policy(trainer, path: str, quiet: bool = False) -> None:
    """Replace ``trainer``'s fresh agent weights (and obs normalizer statistics) by those of the
    checkpoint at ``path`` (a file, or a run directory's newest); a ConfigError naming
    ``--init-from`` where the checkpoint's spaces or network differ from the run's."""
    from . import checkpoint as ckpt

    flag = f"--init-from {path}"
    if not Path(path).exists():
        raise ConfigError(f"{flag}: no such file or directory")
    try:
        state = ckpt.load_checkpoint(path)
    except ckpt.CheckpointError as e:
        raise ConfigError(f"{flag}: {e}") from None
    if state.get("kind") == "ppo-population":
        raise ConfigError(f"{flag}: a population's checkpoint holds many members; give one member's run directory "
                          "(RUN/m000-seed1 ...)")
    recorded = state["config"]
    cfg = trainer.cfg
    # the new run's own draws (its seed's) must not depend on the old network's initialization
    with torch.random.fork_rng(devices=[]):
        try:
            agent, obs_norm, obs_space, act_space = ckpt.build_agent(state, trainer.device)
        except ckpt.CheckpointError as e:
            raise ConfigError(f"{flag}: {e}") from None
    env_obs, env_act = trainer.env.single_observation_space, trainer.env.single_action_space
    # observation bounds are not what the network learned (its inputs are the values); the action
    # space's are: its actions are clipped or offset by them
    for what, theirs, ours, differ in (("observation", obs_space, env_obs, ckpt.describe_space(obs_space) != ckpt.describe_space(env_obs)),
                                       ("action", act_space, env_act, act_space != env_act)):
        if differ:
            shown = ckpt.describe_space(theirs), ckpt.describe_space(ours)
            if shown[0] == shown[1]:
                shown = str(theirs), str(ours)  # alike but for the bounds: show them
            raise ConfigError(f"{flag}: its policy acts on the {what} space {shown[0]}, and {cfg.env_id}'s is "
                              f"{shown[1]}; it can only start a run on an env of the same spaces")
    for name in NETWORK_FIELDS:
        theirs = recorded.get(name, ckpt_default(name))
        if theirs != getattr(cfg, name):
            raise ConfigError(f"{flag}: its network has {name} {_shown(theirs)}, this run's {_shown(getattr(cfg, name))}; "
                              f"give {_flag(name, theirs)} to start from it")
    trainer.agent.load_state_dict(agent.state_dict())
    if trainer.obs_norm is not None:
        trainer.obs_norm.load_state_dict(obs_norm.state_dict())
    step = int(state.get("global_step", 0))
    trainer.init_from_checkpoint = str(state.get("path", path))
    if not quiet and trainer.dist.is_main:
        env = recorded.get("env_id", "?")
        print(f"proxima: starting from the policy of {trainer.init_from_checkpoint} ({env}, step {step:,}): "
              "new optimizer, learning-rate schedule and counters", file=sys.stderr)


def ckpt_default(name: str):
    """What a checkpoint that lacks field ``name`` ran with (config.ABSENT_MEANS, else the default)."""
    import dataclasses

    from .config import ABSENT_MEANS, FIELDS

    if name in ABSENT_MEANS:
        return ABSENT_MEANS[name]
    f = FIELDS[name]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def _shown(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _flag(name: str, value) -> str:
    """The flag that sets field ``name`` to ``value``: --norm-obs / --no-norm-obs, --hidden-sizes 64,64."""
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else f"--no-{flag[2:]}"
    return f"{flag} {_shown(value)}"
