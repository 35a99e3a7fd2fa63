"""k1 / k3 KL estimators and the fixed / adaptive coefficient."""

import torch

from proxima.rlhf.kl import KLController, kl_per_token


def test_k1_is_the_log_ratio_and_k3_is_non_negative():
    lp = torch.tensor([[-1.0, -2.0, -0.5]])
    ref = torch.tensor([[-1.5, -1.0, -0.5]])
    torch.testing.assert_close(kl_per_token(lp, ref, "k1"), torch.tensor([[0.5, -1.0, 0.0]]))
    k3 = kl_per_token(lp, ref, "k3")
    r = ref - lp
    torch.testing.assert_close(k3, r.exp() - 1 - r)
    assert (k3 >= 0).all() and k3[0, 2] == 0


def test_both_estimators_are_unbiased_for_the_true_kl():
    torch.manual_seed(0)
    p = torch.distributions.Categorical(logits=torch.tensor([2.0, 0.5, -1.0, 0.0]))
    q = torch.distributions.Categorical(logits=torch.tensor([1.0, 1.0, 0.0, -0.5]))
    true_kl = torch.distributions.kl_divergence(p, q)
    x = p.sample((200_000,))
    lp, lq = p.log_prob(x)[None], q.log_prob(x)[None]
    for est in ("k1", "k3"):
        torch.testing.assert_close(kl_per_token(lp, lq, est).mean(), true_kl, atol=0.01, rtol=0.0)


def test_fixed_coefficient_never_moves():
    ctl = KLController(0.05)
    ctl.update(100.0, 64)
    assert ctl.value == 0.05


def test_adaptive_coefficient_moves_towards_the_target():
    up, down = KLController(0.1, adaptive=True, target=1.0, horizon=100), KLController(0.1, adaptive=True, target=1.0, horizon=100)
    up.update(5.0, 10)      # KL above target: beta grows, by at most 20% x n / horizon
    down.update(0.1, 10)    # KL below target: beta shrinks
    assert abs(up.value - 0.1 * (1 + 0.2 * 10 / 100)) < 1e-12
    assert down.value < 0.1
    restored = KLController(0.5, adaptive=True)
    restored.load_state_dict(up.state_dict())
    assert restored.value == up.value
