"""Per-token rewards, GAE on the token axis (through the core compute_gae), group baselines."""

import torch

from proxima.rlhf.algorithm import gae_advantages, group_advantages, sequence_rewards, token_rewards
from proxima.rlhf.generation import response_masks

EOS = 2


def reference_gae(rewards, values, gamma, lam):
    """Textbook backward recursion over one response (no padding): V after the last token is 0."""
    n = len(rewards)
    adv, last = [0.0] * n, 0.0
    for t in reversed(range(n)):
        next_v = values[t + 1] if t + 1 < n else 0.0
        last = rewards[t] + gamma * next_v - values[t] + gamma * lam * last
        adv[t] = last
    return adv


def test_kl_penalty_on_every_token_and_score_on_the_last():
    responses = torch.tensor([[5, 6, EOS, 0], [5, 6, 7, 8]])
    mask, lengths, _ = response_masks(responses, EOS)
    kl = torch.tensor([[0.1, 0.2, 0.3, 9.0], [0.5, 0.5, 0.5, 0.5]])
    rewards, non_score = token_rewards(torch.tensor([1.0, -2.0]), kl, mask, lengths, kl_coef=0.1)
    torch.testing.assert_close(non_score, torch.tensor([[-0.01, -0.02, -0.03, 0.0], [-0.05] * 4]))
    torch.testing.assert_close(rewards, torch.tensor([[-0.01, -0.02, 0.97, 0.0], [-0.05, -0.05, -0.05, -2.05]]))


def test_gae_over_tokens_matches_the_textbook_recursion_and_padding_does_not_leak():
    torch.manual_seed(0)
    responses = torch.tensor([[5, 6, 7, EOS, 0, 0], [5, 6, 7, 8, 9, 10], [EOS, 0, 0, 0, 0, 0]])
    mask, lengths, _ = response_masks(responses, EOS)
    rewards = torch.where(mask, torch.randn(3, 6), torch.zeros(()))
    values = torch.randn(3, 6)
    values[~mask] = float("nan")  # garbage after EOS must not reach the valid tokens
    adv, ret = gae_advantages(rewards, values, lengths, gamma=0.9, lam=0.8)
    for i in range(3):
        n = int(lengths[i])
        expected = reference_gae(rewards[i, :n].tolist(), values[i, :n].tolist(), 0.9, 0.8)
        torch.testing.assert_close(adv[i, :n], torch.tensor(expected), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(ret[i, :n], adv[i, :n] + values[i, :n])
    assert torch.isfinite(adv[mask]).all()


def test_gamma_1_lambda_1_advantage_is_return_to_go_minus_value():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.2, 0.4, 0.6]])
    adv, _ = gae_advantages(rewards, values, torch.tensor([3]), gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv, torch.tensor([[0.8, 0.6, 0.4]]))


def test_grpo_normalizes_within_each_group():
    r = torch.tensor([1.0, 2.0, 3.0, 10.0, 10.0, 10.0])
    adv = group_advantages(r, 3, "grpo")
    g = torch.tensor([1.0, 2.0, 3.0])
    torch.testing.assert_close(adv[:3], (g - g.mean()) / (g.std() + 1e-4))
    torch.testing.assert_close(adv[3:], torch.zeros(3))


def test_rloo_subtracts_the_mean_of_the_others():
    adv = group_advantages(torch.tensor([1.0, 2.0, 6.0, 0.0]), 4, "rloo")
    torch.testing.assert_close(adv, torch.tensor([1 - 8 / 3, 2 - 7 / 3, 6 - 3 / 3, 0 - 9 / 3]))


def test_sequence_reward_subtracts_the_summed_kl_of_valid_tokens():
    mask = torch.tensor([[True, True, False]])
    kl = torch.tensor([[1.0, 2.0, 50.0]])
    torch.testing.assert_close(sequence_rewards(torch.tensor([5.0]), kl, mask, 0.5), torch.tensor([3.5]))
