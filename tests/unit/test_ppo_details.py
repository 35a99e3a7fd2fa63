"""PPO implementation details pinned against computations made here, independently of the code under
test (PPO_NOTES.md "Core details"): truncation bootstrapped in the trainer's GAE, the observation
normalizer's update-then-normalize order, the global gradient-norm clip, the annealed learning rate
of each iteration, a fresh minibatch permutation every epoch, per-minibatch advantage normalization
on the trainer's own path, and the update's metrics as means over its minibatches."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from proxima import ppo
from proxima.config import PPOConfig
from proxima.normalize import ObsNormalizer
from proxima.population import Population
from proxima.trainer import Trainer


def _cfg(**overrides) -> PPOConfig:
    values = dict(env_id="CartPole-v1", backend="native", num_envs=4, num_steps=32, total_timesteps=128,
                  num_minibatches=4, update_epochs=2, progress=False, checkpoint_every=0, eval_episodes=0, threads=1, seed=0)
    values.update(overrides)
    return PPOConfig(**values)


def _trainer(**overrides) -> Trainer:
    return Trainer(_cfg(**overrides), quiet=True)


def _assert_close(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> None:
    """torch.testing.assert_close's check without its first-call cost (it imports torch.distributed.tensor: 1.5 s)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    assert torch.allclose(got, want, rtol=rtol, atol=atol), f"max |got - want| = {float((got - want).abs().max()):.3g}"


def _global_norm(tensors) -> float:
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.detach().double()) for g in tensors])))


# ---------------------------------------------------------------------------------------------
# detail 5 with truncation: the default bootstraps a truncated episode from V(final_obs)
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def short_pendulum(monkeypatch):
    """'ShortPendulum-v0': native Pendulum with a 5-step time limit (truncations mid-rollout, never a termination)."""
    from proxima.envs import classic

    cls = type("ShortPendulum", (classic.Pendulum,), {"max_episode_steps": 5})
    monkeypatch.setitem(classic.NATIVE_ENVS, "ShortPendulum-v0", cls)
    return "ShortPendulum-v0"


def test_the_trainers_gae_bootstraps_a_truncated_episode_from_its_final_obs(short_pendulum):
    """Pendulum never terminates; here it is truncated at its 5th step (t = 4, 9, 14 of the rollout):
    the trainer's advantages are compute_gae with the *terminated* mask (no cut of the bootstrap) and
    V(final_obs) as the next value, not the done mask that would treat a truncation as an end."""
    t = _trainer(env_id=short_pendulum, num_envs=2, num_steps=16, total_timesteps=32)
    try:
        assert t.cfg.bootstrap_truncation  # the default
        t._rollout()
        t._advantages()
        ro, cfg = t.rollout, t.cfg
        assert not ro.terminated.any()
        truncated = [4, 9, 14]
        assert ro.dones.nonzero()[:, 0].unique().tolist() == truncated and ro.dones[truncated].all()
        with torch.no_grad():  # V of the obs that followed every step (the final obs where an episode ended)
            next_v = t.agent.get_value(ro.final_obs.reshape(-1, *ro.final_obs.shape[2:])).reshape(ro.values.shape)
        want, want_ret = ppo.compute_gae(ro.rewards, ro.values, next_v, ro.terminated, ro.dones, cfg.gamma, cfg.gae_lambda)
        got = t.parts.advantages_buf
        _assert_close(got, want, rtol=1e-5, atol=1e-5)
        _assert_close(t.parts.returns_buf, want_ret, rtol=1e-5, atol=1e-5)
        # the truncated steps by hand: the trace is cut there, the next value bootstrapped
        by_hand = ro.rewards[truncated] + cfg.gamma * next_v[truncated] - ro.values[truncated]
        _assert_close(got[truncated], by_hand, rtol=1e-5, atol=1e-5)
        # ... which the dones mask (ppo2's truncation-as-termination) would not give
        as_end, _ = ppo.compute_gae(ro.rewards, ro.values, next_v, ro.dones, ro.dones, cfg.gamma, cfg.gae_lambda)
        # every bootstrapped value 10x the checks' atol (1e-5), so they tell the two apart (an untrained critic's
        # value at Pendulum's random states can be near 0: 2.2e-4 at one of them since starts are drawn per env)
        assert next_v[truncated].abs().min() > 1e-4
        _assert_close((got - as_end)[truncated], cfg.gamma * next_v[truncated], rtol=1e-4, atol=1e-6)
    finally:
        t.close()


# ---------------------------------------------------------------------------------------------
# observation normalization: update the statistics with the batch, then normalize it
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("groups", [0, 2])
def test_obs_normalizer_updates_its_statistics_before_normalizing(groups):
    """As Gymnasium's NormalizeObservation: in training mode the returned obs is normalized with the
    statistics that already count it. Reference: the moments of every row so far with the epsilon
    prior in the variance only (var = (1e-4 + n * biased var) / (n + 1e-4)); gymnasium's
    RunningMeanStd puts its prior at mean 0, which adds ~100**2 * 1e-4 / 8 to dimension 0's variance
    here (RunningMeanStd's docstring: the departure is on purpose)."""
    g = torch.Generator().manual_seed(0)
    batches = [torch.randn(8, 2, generator=g) * torch.tensor([0.5, 4.0]) + torch.tensor([100.0, -3.0]) for _ in range(2)]
    norm = ObsNormalizer((2,), groups=groups)
    seen = [np.zeros((0, 2)) for _ in range(max(groups, 1))]
    for x in batches:
        out = norm(x)  # training mode: an updating call
        blocks = x.double().numpy().reshape(len(seen), -1, 2)
        want = []
        for i, block in enumerate(blocks):
            seen[i] = np.concatenate([seen[i], block])
            n = len(seen[i])
            mean, var = seen[i].mean(0), (1e-4 + n * seen[i].var(0)) / (n + 1e-4)
            want.append(np.clip((block - mean) / np.sqrt(var + 1e-8), -10.0, 10.0))
        want = torch.from_numpy(np.concatenate(want)).to(torch.float32)
        _assert_close(out, want, rtol=1e-5, atol=1e-5)
    # far from the initial (0, 1) statistics: the first batch is centred, not clipped at +-10
    first = ObsNormalizer((2,))(batches[0])
    assert first.abs().max() < 5.0 and first.mean(0).abs().max() < 0.01


# ---------------------------------------------------------------------------------------------
# detail 11: the optimizer steps with the clipped gradient
# ---------------------------------------------------------------------------------------------
def _clipped(raw: float, max_norm: float) -> float:
    """torch.nn.utils.clip_grad_norm_'s result norm: raw * min(1, max_norm / (raw + 1e-6))."""
    return raw * min(1.0, max_norm / (raw + 1e-6))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])  # grad_cpu's path and loss_cpu's
def test_the_adam_step_of_a_single_run_uses_the_clipped_gradient(env_id):
    max_norm = 0.05
    t = _trainer(env_id=env_id, max_grad_norm=max_norm, update_epochs=1)
    try:
        used, raw = [], []
        params = [p for p in t.agent.parameters()]
        real_step, real_grad_step = t.optimizer.step, t.grad_step

        def step():
            used.append(_global_norm([p.grad for p in params if p.grad is not None]))
            return real_step()

        def grad_step(mb):
            out = real_grad_step(mb)
            raw.append(float(out["grad_norm"]))  # the norm before the clip
            return out

        t.optimizer.step = step
        t.grad_step = grad_step
        t.train_iteration()
    finally:
        t.close()
    assert len(used) == len(raw) == 4
    assert max(raw) > 2 * max_norm  # the clip had work to do
    for u, r in zip(used, raw):
        assert u <= max_norm * (1 + 1e-5)
        assert u == pytest.approx(_clipped(r, max_norm), rel=1e-5)


def test_the_adam_step_of_each_population_member_uses_its_own_clipped_gradient():
    norms = [0.05, 1e6]  # member 0 clipped, member 1 never
    pop = Population([_cfg(seed=1, max_grad_norm=norms[0], update_epochs=1), _cfg(seed=2, max_grad_norm=norms[1], update_epochs=1)])
    try:
        used, raw = [], []
        real_step = pop.optimizer.step

        def step(grad, lr, active=None):
            used.append(grad.double().norm(dim=1).tolist())
            raw.append(pop.optimizer.flat_grad().double().norm(dim=1).tolist())  # the .grad backward left, unclipped
            return real_step(grad, lr, active)

        pop.optimizer.step = step
        pop.train_iteration()
    finally:
        pop.close()
    assert len(used) == 4
    assert max(r[0] for r in raw) > 2 * norms[0]
    for u, r in zip(used, raw):
        for member, max_norm in enumerate(norms):
            assert u[member] <= max_norm * (1 + 1e-5)
            assert u[member] == pytest.approx(_clipped(r[member], max_norm), rel=1e-5)


# ---------------------------------------------------------------------------------------------
# detail 4: lr of iteration i (from 1) = lr * (1 - (i - 1) / num_iterations), as CleanRL
# ---------------------------------------------------------------------------------------------
def test_a_single_runs_learning_rate_anneals_from_lr_to_lr_over_n_iterations():
    lr = 1e-3
    t = _trainer(lr=lr, total_timesteps=4 * 128)
    try:
        assert t.num_iterations == 4 and t.cfg.anneal_lr
        seen = []
        real_step = t.optimizer.step

        def step():  # the learning rate each Adam step is given
            seen.append(float(t.optimizer.param_groups[0]["lr"]))
            return real_step()

        t.optimizer.step = step
        per_iteration = []
        for _ in range(4):
            seen.clear()
            t.train_iteration()
            assert len(seen) == 8 and len(set(seen)) == 1
            per_iteration.append(seen[0])
    finally:
        t.close()
    assert per_iteration == pytest.approx([lr * f for f in (1.0, 0.75, 0.5, 0.25)], rel=1e-6)


@pytest.mark.parametrize("lrs", [[1e-3], [1e-3, 4e-4]])
def test_each_population_members_learning_rate_anneals_as_a_single_runs(lrs):
    pop = Population([_cfg(seed=i, lr=lr, total_timesteps=4 * 128, update_epochs=1) for i, lr in enumerate(lrs)])
    try:
        assert pop.num_iterations == 4
        seen = []
        real_step = pop.optimizer.step

        def step(grad, lr, active=None):
            seen.append(lr.tolist())
            return real_step(grad, lr, active)

        pop.optimizer.step = step
        per_iteration = []
        for _ in range(4):
            seen.clear()
            pop.train_iteration()
            assert len(seen) == 4 and all(s == seen[0] for s in seen)
            per_iteration.append(seen[0])
    finally:
        pop.close()
    for member, lr in enumerate(lrs):
        got = [it[member] for it in per_iteration]
        assert got == pytest.approx([lr * f for f in (1.0, 0.75, 0.5, 0.25)], rel=1e-6)


# ---------------------------------------------------------------------------------------------
# detail 6: every epoch a fresh permutation of the batch into minibatches
# ---------------------------------------------------------------------------------------------
def test_each_epoch_draws_a_fresh_permutation_of_the_batch():
    b, epochs, minibatches = 64, 3, 4
    cfg = _cfg(num_envs=4, num_steps=16, total_timesteps=64, num_minibatches=minibatches, update_epochs=epochs)
    batch = {"obs": torch.zeros(b, 1), "advantages": torch.zeros(b), "rows": torch.arange(b)}
    seen = []

    def grad_step(mb):
        seen.append(mb["rows"].clone())
        return {"loss_term": torch.zeros(())}

    torch.manual_seed(0)
    ppo.update(None, None, batch, cfg, grad_step=grad_step)
    assert len(seen) == epochs * minibatches and all(len(s) == b // minibatches for s in seen)
    orders = [torch.cat(seen[e * minibatches:(e + 1) * minibatches]) for e in range(epochs)]
    for order in orders:  # each epoch covers every row exactly once
        assert torch.equal(order.sort().values, torch.arange(b))
    for e in range(1, epochs):
        assert not torch.equal(orders[e], orders[0]), f"epoch {e} reused epoch 0's permutation"
    firsts = [set(orders[e][:b // minibatches].tolist()) for e in range(epochs)]
    assert len({frozenset(f) for f in firsts}) == epochs  # different minibatches, not only a different order


# ---------------------------------------------------------------------------------------------
# detail 7: advantages normalized per minibatch, on the path the trainer takes
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])  # grad_cpu's path and loss_cpu's
def test_the_trainer_normalizes_advantages_within_each_minibatch(env_id, monkeypatch):
    t = _trainer(env_id=env_id, update_epochs=2, num_minibatches=4)
    try:
        assert t.cfg.norm_adv
        raw, used = [], []
        real_terms = ppo.ppo_terms

        def terms(new_logprob, old_logprob, advantages, *args, **kwargs):  # the advantages the surrogate is built from
            used.append(advantages.detach().clone())
            return real_terms(new_logprob, old_logprob, advantages, *args, **kwargs)

        monkeypatch.setattr(ppo, "ppo_terms", terms)
        real_grad_step = t.grad_step

        def grad_step(mb):
            raw.append(mb["advantages"].clone())
            return real_grad_step(mb)

        t.grad_step = grad_step
        t._rollout()
        t._advantages()
        gae = t.parts.batch["advantages"].clone()  # the batch as GAE wrote it
        t._update()
    finally:
        t.close()
    assert len(raw) == len(used) == 8
    means = torch.stack([r.mean() for r in raw])
    assert float(means.max() - means.min()) > 0.05 * float(gae.std())  # minibatches whose advantage means differ
    for r, u in zip(raw, used):
        assert torch.isin(r, gae).all()  # the minibatch's rows of GAE's advantages, as they are
        _assert_close(u, (r - r.mean()) / (r.std() + 1e-8), rtol=1e-5, atol=1e-5)
        assert abs(float(u.mean())) < 1e-5
        assert float(u.std()) == pytest.approx(1.0, abs=1e-4)


# ---------------------------------------------------------------------------------------------
# the update's metrics: means over the minibatches it ran
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_the_update_metrics_are_means_over_its_minibatches(env_id):
    t = _trainer(env_id=env_id, update_epochs=3, num_minibatches=4, lr=1e-2)
    names = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "vf_clipfrac", "ratio")
    try:
        cfg = t.cfg
        refs, norms = [], []
        real_grad_step = t.grad_step

        def grad_step(mb):
            with torch.no_grad():  # the loss of this minibatch at the parameters the step starts from
                _, logprob, entropy, value = t.agent(mb["obs"], mb["actions"])
                ref = ppo.ppo_loss(logprob, mb["logprobs"], mb["advantages"], value, mb["values"], mb["returns"], entropy,
                                   clip_coef=cfg.clip_coef, vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef,
                                   clip_vloss=cfg.clip_vloss, norm_adv=cfg.norm_adv)
            refs.append({k: float(ref[k]) for k in names})
            out = real_grad_step(mb)
            norms.append(float(out["grad_norm"]))
            return out

        t.grad_step = grad_step
        out = {k: float(v) for k, v in t.train_iteration().items() if v.dim() == 0}
    finally:
        t.close()
    assert len(refs) == 12
    for k in names:
        want = sum(r[k] for r in refs) / len(refs)
        assert out[k] == pytest.approx(want, rel=1e-4, abs=1e-6), k
    assert out["grad_norm"] == pytest.approx(sum(norms) / len(norms), rel=1e-5)
    assert 0.0 <= out["clipfrac"] <= 1.0 and 0.0 <= out["vf_clipfrac"] <= 1.0
    assert abs(out["ratio"] - 1.0) < 0.2 and 0.0 <= out["approx_kl"] < 0.5
    assert 0.0 < max(r["clipfrac"] for r in refs)  # the lr moves the policy: clipfrac and approx_kl are not all 0
    assert not math.isclose(out["approx_kl"], 0.0)


@pytest.mark.parametrize("norm_obs", [False, True])
def test_the_rollout_stores_each_steps_final_obs_normalized_as_the_next_obs_is(short_pendulum, norm_obs):
    """rollout.final_obs[t], which V bootstraps step t from, is the env's info["final_obs"] where an
    episode ended (not the next episode's first obs) and the next obs elsewhere, normalized with the
    statistics that count this step's obs (what obs[t + 1] is normalized with). Recorded from the
    env's own step outputs and the normalizer's own copy, independently of what the rollout wrote."""
    import copy

    t = _trainer(env_id=short_pendulum, num_envs=2, num_steps=16, total_timesteps=32, norm_obs=norm_obs)
    try:
        real_step, want = t.env.step, []

        def step(action):
            out = real_step(action)
            raw_next, info = out[0], out[4]
            if norm_obs:  # the normalizer as it stands after this step's update, applied to the final obs
                norm = copy.deepcopy(t.obs_norm)
                norm(raw_next.clone())
                want.append(norm(info["final_obs"].clone(), update=False))
            else:
                want.append(info["final_obs"].clone())
            return out

        t.env.step = step
        t._rollout()
        ro = t.rollout
        truncated = [4, 9, 14]
        assert ro.dones.nonzero()[:, 0].unique().tolist() == truncated
        _assert_close(ro.final_obs, torch.stack(want), rtol=1e-6, atol=1e-6)
        # the final obs of an ended episode is not the next episode's first obs ...
        assert all((ro.final_obs[s] - ro.obs[s + 1]).abs().amax(-1).min() > 1e-3 for s in truncated)
        # ... and elsewhere it is the next obs itself, as the rollout normalized it for the policy
        kept = [s for s in range(15) if s not in truncated]
        _assert_close(ro.final_obs[kept], ro.obs[[s + 1 for s in kept]], rtol=1e-6, atol=1e-6)
    finally:
        t.close()


def test_the_trainers_adam_uses_ppos_eps():
    """PPO_NOTES detail 3: Adam with eps 1e-5 (CleanRL, the original implementation), not torch's 1e-8."""
    t = _trainer()
    try:
        assert [g["eps"] for g in t.optimizer.param_groups] == [1e-5] * len(t.optimizer.param_groups)
    finally:
        t.close()
