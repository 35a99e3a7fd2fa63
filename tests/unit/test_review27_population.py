"""Population review 27: MemberAdam's arithmetic is the single run's fused Adam's, every per-member
field reaches its member, and an env's NaN/inf under --norm-obs is reported as what it is."""

from __future__ import annotations

import math
import re

import pytest
import torch

from proxima.member_adam import MemberAdam
from proxima.population import PER_MEMBER_NUMBERS, Population
from proxima.trainer import Trainer

# --- 1. MemberAdam against torch.optim.Adam(fused=True), the single run's kernel ------------------------


def _fused_reference(w0: torch.Tensor, lr: float) -> tuple:
    w = w0.clone().requires_grad_(True)
    # the trainer holds its lr as a float32 tensor (trainer.py), as the population's (P,) lrs are
    return w, torch.optim.Adam([w], lr=torch.tensor(lr), eps=1e-5, fused=True)


@pytest.mark.parametrize("lrs", [(2.5e-4,) * 3, (1e-2,) * 3, (3.0,) * 3, (2.5e-4, 1e-2, 3.0)],
                         ids=["2.5e-4", "1e-2", "3.0", "per-member"])
@pytest.mark.parametrize("steps", [1, 8])
def test_member_adam_steps_each_member_as_fused_adam_on_that_member_alone(lrs, steps):
    # a bias correction in float32 (1 - 0.999**1 = 0.0009999871) put every member's step ~7e-6
    # relative off the single run's; from zero weights each weight is a sum of steps of about lr,
    # so 1e-6 x lr is the rounding of float32 Adam, far under that
    torch.manual_seed(0)
    P, D = 3, 257
    lr = torch.tensor(lrs)
    scale = torch.tensor([[1.0], [100.0], [1e-3]])  # gradients of different sizes per member, under and over eps
    w = torch.zeros(P, D - 7)
    b = torch.zeros(P, 7)
    params = [w.clone().requires_grad_(True), b.clone().requires_grad_(True)]
    adam = MemberAdam(params, P, eps=1e-5)
    refs = [_fused_reference(torch.zeros(D), lrs[p]) for p in range(P)]
    for k in range(steps):
        grad = torch.randn(P, D) * scale
        # at step 3 member 1 sits out (a target_kl stop): its step count then lags the others'
        active = torch.tensor([True, k != 2, True])
        stepped = adam.step(grad, lr, active)
        assert stepped.tolist() == active.tolist()
        for p in range(P):
            if active[p]:
                ref, opt = refs[p]
                ref.grad = grad[p].clone()
                opt.step()
    for p in range(P):
        ref, opt = refs[p]
        torch.testing.assert_close(adam.flat[p], ref.detach(), rtol=1e-6, atol=1e-6 * lrs[p], msg=f"member {p} lr {lrs[p]}")
        assert float(adam.step_count[p]) == float(opt.state[ref]["step"])
    assert params[0].data_ptr() == adam.flat.data_ptr()  # the modules' tensors are the stepped buffer


# --- 2. each per-member field reaches member 1 and only member 1 --------------------------------------

#: a value per field that moves a 2-iteration CartPole run well past 1e-6 (measured: 1.3e-4 to 1e-2;
#: each member agreed with its single run to 6e-8).
#: ent_coef is large because the initial policy is near uniform, where the entropy's gradient is tiny;
#: target_kl 1e-6 stops the update after its second minibatch (the first has approx_kl 0)
FIELD_VALUES = {"lr": 1e-3, "ent_coef": 5.0, "clip_coef": 0.05, "vf_clip_coef": 0.01, "vf_coef": 0.1, "gamma": 0.9,
                "gae_lambda": 0.5, "max_grad_norm": 0.01, "target_kl": 1e-6}


def _single(cfg, iterations: int) -> dict:
    t = Trainer(cfg)
    try:
        for _ in range(iterations):
            t.train_iteration()
        return {k: v.detach().clone() for k, v in t.agent.state_dict().items()}
    finally:
        t.close()


def test_every_per_member_field_is_exercised_below():
    # the per-member switches (norm_adv, anneal_lr, clip_vloss): tests/unit/test_sweep_switches46.py
    assert set(FIELD_VALUES) == set(PER_MEMBER_NUMBERS)


@pytest.mark.parametrize("field", PER_MEMBER_NUMBERS)
def test_a_member_whose_one_field_differs_trains_as_the_single_run_of_its_config(small_config, field):
    # member 0 keeps the default: a member 1 that silently got member 0's value trains as the
    # default single run, which the last assertion shows is far from its own
    configs = [small_config(seed=1), small_config(seed=2, **{field: FIELD_VALUES[field]})]
    pop = Population(configs)
    try:
        for _ in range(2):
            pop.train_iteration()
        got = pop.member_agent(1).state_dict()
    finally:
        pop.close()
    want = _single(configs[1], 2)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=1e-6, msg=f"{field}={FIELD_VALUES[field]}: {k}")
    default = _single(small_config(seed=2), 2)
    moved = max(float((want[k] - default[k]).abs().max()) for k in want)
    assert moved > 1e-4, f"{field}={FIELD_VALUES[field]} moves the single run by only {moved:.1e}"


# --- 3. an env's NaN/inf: the raw value where the rollout has it, the right label, no wrong env -----------


def _population_with_bad_env(small_config, monkeypatch, at_call: int, norm_obs: bool, final: bool = False):
    """Members 1, 2 with 2 envs each; member 1's env 1 (row 3) returns +inf in component 0 of its
    observation at the ``at_call``-th step (``final``: NaN in the final observation of its first
    finished episode instead). Returns env_failures() after one iteration."""
    pop = Population([small_config(seed=1, num_envs=2, norm_obs=norm_obs), small_config(seed=2, num_envs=2, norm_obs=norm_obs)])
    step, calls = pop.env.step, [0]
    seen = {}

    def bad_step(action):
        obs, reward, terminated, truncated, info = step(action)
        calls[0] += 1
        done = bool((terminated | truncated)[3])
        if final:
            if done and "t" not in seen:
                seen["t"] = calls[0]
                info = dict(info, final_obs=info["final_obs"].clone())
                info["final_obs"][3, 0] = math.nan
        elif calls[0] == at_call:
            assert not done  # an observation, not a reset's: the final obs is the same one (the env contract)
            obs, info = obs.clone(), dict(info, final_obs=info["final_obs"].clone())
            obs[3, 0] = info["final_obs"][3, 0] = math.inf
        return obs, reward, terminated, truncated, info

    monkeypatch.setattr(pop.env, "step", bad_step)
    try:
        pop.train_iteration()
        return pop.env_failures(), seen.get("t")
    finally:
        pop.close()


CHECK = "; check the env's step() with: proxima check-env CartPole-v1"


def test_an_envs_inf_observation_is_shown_raw_and_called_an_observation(small_config, monkeypatch):
    failures, _ = _population_with_bad_env(small_config, monkeypatch, at_call=5, norm_obs=False)
    assert len(failures) == 1 and failures[0][0] == 1
    # the 5th step's return: step 10 of a member of 2 envs; a running episode's next obs, not a final one
    assert re.fullmatch(r"non-finite observation \[inf, \S+, \S+, \S+\] from env 1 of member 1 at step 10 of that member"
                        + re.escape(CHECK), failures[0][1]), failures[0][1]


def test_under_norm_obs_an_inf_observation_names_no_env_it_cannot_tell(small_config, monkeypatch):
    # the inf enters member 1's running statistics at that step, so both its envs' normalized
    # observations are NaN there: the message was "final observation [nan, ...] from env 0"
    failures, _ = _population_with_bad_env(small_config, monkeypatch, at_call=5, norm_obs=True)
    assert failures == [(1, "non-finite observation in component 0 from at least one of the 2 envs of member 1 at step 10 "
                            "of that member (--norm-obs took it into the member's running statistics, so every env's "
                            "normalized observation is non-finite there and neither the env nor the raw value is known)"
                            + CHECK)]


def test_under_norm_obs_the_last_steps_observation_is_read_raw_with_its_env(small_config, monkeypatch):
    failures, _ = _population_with_bad_env(small_config, monkeypatch, at_call=32, norm_obs=True)  # num_steps 32
    assert len(failures) == 1
    assert re.fullmatch(r"non-finite observation \[inf, \S+, \S+, \S+\] from env 1 of member 1 at step 64 of that member"
                        + re.escape(CHECK), failures[0][1]), failures[0][1]


@pytest.mark.parametrize("norm_obs", [False, True])
def test_a_nan_final_observation_is_called_one_and_normalized_only_when_it_is(small_config, monkeypatch, norm_obs):
    failures, t = _population_with_bad_env(small_config, monkeypatch, at_call=0, norm_obs=norm_obs, final=True)
    assert t is not None and t <= 32, "member 1's env 1 finished no episode in the rollout"
    label = "normalized final observation" if norm_obs else "final observation"
    assert len(failures) == 1
    assert re.fullmatch(rf"non-finite {label} \[nan, \S+, \S+, \S+\] from env 1 of member 1 at step {2 * t} of that member"
                        + re.escape(CHECK), failures[0][1]), failures[0][1]


def test_annealed_learning_rates_are_the_single_runs_bit_for_bit(small_config):
    # was: frac * (lr rounded to float32), rounded again; the single run rounds frac * lr once
    lrs = [1e-2, 2.9e-3, 7e-4]
    configs = [small_config(seed=s, lr=lr, total_timesteps=128 * 7) for s, lr in enumerate(lrs, 1)]
    pop = Population(configs)
    singles = [Trainer(c) for c in configs]
    try:
        for _ in range(5):
            pop.train_iteration()
            for t in singles:
                t.train_iteration()
            want = torch.stack([t.optimizer.param_groups[0]["lr"].reshape(()).float().cpu() for t in singles])
            assert torch.equal(pop.lr_now.cpu(), want), (pop.lr_now, want)
    finally:
        pop.close()
        for t in singles:
            t.close()
