"""Flags wired end to end, each checked where a wrong wiring would show: --norm-reward reaches the
rewards trained on, --no-bootstrap-truncation reaches the Trainer's and the Population's GAE,
--stop-return stops at exactly the target, and --clip-obs/--clip-reward reach the trainer and the
policy loaded from its checkpoint (a test-quality review found each of these uncaught)."""

from __future__ import annotations

import pytest
import torch

from proxima.config import PPOConfig
from proxima.normalize import RewardScaler
from proxima.population import Population, from_members, member_configs, to_members
from proxima.trainer import ReturnTarget, Trainer

# ShortPendulum truncates every env at its 5th step: these rollout steps, never a termination
TRUNCATED = [4, 9, 14]


@pytest.fixture
def short_pendulum(monkeypatch):
    """'ShortPendulum-v0': native Pendulum with a 5-step time limit."""
    from proxima.envs import classic

    cls = type("ShortPendulum", (classic.Pendulum,), {"max_episode_steps": 5})
    monkeypatch.setitem(classic.NATIVE_ENVS, "ShortPendulum-v0", cls)
    return "ShortPendulum-v0"


def _pendulum_cfg(env_id: str, **overrides) -> PPOConfig:
    values = dict(env_id=env_id, backend="native", num_envs=2, num_steps=16, total_timesteps=32, num_minibatches=4,
                  update_epochs=1, progress=False, checkpoint_every=0, eval_episodes=0, threads=1, seed=0)
    values.update(overrides)
    return PPOConfig(**values)


# ---------------------------------------------------------------------------------------------
# --norm-reward: the rollout's rewards are the scaler's output, not the env's
# ---------------------------------------------------------------------------------------------
def test_norm_reward_scales_the_rewards_the_trainer_trains_on(small_config):
    t = Trainer(small_config(norm_reward=True, total_timesteps=128), quiet=True)
    try:
        t.train_iteration()
        ro, cfg = t.rollout, t.cfg
        replay = RewardScaler(cfg.num_envs, cfg.gamma, cfg.clip_reward)
        want = torch.stack([replay(ro.raw_rewards[s], ro.dones[s]) for s in range(cfg.num_steps)])
        assert torch.allclose(ro.rewards, want, rtol=1e-6, atol=1e-7), float((ro.rewards - want).abs().max())
        # CartPole pays 1.0 a step: scaled by the return's std, every reward differs from it
        assert (ro.rewards - ro.raw_rewards).abs().min() > 1e-3
    finally:
        t.close()


# ---------------------------------------------------------------------------------------------
# --no-bootstrap-truncation: a truncated step's advantage is r - V(s), no gamma * V(final_obs)
# ---------------------------------------------------------------------------------------------
def _check_truncated_steps(ro, advantages, returns, next_v, gamma: float, bootstrap: bool) -> None:
    assert not ro.terminated.any()
    assert ro.dones.nonzero()[:, 0].unique().tolist() == TRUNCATED and ro.dones[TRUNCATED].all()
    # a zero V(final_obs) would make both settings agree: the check would prove nothing. 10x the allclose atol
    # below (an untrained critic's value at Pendulum's random states can be near 0: 2.2e-4 at one of them)
    assert next_v[TRUNCATED].abs().min() > 1e-4
    r, v = ro.rewards[TRUNCATED], ro.values[TRUNCATED]
    want = r + gamma * next_v[TRUNCATED] - v if bootstrap else r - v
    got = advantages[TRUNCATED]
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), float((got - want).abs().max())
    assert torch.allclose(returns[TRUNCATED], want + v, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bootstrap", [True, False])
def test_trainer_bootstraps_truncations_only_when_asked(short_pendulum, bootstrap):
    t = Trainer(_pendulum_cfg(short_pendulum, bootstrap_truncation=bootstrap), quiet=True)
    try:
        t._rollout()
        t._advantages()
        ro = t.rollout
        with torch.no_grad():
            next_v = t.agent.get_value(ro.final_obs.reshape(-1, *ro.final_obs.shape[2:])).reshape(ro.values.shape)
        _check_truncated_steps(ro, t.parts.advantages_buf, t.parts.returns_buf, next_v, t.cfg.gamma, bootstrap)
    finally:
        t.close()


@pytest.mark.parametrize("bootstrap", [True, False])
def test_population_bootstraps_truncations_only_when_asked(short_pendulum, bootstrap):
    pop = Population(member_configs(_pendulum_cfg(short_pendulum, bootstrap_truncation=bootstrap), [0, 1]))
    try:
        pop.collect()
        pop.advantages()
        ro = pop.rollout
        with torch.no_grad():  # each member's own critic on its rows of the rollout
            per_member = to_members(ro.final_obs, 2)
            values = torch.stack([pop.member_agent(p).get_value(per_member[p]) for p in range(2)])
        next_v = from_members(values, ro.values.shape[0])
        _check_truncated_steps(ro, pop.advantages_buf, pop.returns_buf, next_v, pop.cfg.gamma, bootstrap)
    finally:
        pop.close()


# ---------------------------------------------------------------------------------------------
# --stop-return: a mean return equal to the target reaches it
# ---------------------------------------------------------------------------------------------
def test_a_mean_return_of_exactly_the_target_reaches_it():
    assert ReturnTarget(500.0, 20).add(20 * 500.0, 20) == 500.0
    assert ReturnTarget(500.0, 20).add(20 * 499.0, 20) is None


# ---------------------------------------------------------------------------------------------
# --clip-obs / --clip-reward: the trainer and the policy loaded from its checkpoint clip there
# ---------------------------------------------------------------------------------------------
def test_clip_obs_and_clip_reward_reach_training_and_the_saved_policy(tmp_path):
    import proxima

    run = tmp_path / "run"
    cfg = PPOConfig(env_id="Pendulum-v1", backend="native", num_envs=4, num_steps=32, total_timesteps=128, num_minibatches=4,
                    update_epochs=1, norm_obs=True, norm_reward=True, clip_obs=0.5, clip_reward=0.5, progress=False,
                    checkpoint_every=1, eval_episodes=0, threads=1, seed=0, run_dir=str(run))
    t = Trainer(cfg, quiet=True)
    try:
        t.run()
        ro = t.rollout
        assert t.obs_norm.clip == 0.5 and t.reward_scaler.clip == 0.5
        # the bounds were met, so a wider clip would have let values past them
        assert ro.rewards.abs().max() == pytest.approx(0.5) and ro.obs.abs().max() == pytest.approx(0.5)
    finally:
        t.close()
    policy = proxima.load(run)
    assert policy.obs_normalizer is not None and policy.obs_normalizer.clip == 0.5
