"""Agent heads and init, separate actor/critic gradients, and ratio == 1 on the first minibatch."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal

from proxima import ppo
from proxima.agent import Agent, action_dtype, action_shape
from proxima.config import PPOConfig
from proxima.trainer import Trainer

OBS = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
SPACES = {
    "discrete": gym.spaces.Discrete(3),
    "multidiscrete": gym.spaces.MultiDiscrete([2, 4, 3]),
    "box": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
}


def make_agent(kind: str, seed: int = 0) -> Agent:
    torch.manual_seed(seed)
    return Agent(OBS, SPACES[kind])


def obs_batch(b=7, seed=1):
    return torch.randn(b, 5, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kind, act_shape, dtype", [
    ("discrete", (), torch.int64), ("multidiscrete", (3,), torch.int64), ("box", (2,), torch.float32)])
def test_shapes_of_get_action_and_value_and_act(kind, act_shape, dtype):
    agent = make_agent(kind)
    obs = obs_batch()
    action, logprob, entropy, value = agent.get_action_and_value(obs)
    assert action.shape == (7, *act_shape)
    assert logprob.shape == entropy.shape == value.shape == (7,)
    assert action_shape(SPACES[kind]) == act_shape and action_dtype(SPACES[kind]) == dtype
    assert agent.act(obs).shape == (7, *act_shape)
    assert agent.act(obs, deterministic=False).shape == (7, *act_shape)
    a, lp, v = agent.policy_step(obs)
    assert a.shape == (7, *act_shape) and lp.shape == v.shape == (7,)
    # re-scoring the sampled action gives the same log-prob
    _, lp2, _, _ = agent.get_action_and_value(obs, action)
    torch.testing.assert_close(lp2, logprob)


def test_sampled_actions_are_in_range():
    obs = obs_batch(b=200)
    d = make_agent("discrete").get_action_and_value(obs)[0]
    md = make_agent("multidiscrete").get_action_and_value(obs)[0]
    assert d.min() >= 0 and d.max() <= 2
    assert (md >= 0).all() and (md < torch.tensor([2, 4, 3])).all()


def test_discrete_logprob_and_entropy_match_categorical():
    agent = make_agent("discrete")
    obs = obs_batch()
    action = torch.tensor([0, 1, 2, 0, 1, 2, 2])
    _, logprob, entropy, _ = agent.get_action_and_value(obs, action)
    dist = Categorical(logits=agent.actor(obs))
    torch.testing.assert_close(logprob, dist.log_prob(action))
    torch.testing.assert_close(entropy, dist.entropy())


@pytest.mark.parametrize("n, lead", [(2, (300,)), (3, (4, 50)), (6, (129,))])
def test_categorical_head_gradients_match_categorical_and_come_back_contiguous(n, lead):
    """The CPU head reduces over an (n, ...) copy of the logits; its values and gradients are
    Categorical's, and the gradient reaching the actor's last layer keeps the (..., n) layout a
    plain head gives it (a transposed one sends that layer's matmuls down another, differently
    rounding path)."""
    from proxima.agent import _categorical_logprob_entropy

    torch.manual_seed(n)
    logits = torch.randn(*lead, n, requires_grad=True)
    action = torch.randint(0, n, lead)
    weights = torch.randn(*lead), torch.randn(*lead)
    lp, ent = _categorical_logprob_entropy(logits, action)
    torch.autograd.backward([lp, ent], list(weights))
    ref_logits = logits.detach().clone().requires_grad_()
    dist = Categorical(logits=ref_logits)
    ref_lp, ref_ent = dist.log_prob(action), dist.entropy()
    torch.autograd.backward([ref_lp, ref_ent], list(weights))
    torch.testing.assert_close(lp, ref_lp)
    torch.testing.assert_close(ent, ref_ent)
    torch.testing.assert_close(logits.grad, ref_logits.grad)
    assert logits.grad.is_contiguous()
    # under vmap (a population's members), as get_action_and_value is called there
    vlp, vent = torch.func.vmap(_categorical_logprob_entropy)(logits.detach().reshape(-1, 1, n), action.reshape(-1, 1))
    torch.testing.assert_close(vlp.reshape(lead), ref_lp.detach())
    torch.testing.assert_close(vent.reshape(lead), ref_ent.detach())


def test_multidiscrete_logprob_and_entropy_summed_over_dims():
    agent = make_agent("multidiscrete")
    obs = obs_batch()
    action = torch.stack([torch.arange(7) % 2, torch.arange(7) % 4, torch.arange(7) % 3], -1)
    _, logprob, entropy, _ = agent.get_action_and_value(obs, action)
    chunks = torch.split(agent.actor(obs), [2, 4, 3], dim=-1)
    dists = [Categorical(logits=c) for c in chunks]
    torch.testing.assert_close(logprob, sum(d.log_prob(action[:, i]) for i, d in enumerate(dists)))
    torch.testing.assert_close(entropy, sum(d.entropy() for d in dists))


def test_box_log_std_starts_at_zero_and_logprob_is_summed_normal_density():
    agent = make_agent("box")
    assert agent.actor_logstd.shape == (1, 2)
    assert (agent.actor_logstd == 0).all()
    with torch.no_grad():
        agent.actor_logstd.copy_(torch.tensor([[-0.5, 0.3]]))
    obs = obs_batch()
    action = torch.randn(7, 2)
    _, logprob, entropy, _ = agent.get_action_and_value(obs, action)
    dist = Normal(agent.actor(obs), agent.actor_logstd.exp().expand(7, 2))
    torch.testing.assert_close(logprob, dist.log_prob(action).sum(-1))
    torch.testing.assert_close(entropy, dist.entropy().sum(-1))
    torch.testing.assert_close(agent.act(obs), agent.actor(obs))  # deterministic action: the mean


def test_box_logprob_of_action_outside_bounds_is_not_clipped():
    agent = make_agent("box")
    obs = obs_batch(b=3)
    action = torch.tensor([[3.0, -2.5], [10.0, 0.0], [-7.0, 1.5]])  # bounds are [-1, 1]
    _, logprob, _, _ = agent.get_action_and_value(obs, action)
    expected = Normal(agent.actor(obs), 1.0).log_prob(action).sum(-1)
    torch.testing.assert_close(logprob, expected)
    clipped = agent.get_action_and_value(obs, action.clamp(-1, 1))[1]
    assert (logprob < clipped).all()  # a clipped action would score as a likelier one


def _gain(weight: torch.Tensor) -> torch.Tensor:
    """Singular values of an orthogonally initialized matrix: all equal to the gain."""
    return torch.linalg.svdvals(weight.detach())


@pytest.mark.parametrize("kind", list(SPACES))
def test_orthogonal_init_gains_and_zero_biases(kind):
    agent = make_agent(kind)
    linears = lambda net: [m for m in net if isinstance(m, torch.nn.Linear)]  # noqa: E731
    for net, head_gain in ((agent.actor, 0.01), (agent.critic, 1.0)):
        *hidden, head = linears(net)
        assert len(hidden) == 2 and all(h.out_features == 64 for h in hidden)
        for layer in hidden:
            torch.testing.assert_close(_gain(layer.weight), torch.full((min(layer.weight.shape),), math.sqrt(2)))
        torch.testing.assert_close(_gain(head.weight), torch.full((min(head.weight.shape),), head_gain))
        for layer in (*hidden, head):
            assert (layer.bias == 0).all()


@pytest.mark.parametrize("kind", list(SPACES))
def test_value_loss_moves_only_critic_and_policy_loss_only_actor(kind):
    agent = make_agent(kind)
    obs = obs_batch(b=16)
    with torch.no_grad():
        action, old_logprob, _, old_values = agent.get_action_and_value(obs)
    critic = {id(p) for p in agent.critic.parameters()}
    actor = [p for p in agent.parameters() if id(p) not in critic]
    g = torch.Generator().manual_seed(3)
    advantages, returns = torch.randn(16, generator=g), torch.randn(16, generator=g)

    def grads(term: str):
        agent.zero_grad(set_to_none=True)
        _, new_logprob, entropy, new_values = agent.get_action_and_value(obs, action)
        out = ppo.ppo_loss(new_logprob, old_logprob - 0.05, advantages, new_values, old_values, returns, entropy,
                           clip_coef=0.2, vf_coef=0.5, ent_coef=0.01)
        out[term].backward()
        norm = lambda ps: sum(float(p.grad.abs().sum()) for p in ps if p.grad is not None)  # noqa: E731
        return norm(actor), norm(agent.critic.parameters())

    actor_g, critic_g = grads("value_loss")
    assert actor_g == 0.0 and critic_g > 0.0
    actor_g, critic_g = grads("policy_loss")
    assert actor_g > 0.0 and critic_g == 0.0


def test_first_minibatch_of_first_epoch_has_ratio_one_on_a_real_rollout():
    cfg = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=32, total_timesteps=128, num_minibatches=4,
                    update_epochs=2, progress=False, eval_episodes=0)
    trainer = Trainer(cfg)
    try:
        ro = trainer.rollout
        trainer.next_obs = ppo.collect_rollout(trainer.env, trainer.agent.policy_step, ro, trainer.next_obs)
        with torch.no_grad():
            next_values = trainer.agent.get_value(ro.final_obs.reshape(-1, 4)).reshape(32, 4)
        adv, ret = ppo.compute_gae(ro.rewards, ro.values, next_values, ro.terminated, ro.dones, cfg.gamma, cfg.gae_lambda)
        batch = ro.flatten(adv, ret)
        seen = []

        def recording_step(mb):
            out = trainer.grad_step(mb)
            seen.append({k: float(v) for k, v in out.items()})
            return out

        ppo.update(trainer.agent, trainer.optimizer, batch, cfg, grad_step=recording_step)
    finally:
        trainer.close()
    assert len(seen) == cfg.update_epochs * cfg.num_minibatches == 8
    first = seen[0]
    assert first["ratio"] == pytest.approx(1.0, abs=1e-6)
    assert first["approx_kl"] == pytest.approx(0.0, abs=1e-10)
    assert first["clipfrac"] == 0.0
    assert not first["nonfinite"]
    # the check has teeth: once the policy moved, later minibatches see ratio != 1
    assert max(abs(s["ratio"] - 1.0) for s in seen[1:]) > 1e-5


@pytest.mark.parametrize("kind", list(SPACES))
def test_amp_bf16_heads_are_float32_sampling_logprobs_and_values(kind):
    """Under --amp bf16 the heads' last layer runs in float32: a value near -600 keeps its digits
    (bf16 rounds it to a step of 4), and log-probs are the float32 formula on float32 logits."""
    agent = make_agent(kind)
    with torch.no_grad():
        agent.critic[-1].bias.fill_(-600.0)
    obs = obs_batch(256)
    with torch.no_grad():
        exact = agent.get_value(obs)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            action, logprob, entropy, value = agent.get_action_and_value(obs)
            logits = agent.actor(agent.features(obs))
    for t in (logprob, entropy, value, logits):
        assert t.dtype == torch.float32
    assert value.unique().numel() > 100, "values rounded to a few bfloat16 steps"
    assert (value - exact).abs().max() < 0.1  # the hidden layers in bf16 only
    if kind == "discrete":  # the log-prob is the float32 log-softmax of those float32 logits
        torch.testing.assert_close(logprob, torch.log_softmax(logits, -1).gather(-1, action[:, None]).squeeze(-1))


def test_amp_bf16_sampling_follows_the_softmax_of_the_logits():
    """Gumbel-max sampling on bf16 logits drew index 1 of logits [0, 4.6] with frequency 0.991
    against the softmax's 0.990 (ties go to index 0): the noise is now drawn in float32. One hidden unit:
    the weights are zero, so the logits are the output bias whatever the width, and 10^6 rows through
    two emulated-bf16 64-wide layers took ~35 s on 2 cores (now ~0.5 s, the same draws)."""
    agent = Agent(OBS, gym.spaces.Discrete(2), hidden_sizes=(1,))
    with torch.no_grad():
        for m in agent.actor:
            if isinstance(m, torch.nn.Linear):
                m.weight.zero_()
        agent.actor[-1].bias.copy_(torch.tensor([0.0, 4.6]))
    torch.manual_seed(0)
    n = 1_000_000
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        action, logprob, _, _ = agent.get_action_and_value(torch.zeros(n, 5))
    p0 = torch.softmax(torch.tensor([0.0, 4.6]), 0)[0].item()
    freq = (action == 0).float().mean().item()
    assert abs(freq - p0) < 5 * math.sqrt(p0 * (1 - p0) / n), (freq, p0)
    assert logprob.dtype == torch.float32
    assert torch.allclose(logprob[action == 0][:1], torch.log(torch.tensor([p0])), atol=1e-6)
