"""grad_cpu.BlockGradients: autograd's gradients bit for bit (the first layer's weight gradient as
autograd computes it: the ``unflipped`` fixture says why), ppo_loss's metrics within rounding, and
autograd's path for everything it does not cover."""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima import grad_cpu, loss_cpu, mlp_cpu, ppo, tanh_cpu
from proxima.agent import Agent


def _cfg(**kw):
    base = dict(clip_coef=0.2, vf_coef=0.5, ent_coef=0.01, clip_vloss=True, norm_adv=True, vf_clip_coef=None)
    return SimpleNamespace(**{**base, **kw})


def _agent(obs_dim=4, n=2, hidden=(64, 64), activation="tanh", seed=0):
    torch.manual_seed(seed)
    space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
    return Agent(space, gym.spaces.Discrete(n), hidden, activation)


def _minibatch(agent, b, seed=1):
    """Rows whose new log-probs and values (after a perturbation of the agent) fall inside and
    outside the clip ranges."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(b, agent.actor[0].in_features, generator=g)
    with torch.no_grad():
        actions, logprobs, _, values = agent.get_action_and_value(obs)
    return {"obs": obs, "actions": actions, "logprobs": logprobs + 0.3 * torch.randn(b, generator=g),
            "advantages": torch.randn(b, generator=g) * 2 + 0.5, "values": values + 0.3 * torch.randn(b, generator=g),
            "returns": values + torch.randn(b, generator=g)}


def _autograd(agent, mb, cfg, loss=loss_cpu.ppo_loss):
    agent.zero_grad(set_to_none=True)
    _, lp, ent, v = agent(mb["obs"], mb["actions"])
    out = loss(lp, mb["logprobs"], mb["advantages"], v, mb["values"], mb["returns"], ent, clip_coef=cfg.clip_coef,
               vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef, clip_vloss=cfg.clip_vloss, norm_adv=cfg.norm_adv)
    out["loss"].backward()
    return out, {k: p.grad.clone() for k, p in agent.named_parameters()}


def _blocks(agent, mb, cfg):
    agent.zero_grad(set_to_none=True)
    blocks = grad_cpu.BlockGradients.for_agent(agent, cfg)
    assert blocks is not None and blocks.covers(mb)  # make_grad_step's choice, at every size
    out = blocks(mb)
    return out, {k: p.grad.clone() for k, p in agent.named_parameters()}


ROWS = mlp_cpu.block_rows([64, 64, 2])


# one block (every preset's minibatch: at most 2,048 rows; under mlp_cpu.FOLD_MIN_ROWS and over it),
# exactly one, 2 + a partial third, and 4,096 envs x 16 steps / 4 (several)
@pytest.mark.parametrize("b", [512, 1024, 2048, ROWS, 2 * ROWS + 808, 16384])
@pytest.mark.parametrize("cfg", [_cfg(), _cfg(norm_adv=False, clip_vloss=False, ent_coef=0.0)], ids=["default", "plain"])
@pytest.mark.parametrize("mode", tanh_cpu.MODES)  # sigmoid: the kernel's doubled weights (mlp_cpu.folded) give the same bits
def test_gradients_equal_autograds_bit_for_bit(b, cfg, mode, unflipped, monkeypatch):
    monkeypatch.setattr(tanh_cpu, "MODE", mode)
    agent = _agent()
    with torch.no_grad():  # biases as after training (init sets them to 0, which any scaling keeps)
        for p in agent.parameters():
            if p.dim() == 1:
                p.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(p.numel()))
    mb = _minibatch(agent, b)
    ref, ref_grads = _autograd(agent, mb, cfg)
    out, grads = _blocks(agent, mb, cfg)
    assert grads.keys() == ref_grads.keys() and len(grads) == 12
    for k in ref_grads:
        assert torch.equal(grads[k], ref_grads[k]), k
    assert out.keys() == ref.keys()
    for k in ref:  # sums of block sums / B against one mean: equal within rounding
        torch.testing.assert_close(out[k], ref[k].detach(), rtol=1e-5, atol=1e-6, msg=k)
    assert 0.05 < float(ref["clipfrac"]) < 0.95  # both branches of the surrogate are exercised


@pytest.mark.parametrize("hidden, activation", [((32, 128), "relu"), ((), "tanh"), ((16,), "tanh")])
def test_other_shapes_and_relu_equal_autograd(hidden, activation, unflipped):
    """Three actions, six observations, ReLU or tanh, MLPs of 0-2 hidden layers: within rounding of
    plain autograd (ppo.ppo_loss, no closed forms anywhere), bit for bit with the CPU autograd path."""
    cfg = _cfg()
    agent = _agent(obs_dim=6, n=3, hidden=hidden, activation=activation, seed=3)
    mb = _minibatch(agent, 2000, seed=4)
    _, plain = _autograd(agent, mb, cfg, loss=ppo.ppo_loss)
    _, ref = _autograd(agent, mb, cfg)
    _, grads = _blocks(agent, mb, cfg)
    for k in ref:
        assert torch.equal(grads[k], ref[k]), k
        torch.testing.assert_close(grads[k], plain[k], rtol=1e-4, atol=1e-6, msg=k)


def test_what_it_does_not_cover_keeps_autograd():
    cfg = _cfg()
    agent = _agent()
    assert grad_cpu.BlockGradients.for_agent(agent, cfg) is not None
    box = Agent(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))
    assert grad_cpu.BlockGradients.for_agent(box, cfg) is None  # Gaussian head
    wrapped = torch.nn.Module()
    wrapped.module = agent  # DistributedDataParallel: its all-reduce runs in autograd's backward
    assert grad_cpu.BlockGradients.for_agent(wrapped, cfg) is None
    assert grad_cpu.BlockGradients.for_agent(agent, cfg, autocast=lambda: None) is None
    frozen = _agent()
    frozen.critic[0].weight.requires_grad_(False)
    assert grad_cpu.BlockGradients.for_agent(frozen, cfg) is None
    blocks = grad_cpu.BlockGradients.for_agent(agent, cfg)
    mb = _minibatch(agent, 64)
    assert blocks.covers(mb)
    assert not blocks.covers({**mb, "obs": mb["obs"].double()})
    with pytest.raises(ValueError, match="advantages has shape"):
        blocks({**mb, "advantages": mb["advantages"][:10]})


def test_nan_in_the_minibatch_reaches_the_loss_and_gradients():
    agent = _agent()
    mb = _minibatch(agent, 300)
    mb["obs"][7, 2] = float("nan")
    out, grads = _blocks(agent, mb, _cfg())
    assert not torch.isfinite(out["loss"]) and not torch.isfinite(grads["actor.0.weight"]).all()


def _trainer(**kw):
    from proxima.config import PPOConfig
    from proxima.trainer import Trainer

    cfg = PPOConfig(env_id="CartPole-v1", backend="native", num_envs=256, num_steps=16, num_minibatches=2, update_epochs=2,
                    total_timesteps=10**6, progress=False, checkpoint_every=0, eval_episodes=0, threads=1, **kw)
    return Trainer(cfg, quiet=True)


def test_a_cpu_trainer_trains_through_it_as_through_autograd(monkeypatch, unflipped):
    """CartPole on the CPU takes the block path once a minibatch (2,048 rows: one block), and two
    iterations give the parameters that autograd's path gives, bit for bit."""
    calls = []
    real = grad_cpu.BlockGradients.__call__
    monkeypatch.setattr(grad_cpu.BlockGradients, "__call__", lambda self, mb: calls.append(mb["obs"].shape[0]) or real(self, mb))
    params = []
    for covered in (True, False):
        if not covered:
            monkeypatch.setattr(grad_cpu.BlockGradients, "covers", lambda self, mb: False)
        trainer = _trainer()
        try:
            for _ in range(2):
                trainer.train_iteration()
            params.append([p.detach().clone() for p in trainer.agent.parameters()])
        finally:
            trainer.close()
    assert calls == [2048] * (2 * 2 * 2)
    assert all(torch.equal(a, b) for a, b in zip(*params))
