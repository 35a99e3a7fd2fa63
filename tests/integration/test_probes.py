"""Probe envs (tests/probe_envs.py): each isolates one part of the learner and must be solved in seconds."""

from __future__ import annotations

import pytest
import torch

from proxima.config import PPOConfig
from proxima.trainer import Trainer


def train_probe(env_id: str, total_timesteps: int = 2048, **overrides) -> Trainer:
    """Train on a probe with Trainer's own iteration (no run directory); return the trainer."""
    values = dict(env_id=env_id, num_envs=8, num_steps=32, total_timesteps=total_timesteps, num_minibatches=4,
                  update_epochs=4, lr=3e-3, anneal_lr=False, ent_coef=0.0, progress=False, eval_episodes=0, seed=1)
    values.update(overrides)
    trainer = Trainer(PPOConfig(**values))
    try:
        while trainer.iteration < trainer.num_iterations:
            out = trainer.train_iteration()
            assert not bool(out["nonfinite"])
    finally:
        trainer.close()
    return trainer


def value(trainer: Trainer, obs: float) -> float:
    with torch.no_grad():
        return trainer.agent.get_value(torch.tensor([[obs]])).item()


def action_probs(trainer: Trainer, obs: float) -> torch.Tensor:
    with torch.no_grad():
        return torch.softmax(trainer.agent.actor(torch.tensor([[obs]])), -1)[0]


def test_probe1_constant_reward_value_learns_one(probe_envs):
    trainer = train_probe("Probe1-v0")
    assert value(trainer, 0.0) == pytest.approx(1.0, abs=0.1)


def test_probe2_obs_dependent_reward_value_predicts_it(probe_envs):
    trainer = train_probe("Probe2-v0")
    assert value(trainer, 1.0) == pytest.approx(1.0, abs=0.1)
    assert value(trainer, -1.0) == pytest.approx(-1.0, abs=0.1)


def test_probe3_two_step_discounting_value_of_first_obs_is_gamma(probe_envs):
    gamma = 0.5  # far from 1 so that a missing discount (V = 1) fails
    trainer = train_probe("Probe3-v0", gamma=gamma)
    assert value(trainer, 0.0) == pytest.approx(gamma, abs=0.1)
    assert value(trainer, 1.0) == pytest.approx(1.0, abs=0.1)


def test_probe4_action_dependent_reward_policy_picks_the_right_action(probe_envs):
    trainer = train_probe("Probe4-v0")
    assert action_probs(trainer, 0.0)[1].item() > 0.9
    assert trainer.agent.act(torch.tensor([[0.0]])).item() == 1
    assert value(trainer, 0.0) > 0.5  # the critic follows the better policy: V -> +1


def test_probe5_obs_times_action_policy_matches_the_obs(probe_envs):
    trainer = train_probe("Probe5-v0")
    assert action_probs(trainer, 1.0)[1].item() > 0.9
    assert action_probs(trainer, -1.0)[0].item() > 0.9
    assert trainer.agent.act(torch.tensor([[1.0], [-1.0]])).tolist() == [1, 0]
