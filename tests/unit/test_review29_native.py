"""Review 29, native envs: unseeded builds, uint8 actions, step before reset, member-stream reseeds,
the README's float32 sentence (now docs/environments.md's)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from proxima.envs import EnvError, make_env
from proxima.envs.classic import NATIVE_ENVS, Acrobot, CartPole, MountainCar

ENVIRONMENTS = Path(__file__).resolve().parents[2] / "docs" / "environments.md"  # the README's env notes


# ------------------------------------------------------------------------------- 1. seed=None
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_unseeded_native_envs_draw_their_own_episodes(env_id):
    """seed=None was seed 0: every unseeded build replayed the same episodes (Gymnasium's differ)."""
    first = make_env(env_id, 8, backend="native").reset()
    second = make_env(env_id, 8, backend="native").reset()
    assert not torch.equal(first, second)
    assert not torch.equal(NATIVE_ENVS[env_id](8).reset(), NATIVE_ENVS[env_id](8).reset())
    # a seed (what train and evaluate always pass) still reproduces the episodes
    assert torch.equal(make_env(env_id, 8, backend="native", seed=3).reset(),
                       make_env(env_id, 8, backend="native", seed=3).reset())
    env = make_env(env_id, 8, backend="native")
    assert torch.equal(env.reset(seed=5), make_env(env_id, 8, backend="native", seed=5).reset())


# ------------------------------------------------------------------------------- 2. uint8 actions
@pytest.mark.parametrize("cls", [CartPole, Acrobot, MountainCar])
@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_uint8_actions_step_as_int64_ones(cls, kind):
    """(action - 1) in uint8 wrapped action 0 to 255: Acrobot got torque +255, CartPole force +2550."""
    n = cls(1).single_action_space.n
    actions = torch.arange(n).repeat(2)
    small = actions.to(torch.uint8) if kind == "torch" else actions.numpy().astype(np.uint8)
    ref, env = cls(len(actions), seed=1), cls(len(actions), seed=1)
    ref.reset(), env.reset()
    for _ in range(3):
        want = ref.step(actions)
        got = env.step(small)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(env.state["s"], ref.state["s"])


# ------------------------------------------------------------------------------- 3. step before reset
@pytest.mark.parametrize("env_id", sorted(NATIVE_ENVS))
def test_step_before_reset_is_one_env_error_line(env_id):
    env = make_env(env_id, 2, backend="native")
    with pytest.raises(EnvError) as e:
        env.step(torch.zeros(2, *env.action_shape, dtype=torch.int64 if not env.action_shape else torch.float32))
    assert str(e.value) == f"{env_id}: call reset() before step()"
    env.reset()
    env.step(torch.zeros(2, *env.action_shape, dtype=torch.int64 if not env.action_shape else torch.float32))


# ------------------------------------------------------------------------------- 5. member streams
def test_reset_with_a_seed_reseeds_member_streams():
    """reset(seed=...) re-seeded only self.generator, which member streams do not draw from: the
    seed was ignored. Block p now gets seed + seeds[p] - seeds[0], a lone env's reset(seed=seeds[p] + k)."""
    seeds = [10, 20, 10]
    env = CartPole(6)
    assert env.use_member_streams(seeds)

    def lone(seed):
        return CartPole(2, seed=0).reset(seed=seed)

    first = env.reset(seed=10)
    assert torch.equal(first, torch.cat([lone(10), lone(20), lone(10)]))
    env.step(torch.ones(6, dtype=torch.int64))  # draws from every member stream (the autoreset candidates)
    assert torch.equal(env.reset(seed=10), first)  # the same seed, the same episodes
    assert torch.equal(env.reset(seed=17), torch.cat([lone(17), lone(27), lone(17)]))
    # unseeded resets go on with each member's stream, as a lone env's do
    lone20 = CartPole(2, seed=0)
    lone20.reset(seed=27)
    assert torch.equal(env.reset()[2:4], lone20.reset())


# ------------------------------------------------------------------------------- 4. README
def test_readme_says_native_state_is_float32_and_episodes_may_part():
    text = " ".join(ENVIRONMENTS.read_text().split())
    bullet = text[text.index("`backend auto` (default) uses a torch-native batched env"):]
    bullet = bullet[:bullet.index("`--backend gymnasium` forces the adapter")]
    assert "state is float32" in bullet and "dtype=torch.float64" in bullet
    assert re.search(r"step matches Gymnasium's to float32 rounding", bullet)
    assert "whole episode need not" in bullet
