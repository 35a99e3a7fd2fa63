"""The fast paths' behaviours that no other test pinned (review 31's mutation run): the CPU MLP
kernel with non-zero biases (layer_init zeroes them, so the kernel tests never saw a bias) and with
frozen parameters, bench's steps per call, Line.stat and paired_batches, Adam's loaded betas/eps and
its skipping of gradient-less parameters, side_thread.MIN_ROWS, and hostmem's mallopt calls."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from proxima import adam, bench, hostmem, mlp_cpu, side_thread, tanh_cpu
from proxima.nets import mlp
from tests.unit.test_mlp_cpu import assert_kernel_matches_plain, plain

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ 1, 2. mlp_cpu with non-zero biases
@pytest.mark.parametrize("mode", tanh_cpu.MODES)
def test_the_kernel_adds_every_layer_s_bias_in_every_tanh_mode(monkeypatch, mode):
    """Biases as after some training: the last layer's is added to W h^T (``o_t.add_(bias_col)``),
    and in sigmoid MODE the hidden layers' are doubled with their weights (``folded``); a zero bias
    hides either being dropped."""
    monkeypatch.setattr(tanh_cpu, "MODE", mode)
    torch.manual_seed(7)
    net = mlp(4, [64, 64], 2, out_std=1.0)
    for layer in net:
        if isinstance(layer, nn.Linear):
            nn.init.uniform_(layer.bias, -0.5, 0.5)
    rows = mlp_cpu.block_rows([64, 64, 2])
    x = torch.randn(2 * rows + 808, 4)  # > 4,096 rows: the kernel, folded (>= FOLD_MIN_ROWS), a partial block
    assert rows == 4096 and x.shape[0] > net.kernel_rows and x.shape[0] >= mlp_cpu.FOLD_MIN_ROWS
    assert type(net(x).grad_fn).__name__ == "_MLPFunctionBackward"
    assert_kernel_matches_plain(net, x)
    with torch.no_grad():  # acting: the forward without kept activations
        torch.testing.assert_close(net(x), plain(net, x), rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ 8. mlp_cpu, frozen parameters
def test_frozen_parameters_still_give_the_input_its_gradient():
    """An input that needs a gradient (an encoder's features) through a frozen MLP: the kernel's
    autograd path, not its no-grad forward, and the input gradient autograd's plain modules give."""
    torch.manual_seed(8)
    net = mlp(16, [64, 64], 1, out_std=1.0).requires_grad_(False)
    x1 = torch.randn(mlp_cpu.block_rows([64, 64, 1]) + 904, 16, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    y = net(x1)
    assert type(y.grad_fn).__name__ == "_MLPFunctionBackward"
    y.squeeze(-1).pow(2).sum().backward()
    plain(net, x2).squeeze(-1).pow(2).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-6)
    assert all(p.grad is None for p in net.parameters())


# ------------------------------------------------------------------ 3. bench_line's steps per call
def test_bench_line_counts_env_steps_per_call_of_each_measure(monkeypatch):
    """env: one step of every env; rollout and train: num_steps x num_envs (a whole batch)."""
    calls = {}

    def fake_rounds(parts, seconds, repeats, device, durations=None):
        [(fn, steps_per_call)] = parts  # one backend: nothing to alternate with
        calls[fn.__name__] = steps_per_call
        durations[0].append(1.0)
        return [[float(steps_per_call)]]

    monkeypatch.setattr(bench, "measure_rounds", fake_rounds)
    args = SimpleNamespace(env_id="CartPole-v1", preset="fast", device="cpu", compile=None, cudagraphs=None,
                           amp=None, vector=None, num_steps=8, threads=1, seconds=0.01, repeats=1, train_only=False)
    line, cfg, _ = bench.bench_line(args, "native", 12)
    assert (cfg.num_envs, cfg.num_steps) == (12, 8)
    assert calls == {"env_step": 12, "rollout": 96, "train": 96}
    assert line.samples == {"env": [12.0], "rollout": [96.0], "train": [96.0]}


# ------------------------------------------------------------------ 4. Line.stat
def test_line_stat_is_median_min_max():
    line = bench.Line("native", 4, samples={"train": [1, 2, 9]})
    assert line.stat("train") == (2, 1, 9)
    assert line.stat("env") == (None, None, None)


# ------------------------------------------------------------------ 5. paired_batches
def test_a_big_rollout_batch_split_into_small_minibatches_is_not_paired():
    """1,024 envs x 4 steps = 4,096 rows, but 4 minibatches of 1,024 and a rollout of 1,024 rows:
    no batch reaches MIN_ROWS, so no batch runs actor and critic side by side."""
    assert side_thread.MIN_ROWS == 2048
    cfg = SimpleNamespace(num_envs=1024, num_steps=4, num_minibatches=4)
    assert bench.paired_batches(cfg, True) is False
    assert bench.paired_batches(SimpleNamespace(num_envs=1024, num_steps=4, num_minibatches=2), True) is True
    assert bench.paired_batches(SimpleNamespace(num_envs=2048, num_steps=1, num_minibatches=4), True) is True
    assert bench.paired_batches(SimpleNamespace(num_envs=4096, num_steps=4, num_minibatches=1), False) is False


# ------------------------------------------------------------------ 6, 7. adam
def test_load_state_dict_takes_the_saved_betas_and_eps():
    """A torch.optim.Adam checkpoint with other betas and eps: loaded into the param group, and the
    next step is torch's fused step with them, bit for bit."""
    torch.manual_seed(9)
    ref = nn.Parameter(torch.randn(5, 3))
    theirs = torch.optim.Adam([ref], lr=1e-2, betas=(0.8, 0.99), eps=1e-5, fused=True)
    for _ in range(2):
        ref.grad = torch.randn(5, 3)
        theirs.step()
    mine_p = nn.Parameter(ref.detach().clone())
    mine = adam.Adam([mine_p], lr=torch.tensor(1e-3))
    mine.load_state_dict(theirs.state_dict())
    group = mine.param_groups[0]
    assert group["betas"] == (0.8, 0.99) and group["eps"] == 1e-5 and group["lr"].item() == pytest.approx(1e-2)
    g = torch.randn(5, 3)
    ref.grad, mine_p.grad = g.clone(), g.clone()
    theirs.step()
    mine.step()
    assert torch.equal(mine_p, ref)


def test_a_parameter_without_a_gradient_is_left_alone():
    torch.manual_seed(10)
    a, b = nn.Parameter(torch.randn(4)), nn.Parameter(torch.randn(3))
    b_before = b.detach().clone()
    opt = adam.Adam([a, b], lr=torch.tensor(1e-2))
    a.grad = torch.randn(4)
    a_before = a.detach().clone()
    opt.step()
    assert torch.equal(b, b_before) and b.grad is None
    assert b not in opt.state and list(opt.state_dict()["state"]) == [0]
    assert not torch.equal(a, a_before) and opt.state[a]["step"].item() == 1


# ------------------------------------------------------------------ 9. side_thread.MIN_ROWS
def test_min_rows_is_the_2048_the_docs_and_bench_quote():
    assert side_thread.MIN_ROWS == 2048
    assert "2,048 rows (`side_thread.MIN_ROWS`)" in (ROOT / "docs" / "performance.md").read_text()
    import argparse

    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    assert "some batch of 2,048+ rows" in " ".join(p.format_help().split())


# ------------------------------------------------------------------ 10. hostmem's mallopt calls
def test_mallopt_parameters_are_glibc_s():
    assert (hostmem.M_MMAP_THRESHOLD, hostmem.M_TRIM_THRESHOLD) == (-3, -1)
    header = Path("/usr/include/malloc.h")
    if header.exists():
        defines = dict(re.findall(r"#\s*define\s+(M_\w+)\s+(-?\d+)", header.read_text()))
        assert int(defines["M_MMAP_THRESHOLD"]) == hostmem.M_MMAP_THRESHOLD
        assert int(defines["M_TRIM_THRESHOLD"]) == hostmem.M_TRIM_THRESHOLD


def test_keep_freed_memory_asks_glibc_for_a_1_gib_mmap_threshold_first(monkeypatch):
    calls = []

    class Mallopt:
        argtypes = restype = None

        def __call__(self, param, value):
            calls.append((param, value))
            return 1

    libc = SimpleNamespace(mallopt=Mallopt(), gnu_get_libc_version=lambda: b"2.39")
    fake_ctypes = SimpleNamespace(CDLL=lambda name: libc, c_int=hostmem.ctypes.c_int,
                                  util=SimpleNamespace(find_library=lambda name: "libc.so.6"))
    monkeypatch.setattr(hostmem, "ctypes", fake_ctypes)
    monkeypatch.setattr(hostmem, "_applied", False)
    assert hostmem.keep_freed_memory() is True
    assert calls == [(-3, 1 << 30), (-1, 1 << 30)]
