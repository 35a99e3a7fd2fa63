"""The CPU row-block MLP kernel (proxima/mlp_cpu.py, nets.MLP) computes what the plain modules do."""

import gymnasium as gym
import pytest
import torch
from torch import nn

from proxima import mlp_cpu
from proxima.agent import Agent
from proxima.nets import MLP, StackedLinear, mlp


def plain(net: MLP, x: torch.Tensor) -> torch.Tensor:
    """The same modules run one by one (what autograd does without the kernel)."""
    return nn.Sequential.forward(net, x)


def assert_sums_close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-5) -> None:
    """a equals b within the rounding of sums over thousands of rows added in another order: as a
    whole (Frobenius norm of a - b within ``rtol`` of b's), and each element within 10 x rtol of b's
    largest. An element that is a near-cancelling sum can be off by more than rtol of itself (2e-4
    seen on AMD's MKL); a missing block, a wrong sign or a wrong activation is off by far more."""
    assert a.shape == b.shape
    scale = b.abs().max().item()
    assert (a - b).norm().item() <= rtol * b.norm().item() + 1e-12, f"{(a - b).norm().item() / b.norm().item():.2e}"
    torch.testing.assert_close(a, b, rtol=0, atol=10 * rtol * scale + 1e-12)


def assert_kernel_matches_plain(net, x):
    """The kernel's output and parameter gradients equal the plain modules' within float rounding."""
    out_k, g_k = grads_of(net, x, lambda n, v: n(v))
    out_p, g_p = grads_of(net, x, plain)
    assert out_k.shape == out_p.shape
    torch.testing.assert_close(out_k, out_p, rtol=1e-6, atol=1e-6)
    for a, b in zip(g_k, g_p):  # sums over blocks against one matmul's sum
        assert_sums_close(a, b)


def grads_of(net, x, fn, weight=None):
    net.zero_grad(set_to_none=True)
    out = fn(net, x)
    # a non-uniform upstream gradient, and a (B, 1) -> (B,) squeeze as the critic does
    w = torch.linspace(-1, 2, out.numel()).reshape(out.shape) if weight is None else weight
    (out * w).sum().backward()
    return out.detach(), [p.grad.clone() for p in net.parameters()]


@pytest.mark.parametrize("activation,out_dim", [("tanh", 2), ("tanh", 1), ("relu", 3)])
def test_one_block_runs_autograd_s_ops(activation, out_dim, unflipped):
    """On one block the kernel's backward and its hidden layers are autograd's ops: the gradients
    are bit-identical (the first layer's weight gradient as autograd computes it: ``unflipped``);
    the last layer, computed as W h^T (mlp_cpu._forward_blocks), agrees within rounding."""
    torch.manual_seed(0)
    net = mlp(4, [64, 64], out_dim, out_std=0.01, activation=activation)
    x = torch.randn(mlp_cpu.block_rows([64, 64, out_dim]), 4)  # exactly one block
    out_k, g_k = grads_of(net, x, lambda n, v: mlp_cpu.mlp_forward(v, *mlp_cpu.plan(n)))
    out_p, g_p = grads_of(net, x, plain)
    torch.testing.assert_close(out_k, out_p, rtol=1e-6, atol=1e-7)
    for a, b in zip(g_k, g_p):
        assert torch.equal(a, b)


def test_the_agent_runs_the_kernel_for_batches_of_more_than_one_block():
    agent = Agent(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    rows = mlp_cpu.block_rows([64, 64, 2])
    big, small = torch.randn(rows + 1, 4), torch.randn(rows, 4)
    assert type(agent.critic(big).grad_fn).__name__ == "_MLPFunctionBackward"
    assert type(agent.actor(big).grad_fn).__name__ == "_MLPFunctionBackward"
    # one block or less (every preset's minibatch): the plain modules, autograd's own nodes
    assert type(agent.actor(small).grad_fn).__name__ == "AddmmBackward0"


def test_the_first_layer_s_weight_gradient_is_inp_t_g():
    """mlp_cpu.flipped: a layer with fewer inputs than outputs (4 -> 64) gets its weight gradient
    as (inp^T g)^T, exactly, from the gradient g autograd has at that layer's output; autograd's
    g^T inp agrees within rounding (bit for bit on Intel's MKL, not on AMD's)."""
    torch.manual_seed(6)
    net = mlp(4, [64, 64], 2, out_std=0.01)
    assert mlp_cpu.flipped(net[0].weight) and not mlp_cpu.flipped(net[2].weight)
    x = torch.randn(mlp_cpu.block_rows([64, 64, 2]), 4)  # one block: g is autograd's, bit for bit
    w = torch.linspace(-1, 2, x.shape[0] * 2).reshape(-1, 2)
    h0 = net[0](x)
    h0.retain_grad()
    (nn.Sequential.forward(net[1:], h0) * w).sum().backward()
    autograd_w0 = net[0].weight.grad.clone()
    _, g_k = grads_of(net, x, lambda n, v: mlp_cpu.mlp_forward(v, *mlp_cpu.plan(n)), weight=w)
    assert torch.equal(g_k[0], (x.t() @ h0.grad).t())
    assert_sums_close(g_k[0], autograd_w0)


ROWS = mlp_cpu.block_rows([64, 32, 3])


@pytest.mark.parametrize("batch", [2 * ROWS + 808, ROWS + 1])
def test_several_blocks_equal_the_plain_modules_within_rounding(batch):
    torch.manual_seed(1)
    net = mlp(8, [64, 32], 3, out_std=1.0)
    x = torch.randn(batch, 8)
    assert batch > mlp_cpu.block_rows([64, 32, 3])  # a partial last block too
    assert_kernel_matches_plain(net, x)


def test_input_gradient_when_the_input_needs_one():
    torch.manual_seed(2)
    net = mlp(16, [64, 64], 1, out_std=1.0)
    x1 = torch.randn(mlp_cpu.block_rows([64, 64, 1]) + 904, 16, requires_grad=True)  # e.g. an encoder's features
    x2 = x1.detach().clone().requires_grad_(True)
    y = net(x1)
    assert type(y.grad_fn).__name__ == "_MLPFunctionBackward"
    y.squeeze(-1).pow(2).sum().backward()  # squeeze: a non-contiguous upstream gradient
    gk = x1.grad.clone()
    plain(net, x2).squeeze(-1).pow(2).sum().backward()
    torch.testing.assert_close(gk, x2.grad, rtol=1e-5, atol=1e-6)


def test_a_linear_head_without_hidden_layers():
    torch.manual_seed(3)
    net = mlp(32, [], 5, out_std=0.01)  # the CNN agent's heads
    x = torch.randn(mlp_cpu.block_rows([5]) + 100, 32, requires_grad=True)
    assert type(net(x).grad_fn).__name__ == "_MLPFunctionBackward"
    assert_kernel_matches_plain(net, x)


def test_no_grad_forward_equals_the_plain_modules(monkeypatch):
    torch.manual_seed(4)
    net = mlp(4, [64, 64], 2, out_std=0.01)
    x = torch.randn(mlp_cpu.block_rows([64, 64, 2]) * 2 + 100, 4)
    calls, real = [], mlp_cpu._forward_blocks
    monkeypatch.setattr(mlp_cpu, "_forward_blocks", lambda *a, **k: calls.append(a[0].shape[0]) or real(*a, **k))
    with torch.no_grad():
        out = net(x)
    assert calls == [x.shape[0]]  # the kernel's forward, not the plain modules'
    assert not out.requires_grad
    torch.testing.assert_close(out, plain(net, x).detach(), rtol=1e-6, atol=1e-7)


def test_what_the_kernel_does_not_handle_runs_the_plain_modules():
    torch.manual_seed(5)
    net = mlp(4, [64], 2, out_std=1.0)
    x = torch.randn(mlp_cpu.block_rows([64, 2]) * 2, 4)  # large enough for the kernel
    # vmap (a population of encoder agents): functorch-wrapped inputs take the plain path
    xs = torch.randn(3, x.shape[0], 4)
    torch.testing.assert_close(torch.func.vmap(net)(xs), torch.stack([plain(net, v) for v in xs]))
    # torch.func.grad: the same
    g = torch.func.grad(lambda v: net(v).sum())(x)
    x2 = x.clone().requires_grad_(True)
    plain(net, x2).sum().backward()
    torch.testing.assert_close(g, x2.grad)
    # autocast: the plain modules, the hidden layers in bfloat16 as autocast asks, the last in float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, hidden = net(x), net[1](net[0](x))
    assert hidden.dtype == torch.bfloat16 and out.dtype == torch.float32
    torch.testing.assert_close(out, net[2](hidden.float()))
    # 3-D inputs: plain
    assert net(torch.randn(2, 5, 4)).shape == (2, 5, 2)
    assert not mlp_cpu.eligible(x.to("meta"), [net[0]])
    # a population's stacked layers are not plain Linears: no plan
    stacked = mlp(4, [8], 2, out_std=1.0)
    stacked[0] = StackedLinear([nn.Linear(4, 8), nn.Linear(4, 8)])
    assert mlp_cpu.plan(stacked) is None
    assert stacked(torch.randn(2, 10, 4)).shape == (2, 10, 2)
