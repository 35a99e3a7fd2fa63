"""--sweep norm_adv / anneal_lr / clip_vloss (CleanRL's ablations of details 7, 4 and 9) in one batched
population: each member applies its own switch (a (P,) bool tensor, no Python branch per member) and
trains as the single run with that switch."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from proxima import ppo
from proxima.config import ConfigError
from proxima.population import (PER_MEMBER_FIELDS, Population, _fmt, check_sweep_field, member_configs, member_permutation,
                                parse_sweep)
from proxima.trainer import Trainer

SWITCHES = ("norm_adv", "anneal_lr", "clip_vloss")


def _single(cfg, iterations: int) -> dict:
    t = Trainer(cfg)
    try:
        for _ in range(iterations):
            t.train_iteration()
        return {k: v.detach().clone() for k, v in t.agent.state_dict().items()}
    finally:
        t.close()


# --- parsing and refusals ------------------------------------------------------------------------


@pytest.mark.parametrize("field", SWITCHES)
@pytest.mark.parametrize("spelled", ["true,false", "True,False", "1,0"])
def test_a_switch_sweeps_with_any_spelling_of_true_and_false(field, spelled):
    assert field in PER_MEMBER_FIELDS
    check_sweep_field(field)  # no refusal
    assert parse_sweep([f"{field}={spelled}"]) == {field: [True, False]}


def test_a_bad_switch_value_is_one_line_naming_the_field_and_what_it_takes():
    with pytest.raises(ConfigError) as e:
        parse_sweep(["norm_adv=true,maybe"])
    assert str(e.value) == "--sweep norm_adv=true,maybe: 'maybe': expected true or false"
    with pytest.raises(ConfigError, match=r"^--sweep clip_vloss: a value is repeated$"):
        parse_sweep(["clip_vloss=true,1"])


def test_switch_values_print_as_sweep_spells_them():
    # labels, member directory names and the closing lines: norm_advfalse, norm_adv=false (not Python's False)
    assert (_fmt(True), _fmt(False)) == ("true", "false")
    assert parse_sweep([f"anneal_lr={_fmt(False)},{_fmt(True)}"]) == {"anneal_lr": [False, True]}


def test_a_field_that_changes_no_shape_is_refused_for_what_it_is():
    with pytest.raises(ConfigError, match=r"^--sweep device: is a setting of the whole run \(one process trains every member\)"):
        check_sweep_field("device")
    with pytest.raises(ConfigError, match=r"^--sweep norm_reward: is one setting for every member of a population \(not per member yet\)"):
        check_sweep_field("norm_reward")
    with pytest.raises(ConfigError, match=r"^--sweep update_epochs: .*\(here: the length of its loop"):
        check_sweep_field("update_epochs")
    with pytest.raises(ConfigError, match=r"^--sweep num_envs: changes the shapes or the env of the batched program; sweepable: .*clip_vloss"):
        check_sweep_field("num_envs")


def test_a_value_clip_range_with_clip_vloss_swept_off_is_refused_naming_the_sweep(small_config):
    # a single run refuses --vf-clip-coef with --no-clip-vloss; the population's line names the --sweep typed
    want = r"^--sweep clip_vloss: vf_clip_coef 1 sets the range of the value clip that the clip_vloss=false members turn off"
    with pytest.raises(ConfigError, match=want.replace("vf_clip_coef 1", "--vf-clip-coef 1")):  # the value's source
        member_configs(small_config(vf_clip_coef=1.0), [1], {"clip_vloss": [True, False]})
    with pytest.raises(ConfigError, match=want):  # built in Python, past member_configs
        Population([small_config(seed=1, vf_clip_coef=1.0), small_config(seed=1, clip_vloss=False, vf_clip_coef=1.0)])
    member_configs(small_config(vf_clip_coef=1.0), [1], {"clip_vloss": [True]})  # nothing turned off: taken


# --- each switch takes effect per member -----------------------------------------------------------


def _first_minibatch(pop: Population) -> dict:
    """Minibatch 0 of a fresh rollout, member-major as the update lays it out."""
    pop.collect()
    pop.advantages()
    b = pop.batch["obs"].shape[0]
    perm = member_permutation(pop.members, b // pop.members, pop.cfg.num_envs, pop.device, num_minibatches=pop.cfg.num_minibatches)
    return {k: v[perm[:b // pop.cfg.num_minibatches]].clone() for k, v in pop.batch.items()}


def _member_loss(pop: Population, mb: dict, p: int, **switches) -> dict:
    """ppo.ppo_loss of member p alone on its rows of ``mb``, before any step, with Python-bool switches."""
    rows = {k: v.reshape(pop.members, -1, *v.shape[1:])[p] for k, v in mb.items()}
    with torch.no_grad():
        _, logprob, entropy, value = pop.member_agent(p)(rows["obs"], rows["actions"])
        c = pop.configs[p]
        return ppo.ppo_loss(logprob, rows["logprobs"], rows["advantages"], value, rows["values"], rows["returns"], entropy,
                            clip_coef=c.clip_coef, vf_coef=c.vf_coef, ent_coef=c.ent_coef, vf_clip_coef=c.vf_clip_coef,
                            **switches)


def test_norm_adv_off_gives_that_member_the_loss_of_unnormalized_advantages(small_config):
    pop = Population(member_configs(small_config(), [1], {"norm_adv": [False, True]}))
    mb = _first_minibatch(pop)
    want = [_member_loss(pop, mb, 0, norm_adv=False), _member_loss(pop, mb, 1, norm_adv=True)]
    wrong = _member_loss(pop, mb, 0, norm_adv=True)
    got = pop.grad_step(mb)  # the loss terms are those of the weights before its Adam step
    for p in range(2):  # the stacked matmul rounds in the last bits against the member alone
        torch.testing.assert_close(got["policy_loss"][p], want[p]["policy_loss"], rtol=0, atol=1e-6)
    # normalized and not differ far beyond that rounding: the switch reached the member
    assert abs(float(wrong["policy_loss"] - want[0]["policy_loss"])) > 1e-3
    pop.close()


def test_clip_vloss_off_gives_that_member_the_unclipped_value_loss(small_config):
    pop = Population(member_configs(small_config(), [1], {"clip_vloss": [False, True]}))
    mb = _first_minibatch(pop)
    # old values 1 below the new ones (and the positive returns): clip_coef 0.2 moves every clipped prediction
    # away from its return, so the max of detail 9 takes the clipped branch
    mb["values"] -= 1.0
    want = [_member_loss(pop, mb, 0, clip_vloss=False), _member_loss(pop, mb, 1, clip_vloss=True)]
    clipped0 = _member_loss(pop, mb, 0, clip_vloss=True)["value_loss"]
    returns = mb["returns"].reshape(2, -1)[0]
    with torch.no_grad():  # CleanRL's v_loss without detail 9: 0.5 * mean((V - R)^2)
        unclipped0 = 0.5 * ((pop.member_agent(0).get_value(mb["obs"].reshape(2, -1, 4)[0]) - returns) ** 2).mean()
    got = pop.grad_step(mb)
    torch.testing.assert_close(got["value_loss"][0], unclipped0, rtol=1e-6, atol=0)
    for p in range(2):
        torch.testing.assert_close(got["value_loss"][p], want[p]["value_loss"], rtol=1e-6, atol=0)
    assert abs(float(clipped0 / unclipped0) - 1) > 0.01  # the clipped branch would have changed member 0's loss
    assert float(got["vf_clipfrac"][0]) == 0.0 and float(got["vf_clipfrac"][1]) > 0.5
    pop.close()


def test_vf_clipfrac_is_blank_for_the_members_that_do_not_clip(small_config):
    # as a single run with --no-clip-vloss logs it blank, not a 0 that reads as "never clipped"
    pop = Population(member_configs(small_config(), [1, 2], {"clip_vloss": [True, False]}))
    out = pop.train_iteration()
    assert [math.isnan(v) for v in out["vf_clipfrac"].tolist()] == [False, False, True, True]
    pop.close()


def test_anneal_lr_off_keeps_that_members_rate_while_the_others_decays(small_config):
    cfg = small_config(total_timesteps=4 * 4 * 32, lr=1e-3)  # 4 iterations
    pop = Population(member_configs(cfg, [1], {"anneal_lr": [False, True]}))
    rates, logged = [], []
    for _ in range(4):
        pop.train_iteration()
        rates.append(pop.lr_now.tolist())
        logged.append(list(pop.scheduled_lrs))
    lr32 = float(torch.tensor(1e-3))
    assert [r[0] for r in rates] == [lr32] * 4
    assert [r[1] for r in rates] == [float(torch.tensor(f * 1e-3)) for f in (1.0, 0.75, 0.5, 0.25)]
    assert logged == [[1e-3, f * 1e-3] for f in (1.0, 0.75, 0.5, 0.25)]  # charts/learning_rate, as the single runs log it
    pop.close()


# --- a member trains as the single run with its switch ------------------------------------------------


@pytest.mark.parametrize("field", SWITCHES)
def test_every_member_of_a_switch_sweep_equals_the_single_run_with_its_switch(small_config, field):
    # as test_population.py's test_every_member_equals_the_single_run_with_its_seed: 2 iterations, 1e-5
    # (anneal_lr takes effect from the second iteration, whose rate is half the first's). clip_coef 0.05,
    # the value clip's range too: at 0.2 no value moved that far in 2 iterations of seeds 2 and 5
    cfg = small_config(clip_coef=0.05)
    members = member_configs(cfg, [3, 5], {field: [True, False]})
    pop = Population(members)
    for _ in range(2):
        pop.train_iteration()
    got = [pop.member_agent(i).state_dict() for i in range(len(members))]
    pop.close()
    singles = {}
    for i, member in enumerate(members):
        single = singles[(member.seed, getattr(member, field))] = _single(member, 2)
        for k in single:
            torch.testing.assert_close(got[i][k], single[k], rtol=0, atol=1e-5, msg=f"{field}={getattr(member, field)} seed {member.seed}: {k}")
    # the switch moves the single run far past that tolerance: a member given the other's value would fail
    moved = max(float((singles[(3, True)][k] - singles[(3, False)][k]).abs().max()) for k in singles[(3, True)])
    assert moved > 1e-4, f"{field} moves the single run by only {moved:.1e}"


def test_all_three_switches_crossed_each_member_equals_its_single_run(small_config):
    cfg = small_config(seed=2, clip_coef=0.05)
    sweep = {name: [True, False] for name in SWITCHES}
    members = member_configs(cfg, [2], sweep)
    assert len(members) == 8
    pop = Population(members)
    for _ in range(2):
        pop.train_iteration()
    for i, member in enumerate(members):
        single = _single(member, 2)
        got = pop.member_agent(i).state_dict()
        for k in single:
            torch.testing.assert_close(got[k], single[k], rtol=0, atol=1e-5, msg=f"member {i}: {k}")
    pop.close()


def test_unswept_switches_reach_the_loss_as_python_bools(small_config):
    # a population that sweeps no switch runs the loss's bool path, as before (no where, no (P,) mask)
    pop = Population(member_configs(small_config(norm_adv=False), [1, 2], {"lr": [1e-3, 3e-4]}))
    assert pop._loss_switch == {"norm_adv": False, "anneal_lr": True, "clip_vloss": True}
    assert pop.switch["norm_adv"].tolist() == [False] * 4
    pop.close()
    pop = Population(member_configs(small_config(), [1], {"norm_adv": [True, False]}))
    assert pop._loss_switch["norm_adv"].tolist() == [True, False] and pop._loss_switch["clip_vloss"] is True
    pop.close()


def test_an_encoder_members_iteration_is_its_own_switchs_under_vmap(small_config):
    # a CNN agent runs its loss under vmap, each member's switch a 0-d tensor there: member 0 of
    # [off, on] ends its iteration bit-identical to member 0 of [off, off], member 1 to member 1 of [on, on]
    cfg = small_config(env_id="PixelQuadrant-v0", num_envs=2, num_steps=8, num_minibatches=2, total_timesteps=16, encoder="cnn")

    def after(flags: tuple, field: str) -> dict:
        torch.manual_seed(0)
        pop = Population([dataclasses.replace(cfg, seed=1, **{field: flags[0]}), dataclasses.replace(cfg, seed=2, **{field: flags[1]})])
        out = pop.train_iteration()
        params = {k: v.detach().clone() for k, v in pop.params.items()}
        pop.close()
        return params, out

    for field in ("norm_adv", "clip_vloss"):
        mixed, out = after((False, True), field)
        off, _ = after((False, False), field)
        on, _ = after((True, True), field)
        assert not torch.equal(off["encoder.convs.0.weight"][0], on["encoder.convs.0.weight"][0]), field  # the switch matters
        for k in mixed:
            assert torch.equal(mixed[k][0], off[k][0]), f"{field}: {k}"
            assert torch.equal(mixed[k][1], on[k][1]), f"{field}: {k}"
        if field == "clip_vloss":
            assert math.isnan(float(out["vf_clipfrac"][0])) and not math.isnan(float(out["vf_clipfrac"][1]))


def test_a_switch_sweep_resumes_from_its_state_exactly(small_config):
    cfg = small_config(total_timesteps=4 * 4 * 32)
    members = member_configs(cfg, [1], {name: [True, False] for name in SWITCHES})
    pop = Population(members)
    pop.train_iteration()
    state = pop.state_dict()
    other = Population(members)
    other.load_state_dict(state)
    for _ in range(2):
        pop.train_iteration()
        other.train_iteration()
    assert torch.equal(pop.lr_now, other.lr_now)
    for k, v in pop.params.items():
        assert torch.equal(v, other.params[k]), k
    pop.close()
    other.close()


def test_the_loss_with_per_member_switches_is_each_rows_loss_with_its_bools_bit_for_bit():
    # ppo_loss over (P, B) with (P,) bool switches: row p is ppo_loss of row p alone with member p's
    # Python bools (the single run's path), the same ops, so equal bit for bit
    g = torch.Generator().manual_seed(0)
    P, B = 4, 16
    x = {k: torch.randn(P, B, generator=g) for k in ("new_logprob", "old_logprob", "advantages", "new_values", "returns", "entropy")}
    x["old_values"] = x["new_values"] + torch.randn(P, B, generator=g)  # some samples clipped, some not
    norm_adv, clip_vloss = torch.tensor([False, True, False, True]), torch.tensor([False, False, True, True])
    coef = dict(clip_coef=0.2, vf_coef=0.5, ent_coef=0.01)
    got = ppo.ppo_loss(*(x[k] for k in ("new_logprob", "old_logprob", "advantages", "new_values", "old_values", "returns", "entropy")),
                       clip_vloss=clip_vloss, norm_adv=norm_adv, **coef)
    for p in range(P):
        want = ppo.ppo_loss(*(x[k][p] for k in ("new_logprob", "old_logprob", "advantages", "new_values", "old_values", "returns",
                                                "entropy")), clip_vloss=bool(clip_vloss[p]), norm_adv=bool(norm_adv[p]), **coef)
        for k, v in want.items():
            assert torch.equal(got[k][p], v), f"member {p}: {k}"
    assert float(got["vf_clipfrac"][0]) == 0.0 and float(got["vf_clipfrac"][2]) > 0  # off: never counted as clipped


SWITCH_SWEEP = {"norm_adv": [True, False], "anneal_lr": [False, True], "clip_vloss": [False, True]}


def test_switch_sweep_parts_are_capturable_on_cpu_as_far_as_a_cpu_can_tell(small_config):
    # as test_population.py's check for --cudagraphs: the switches add no host read and no tensor made
    # from a Python number to the parts a graph records (anneal_lr acts in train_iteration, outside them)
    from proxima.debug import forbid_host_sync, forbid_host_tensors

    pop = Population(member_configs(small_config(), [1], SWITCH_SWEEP))
    pop.member_generators = None  # a GPU's layout: one stream for all members
    pop.env.member_generators = None
    pop.train_iteration()
    with forbid_host_tensors(), forbid_host_sync("cpu"):
        for part in pop._parts:
            part()
    assert bool(pop.metrics["policy_loss"].isfinite().all())
    pop.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graphed_switch_sweep_equals_eager(small_config):
    from proxima.graphs import PARTS
    from tests.unit.test_population import population_graph_states

    cfg = small_config(device="cuda", num_envs=8, num_steps=16)
    params, lrs = [], []
    for graphs in (False, True):
        torch.manual_seed(0)
        pop = Population(member_configs(dataclasses.replace(cfg, cudagraphs=graphs), [1], SWITCH_SWEEP), device="cuda")
        for _ in range(4):
            out = pop.train_iteration()
        assert not bool(out["nonfinite"].any())
        assert population_graph_states(pop) == dict.fromkeys(PARTS, "graph" if graphs else "eager")
        params.append({k: v.detach().cpu() for k, v in pop.params.items()})
        lrs.append(pop.lr_now.cpu())
        pop.close()
    assert torch.equal(lrs[0], lrs[1])
    for k in params[0]:
        torch.testing.assert_close(params[1][k], params[0][k], rtol=1e-4, atol=1e-5, msg=k)
