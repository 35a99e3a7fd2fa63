"""ppo_loss: ratio 1 at the start, clipping at hand-picked ratios, value clipping, shape guards, masks."""

from __future__ import annotations

import math

import pytest
import torch

from proxima.ppo import ppo_loss

COEFS = dict(clip_coef=0.2, vf_coef=0.5, ent_coef=0.01)


def batch(b=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return dict(new_logprob=torch.randn(b, generator=g) * 0.1 - 1.0, old_logprob=torch.randn(b, generator=g) * 0.1 - 1.0,
                advantages=torch.randn(b, generator=g), new_values=torch.randn(b, generator=g),
                old_values=torch.randn(b, generator=g), returns=torch.randn(b, generator=g),
                entropy=torch.rand(b, generator=g))


def loss(d, **kw):
    return ppo_loss(d["new_logprob"], d["old_logprob"], d["advantages"], d["new_values"], d["old_values"],
                    d["returns"], d["entropy"], **{**COEFS, **kw})


def test_ratio_one_gives_zero_kl_zero_clipfrac_and_minus_mean_normalized_advantage():
    d = batch()
    d["old_logprob"] = d["new_logprob"].clone()
    out = loss(d)
    adv = d["advantages"]
    normalized = (adv - adv.mean()) / (adv.std() + 1e-8)
    assert out["approx_kl"].item() == 0.0
    assert out["clipfrac"].item() == 0.0
    assert out["ratio"].item() == 1.0
    assert out["policy_loss"].item() == pytest.approx(-normalized.mean().item(), abs=1e-7)
    # without normalization the surrogate at ratio 1 is exactly -mean(advantages)
    out = loss(d, norm_adv=False)
    assert out["policy_loss"].item() == pytest.approx(-adv.mean().item(), rel=1e-6)


def test_normalized_advantages_have_unit_std_inside_the_loss():
    # at ratio 1 (inside the clip range) d policy_loss / d new_logprob_i = -adv_norm_i / B
    d = batch(b=6)
    new_logprob = d["old_logprob"].clone().requires_grad_(True)
    d["new_logprob"] = new_logprob
    loss(d)["policy_loss"].backward()
    adv = d["advantages"]
    expected = -(adv - adv.mean()) / (adv.std() + 1e-8) / 6  # d(-mean(adv_n * ratio))/d logprob at ratio 1
    torch.testing.assert_close(new_logprob.grad, expected)


# (ratio, advantage, expected per-sample surrogate loss, clipped?) with clip 0.2
CLIP_CASES = [
    (1.5, 1.0, -1.2, True),    # gain capped at 1 + eps
    (1.1, 1.0, -1.1, False),   # inside the trust region
    (0.5, 1.0, -0.5, True),    # pessimistic: the unclipped, lower objective is kept
    (1.5, -1.0, 1.5, True),    # pessimistic: the unclipped, larger loss is kept
    (0.5, -1.0, 0.8, True),    # loss floor at 1 - eps
    (0.9, -1.0, 0.9, False),
]


@pytest.mark.parametrize("ratio, adv, expected, clipped", CLIP_CASES)
def test_clipped_surrogate_at_hand_picked_ratios(ratio, adv, expected, clipped):
    b = 2
    old = torch.full((b,), -1.0)
    d = dict(new_logprob=old + math.log(ratio), old_logprob=old, advantages=torch.full((b,), adv),
             new_values=torch.zeros(b), old_values=torch.zeros(b), returns=torch.zeros(b), entropy=torch.zeros(b))
    out = loss(d, norm_adv=False)
    assert out["policy_loss"].item() == pytest.approx(expected, rel=1e-5)
    assert out["clipfrac"].item() == (1.0 if clipped else 0.0)
    assert out["approx_kl"].item() == pytest.approx((ratio - 1) - math.log(ratio), rel=1e-4)


def test_clipped_surrogate_has_no_gradient_once_clipped():
    old = torch.full((2,), -1.0)
    new = (old + math.log(1.5)).requires_grad_(True)
    d = dict(new_logprob=new, old_logprob=old, advantages=torch.ones(2), new_values=torch.zeros(2),
             old_values=torch.zeros(2), returns=torch.zeros(2), entropy=torch.zeros(2))
    loss(d, norm_adv=False)["policy_loss"].backward()
    assert new.grad.abs().max().item() == 0.0


@pytest.mark.parametrize("new, old, ret, clip_vloss, vf_clip_coef, expected", [
    (1.0, 0.0, 2.0, True, None, 0.5 * (0.2 - 2.0) ** 2),   # clipped prediction 0.2 is further: max keeps it
    (1.0, 0.0, 0.0, True, None, 0.5 * 1.0),               # clipped prediction 0.2 is closer: unclipped kept
    (1.0, 0.0, 2.0, False, None, 0.5 * 1.0),              # switch off: plain 0.5 * MSE
    (1.0, 0.0, 2.0, True, 0.5, 0.5 * (0.5 - 2.0) ** 2),   # separate value clip epsilon
    (0.1, 0.0, 2.0, True, None, 0.5 * (0.1 - 2.0) ** 2),  # inside the clip range: same either way
])
def test_value_loss_clipping(new, old, ret, clip_vloss, vf_clip_coef, expected):
    d = dict(new_logprob=torch.zeros(2), old_logprob=torch.zeros(2), advantages=torch.zeros(2),
             new_values=torch.full((2,), new), old_values=torch.full((2,), old), returns=torch.full((2,), ret),
             entropy=torch.zeros(2))
    out = loss(d, clip_vloss=clip_vloss, vf_clip_coef=vf_clip_coef, norm_adv=False)
    assert out["value_loss"].item() == pytest.approx(expected, rel=1e-6)


def test_total_loss_combines_terms_with_coefficients():
    d = batch()
    out = loss(d, ent_coef=0.03, vf_coef=0.7)
    expected = out["policy_loss"] - 0.03 * out["entropy"] + 0.7 * out["value_loss"]
    assert out["loss"].item() == pytest.approx(expected.item(), rel=1e-6)
    assert out["entropy"].item() == pytest.approx(d["entropy"].mean().item(), rel=1e-6)


@pytest.mark.parametrize("name", ["new_logprob", "old_logprob", "advantages", "new_values", "old_values", "returns", "entropy"])
def test_b_vs_b1_shape_raises_value_error(name):
    d = batch()
    d[name] = d[name].unsqueeze(-1)  # [B, 1]: would broadcast against [B] to [B, B]
    with pytest.raises(ValueError, match=rf"ppo_loss: {name} has shape \(8, 1\), expected \(8,\)"):
        loss(d)


def test_mask_of_wrong_shape_raises_value_error():
    with pytest.raises(ValueError, match="mask has shape"):
        loss(batch(), mask=torch.ones(8, 1, dtype=torch.bool))


@pytest.mark.parametrize("norm_adv", [False, True])
def test_masked_loss_equals_loss_over_selected_entries(norm_adv):
    d = batch(b=10, seed=7)
    mask = torch.tensor([1, 0, 1, 1, 0, 1, 1, 0, 1, 1], dtype=torch.bool)
    masked = loss(d, mask=mask, norm_adv=norm_adv)
    selected = loss({k: v[mask] for k, v in d.items()}, norm_adv=norm_adv)
    for key in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "vf_clipfrac", "ratio"):
        assert masked[key].item() == pytest.approx(selected[key].item(), rel=1e-5, abs=1e-7), key


def test_all_true_mask_equals_no_mask():
    d = batch(b=8, seed=8)
    with_mask = loss(d, mask=torch.ones(8, dtype=torch.bool))
    without = loss(d)
    for key in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac"):
        assert with_mask[key].item() == pytest.approx(without[key].item(), rel=1e-5, abs=1e-7), key


def test_nan_at_masked_out_entries_does_not_leak():
    d = batch(b=6, seed=9)
    mask = torch.tensor([1, 1, 0, 1, 0, 1], dtype=torch.bool)
    poisoned = {k: v.clone() for k, v in d.items()}
    for k in ("old_logprob", "advantages", "old_values", "returns", "entropy"):
        poisoned[k][~mask] = math.nan  # padding (RLHF) may hold anything
    new_logprob = poisoned["new_logprob"].clone().requires_grad_(True)
    poisoned["new_logprob"] = new_logprob
    out = loss(poisoned, mask=mask)
    selected = loss({k: v[mask] for k, v in d.items()})
    for key in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac"):
        assert out[key].item() == pytest.approx(selected[key].item(), rel=1e-5, abs=1e-7), key
    out["loss"].backward()
    assert torch.isfinite(new_logprob.grad).all()
    assert (new_logprob.grad[~mask] == 0).all()


def test_explained_variance_is_nan_where_the_returns_do_not_vary_even_after_float32_rounding():
    from proxima.ppo import explained_variance

    values = torch.tensor([0.1, 0.2, 0.3])
    returns = torch.tensor([2.0, 1.0, 3.0])
    expected = 1 - (returns - values).var() / returns.var()
    assert torch.allclose(explained_variance(values, returns), expected)
    assert torch.isnan(explained_variance(values, torch.ones(3)))  # Var(returns) == 0: CleanRL's NaN, not -inf
    # a one-step env of constant reward 1: returns = advantages + values in float32 are 1 up to rounding (an ulp)
    values = torch.linspace(0.3, 0.9, 64)
    returns = 1.0 + (torch.arange(64) % 2) * torch.finfo(torch.float32).eps
    assert returns.var() > 0  # the rounding variance the old formula divided by (logged -3e13)
    assert torch.isnan(explained_variance(values, returns))
    # returns that do vary, if little next to their size (a long horizon's ~1/(1-gamma)), keep their value
    g = torch.Generator().manual_seed(0)
    long = 1000 + 0.2 * torch.randn(4096, generator=g)
    near = long + 0.02 * torch.randn(4096, generator=g)
    assert torch.allclose(explained_variance(near, long), 1 - (long - near).var() / long.var())
    # a population's per-member values along dim 1: the same rule per member
    both = explained_variance(torch.stack([values, torch.tensor([0.1, 0.2, 0.3]).repeat(22)[:64]]),
                              torch.stack([returns, torch.arange(64.0)]), dim=1)
    assert torch.isnan(both[0]) and torch.isfinite(both[1])
