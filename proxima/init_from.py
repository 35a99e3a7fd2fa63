"""``--init-from PATH``: a new run that starts from another run's weights (fine-tuning, training on
at another learning rate: SB3's ``PPO.load(...).learn()``).

Only the policy is carried over: the network's weights and, under ``--norm-obs``, the observation
normalizer's statistics. The optimizer, the learning-rate schedule, the step counters, the RNGs and
the reward scaler start afresh, as in any new run; a resume of the new run reads its own checkpoints
(``init_from`` is then history in its config.yaml). The checkpoint is data: its weights are loaded
with ``weights_only`` and its env id is never imported.

Two parts: check_initial_policy reads the checkpoint and checks it against the spaces and the config
of the run (the Trainer's, and ``train --dry-run``'s through run_setup.preflight, which has only an
env's spaces); load_initial_policy puts what it read into a Trainer. The new run records the
checkpoint FILE it started from as an absolute path (config.yaml's init_from, meta.json's init_from):
a run directory's newest checkpoint changes as that run is extended or rotates its files, and a
relative path only holds from the directory the run was started in.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NamedTuple, Optional

import torch

from .config import ConfigError

#: config fields that shape the network: a checkpoint whose values differ holds another network
NETWORK_FIELDS = ("hidden_sizes", "activation", "encoder", "norm_obs")


class InitialPolicy(NamedTuple):
    """What check_initial_policy read: the policy's pieces and where they came from."""
    checkpoint: Path  # the file loaded, absolute (as named: a run's checkpoints/ entry, not where a link leads)
    global_step: int
    env_id: str
    agent: torch.nn.Module
    obs_norm: Optional[torch.nn.Module]

    def record(self) -> dict:
        """meta.json's ``init_from``: which weights the run started from, once the source has moved on."""
        return {"checkpoint": str(self.checkpoint), "global_step": self.global_step, "env_id": self.env_id}


def _given(path, python: bool) -> str:
    return f"PPOConfig.init_from = {str(path)!r}" if python else f"--init-from {path}"


def _quoted(path, python: bool) -> str:
    """``path`` as --init-from takes it in a shell (quoted where it needs it); as it is for a PPOConfig."""
    import shlex

    return str(path) if python else shlex.quote(str(path))


def check_initial_policy(path, cfg, obs_space, act_space, device="cpu", python: bool = False,
                         run_dir=None) -> InitialPolicy:
    """The policy of the checkpoint at ``path`` (a file, a run directory's newest, or RUN/checkpoints'
    newest), checked against a run of ``cfg`` on an env of ``obs_space`` and ``act_space``: a
    ConfigError naming ``--init-from`` (``python``: PPOConfig.init_from, and each field as a Python
    caller sets it) where the spaces or the network differ, the file is no checkpoint, a population's,
    or inside ``run_dir`` (the directory the new run takes, when named: --overwrite would move it
    aside, and the run's record would name a file that is no longer there)."""
    from . import checkpoint as ckpt

    flag = _given(path, python)
    source = ckpt.source_path(path)
    if not source.exists():
        raise ConfigError(f"{flag}: no such file or directory")
    if run_dir is not None:  # before loading: the file a run directory's newest is, named in the line
        try:
            named = ckpt.resolve_checkpoint(source)
        except ckpt.CheckpointError:  # load_checkpoint names why, unless it lies in the run directory anyway
            named = source
        _check_outside(flag, named, Path(run_dir), python)
    try:
        # a run directory as eval and proxima.load() read it: a damaged newest one named with the run's newest
        # sound one, another run's checkpoint copied in refused
        state = ckpt.load_run_newest(source, ckpt.load_checkpoint, "start from", lambda f: _given(_quoted(f, python), python))
    except ckpt.CheckpointError as e:
        raise ConfigError(f"{flag}: {e}") from None
    if state.get("kind") == "ppo-population":
        raise ConfigError(f"{flag}: a population's checkpoint holds many members; give one member's run directory "
                          "(RUN/m000-seed1 ...)")
    checkpoint = Path(os.path.abspath(state.get("path", source)))
    if run_dir is not None:  # the file a run directory's newest turned out to be
        _check_outside(flag, checkpoint, Path(run_dir), python)
    recorded = state["config"]
    # the new run's own draws (its seed's) must not depend on the old network's initialization
    with torch.random.fork_rng(devices=[]):
        try:
            agent, obs_norm, their_obs, their_act = ckpt.build_agent(state, device)
        except ckpt.CheckpointError as e:
            raise ConfigError(f"{flag}: {e}") from None
    # observation bounds are not what the network learned (its inputs are the values); the action
    # space's are: its actions are clipped or offset by them
    for what, theirs, ours, differ in (("observation", their_obs, obs_space,
                                        ckpt.describe_space(their_obs) != ckpt.describe_space(obs_space)),
                                       ("action", their_act, act_space, their_act != act_space)):
        if differ:
            shown = ckpt.describe_space(theirs), ckpt.describe_space(ours)
            if shown[0] == shown[1]:
                shown = str(theirs), str(ours)  # alike but for the bounds: show them
            raise ConfigError(f"{flag}: its policy acts on the {what} space {shown[0]}, and {cfg.env_id}'s is "
                              f"{shown[1]}; it can only start a run on an env of the same spaces")
    for name in NETWORK_FIELDS:
        theirs, ours = recorded.get(name, ckpt_default(name)), getattr(cfg, name)
        if theirs != ours:
            raise ConfigError(f"{flag}: its network has {name} {_shown(theirs, python)}, this run's "
                              f"{_shown(ours, python)}; give {_setting(name, theirs, python)} to start from it")
    step = state.get("global_step", 0)
    env_id = recorded.get("env_id")
    return InitialPolicy(checkpoint, int(step) if isinstance(step, int) else 0, env_id if isinstance(env_id, str) else "?",
                         agent, obs_norm)


def _check_outside(flag: str, checkpoint: Path, run_dir: Path, python: bool) -> None:
    """ConfigError when ``checkpoint`` lies in ``run_dir``, the directory the new run takes."""
    taken = run_dir.resolve()
    for named in (Path(os.path.abspath(checkpoint)), checkpoint.resolve()):
        if named == taken or taken in named.parents:
            given = f"run_dir={str(run_dir)!r}" if python else f"--run-dir {run_dir}"
            raise ConfigError(f"{flag}: {checkpoint} is inside {given}, which this new run takes; copy the checkpoint "
                              f"out of it, or give another {'run_dir' if python else '--run-dir'}")


def load_initial_policy(trainer, path, quiet: bool = False, python: bool = False, run_dir=None) -> InitialPolicy:
    """Replace ``trainer``'s fresh agent weights (and obs normalizer statistics) by those of the
    checkpoint at ``path`` (check_initial_policy, against the trainer's env and config); returns
    what was loaded (trainer.init_from_record: the file, its step and env, for meta.json)."""
    initial = check_initial_policy(path, trainer.cfg, trainer.env.single_observation_space,
                                   trainer.env.single_action_space, trainer.device, python, run_dir)
    trainer.agent.load_state_dict(initial.agent.state_dict())
    if trainer.obs_norm is not None:
        trainer.obs_norm.load_state_dict(initial.obs_norm.state_dict())
    trainer.init_from_record = initial.record()
    if not quiet and trainer.dist.is_main:
        print(f"proxima: starting from the policy of {initial.checkpoint} ({initial.env_id}, step {initial.global_step:,}): "
              "new optimizer, learning-rate schedule and counters", file=sys.stderr)
    return initial


def ckpt_default(name: str):
    """What a checkpoint that lacks field ``name`` ran with (config.ABSENT_MEANS, else the default)."""
    from .config import ABSENT_MEANS, field_default

    return ABSENT_MEANS[name] if name in ABSENT_MEANS else field_default(name)


def _shown(value, python: bool = False) -> str:
    if python:
        return repr(value)
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _setting(name: str, value, python: bool = False) -> str:
    """How field ``name`` is set to ``value``: ``--norm-obs`` / ``--no-norm-obs``, ``--hidden-sizes 64,64``
    on the command line; ``norm_obs=True``, ``hidden_sizes=[64, 64]`` in a PPOConfig."""
    if python:
        return f"{name}={value!r}"
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else f"--no-{flag[2:]}"
    return f"{flag} {_shown(value)}"
