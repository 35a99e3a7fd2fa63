"""compute_gae: a hand-computed case, the reference loop, cuts at done, bootstrap rules, NaN safety."""

from __future__ import annotations

import math

import pytest
import torch

from proxima.ppo import compute_gae


def col(*xs, dtype=torch.float32):
    """A (T, 1) column: one env over T steps."""
    return torch.tensor(xs, dtype=dtype).reshape(-1, 1)


def reference_gae(rewards, values, next_values, terminated, done, gamma, lam):
    """Plain Python, one env and one step at a time, in float64."""
    T, N = rewards.shape
    adv = [[0.0] * N for _ in range(T)]
    for n in range(N):
        following = 0.0  # advantage of step t+1 of the same episode
        for t in reversed(range(T)):
            boot = 0.0 if bool(terminated[t, n]) else float(next_values[t, n])
            delta = float(rewards[t, n]) + gamma * boot - float(values[t, n])
            if bool(done[t, n]):
                following = 0.0
            adv[t][n] = delta + gamma * lam * following
            following = adv[t][n]
    adv = torch.tensor(adv, dtype=torch.float64)
    return adv, adv + values.double()


def random_case(T=16, N=5, seed=0, p_term=0.15, p_trunc=0.1):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(T, N, generator=g)
    values = torch.randn(T, N, generator=g)
    next_values = torch.randn(T, N, generator=g)
    terminated = torch.rand(T, N, generator=g) < p_term
    truncated = (torch.rand(T, N, generator=g) < p_trunc) & ~terminated
    return rewards, values, next_values, terminated, terminated | truncated


def test_hand_computed_three_steps_without_done():
    # gamma 0.9, lambda 0.8: deltas 1 + .9*1 - .5 = 1.4, 2 + .9*1.5 - 1 = 2.35, 3 + .9*2 - 1.5 = 3.3
    # A2 = 3.3, A1 = 2.35 + .72*3.3 = 4.726, A0 = 1.4 + .72*4.726 = 4.80272
    no = col(False, False, False, dtype=torch.bool)
    adv, ret = compute_gae(col(1.0, 2.0, 3.0), col(0.5, 1.0, 1.5), col(1.0, 1.5, 2.0), no, no, gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv, col(4.80272, 4.726, 3.3))
    torch.testing.assert_close(ret, col(5.30272, 5.726, 4.8))


def test_hand_computed_three_steps_terminated_in_the_middle():
    # step 1 terminates: delta1 = 2 - 1 = 1 (no bootstrap), A1 = 1 (trace cut), A0 = 1.4 + .72*1 = 2.12
    term = col(False, True, False, dtype=torch.bool)
    adv, ret = compute_gae(col(1.0, 2.0, 3.0), col(0.5, 1.0, 1.5), col(1.0, 1.5, 2.0), term, term, gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv, col(2.12, 1.0, 3.3))
    torch.testing.assert_close(ret, col(2.62, 2.0, 4.8))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("gamma, lam", [(0.99, 0.95), (0.9, 1.0), (1.0, 0.0)])
def test_matches_reference_loop_on_random_data(seed, gamma, lam):
    rewards, values, next_values, terminated, done = random_case(seed=seed)
    assert terminated.any() and (done & ~terminated).any()  # both kinds of episode end occur
    adv, ret = compute_gae(rewards, values, next_values, terminated, done, gamma, lam)
    ref_adv, ref_ret = reference_gae(rewards, values, next_values, terminated, done, gamma, lam)
    assert adv.shape == (16, 5) and adv.dtype == torch.float32
    torch.testing.assert_close(adv.double(), ref_adv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret.double(), ref_ret, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("boundary_terminated", [True, False])
def test_split_at_done_equals_concatenation_of_halves(boundary_terminated):
    rewards, values, next_values, terminated, done = random_case(T=12, N=4, seed=3)
    k = 7  # every env's episode ends at step k - 1
    terminated[k - 1] = boundary_terminated
    done[k - 1] = True
    args = (rewards, values, next_values, terminated, done)
    whole_adv, whole_ret = compute_gae(*args, 0.99, 0.95)
    first = compute_gae(*(x[:k] for x in args), 0.99, 0.95)
    second = compute_gae(*(x[k:] for x in args), 0.99, 0.95)
    torch.testing.assert_close(whole_adv, torch.cat([first[0], second[0]]), rtol=0, atol=0)
    torch.testing.assert_close(whole_ret, torch.cat([first[1], second[1]]), rtol=0, atol=0)


def test_truncation_bootstraps_from_next_value_and_termination_does_not():
    gamma = 0.9
    reward, value, next_value = col(1.0), col(0.0), col(5.0)
    yes, no = col(True, dtype=torch.bool), col(False, dtype=torch.bool)
    truncated_adv, _ = compute_gae(reward, value, next_value, no, yes, gamma, 0.95)
    terminated_adv, _ = compute_gae(reward, value, next_value, yes, yes, gamma, 0.95)
    assert truncated_adv.item() == pytest.approx(1.0 + gamma * 5.0)
    assert terminated_adv.item() == pytest.approx(1.0)


def test_truncation_cuts_the_trace():
    # step 0 truncated: its advantage uses V(final obs) = 2, not the next episode's advantage
    no = col(False, False, dtype=torch.bool)
    trunc = col(True, False, dtype=torch.bool)
    adv, _ = compute_gae(col(0.0, 10.0), col(0.0, 0.0), col(2.0, 0.0), no, trunc, gamma=0.5, lam=1.0)
    torch.testing.assert_close(adv, col(1.0, 10.0))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nonfinite_next_value_at_a_terminal_step_does_not_leak(bad):
    rewards, values, next_values, terminated, done = random_case(seed=4)
    clean_next = torch.where(terminated, torch.zeros_like(next_values), next_values)
    poisoned_next = torch.where(terminated, torch.full_like(next_values, bad), next_values)
    clean = compute_gae(rewards, values, clean_next, terminated, done, 0.99, 0.95)
    poisoned = compute_gae(rewards, values, poisoned_next, terminated, done, 0.99, 0.95)
    assert torch.isfinite(poisoned[0]).all() and torch.isfinite(poisoned[1]).all()
    torch.testing.assert_close(poisoned[0], clean[0], rtol=0, atol=0)
    torch.testing.assert_close(poisoned[1], clean[1], rtol=0, atol=0)


def test_returns_equal_advantages_plus_values():
    rewards, values, next_values, terminated, done = random_case(seed=5)
    adv, ret = compute_gae(rewards, values, next_values, terminated, done, 0.99, 0.95)
    torch.testing.assert_close(ret, adv + values, rtol=0, atol=0)


@pytest.mark.parametrize("which", ["rewards", "values", "next_values", "terminated", "done"])
def test_shape_mismatch_raises_value_error(which):
    args = dict(zip(("rewards", "values", "next_values", "terminated", "done"), random_case(T=4, N=3)))
    args[which] = args[which][:, :1] if which != "values" else args[which].reshape(4, 3, 1)
    with pytest.raises(ValueError, match="compute_gae: shapes differ"):
        compute_gae(**args, gamma=0.99, lam=0.95)


# --- next_values: V(s_{t+1}) from the rollout's own values, the critic only where it must run ------------
def _rollout_case(T=6, N=8, seed=0):
    """A critic and a rollout as collect_rollout leaves it: obs (T, N, 4), values V(obs[t]) computed
    step by step (N rows, as the acting step does), final_obs[t] = obs[t + 1] except where an episode
    ended (its own last obs). Terminated at (1, 2) and (3, 0); truncated at (2, 5), (2, 6) and the last step (5, 0)."""
    from proxima.nets import mlp

    torch.manual_seed(seed)
    critic = mlp(4, [64, 64], 1, out_std=1.0)
    obs = torch.randn(T + 1, N, 4)
    final_obs = obs[1:].clone()
    terminated = torch.zeros(T, N, dtype=torch.bool)
    truncated = torch.zeros(T, N, dtype=torch.bool)
    terminated[1, 2] = terminated[3, 0] = True
    truncated[2, 5] = truncated[2, 6] = truncated[5, 0] = True
    done = terminated | truncated
    final_obs[done] = torch.randn(int(done.sum()), 4)  # a finished episode's last obs is not the next (reset) obs
    with torch.no_grad():
        values = torch.stack([critic(obs[t]).squeeze(-1) for t in range(T)])
    return critic, obs[:T], final_obs, values, terminated, done


@pytest.mark.parametrize("bootstrap_truncation", [True, False])
def test_next_values_equal_the_critic_on_every_final_obs_and_run_it_only_where_needed(bootstrap_truncation):
    from proxima.ppo import next_values

    critic, obs, final_obs, values, terminated, done = _rollout_case()
    T, N = values.shape
    term = terminated if bootstrap_truncation else done
    evaluated = []

    def value_of(o):
        evaluated.append(o.shape[0])
        with torch.no_grad():
            return critic(o.reshape(-1, 4)).squeeze(-1).reshape(o.shape[:2])

    got = next_values(values, final_obs, done, term, value_of)
    with torch.no_grad():
        full = critic(final_obs.reshape(-1, 4)).squeeze(-1).reshape(T, N)  # what every step's final obs gives
    used = ~term
    # where compute_gae reads it (bit for bit with MKL on this project's CPU; a tolerance for other BLAS)
    torch.testing.assert_close(got[used], full[used], rtol=1e-6, atol=1e-6)
    # the last step, plus step 2 (its truncations) when they are bootstrapped; not the other T - 2 steps
    assert evaluated == ([1, 1] if bootstrap_truncation else [1])


def test_next_values_on_a_rollout_without_done_reuse_the_rollout_values():
    from proxima.ppo import next_values

    values = torch.randn(5, 3)
    final_obs = torch.randn(5, 3, 4)
    no = torch.zeros(5, 3, dtype=torch.bool)
    got = next_values(values, final_obs, no, no, lambda o: torch.full(o.shape[:2], 7.0))
    assert torch.equal(got[:-1], values[1:]) and torch.equal(got[-1], torch.full((3,), 7.0))
