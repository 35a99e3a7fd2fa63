"""Review 33 (CPU fast paths and the agent): what the mutations that survived the kernels' own tests
would have broken. grad_cpu keeps autograd for an agent with an encoder or with an actor and critic
of different activations and names a wrong actions shape; mlp_cpu's kernel is not used for mixed
activations or a Linear without a bias; Adam refuses an out-of-range index or a multi-valued step
before changing anything and drops the moments of a parameter a loaded state lacks; the side thread
runs with its own intra-op thread count; the deterministic action is the mode; a zero uniform draw
does not rule its action out; the rollout's episode statistics count games and restart each
iteration."""

import re
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from proxima import agent as agent_module
from proxima import grad_cpu, mlp_cpu
from proxima.adam import Adam
from proxima.agent import Agent, _categorical_sample
from proxima.nets import MLP, mlp
from proxima.rollout import Rollout
from proxima.side_thread import SideThread

FLAT = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)


def _cfg():
    return SimpleNamespace(clip_coef=0.2, vf_coef=0.5, ent_coef=0.01, clip_vloss=True, norm_adv=True, vf_clip_coef=None)


# --- grad_cpu: what it does not cover keeps autograd ------------------------------------------------

@pytest.mark.parametrize("obs_space", [
    gym.spaces.Dict({"img": gym.spaces.Box(0, 255, (4, 4, 1), np.uint8), "v": gym.spaces.Box(-1, 1, (3,), np.float32)}),
    gym.spaces.Box(0, 255, (4, 4, 1), np.uint8),
], ids=["dict", "pixels"])
def test_an_agent_with_an_encoder_keeps_autograd(obs_space):
    """The fast path feeds the packed observation straight into the MLPs: an encoder (pixels scaled
    by 1/255, keys unpacked) would never run, and the gradients would be of other inputs."""
    torch.manual_seed(0)
    agent = Agent(obs_space, gym.spaces.Discrete(2), encoder="mlp")
    assert agent.encoder is not None
    assert grad_cpu.BlockGradients.for_agent(agent, _cfg()) is None


def test_an_actor_and_critic_of_different_activations_keep_autograd():
    """BlockGradients runs both MLPs with the actor's activation: a ReLU critic under a tanh actor
    would get tanh's value gradients."""
    torch.manual_seed(0)
    agent = Agent(FLAT, gym.spaces.Discrete(2))
    assert grad_cpu.BlockGradients.for_agent(agent, _cfg()) is not None  # the plain agent is covered
    agent.critic = mlp(4, [64, 64], 1, out_std=1.0, activation="relu")
    assert grad_cpu.BlockGradients.for_agent(agent, _cfg()) is None


@pytest.mark.parametrize("bad", ["short", "column"])
def test_a_wrong_actions_shape_is_named(bad):
    torch.manual_seed(0)
    agent = Agent(FLAT, gym.spaces.Discrete(2))
    b = 64
    obs = torch.randn(b, 4)
    with torch.no_grad():
        actions, logprobs, _, values = agent.get_action_and_value(obs)
    mb = {"obs": obs, "actions": actions, "logprobs": logprobs, "advantages": torch.randn(b),
          "values": values, "returns": values + 1.0}
    mb["actions"] = actions[:10] if bad == "short" else actions.unsqueeze(-1)
    shape = "(10,)" if bad == "short" else "(64, 1)"
    blocks = grad_cpu.BlockGradients.for_agent(agent, _cfg())
    with pytest.raises(ValueError, match=re.escape(f"actions has shape {shape}, expected (64,)")):
        blocks(mb)


# --- mlp_cpu: the kernel only for one activation and Linears with biases ----------------------------

def _kernel_vs_plain(net: MLP, rows_over: int = 100):
    """(net(x), nn.Sequential's) outputs and parameter gradients for a batch of more than one block
    (1,024-wide layers: 256-row blocks, so a few hundred rows reach the kernel cheaply)."""
    x = torch.randn(net.kernel_rows + rows_over, net[0].in_features, generator=torch.Generator().manual_seed(1))
    assert x.shape[0] > net.kernel_rows == 256
    results = []
    for forward in (net, lambda v: nn.Sequential.forward(net, v)):
        net.zero_grad(set_to_none=True)
        out = forward(x)
        (out * torch.linspace(-1, 2, out.numel()).reshape(out.shape)).sum().backward()
        results.append((out.detach(), [p.grad.clone() for p in net.parameters()]))
    return results


def _assert_same(kernel, plain):
    (out_k, grads_k), (out_p, grads_p) = kernel, plain
    torch.testing.assert_close(out_k, out_p, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads_k, grads_p):  # block sums against one matmul's: within rounding
        assert (a - b).norm() <= 1e-5 * b.norm() + 1e-12


def test_an_mlp_of_mixed_activations_computes_each_layer_s_own():
    """The kernel applies one activation everywhere: Tanh then ReLU would run as Tanh twice."""
    torch.manual_seed(2)
    net = MLP(nn.Linear(4, 1024), nn.Tanh(), nn.Linear(1024, 8), nn.ReLU(), nn.Linear(8, 2))
    assert mlp_cpu.plan(net) is None
    _assert_same(*_kernel_vs_plain(net))


def test_an_mlp_with_a_linear_without_bias_runs_as_the_plain_modules():
    torch.manual_seed(3)
    net = MLP(nn.Linear(4, 1024, bias=False), nn.Tanh(), nn.Linear(1024, 2))
    assert mlp_cpu.plan(net) is None
    _assert_same(*_kernel_vs_plain(net))


# --- Adam's load_state_dict -------------------------------------------------------------------------

def _trained_adam():
    g = torch.Generator().manual_seed(0)
    params = [nn.Parameter(torch.randn(*s, generator=g)) for s in ((8, 4), (8,), (2, 8))]
    opt = Adam(params, lr=torch.tensor(1e-2), eps=1e-5)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)
    opt.step()
    return params, opt


def _copy(sd):
    return {"state": {i: {k: v.clone() for k, v in s.items()} for i, s in sd["state"].items()},
            "param_groups": [dict(sd["param_groups"][0], lr=0.5, betas=(0.5, 0.5))]}


@pytest.mark.parametrize("mutate, message", [
    (lambda sd: sd["state"].update({3: sd["state"][0]}), r"parameter index 3 out of range 0\.\.2"),
    (lambda sd: sd["state"][1].update(step=torch.zeros(2)), r"optimizer state of parameter 1: step has 2 values, not 1"),
], ids=["index_past_the_end", "two_value_step"])
def test_a_state_that_does_not_fit_is_refused_before_anything_changes(mutate, message):
    """One past the last index (an IndexError without the check) and a two-value step (a reshape
    error once lr and betas were written): a ValueError that names it, the optimizer as it was."""
    params, opt = _trained_adam()
    before = {i: {k: v.clone() for k, v in opt.state[p].items()} for i, p in enumerate(params)}
    sd = _copy(opt.state_dict())
    for s in sd["state"].values():
        s["exp_avg"].add_(1.0)
    mutate(sd)
    with pytest.raises(ValueError, match=message):
        opt.load_state_dict(sd)
    assert float(opt.param_groups[0]["lr"]) == pytest.approx(1e-2) and opt.param_groups[0]["betas"] == (0.9, 0.999)
    for i, p in enumerate(params):
        for k, v in before[i].items():
            assert torch.equal(opt.state[p][k], v), (i, k)


def test_a_loaded_state_without_a_parameter_starts_it_fresh():
    """As torch.optim does: a parameter the state_dict has no entry for loses its moments and step
    count, so its next step is a first step."""
    params, opt = _trained_adam()
    sd = _copy(opt.state_dict())
    sd["param_groups"][0].update(lr=1e-2, betas=(0.9, 0.999))
    del sd["state"][1]
    opt.load_state_dict(sd)
    assert params[1] not in opt.state and params[0] in opt.state
    fresh_param = nn.Parameter(params[1].detach().clone())
    fresh = Adam([fresh_param], lr=torch.tensor(1e-2), eps=1e-5)
    grad = torch.linspace(-1, 1, params[1].numel())
    for p in params:
        p.grad = torch.ones_like(p)
    params[1].grad, fresh_param.grad = grad.clone(), grad.clone()
    opt.step()
    fresh.step()
    assert torch.equal(params[1], fresh_param)
    assert float(opt.state[params[1]]["step"]) == 1.0 and float(opt.state[params[0]]["step"]) == 2.0


# --- the side thread's intra-op threads -------------------------------------------------------------

def test_the_worker_runs_its_own_thread_count_not_the_callers():
    """--threads 2: the caller runs 2 intra-op threads, the worker must run 1 (a thread started
    without set_num_threads takes the process's last count, and the two would oversubscribe)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    side = SideThread(intra_op=1)
    try:
        assert side.submit(torch.get_num_threads).result() == 1
        assert torch.get_num_threads() == 2  # the caller's own count is left alone
    finally:
        side.close()
        torch.set_num_threads(before)


# --- the agent's actions ----------------------------------------------------------------------------

@pytest.mark.parametrize("space, bias, mode", [
    (gym.spaces.Discrete(5), [0.0, -1.0, 3.0, 0.5, 1.0], [2]),
    (gym.spaces.MultiDiscrete([3, 4]), [0.0, 2.0, -1.0, 1.0, 0.0, 5.0, 2.0], [1, 2]),
], ids=["discrete", "multidiscrete"])
@pytest.mark.parametrize("rows", [3, 4097], ids=["plain", "kernel"])
def test_the_deterministic_action_is_the_mode(space, bias, mode, rows):
    """Evaluation's action: the likeliest in every (sub-)space, not the least likely; on the plain
    modules and through mlp_cpu's (n, B)-laid-out last layer alike."""
    torch.manual_seed(0)
    agent = Agent(FLAT, space)
    with torch.no_grad():  # logits = the last bias whatever the observation
        agent.actor[-1].weight.zero_()
        agent.actor[-1].bias.copy_(torch.tensor(bias))
    obs = torch.randn(rows, 4)
    with torch.no_grad():
        action = agent.act(obs)
    expected = torch.tensor(mode).expand(rows, len(mode))
    assert torch.equal(action.reshape(rows, -1), expected)


def test_a_zero_uniform_draw_does_not_rule_its_action_out(monkeypatch):
    """rand_like can return exactly 0.0: log(-log 0) is inf, which would make that action lose
    whatever its logit. Clamped, an action 10 nats likelier than the other still wins its row, and a
    row of zeros (equal noise everywhere) takes the likeliest action."""
    noise = torch.tensor([[0.0, 0.5], [0.0, 0.0]])
    monkeypatch.setattr(agent_module, "_noise", lambda like, generators=None, normal=False: noise.clone())
    logits = torch.tensor([[10.0, 0.0], [0.0, 1.0]])
    assert _categorical_sample(logits).tolist() == [0, 1]


# --- the rollout's episode statistics ---------------------------------------------------------------

def test_episode_statistics_count_games_and_restart_each_iteration():
    """A done row with no length is a lost life (Atari while training), not a game; reset_stats
    starts every iteration's sums and count at zero, so the count does not pile up."""
    ro = Rollout(2, 3, (4,), (), torch.int64, "cpu")
    for _ in range(2):  # two iterations
        ro.reset_stats()
        ro.add_episode_stats(torch.tensor([5.0, 0.0, 0.0]), torch.tensor([10.0, 0.0, 0.0]),
                             torch.tensor([True, True, False]))
        ro.add_episode_stats(torch.tensor([0.0, 0.0, 3.0]), torch.tensor([0.0, 0.0, 4.0]),
                             torch.tensor([False, True, True]))
        assert (float(ro.ep_count), float(ro.ep_return_sum), float(ro.ep_length_sum)) == (2.0, 8.0, 14.0)
    ro.reset_stats()
    assert (float(ro.ep_count), float(ro.ep_return_sum), float(ro.ep_length_sum)) == (0.0, 0.0, 0.0)
