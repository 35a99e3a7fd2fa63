"""Review 33: what the synthetic envs (LinearQuadratic-v0, PixelQuadrant-v0), the classic envs'
edges and a population's clip, duplicate check, checkpoint shapes and frozen statistics must do,
which no test pinned (mutations of each survived)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control import CartPoleEnv, MountainCarEnv

from proxima.config import ConfigError, PPOConfig
from proxima.envs import NATIVE_ENVS
from proxima.envs.classic import CartPole, MountainCar
from proxima.envs.synthetic import LinearQuadratic, PixelQuadrant
from proxima.population import Population, check_members, member_configs
from tests.unit.test_native_envs import random_actions


def _cfg(**kw) -> PPOConfig:
    values = dict(env_id="CartPole-v1", num_envs=2, num_steps=16, total_timesteps=64, num_minibatches=2, update_epochs=1,
                  progress=False, checkpoint_every=0, eval_episodes=0, threads=1)
    values.update(kw)
    return PPOConfig(**values)


# --- LinearQuadratic-v0 -----------------------------------------------------------------------------
def test_linear_quadratic_clips_actions_to_the_documented_box():
    """An action beyond [-1, 1] (an unbounded Gaussian policy's) acts as the bound it exceeds."""
    env = LinearQuadratic(3, seed=0)
    env.reset()
    saved = env.state_dict()
    over, reward_over = env.step(torch.full((3, 6), 5.0))[:2]
    env.load_state_dict(saved)
    at_bound, reward_at_bound = env.step(torch.ones(3, 6))[:2]
    assert torch.equal(over, at_bound)
    assert torch.equal(reward_over, reward_at_bound)


def test_linear_quadratic_is_a_contraction_even_along_its_worst_direction():
    """Spectral norm 0.95: with zero actions every state shrinks by at least 5% a step, the top
    singular direction included (a random state would not show a norm above 1)."""
    env = LinearQuadratic(2, seed=0)
    env.reset()
    u = torch.linalg.svd(env.A).U[:, 0]  # s @ A is longest for s along A's top left singular vector
    start = torch.stack((u, env.state["s"][1]))
    env.state["s"].copy_(start)
    obs = env.step(torch.zeros(2, 6))[0]
    ratio = obs.norm(dim=1) / start.norm(dim=1)
    assert ratio[0].item() == pytest.approx(0.95, abs=1e-5)
    assert bool((ratio <= 0.95 + 1e-5).all())


def test_linear_quadratic_reward_is_minus_the_quadratic_cost_of_the_next_state():
    env = LinearQuadratic(4, seed=1)
    s = env.reset().double()
    a = torch.linspace(-0.9, 0.9, 24).reshape(4, 6)
    obs, reward = env.step(a)[:2]
    expected_next = s @ env.A.double() + a.double() @ env.B.double()
    # torch.allclose, not torch.testing.assert_close: that one's first call imports for ~1.5 s
    assert torch.allclose(obs.double(), expected_next, rtol=1e-5, atol=1e-6)
    expected = -(expected_next.pow(2).sum(-1) + 0.1 * a.double().pow(2).sum(-1)) / 17
    assert torch.allclose(reward.double(), expected, rtol=1e-5, atol=1e-6), (reward, expected)
    assert bool((reward < 0).all())


# --- observations never alias the state (test_native_envs' check, for the synthetic envs) -----------
@pytest.mark.parametrize("env_id", ["LinearQuadratic-v0", "PixelQuadrant-v0"])
def test_synthetic_observations_do_not_alias_the_state(env_id):
    """A caller that edits obs in place (a normalizer) must not change the env, and an observation it
    keeps must not change on the next step (base.step writes the state buffers in place)."""
    env = NATIVE_ENVS[env_id](2, seed=0)
    obs = env.reset()
    before = env.state_dict()
    obs.add_(1)  # integer operands: PixelQuadrant's obs are uint8
    gen = torch.Generator().manual_seed(0)
    obs, _, _, _, info = env.step(random_actions(env, gen))
    obs.mul_(2)
    info["final_obs"].sub_(3)
    other = NATIVE_ENVS[env_id](2, seed=5)
    other.load_state_dict(before)
    gen = torch.Generator().manual_seed(0)
    other.step(random_actions(other, gen))
    assert torch.equal(env._observe(), other._observe())

    kept = [other.reset()]
    copies = [kept[0].clone()]
    for _ in range(2):
        obs, _, _, _, info = other.step(random_actions(other, gen))
        for x in (obs, info["final_obs"]):
            kept.append(x)
            copies.append(x.clone())
    for i, (x, copy) in enumerate(zip(kept, copies)):
        assert torch.equal(x, copy), f"observation {i} changed after a later step"


# --- PixelQuadrant-v0 ---------------------------------------------------------------------------------
def _squares(obs: torch.Tensor) -> tuple:
    """Per image (n, 36, 36, 3): the 255 pixels' count and their bounding box (top, bottom, left, right).
    Noise is below 64, so every 255 belongs to the square."""
    bright = (obs == 255).all(-1)
    assert torch.equal(bright, (obs == 255).any(-1))  # the square is white, not one channel
    rows, cols = bright.any(2).to(torch.uint8), bright.any(1).to(torch.uint8)
    last = obs.shape[1] - 1
    return (bright.sum((1, 2)), rows.argmax(1), last - rows.flip(1).argmax(1),
            cols.argmax(1), last - cols.flip(1).argmax(1))


def test_pixel_quadrant_square_is_whole_and_inside_the_labelled_quadrant():
    """Over 512 images: a full 10x10 square, none of it outside the quadrant its label names (the label
    is what the reward checks; a square across the middle line would have no right answer)."""
    env = PixelQuadrant(512, seed=3)
    obs = env.reset()
    quadrant = env.state["quadrant"]
    count, top, bottom, left, right = _squares(obs)
    assert count.tolist() == [100] * 512
    assert (bottom - top).tolist() == [9] * 512 and (right - left).tolist() == [9] * 512
    half = PixelQuadrant.size // 2
    assert torch.equal(top // half, quadrant // 2) and torch.equal(bottom // half, quadrant // 2)
    assert torch.equal(left // half, quadrant % 2) and torch.equal(right // half, quadrant % 2)
    # every offset inside a quadrant is drawn, the last one (flush with the middle line or the edge) too
    assert sorted(set((top % half).tolist())) == list(range(half - PixelQuadrant.square + 1))


def test_pixel_quadrant_pays_one_exactly_for_the_quadrant_the_square_is_in():
    """The answer read from the pixels earns 1 and every other quadrant 0: checks the image, the label
    and the reward together (an env whose reward is inverted still lets a CNN "solve" it)."""
    env = PixelQuadrant(64, seed=4)
    obs = env.reset()
    _, top, _, left, _ = _squares(obs)
    half = PixelQuadrant.size // 2
    seen = (top // half) * 2 + left // half
    assert len(set(seen.tolist())) == 4
    saved = env.state_dict()
    for shift in range(4):
        env.load_state_dict(saved)
        _, reward, terminated, truncated, _ = env.step((seen + shift) % 4)
        assert reward.tolist() == [1.0 if shift == 0 else 0.0] * 64, f"action = quadrant + {shift}"
        assert terminated.all() and not truncated.any()  # one step an episode


# --- classic envs: render index, exact termination thresholds -----------------------------------
@pytest.mark.parametrize("index", [2, -3])
def test_render_index_out_of_range_names_the_index_and_the_env_count(index):
    env = CartPole(2, seed=0)
    env.reset()
    with pytest.raises(IndexError, match=rf"CartPole-v1: render index {index} out of range for 2 envs"):
        env.render(index)


def test_cartpole_on_its_thresholds_goes_on_as_gymnasiums_does():
    """Gymnasium ends an episode past +-2.4 and +-12 degrees (strict >), not on them. With zero
    velocities the Euler step leaves x and theta exactly where they were (float64 on both sides)."""
    thr = CartPole.theta_threshold
    rows = [[2.4, 0.0, 0.0, 0.0], [-2.4, 0.0, 0.0, 0.0], [0.0, 0.0, thr, 0.0], [0.0, 0.0, -thr, 0.0],
            [2.4, 1e-9, 0.0, 0.0]]  # last: just past, so the check can tell the two apart
    expected = []
    for row in rows:
        gym_env = CartPoleEnv()
        gym_env.reset(seed=0)
        gym_env.state = np.array(row, dtype=np.float64)
        expected.append(gym_env.step(1)[2])
    assert expected == [False, False, False, False, True]
    env = CartPole(len(rows), seed=0, dtype=torch.float64)
    env.reset()
    env.state["s"].copy_(torch.tensor(rows, dtype=torch.float64))
    assert env.step(torch.ones(len(rows), dtype=torch.long))[2].tolist() == expected


def test_mountain_car_reaching_the_goal_with_velocity_exactly_zero_terminates_as_gymnasiums_does():
    """Gymnasium's goal is position >= 0.5 and velocity >= 0: a step whose velocity cancels to exactly
    0.0 (each side given the velocity that its own cos cancels) ends the episode; one a hair below 0 does not."""
    gravity = MountainCar.gravity
    cases = [(0.55, 0.0, True), (0.5, 0.0, True), (0.55, -1e-12, False)]  # (position, velocity after the step, terminates)
    env = MountainCar(len(cases), seed=0, dtype=torch.float64)
    env.reset()
    position = torch.tensor([p for p, _, _ in cases], dtype=torch.float64)
    pull = torch.cos(3 * position) * (-gravity)  # action 1 pushes 0: the step adds exactly this
    env.state["s"].copy_(torch.stack((position, -pull + torch.tensor([d for _, d, _ in cases], dtype=torch.float64)), -1))
    terminated = env.step(torch.ones(len(cases), dtype=torch.long))[2]
    assert terminated.tolist() == [goal for _, _, goal in cases]
    for p, d, goal in cases:
        gym_env = MountainCarEnv()
        gym_env.reset(seed=0)
        gym_env.state = np.array([p, -(math.cos(3 * p) * (-gravity)) + d], dtype=np.float64)
        assert gym_env.step(1)[2] is goal, (p, d)


# --- population ---------------------------------------------------------------------------------------
def test_per_member_clip_scales_only_a_gradient_above_its_members_max_grad_norm(monkeypatch):
    """clip_grad_norm_ semantics per member: a gradient under max_grad_norm reaches Adam unchanged
    (never scaled up to the bound); one above is scaled to it; the reported grad_norm is the raw norm."""
    pop = Population([_cfg(seed=1, max_grad_norm=1e6), _cfg(seed=2, max_grad_norm=1e-3)])
    seen = []
    adam_step = pop.optimizer.step

    def recording_step(grad, lr, active=None):
        seen.append((pop.optimizer.flat_grad().clone(), grad.clone()))
        return adam_step(grad, lr, active)

    monkeypatch.setattr(pop.optimizer, "step", recording_step)
    metrics = pop.train_iteration()
    assert len(seen) == 2  # one epoch of two minibatches
    for raw, clipped in seen:
        assert torch.equal(clipped[0], raw[0])
        assert raw[1].norm().item() > 1e-2  # so member 1's clip acts
        assert clipped[1].norm().item() == pytest.approx(1e-3, rel=1e-4)
    raw_norms = torch.stack([raw.norm(dim=1) for raw, _ in seen])
    assert torch.allclose(metrics["grad_norm"], raw_norms.mean(0), rtol=1e-5, atol=0)  # the mean over the minibatches
    pop.close()


def test_members_with_the_same_seed_and_settings_are_refused():
    """Two identical members would train twins under one label; the Python API refuses them too."""
    cfg = _cfg(seed=1)
    with pytest.raises(ConfigError, match="two members have the same seed and settings; give distinct seeds"):
        check_members([cfg, cfg])
    with pytest.raises(ConfigError, match="same seed and settings"):
        Population(member_configs(cfg, [1, 1]))
    check_members([cfg, dataclasses.replace(cfg, lr=1e-3)])  # the same seed with other settings: a sweep


def test_loading_a_checkpoint_tensor_of_another_member_count_names_it():
    """A (1, ...) tensor would broadcast silently into every member's slice: refused by name."""
    pop = Population(member_configs(_cfg(), [1, 2]))
    state = pop.state_dict()
    name = next(iter(state["params"]))
    before = pop.params[name].detach().clone()
    state["params"][name] = state["params"][name][:1] + 1.0
    with pytest.raises(ValueError, match=rf"^{name} has shape \(1, .*this population's \(2, "):
        pop.load_state_dict(state)
    assert torch.equal(pop.params[name].detach(), before)
    pop.close()


def test_a_member_whose_env_returns_nan_keeps_its_last_finite_normalizer_statistics():
    """Unit version of the integration check: NaN observations and rewards on member 1's rows, within
    one rollout (before env_failures marks it diverged): its statistics go back to those before the
    rollout; member 0's are the new ones, bit for bit those of a clean population."""
    def pop_with(nan: bool) -> Population:
        pop = Population(member_configs(_cfg(norm_obs=True, norm_reward=True), [1, 2]))
        step = pop.env.step

        def bad_step(action):
            out = list(step(action))
            if nan:
                out[0], out[1] = out[0].clone(), out[1].clone()
                out[0][2:4], out[1][2:4] = float("nan"), float("nan")  # member 1's rows (2 envs each)
            return tuple(out)

        pop.env.step = bad_step
        return pop

    clean, bad = pop_with(False), pop_with(True)
    stats = lambda pop: [(m.rms.mean.clone(), m.rms.var.clone()) for m in (pop.obs_norm, pop.reward_scaler)]  # noqa: E731
    start = stats(bad)
    clean.collect()
    bad.collect()
    assert not bool(bad.diverged.any())  # the mask's ~finite does the work, not diverged
    for (mean, var), (cmean, cvar), (smean, svar) in zip(stats(bad), stats(clean), start):
        assert torch.equal(mean[1], smean[1]) and torch.equal(var[1], svar[1])
        assert torch.equal(mean[0], cmean[0]) and torch.equal(var[0], cvar[0])
        assert not torch.equal(mean[0], smean[0])  # member 0's did move
    clean.close()
    bad.close()
