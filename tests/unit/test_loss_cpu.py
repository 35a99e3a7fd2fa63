"""loss_cpu.ppo_loss: ppo.ppo_loss's loss terms bit for bit, autograd's gradients within rounding, every branch."""

import pytest
import torch

from proxima import loss_cpu, ppo

COEFS = dict(clip_coef=0.2, vf_coef=0.5, ent_coef=0.01)


def _inputs(b=4096, seed=0):
    """Minibatch tensors whose ratios and value deltas fall inside, outside and exactly on the clip ranges."""
    g = torch.Generator().manual_seed(seed)
    old_logprob = -torch.rand(b, generator=g) * 2
    new_logprob = old_logprob + torch.randn(b, generator=g) * 0.3
    new_logprob[:8] = old_logprob[:8]                                   # ratio exactly 1
    new_logprob[8:16] = old_logprob[8:16] + torch.log(torch.tensor(1.2))  # ratio at (or next to) the clip bound
    advantages = torch.randn(b, generator=g)
    advantages[16:24] = 0.0                                              # u == c for any ratio
    old_values = torch.randn(b, generator=g)
    new_values = old_values + torch.randn(b, generator=g) * 0.3
    new_values[24:32] = old_values[24:32] + 0.2                          # delta on the value clip bound
    returns = torch.randn(b, generator=g)
    entropy = torch.rand(b, generator=g)
    return new_logprob, old_logprob, advantages, new_values, old_values, returns, entropy


def _run(fn, inputs, **kw):
    new_logprob, old_logprob, advantages, new_values, old_values, returns, entropy = inputs
    leaves = [x.clone().requires_grad_() for x in (new_logprob, new_values, entropy)]
    out = fn(leaves[0], old_logprob, advantages, leaves[1], old_values, returns, leaves[2], **COEFS, **kw)
    (out["loss"] * 1.7).backward()
    return out, [x.grad for x in leaves]


@pytest.mark.parametrize("norm_adv", [True, False])
@pytest.mark.parametrize("clip_vloss", [True, False])
@pytest.mark.parametrize("vf_clip_coef", [None, 0.5])  # None: the value clip is clip_coef's
def test_terms_equal_ppo_loss_and_gradients_equal_autograd(norm_adv, clip_vloss, vf_clip_coef):
    inputs = _inputs()
    kw = dict(norm_adv=norm_adv, clip_vloss=clip_vloss, vf_clip_coef=vf_clip_coef)
    ref, ref_grads = _run(ppo.ppo_loss, inputs, **kw)
    out, grads = _run(loss_cpu.ppo_loss, inputs, **kw)
    assert out.keys() == ref.keys()
    for k in ref:  # the same ops in the same order: the same bits
        assert torch.equal(out[k], ref[k]), k
    assert 0.0 < float(ref["clipfrac"]) < 1.0 and (not clip_vloss or 0.0 < float(ref["vf_clipfrac"]) < 1.0)
    for name, got, want in zip(("new_logprob", "new_values", "entropy"), grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-9, msg=name)


def test_ties_get_half_the_gradient_as_torch_max_gives_it():
    """A ratio one float above the clip range whose two surrogate terms still round to the same
    number: torch.max splits the gradient between them and clamp blocks the clipped half."""
    above = torch.nextafter(torch.tensor(1.2), torch.tensor(2.0))
    ratio = torch.stack([above, torch.tensor(1.0), torch.tensor(0.7)])
    advantages = torch.tensor([0.9222684502601624, -2.0, 0.5])
    new_logprob, old_logprob = torch.log(ratio), torch.zeros(3)
    r = (new_logprob - old_logprob).exp()
    assert r[0] != torch.clamp(r[0], 0.8, 1.2) and -advantages[0] * r[0] == -advantages[0] * torch.clamp(r[0], 0.8, 1.2)
    z = torch.zeros(3)
    inputs = (new_logprob, old_logprob, advantages, z, z, z, z)
    _, ref_grads = _run(ppo.ppo_loss, inputs, norm_adv=False)
    _, grads = _run(loss_cpu.ppo_loss, inputs, norm_adv=False)
    torch.testing.assert_close(grads[0], ref_grads[0], rtol=1e-6, atol=0)
    assert ref_grads[0][0] != 0  # the half that torch.max hands the unclipped term


def test_what_it_does_not_handle_goes_to_ppo_loss():
    inputs = _inputs(64)
    mask = torch.ones(64, dtype=torch.bool)
    assert not loss_cpu.eligible(inputs[0], (0.2, 0.5, 0.01), mask)
    assert not loss_cpu.eligible(inputs[0], (torch.tensor([0.2]), 0.5, 0.01), None)  # a population's coefficients
    assert not loss_cpu.eligible(inputs[0].reshape(2, 32), (0.2, 0.5, 0.01), None)
    assert loss_cpu.eligible(inputs[0], (0.2, 0.5, 0.01), None)
    out, _ = _run(loss_cpu.ppo_loss, inputs, mask=mask)
    ref, _ = _run(ppo.ppo_loss, inputs, mask=mask)
    assert torch.equal(out["loss"], ref["loss"])
    with pytest.raises(ValueError, match="advantages has shape"):
        loss_cpu.ppo_loss(inputs[0], inputs[1], inputs[2][:10], *inputs[3:], **COEFS)


def test_the_cpu_trainer_takes_the_closed_form_backward(monkeypatch):
    """A CPU run that grad_cpu does not cover (a Box action) goes through _PPOLoss (one call a
    minibatch), not autograd's masks."""
    from proxima.config import PPOConfig
    from proxima.trainer import Trainer

    calls = []
    real = loss_cpu._PPOLoss.apply
    monkeypatch.setattr(loss_cpu._PPOLoss, "apply", lambda *a: calls.append(1) or real(*a))
    cfg = PPOConfig(env_id="Pendulum-v1", backend="native", num_envs=8, num_steps=16, num_minibatches=2, update_epochs=3,
                    total_timesteps=128, progress=False, checkpoint_every=0, eval_episodes=0, threads=1)
    trainer = Trainer(cfg, quiet=True)
    try:
        trainer.train_iteration()
    finally:
        trainer.close()
    assert len(calls) == 2 * 3
