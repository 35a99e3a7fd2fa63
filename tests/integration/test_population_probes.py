"""Probe envs (tests/probe_envs.py) solved by every member of a population, each with its own settings."""

from __future__ import annotations

import pytest
import torch

from proxima.config import PPOConfig
from proxima.population import Population, member_configs


def train_population(env_id: str, seeds, sweep=None, total_timesteps: int = 2048, **overrides) -> Population:
    values = dict(env_id=env_id, num_envs=8, num_steps=32, total_timesteps=total_timesteps, num_minibatches=4,
                  update_epochs=4, lr=3e-3, anneal_lr=False, ent_coef=0.0, progress=False, eval_episodes=0)
    values.update(overrides)
    pop = Population(member_configs(PPOConfig(**values), seeds, sweep))
    try:
        while pop.iteration < pop.num_iterations:
            out = pop.train_iteration()
            assert not bool(out["nonfinite"].any())
    finally:
        pop.close()
    return pop


def test_probe3_each_member_learns_the_value_of_its_own_gamma(probe_envs):
    pop = train_population("Probe3-v0", [1, 2], {"gamma": [0.5, 0.9]})
    with torch.no_grad():
        v0 = [pop.member_agent(i).get_value(torch.tensor([[0.0]])).item() for i in range(4)]
    assert v0 == pytest.approx([0.5, 0.5, 0.9, 0.9], abs=0.1)


def test_probe4_every_member_picks_the_rewarded_action(probe_envs):
    pop = train_population("Probe4-v0", [1, 2, 3])
    for i in range(3):
        assert pop.member_agent(i).act(torch.tensor([[0.0]])).item() == 1, f"member {i}"
