"""Mutation-found gaps in the per-member PPO switches of populations (--sweep norm_adv / anneal_lr /
clip_vloss, commit 0381f97): both switches swept in a vmapped (encoder) population, the learning rates a
swept anneal_lr rounds once, the clip_vloss=false refusal of a value-clip range (swept, or a clipping
member's own), each non-sweepable field's reason, check_members' line, and the single run's vf_clipfrac
of ppo_loss with its Python-bool clip_vloss."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from proxima import ppo
from proxima.config import ConfigError
from proxima.population import PER_MEMBER_FIELDS, Population, check_members, check_sweep_field, member_configs

SWEEPABLE = ", ".join(PER_MEMBER_FIELDS)


# --- vmapped loss: each member gets its own pair of switches ----------------------------------------


def test_an_encoder_member_gets_its_own_norm_adv_and_clip_vloss_when_both_are_swept(small_config):
    # both switches swept under vmap: member 0 (norm_adv on, clip_vloss off) and member 1 (off, on) must each
    # end the iteration bit-identical to the same seed in a population where every member has its pair
    # (the Python-bool path); handing a member the other switch's mask would give it the other pair
    cfg = small_config(env_id="PixelQuadrant-v0", num_envs=2, num_steps=8, num_minibatches=2, total_timesteps=16, encoder="cnn")

    def after(pairs) -> dict:
        torch.manual_seed(0)
        pop = Population([dataclasses.replace(cfg, seed=s, norm_adv=na, clip_vloss=cv) for s, (na, cv) in zip((1, 2), pairs)])
        assert not pop.stacked  # the vmapped path
        pop.train_iteration()
        params = {k: v.detach().clone() for k, v in pop.params.items()}
        pop.close()
        return params

    mixed = after([(True, False), (False, True)])
    first = after([(True, False), (True, False)])
    second = after([(False, True), (False, True)])
    # the two pairs train member 0 (seed 1) apart: a swap would show
    assert any(not torch.equal(first[k][0], second[k][0]) for k in first)
    for k in mixed:
        assert torch.equal(mixed[k][0], first[k][0]), k
        assert torch.equal(mixed[k][1], second[k][1]), k


# --- anneal_lr swept: each rate rounded once from the configured lr ------------------------------------


def test_a_swept_anneal_lr_rounds_each_rate_once_from_the_configured_lr(small_config):
    # the single run's rate is frac * cfg.lr in Python floats; the population's float32 lr_now must be that,
    # rounded once (frac * float32(1e-3) rounds 2/3 and 1/3 of it to other float32s)
    cfg = small_config(total_timesteps=3 * 4 * 32, lr=1e-3)  # 3 iterations
    fracs = (1.0, 2 / 3, 1 / 3)
    want_annealed = [float(torch.tensor(f * 1e-3, dtype=torch.float64).float()) for f in fracs]
    assert want_annealed != [float((f * torch.tensor(1e-3).double()).float()) for f in fracs]  # the check can tell
    for sweep, annealing in (({"anneal_lr": [True, False]}, [True, False]), (None, [True, True])):
        pop = Population(member_configs(cfg, [1], sweep) if sweep else member_configs(cfg, [1, 2]))
        rates = []
        for _ in range(3):
            pop.train_iteration()
            rates.append(pop.lr_now.tolist())
        pop.close()
        for p, anneals in enumerate(annealing):
            want = want_annealed if anneals else [float(torch.tensor(1e-3))] * 3
            assert [r[p] for r in rates] == want, (sweep, p)


# --- clip_vloss=false and a value-clip range ----------------------------------------------------------------


def test_a_swept_vf_clip_coef_with_clip_vloss_swept_off_is_refused_by_member_configs(small_config):
    # member_configs checks its sweep: the ranges swept, not only the base's (None here), are what the
    # clip_vloss=false members would get; the line names the first value given
    with pytest.raises(ConfigError) as e:
        member_configs(small_config(), [1], {"clip_vloss": [True, False], "vf_clip_coef": [0.1, 0.3]})
    assert str(e.value) == ("--sweep clip_vloss: --sweep vf_clip_coef=0.1,0.3 sets the range of the value clip that the "
                            "clip_vloss=false members turn off; drop that --sweep (the clip then takes clip_coef, as CleanRL's) "
                            "or sweep vf_clip_coef in a population of clip_vloss=true alone")
    with pytest.raises(ConfigError, match=r"^--sweep clip_vloss: --sweep vf_clip_coef=0\.3,0\.1 sets"):  # in the order given
        member_configs(small_config(), [1], {"vf_clip_coef": [0.3, 0.1], "clip_vloss": [False, True]})


def test_a_clipping_members_own_range_is_taken_beside_a_member_that_does_not_clip(small_config):
    # only the members that turn the clip off may not name its range: a clip_vloss=true member's vf_clip_coef is its own
    pop = Population([small_config(seed=1, vf_clip_coef=0.1), small_config(seed=1, clip_vloss=False)])
    assert pop.switch["clip_vloss"].tolist() == [True, False]
    assert pop.coef["vf_clip_coef"].tolist() == [float(torch.tensor(0.1)), float(torch.tensor(0.2))]  # the other: clip_coef
    pop.close()


# --- why a field cannot be swept ---------------------------------------------------------------------------


WHOLE_RUN = ("device", "threads", "flush_denormal", "keep_host_memory", "deterministic", "compile", "compile_mode",
             "cudagraphs", "amp", "run_dir", "init_from", "checkpoint_every", "checkpoint_minutes", "keep_checkpoints",
             "eval_episodes", "eval_every", "progress", "debug_checks", "plot", "stop_return", "stop_episodes")
NOT_PER_MEMBER_YET = ("bootstrap_truncation", "norm_obs", "norm_reward", "clip_obs", "clip_reward")
WHY = {**dict.fromkeys(WHOLE_RUN, "is a setting of the whole run (one process trains every member), not of a member"),
       **dict.fromkeys(NOT_PER_MEMBER_YET, "is one setting for every member of a population (not per member yet)"),
       **dict.fromkeys(("total_timesteps", "update_epochs"), "changes the shapes or the env of the batched program (here: "
                       "the length of its loop, which every member runs together)"),
       **dict.fromkeys(("num_envs", "num_steps", "hidden_sizes", "env_id"), "changes the shapes or the env of the batched program")}


@pytest.mark.parametrize("name", sorted(WHY))
def test_each_field_that_cannot_be_swept_is_refused_for_its_own_reason(name):
    with pytest.raises(ConfigError) as e:
        check_sweep_field(name)
    assert str(e.value) == f"--sweep {name}: {WHY[name]}; sweepable: {SWEEPABLE}; run one population per value of {name}"


@pytest.mark.parametrize("name, values", [("norm_reward", (False, True)), ("total_timesteps", (256, 512)),
                                          ("eval_episodes", (0, 2)), ("num_steps", (32, 16))])
def test_members_built_in_python_that_differ_in_a_shared_field_are_refused_for_its_reason(small_config, name, values):
    with pytest.raises(ConfigError) as e:
        check_members([small_config(seed=1, **{name: values[0]}), small_config(seed=2, **{name: values[1]})])
    assert str(e.value) == f"--sweep {name}: {WHY[name]}; only {SWEEPABLE} can differ between members"


# --- the single run's ppo_loss: vf_clipfrac with a Python-bool clip_vloss ----------------------------------


def test_single_run_vf_clipfrac_counts_the_clipped_branch_only_when_clip_vloss():
    # old values 0, clip range 0.2: samples 0 and 1 moved past the range toward their returns (the clipped
    # branch is the larger: counted); sample 2 moved away from its return (unclipped larger); sample 3 moved
    # within the range (no clamp)
    new_values = torch.tensor([1.0, -1.0, 1.0, 0.05])
    returns = torch.tensor([2.0, -2.0, -1.0, 2.0])
    zeros = torch.zeros(4)
    args = (zeros, zeros, torch.tensor([1.0, -1.0, 0.5, -0.5]), new_values, zeros, returns, zeros)
    on = ppo.ppo_loss(*args, clip_coef=0.2, vf_coef=0.5, ent_coef=0.0, clip_vloss=True, norm_adv=False)
    off = ppo.ppo_loss(*args, clip_coef=0.2, vf_coef=0.5, ent_coef=0.0, clip_vloss=False, norm_adv=False)
    assert float(on["vf_clipfrac"]) == 0.5
    assert float(off["vf_clipfrac"]) == 0.0  # no clip made: never counted as clipped
    assert float(on["value_loss"]) == pytest.approx(0.5 * (1.8 ** 2 + 1.8 ** 2 + 4.0 + 1.95 ** 2) / 4, rel=1e-6)
    assert float(off["value_loss"]) == pytest.approx(0.5 * (1.0 + 1.0 + 4.0 + 1.95 ** 2) / 4, rel=1e-6)
