"""PPO-core behaviours that no other test pinned (review 31's mutation run): the reward scaler's
return reset at a truncation, the lower side of value clipping, vf_clipfrac's direction, the 1e-8
of advantage normalization, and the CUDA-only bodies of the categorical head and the minibatch
permutation, run here on the CPU."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical

from proxima import grad_cpu, loss_cpu, ppo
from proxima.agent import Agent, _categorical_autograd, _categorical_logprob_entropy
from proxima.normalize import RewardScaler
from proxima.rollout import Rollout

COEFS = dict(clip_coef=0.2, vf_coef=0.5, ent_coef=0.01)


def _loss(fn, new_logprob, old_logprob, advantages, new_values, old_values, returns, entropy, **kw):
    return fn(new_logprob, old_logprob, advantages, new_values, old_values, returns, entropy, **{**COEFS, **kw})


# ------------------------------------------------------------------ 1. the scaler resets at truncation
def test_the_rollouts_reward_scaler_restarts_its_return_after_a_time_limit():
    """Pendulum never terminates and truncates at step 200: the discounted return the scaler keeps
    restarts wherever an episode ended (RewardScaler's contract, as baselines' VecNormalize and
    CleanRL's ``dones``; Gymnasium 1.x's NormalizeReward would carry it over a truncation)."""
    from proxima.envs import make_env

    n = 2
    env = make_env("Pendulum-v1", n, backend="native", seed=0)
    rollout = Rollout(200, n, env.obs_shape, (1,), torch.float32, "cpu")
    scaler = RewardScaler(n, gamma=0.99)

    def policy_step(obs):
        return torch.zeros(obs.shape[0], 1), torch.zeros(obs.shape[0]), torch.zeros(obs.shape[0])

    ppo.collect_rollout(env, policy_step, rollout, env.reset(seed=0), reward_scaler=scaler)
    assert not rollout.terminated.any() and rollout.dones[-1].all() and not rollout.dones[:-1].any()
    assert (rollout.raw_rewards < 0).all()  # a nonzero return would be left without the reset
    assert scaler.returns.tolist() == [0.0] * n


# ------------------------------------------------------------------- 2. value clipping, both sides
@pytest.mark.parametrize("fn", [ppo.ppo_loss, loss_cpu.ppo_loss], ids=["ppo", "loss_cpu"])
@pytest.mark.parametrize("new, old, ret, vf_clip_coef, expected, clipped", [
    (-1.0, 0.0, -2.0, None, 0.5 * (-0.2 + 2.0) ** 2, 1.0),  # mirrored: clipped prediction -0.2 is further
    (-1.0, 0.0, 0.0, None, 0.5 * 1.0, 0.0),                # mirrored: clipped prediction -0.2 is closer
    (-1.0, 0.0, -2.0, 0.5, 0.5 * (-0.5 + 2.0) ** 2, 1.0),  # mirrored, separate epsilon
    (2.0, 3.0, 0.0, None, 0.5 * (2.8 - 0.0) ** 2, 1.0),    # below a nonzero old value
    (1.0, 0.0, 2.0, None, 0.5 * (0.2 - 2.0) ** 2, 1.0),    # above: clipped prediction 0.2 is further
    (1.0, 0.0, 0.0, None, 0.5 * 1.0, 0.0),                 # above: clipped prediction 0.2 is closer
    (0.1, 0.0, 2.0, None, 0.5 * (0.1 - 2.0) ** 2, 0.0),    # inside the range: both terms equal
])
def test_value_clipping_and_vf_clipfrac_on_either_side_of_the_old_value(fn, new, old, ret, vf_clip_coef, expected,
                                                                         clipped):
    b = 2
    new_values = torch.full((b,), new, requires_grad=True)
    out = _loss(fn, torch.zeros(b, requires_grad=True), torch.zeros(b), torch.zeros(b), new_values,
                torch.full((b,), old), torch.full((b,), ret), torch.zeros(b, requires_grad=True),
                norm_adv=False, vf_clip_coef=vf_clip_coef)
    assert out["value_loss"].item() == pytest.approx(expected, rel=1e-6)
    # vf_clipfrac: the share of samples where the clipped term won the max
    assert out["vf_clipfrac"].item() == clipped


def test_vf_clipfrac_is_the_share_of_samples_whose_clipped_term_is_larger():
    new, old, ret = torch.tensor([1.0, 1.0, -1.0, 0.1]), torch.zeros(4), torch.tensor([2.0, 0.0, -2.0, 2.0])
    z = torch.zeros(4)
    for fn in (ppo.ppo_loss, loss_cpu.ppo_loss):
        out = _loss(fn, z, z, z, new, old, ret, z, norm_adv=False)
        assert out["vf_clipfrac"].item() == 0.5  # rows 0 and 2
        assert _loss(fn, z, z, z, new, old, ret, z, norm_adv=False, clip_vloss=False)["vf_clipfrac"].item() == 0.0
    t = ppo.ppo_terms(z, z, z, new, old, ret, 0.2, 0.2, True)
    assert ppo.monitor_terms(t, 0.2, True)["vf_clipfrac"].tolist() == [1.0, 0.0, 1.0, 0.0]
    torch.testing.assert_close(t["v_delta_clipped"], torch.tensor([0.2, 0.2, -0.2, 0.1]))


# ------------------------------------------------------- 4. identical advantages: the 1e-8 matters
@pytest.mark.parametrize("b, adv", [(1, 0.5), (4, 3.0)])
@pytest.mark.parametrize("fn", [ppo.ppo_loss, loss_cpu.ppo_loss], ids=["autograd", "loss_cpu"])
def test_identical_advantages_give_a_finite_loss_and_finite_gradients(fn, b, adv):
    """A minibatch whose advantages are all equal (one row, or a constant reward stream) has std 0:
    normalized, they are 0/(0 + 1e-8) = 0, not NaN, and so is the surrogate."""
    g = torch.Generator().manual_seed(b)
    new_logprob = (torch.randn(b, generator=g) * 0.1 - 1.0).requires_grad_()
    new_values = torch.randn(b, generator=g).requires_grad_()
    entropy = torch.rand(b, generator=g).requires_grad_()
    out = _loss(fn, new_logprob, torch.full((b,), -1.0), torch.full((b,), adv), new_values,
                torch.randn(b, generator=g), torch.randn(b, generator=g), entropy)
    assert out["policy_loss"].item() == 0.0
    assert torch.isfinite(out["loss"])
    out["loss"].backward()
    for x in (new_logprob, new_values, entropy):
        assert torch.isfinite(x.grad).all()
    assert new_logprob.grad.abs().max().item() == 0.0


@pytest.mark.parametrize("b, adv", [(1, 0.5), (4, 3.0)])
def test_identical_advantages_give_finite_block_gradients(b, adv):
    """grad_cpu's path (the trainer's default for a discrete MLP on the CPU) normalizes the same way."""
    torch.manual_seed(0)
    agent = Agent(gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2), (8, 8))
    cfg = SimpleNamespace(clip_coef=0.2, vf_coef=0.5, ent_coef=0.01, clip_vloss=True, norm_adv=True, vf_clip_coef=None)
    blocks = grad_cpu.BlockGradients.for_agent(agent, cfg)
    obs = torch.randn(b, 4)
    with torch.no_grad():
        actions, logprobs, _, values = agent.get_action_and_value(obs)
    mb = {"obs": obs, "actions": actions, "logprobs": logprobs, "advantages": torch.full((b,), adv),
          "values": values, "returns": values + 1.0}
    assert blocks is not None and blocks.covers(mb)
    out = blocks(mb)
    assert torch.isfinite(out["loss"]) and out["policy_loss"].item() == 0.0
    for name, p in agent.named_parameters():
        assert torch.isfinite(p.grad).all(), name


# --------------------------------------------- 5. the categorical head's off-CPU body, on the CPU
@pytest.mark.parametrize("body", [_categorical_logprob_entropy, _categorical_autograd], ids=["cpu", "cuda_body"])
def test_both_categorical_bodies_match_categorical_with_gradients(body):
    """The CPU body (_CategoricalCPU) and the one CUDA runs: log-prob, entropy and their gradients
    are Categorical's."""
    torch.manual_seed(5)
    logits = torch.randn(7, 3, 4, requires_grad=True)
    action = torch.randint(0, 4, (7, 3))
    w_lp, w_ent = torch.randn(7, 3), torch.randn(7, 3)
    lp, ent = body(logits, action)
    torch.autograd.backward([lp, ent], [w_lp, w_ent])
    ref_logits = logits.detach().clone().requires_grad_()
    dist = Categorical(logits=ref_logits)
    ref_lp, ref_ent = dist.log_prob(action), dist.entropy()
    torch.autograd.backward([ref_lp, ref_ent], [w_lp, w_ent])
    torch.testing.assert_close(lp, ref_lp)
    torch.testing.assert_close(ent, ref_ent)
    assert (ent > 0).all()
    torch.testing.assert_close(logits.grad, ref_logits.grad)


# ------------------------------------------------ 6. the minibatch permutation's CUDA body, on the CPU
@pytest.mark.parametrize("body", [ppo.minibatch_permutation, ppo._argsort_permutation], ids=["cpu", "cuda_body"])
def test_both_permutation_bodies_give_fresh_permutations_from_an_advancing_generator(body):
    b = 64
    g = torch.Generator().manual_seed(0)
    perms = [body(b, torch.device("cpu"), g) for _ in range(3)]
    for p in perms:
        assert p.dtype == torch.int64 and sorted(p.tolist()) == list(range(b))
        assert not torch.equal(p, torch.arange(b))
    assert not torch.equal(perms[0], perms[1]) and not torch.equal(perms[1], perms[2])
    # the generator drives it: the same seed gives the same sequence
    g2 = torch.Generator().manual_seed(0)
    assert torch.equal(body(b, torch.device("cpu"), g2), perms[0])


def test_off_the_cpu_the_dispatchers_call_the_bodies_checked_above(monkeypatch):
    """Day review 31: the bodies are tested on the CPU; this pins that the CUDA (non-CPU) branches still
    call them (a `meta` tensor takes the categorical head's non-CPU branch; no GPU is needed)."""
    from proxima import agent as agent_module
    from proxima import ppo

    monkeypatch.setattr(agent_module, "_categorical_autograd", lambda logits, action: ("body", logits.device.type))
    logits = torch.zeros(4, 3, device="meta")
    assert agent_module._categorical_logprob_entropy(logits, torch.zeros(4, device="meta")) == ("body", "meta")
    monkeypatch.setattr(ppo, "_argsort_permutation", lambda b, device, generator=None: ("body", b, device.type))
    assert ppo.minibatch_permutation(8, torch.device("cuda")) == ("body", 8, "cuda")
