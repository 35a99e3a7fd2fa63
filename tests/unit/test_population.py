"""Populations (proxima/population.py): members are independent PPO runs batched into one program."""

from __future__ import annotations

import dataclasses
from typing import Optional

import pytest
import torch

from proxima.config import ConfigError
from proxima.population import (PER_MEMBER_FIELDS, Population, member_configs, member_permutation, parse_seeds, parse_sweep,
                                to_members)
from proxima.trainer import Trainer


def _params_after_single(cfg, iterations: int = 1, steps: Optional[list] = None) -> dict:
    t = Trainer(cfg)
    try:
        for _ in range(iterations):
            t.train_iteration()
        if steps is not None:  # Adam steps taken (one per minibatch run)
            steps.append(float(t.optimizer.state[next(t.agent.parameters())]["step"]))
        return {k: v.detach().clone() for k, v in t.agent.state_dict().items()}
    finally:
        t.close()


_params_after_one_iteration_single = _params_after_single


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])  # Categorical (Gumbel-max) and Normal sampling
def test_population_of_one_equals_a_single_run_after_one_iteration(small_config, env_id):
    cfg = small_config(seed=3, env_id=env_id)
    single = _params_after_one_iteration_single(cfg)
    pop = Population(member_configs(cfg, [3]))
    pop.train_iteration()
    member = pop.member_agent(0).state_dict()
    assert member.keys() == single.keys()
    for k in single:  # batched matmuls and torch.sqrt round differently in the last bits
        torch.testing.assert_close(member[k], single[k], rtol=0, atol=1e-6, msg=k)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_every_member_equals_the_single_run_with_its_seed(small_config, env_id):
    # each member has its own random streams (env resets, action samples, permutations), started
    # where the single run's stand: member k's iterations are the single run k's, not just alike
    cfg = small_config(env_id=env_id)
    pop = Population(member_configs(cfg, [3, 5, 8]))
    for _ in range(2):
        pop.train_iteration()
    for i, seed in enumerate([3, 5, 8]):
        single = _params_after_single(dataclasses.replace(cfg, seed=seed), iterations=2)
        member = pop.member_agent(i).state_dict()
        for k in single:
            torch.testing.assert_close(member[k], single[k], rtol=0, atol=1e-5, msg=f"seed {seed}: {k}")


def test_per_member_scalars_act_like_the_single_run_config(small_config):
    # every per-member field away from its default: the (P,) tensors must carry them where the
    # float config values go in a single run (lr scaling, GAE rows, loss coefficients, clip_coef).
    # The gradient-norm clip is not tested here: every minibatch's norm (1.5 to 4.8) exceeds
    # max_grad_norm 0.05, so a clip that also scaled norms below it would pass too; test_ppo_details'
    # test_the_adam_step_of_each_population_member_uses_its_own_clipped_gradient pins the clip
    cfg = small_config(seed=5, lr=1e-3, ent_coef=0.05, clip_coef=0.1, vf_coef=0.8, gamma=0.9, gae_lambda=0.8,
                       max_grad_norm=0.05)
    single = _params_after_one_iteration_single(cfg)
    pop = Population([cfg])
    pop.train_iteration()
    member = pop.member_agent(0).state_dict()
    for k in single:
        torch.testing.assert_close(member[k], single[k], rtol=0, atol=1e-6, msg=k)
    default = _params_after_one_iteration_single(small_config(seed=5))
    assert not torch.allclose(default["actor.0.weight"], single["actor.0.weight"], atol=1e-6)


def test_a_members_gradient_does_not_depend_on_another_members_data(small_config):
    cfg = small_config(num_envs=2, num_steps=8, num_minibatches=2)

    def grads_after_step(perturb: bool):
        pop = Population(member_configs(cfg, [1, 2]))
        pop.collect()
        pop.advantages()
        perm = member_permutation(2, 16, cfg.num_envs, pop.device, num_minibatches=2)
        mb = {k: v[perm[:16]].clone() for k, v in pop.batch.items()}  # 8 samples of member 0, then 8 of member 1
        if perturb:  # member 1's rows: the second half
            mb["advantages"][8:] += torch.linspace(-3, 3, 8)
            mb["returns"][8:] *= -2.0
            mb["obs"][8:] += 0.5
        pop.grad_step(mb)
        return [p.grad.clone() for p in pop.params.values()], [p.detach().clone() for p in pop.params.values()]

    g0, p0 = grads_after_step(False)
    g1, p1 = grads_after_step(True)
    for a, b in zip(g0, g1):
        assert torch.equal(a[0], b[0])  # member 0: bit for bit
    assert any(not torch.equal(a[1], b[1]) for a, b in zip(g0, g1))  # member 1 saw its new data
    for a, b in zip(p0, p1):
        assert torch.equal(a[0], b[0])


def test_member_permutation_gives_each_member_its_own_rows():
    P, T, N, M = 3, 4, 2, 2
    perm = member_permutation(P, T * N, N, torch.device("cpu"), torch.Generator().manual_seed(0), num_minibatches=M)
    assert sorted(perm.tolist()) == list(range(P * T * N))  # every row once per epoch
    member_of_row = (perm % (P * N)) // N
    mb = T * N // M  # each minibatch of P*mb indices: mb of member 0, then mb of member 1, ...
    assert torch.equal(member_of_row, torch.arange(P).repeat_interleave(mb).repeat(M))
    # members draw different permutations of their own samples
    rows = perm.reshape(M, P, mb).transpose(0, 1).reshape(P, -1)
    local = lambda p: [((r // (P * N)) * N + r % N) for r in rows[p].tolist()]  # noqa: E731
    assert local(0) != local(1) and sorted(local(0)) == list(range(T * N))


def test_to_members_puts_each_members_rows_together():
    T, P, N = 3, 2, 2
    x = torch.arange(T * P * N).reshape(T, P * N)
    m = to_members(x, P)
    assert m.shape == (P, T * N)
    assert m[1].tolist() == [2, 3, 6, 7, 10, 11]


def test_population_episode_statistics_and_metrics_are_per_member(small_config):
    pop = Population(member_configs(small_config(num_steps=64), [1, 2, 3]))
    out = pop.train_iteration()
    for k in ("policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm", "explained_variance", "ep_count"):
        assert out[k].shape == (3,), k
    assert bool((out["ep_count"] > 0).all())  # 64 steps of CartPole with a random policy end episodes
    assert torch.equal(out["ep_count"].sum(), pop.rollout.dones.sum().float())
    # different seeds: different initial parameters and trajectories
    assert not torch.equal(pop.params["actor.0.weight"][0], pop.params["actor.0.weight"][1])


def test_population_trains_a_cnn_encoder(small_config):
    cfg = small_config(env_id="PixelQuadrant-v0", num_envs=2, num_steps=8, num_minibatches=2, total_timesteps=16, encoder="cnn")
    pop = Population(member_configs(cfg, [1, 2]))
    assert pop.params["encoder.convs.0.weight"].shape[0] == 2  # the conv trunk is stacked per member
    before = pop.params["encoder.convs.0.weight"].clone()
    out = pop.train_iteration()
    assert pop.encoder_kind == "cnn"
    assert out["policy_loss"].shape == (2,)
    assert not bool(out["nonfinite"].any())
    assert not torch.equal(before, pop.params["encoder.convs.0.weight"])


@pytest.mark.parametrize("flag, field", [("num_envs", "num_envs"), ("num_steps", "num_steps"), ("hidden_sizes", "hidden_sizes"),
                                         ("env_id", "env_id"), ("update_epochs", "update_epochs")])
def test_sweeping_a_shape_or_env_field_is_refused_naming_it(flag, field):
    with pytest.raises(ConfigError, match=f"--sweep {field}: changes the shapes or the env"):
        parse_sweep([f"{flag}=1,2"])


def test_members_that_differ_in_a_shape_field_are_refused(small_config):
    a, b = small_config(seed=1), small_config(seed=2, num_envs=8)
    with pytest.raises(ConfigError, match="--sweep num_envs"):
        Population([a, b])


def test_target_kl_stops_each_member_as_its_single_run_stops(small_config):
    # target_kl 1e-6 stops a member's update after its second minibatch (the first has ratio 1,
    # approx_kl 0); none never stops. Each member must match the single run with its seed and
    # target_kl: the same steps taken, the same moments, the same random streams afterwards.
    cfg = small_config(update_epochs=4, num_minibatches=4)
    members = member_configs(cfg, [3, 5], {"target_kl": [1e-6, None]})
    pop = Population(members)
    first = pop.train_iteration()
    pop.train_iteration()
    steps = []
    for i, member in enumerate(members):
        single = _params_after_single(member, iterations=2, steps=steps)
        got = pop.member_agent(i).state_dict()
        for k in single:
            torch.testing.assert_close(got[k], single[k], rtol=0, atol=1e-5, msg=f"member {i}: {k}")
    assert pop.optimizer.step_count.tolist() == steps  # the same Adam steps as each single run
    assert steps[0] < 32 and steps[1] < 32 and steps[2:] == [32.0, 32.0]  # 2 iterations x 16 minibatches unless stopped
    # a stopped member's loss terms average over the minibatches it ran: it ended on one above 1e-6
    assert bool((first["approx_kl"][:2] > 0).all())


def test_parse_seeds_and_sweep():
    assert parse_seeds("1-4") == [1, 2, 3, 4]
    assert parse_seeds("1,5,9") == [1, 5, 9]
    assert parse_seeds("1-2,7") == [1, 2, 7]
    for bad in ("4-1", "a", "1,1", "1-"):
        with pytest.raises(ConfigError, match="--seeds"):
            parse_seeds(bad)
    assert parse_sweep(["lr=1e-3,3e-4", "ent-coef=0,0.01"]) == {"lr": [1e-3, 3e-4], "ent_coef": [0.0, 0.01]}
    with pytest.raises(ConfigError, match="--sweep nope: not a config field"):
        parse_sweep(["nope=1"])


def test_sweep_values_that_print_alike_are_refused():
    # labels and member directories print 6 significant digits: gamma=0.9999995 would read as gamma=1
    with pytest.raises(ConfigError) as e:
        parse_sweep(["gamma=0.9999995,1"])
    assert str(e.value) == ("--sweep gamma: 0.9999995 and 1 print the same (gamma=1); give values that differ in 6 "
                            "significant digits")
    with pytest.raises(ConfigError, match=r"--sweep lr: 1e-3 and 0.0010000001 print the same \(lr=0.001\)"):
        parse_sweep(["lr=1e-3,0.0010000001"])
    assert parse_sweep(["gamma=0.999999,1", "target_kl=none,0.01"]) == {"gamma": [0.999999, 1.0], "target_kl": [None, 0.01]}


def test_per_setting_groups_members_by_their_values_not_their_labels(small_config):
    from proxima.population_run import _per_setting, _setting_of

    members = member_configs(small_config(), [1, 2], {"gamma": [0.9999995, 1.0], "lr": [1e-3]})
    groups = _per_setting(_setting_of(members), [10, 20, 30, 40])
    assert groups == [("gamma=0.9999995", [10, 20]), ("gamma=1.0", [30, 40])]  # alike at 6 digits: exact labels
    members = member_configs(small_config(), [1, 2], {"lr": [1e-3, 3e-4]})
    assert _per_setting(_setting_of(members), [1, 2, 3, 4]) == [("lr=0.001", [1, 2]), ("lr=0.0003", [3, 4])]
    assert _per_setting(_setting_of(member_configs(small_config(), [1, 2])), [1, 2]) == [("", [1, 2])]


def test_a_resume_refusal_names_the_runs_seeds_and_sweep_as_flags_that_resume_it():
    from proxima.population_run import check_same_members, seeds_spec, sweep_flags

    assert seeds_spec([1, 2, 3, 7]) == "1-3,7" and seeds_spec([1, 2]) == "1,2" and seeds_spec([5, 1]) == "5,1"
    assert sweep_flags({"lr": [1e-3, 3e-4], "target_kl": [None, 0.01]}) == "--sweep lr=0.001,0.0003 --sweep target_kl=none,0.01"
    check_same_members("R", None, None, [1, 2], {"lr": [1e-3]})  # proxima resume RUN: nothing to compare
    check_same_members("R", [1, 2], {"lr": [1e-3]}, [1, 2], {"lr": [1e-3]})
    with pytest.raises(ConfigError, match=r"^--seeds: R trains seeds 1-3, and no --seeds was given \(the config's one seed, 1\); "
                                          r"resume continues the same members: give --seeds 1-3$"):
        check_same_members("R", [1], {}, [1, 2, 3], {}, typed=("sweep",))
    with pytest.raises(ConfigError, match=r"^--sweep: R was trained with --sweep gamma=0.9999995, and no --sweep was given"):
        check_same_members("R", [1], {}, [1], {"gamma": [0.9999995]}, typed=("seeds",))


def test_member_configs_cross_settings_with_seeds(small_config):
    members = member_configs(small_config(), [1, 2], {"lr": [1e-3, 3e-4], "ent_coef": [0.0, 0.01]})
    assert len(members) == 8
    assert [(m.lr, m.ent_coef, m.seed) for m in members[:3]] == [(1e-3, 0.0, 1), (1e-3, 0.0, 2), (1e-3, 0.01, 1)]
    assert {f for f in PER_MEMBER_FIELDS} >= {"lr", "ent_coef"}
    pop = Population(members)
    assert pop.coef["lr"].tolist() == pytest.approx([1e-3] * 4 + [3e-4] * 4)
    assert dataclasses.asdict(members[0])["seed"] == 1


def test_a_members_whole_iteration_does_not_depend_on_another_members_settings(small_config):
    # member 0 identical, member 1 with every per-member field changed: after a full iteration
    # (rollout, GAE, update with per-member lr, clip, coefficients) member 0 is bit-identical
    cfg = small_config(seed=1)
    other = dict(lr=1e-2, ent_coef=0.2, clip_coef=0.3, vf_coef=0.1, gamma=0.9, gae_lambda=0.5, max_grad_norm=0.01,
                 target_kl=1e-6)
    runs = []
    for member1 in (small_config(seed=2), small_config(seed=2, **other)):
        pop = Population([cfg, member1])
        pop.train_iteration()
        runs.append(pop)
    a, b = (p.member_agent(0).state_dict() for p in runs)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert not torch.equal(runs[0].params["actor.0.weight"][1], runs[1].params["actor.0.weight"][1])


def test_population_cudagraphs_needs_a_cuda_device(small_config):
    with pytest.raises(ConfigError, match="--cudagraphs needs a CUDA device"):
        Population(member_configs(small_config(cudagraphs=True), [1, 2]))


def population_graph_states(pop: Population) -> dict:
    """graphs.part_states of a population's rollout, advantages and update (its ``_parts``, in that order)."""
    from proxima.graphs import PARTS, part_states

    return part_states(dict(zip(PARTS, pop._parts, strict=True)))


def test_population_graph_states_reads_the_three_parts(small_config, monkeypatch):
    # the helper the CUDA test asserts with, checked here so that a wrong name fails on the CPU: an
    # eager population's parts are 'eager'; built as --cudagraphs builds them (the CUDA-only check and
    # the graph pool left out), each is a Replay not captured yet
    from proxima.graphs import PARTS

    pop = Population(member_configs(small_config(), [1, 2]))
    assert population_graph_states(pop) == {"rollout": "eager", "advantages": "eager", "update": "eager"}
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: "pool")
    pop.cfg = dataclasses.replace(pop.cfg, cudagraphs=True)
    pop._build_parts()
    assert population_graph_states(pop) == dict.fromkeys(PARTS, "warm-up")
    pop._parts[1].graph = object()  # as a capture leaves it
    assert population_graph_states(pop)["advantages"] == "graph"
    pop.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("sweep", [None, {"target_kl": [1e-6, None]}], ids=["plain", "target_kl"])
def test_cuda_graphed_population_equals_eager(small_config, sweep):
    # run by benchmarks/gpu_session.sh (-m gpu): every part replayed as a CUDA graph, the same
    # random draws as eager (one generator per device on a GPU), parameters equal after 4 iterations
    from proxima.graphs import PARTS

    cfg = small_config(device="cuda", num_envs=8, num_steps=16)
    params = []
    for graphs in (False, True):
        torch.manual_seed(0)
        pop = Population(member_configs(dataclasses.replace(cfg, cudagraphs=graphs), [1, 2], sweep), device="cuda")
        for _ in range(4):
            out = pop.train_iteration()
        assert not bool(out["nonfinite"].any())
        # a failed capture runs that part eagerly, so equal parameters alone would not show a replay
        assert population_graph_states(pop) == dict.fromkeys(PARTS, "graph" if graphs else "eager")
        params.append({k: v.detach().cpu() for k, v in pop.params.items()})
        pop.close()
    for k in params[0]:
        torch.testing.assert_close(params[1][k], params[0][k], rtol=1e-4, atol=1e-5, msg=k)


@pytest.mark.parametrize("sweep", [None, {"target_kl": [1e-6, None]}], ids=["plain", "target_kl"])
def test_population_parts_are_capturable_on_cpu_as_far_as_a_cpu_can_tell(small_config, sweep):
    # what --cudagraphs needs of the parts a graph records: no tensors made from Python numbers, no
    # host reads (the CPU-only permutation skip of stopped members aside, which a GPU never takes),
    # and the same buffers every iteration
    from proxima.debug import forbid_host_sync, forbid_host_tensors

    pop = Population(member_configs(small_config(), [1, 2], sweep))
    pop.member_generators = None  # a GPU's layout: one stream for all members
    pop.env.member_generators = None
    pop.host_stop_check = False  # as under --cudagraphs: no host read of the active mask to end the update early
    pop.train_iteration()
    before = {k: v.data_ptr() for k, v in {**pop.metrics, "ev": pop.explained_variance, "next_obs": pop.next_obs,
                                           "lr": pop.lr_now, "step": pop.optimizer.step_count, **pop.params}.items()}
    with forbid_host_tensors(), forbid_host_sync("cpu"):
        for part in pop._parts:
            part()
    after = {k: v.data_ptr() for k, v in {**pop.metrics, "ev": pop.explained_variance, "next_obs": pop.next_obs,
                                          "lr": pop.lr_now, "step": pop.optimizer.step_count, **pop.params}.items()}
    assert before == after
    assert bool(pop.metrics["policy_loss"].isfinite().all())


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_members_evaluated_at_once_get_what_evaluating_each_alone_gives(small_config, env_id):
    from proxima import checkpoint as ckpt
    from proxima.evaluate import evaluate

    pop = Population(member_configs(small_config(env_id=env_id), [3, 5, 8]))
    for _ in range(2):
        pop.train_iteration()
    seeds = [1_000_003, 1_000_005, 1_000_008]
    together = pop.evaluate_members(4, seeds)
    assert together is not None and len(together) == 3
    for i, seed in enumerate(seeds):
        policy = ckpt.Policy(pop.member_agent(i), None, pop.configs[i].to_dict(), pop.env.single_observation_space,
                             pop.env.single_action_space, pop.device)
        alone = evaluate(policy, episodes=4, seed=seed, backend="native")
        assert together[i]["lengths"] == alone["lengths"]
        assert together[i]["returns"] == pytest.approx(alone["returns"], rel=1e-5)
        assert together[i]["mean_return"] == pytest.approx(alone["mean_return"], rel=1e-5)


def test_members_with_normalizers_equal_their_single_runs_and_resume_exactly(small_config):
    # --norm-obs/--norm-reward: one set of running statistics per member over its own rows, the
    # reward scaler's discounted return with each member's own gamma
    from proxima import checkpoint as ckpt
    from proxima.evaluate import evaluate

    cfg = small_config(env_id="Pendulum-v1", norm_obs=True, norm_reward=True)
    members = member_configs(cfg, [3, 5], {"gamma": [0.9, 0.99]})
    pop = Population(members)
    for _ in range(2):
        pop.train_iteration()
    for i, member in enumerate(members):
        single = _params_after_single(member, iterations=2)
        got = pop.member_agent(i).state_dict()
        for k in single:
            torch.testing.assert_close(got[k], single[k], rtol=0, atol=1e-5, msg=f"member {i}: {k}")
    # a checkpoint's state continues exactly as the population it came from
    state = pop.state_dict()
    other = Population(members)
    other.load_state_dict(state)
    pop.train_iteration()
    other.train_iteration()
    for k, v in pop.params.items():
        assert torch.equal(v, other.params[k]), k
    assert torch.equal(pop.obs_norm.rms.mean, other.obs_norm.rms.mean)
    assert torch.equal(pop.reward_scaler.rms.var, other.reward_scaler.rms.var)
    # evaluation at once uses each member's own frozen statistics, as evaluating it alone does
    seeds = [7, 9, 11, 13]  # one per member: 2 seeds x 2 gammas
    together = pop.evaluate_members(2, seeds)
    for i, seed in enumerate(seeds):
        policy = ckpt.Policy(pop.member_agent(i), pop.member_obs_normalizer(i), members[i].to_dict(),
                             pop.env.single_observation_space, pop.env.single_action_space, pop.device)
        assert together[i]["returns"] == pytest.approx(evaluate(policy, episodes=2, seed=seed, backend="native")["returns"], rel=1e-5)


def test_once_every_member_has_stopped_the_update_runs_no_more_minibatches(small_config):
    # target_kl 1e-6 stops the member after its second minibatch of 16: the other 14 must cost no
    # forward, backward or Adam call (a population of one then runs as fast as the single run,
    # which leaves its update); the member's weights stay the single run's
    cfg = small_config(seed=3, update_epochs=4, num_minibatches=4, target_kl=1e-6)
    pop = Population([cfg])
    calls = []
    step = pop.optimizer.step
    pop.optimizer.step = lambda *a: calls.append(1) or step(*a)
    pop.train_iteration()
    steps = []
    single = _params_after_single(cfg, iterations=1, steps=steps)
    assert len(calls) == pop.optimizer.step_count.item() == steps[0] == 2
    got = pop.member_agent(0).state_dict()
    for k in single:
        torch.testing.assert_close(got[k], single[k], rtol=0, atol=1e-6, msg=k)


def test_a_diverged_member_is_frozen_and_the_others_train_on_bit_identically(small_config):
    # member 1's lr overflows its first Adam step (lr / (1 - beta1) = inf): that step is not applied,
    # the member is frozen for good, and member 0 trains exactly as beside a healthy member 1
    runs, outs = [], []
    for lr1 in (1e-3, 1e38):
        pop = Population([small_config(seed=1, lr=2.5e-3), small_config(seed=2, lr=lr1)])
        initial = {k: v[1].detach().clone() for k, v in pop.params.items()}
        outs.append([pop.train_iteration()["nonfinite"].tolist() for _ in range(2)])
        runs.append(pop)
    healthy, diverged = runs
    for k, v in healthy.params.items():
        assert torch.equal(v[0], diverged.params[k][0]), k  # member 0: bit for bit
    assert outs == [[[False, False], [False, False]], [[False, True], [False, False]]]  # flagged once, in iteration 1
    assert diverged.diverged.tolist() == [False, True]
    for k, v in diverged.params.items():  # its weights never took the non-finite step: the initial ones, finite
        assert torch.equal(v[1], initial[k]), k
    assert diverged.optimizer.step_count.tolist() == [16.0, 0.0]
    # a checkpoint carries the frozen state
    other = Population([small_config(seed=1, lr=2.5e-3), small_config(seed=2, lr=1e38)])
    other.load_state_dict(diverged.state_dict())
    assert other.diverged.tolist() == [False, True]
