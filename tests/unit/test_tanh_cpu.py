"""tanh_cpu: numpy's tanh (or 2 sigmoid(2x) - 1) where MKL's tanh is slow (CPUs not Intel's),
tanh's derivative, the same function on every path (plain modules, the row-block kernel,
torch.func), and the choice."""

import numpy as np
import pytest
import torch
from torch import nn

from proxima import mlp_cpu, tanh_cpu
from proxima.config import ConfigError
from proxima.nets import mlp
import warm_python


@pytest.fixture
def sigmoid_mode(monkeypatch):
    monkeypatch.setattr(tanh_cpu, "MODE", "sigmoid")


@pytest.fixture
def numpy_mode(monkeypatch):
    monkeypatch.setattr(tanh_cpu, "MODE", "numpy")


@pytest.mark.parametrize("env, mkl, vendor, target, mode", [
    (None, True, "AuthenticAMD", "X86_V4", "numpy"),  # MKL's VML on AMD: the slow tanh; numpy's AVX-512 one is fast
    (None, True, "AuthenticAMD", "AVX512_SKX", "numpy"),  # numpy < 2.3 names its targets by feature
    (None, True, "HygonGenuine", "X86_V4", "numpy"),
    # numpy's AVX2 tanh (an EPYC without AVX-512) is 2-2.5x slower than the sigmoid form: that, not numpy
    (None, True, "AuthenticAMD", "X86_V3", "sigmoid"),
    (None, True, "AuthenticAMD", "AVX2", "sigmoid"),
    (None, True, "AuthenticAMD", None, "sigmoid"),      # numpy cannot say: the form that is never the slow one
    (None, True, "GenuineIntel", "X86_V4", "torch"),
    (None, False, "AuthenticAMD", "X86_V4", "torch"),   # no MKL (e.g. ARM builds): torch's own vectorized tanh
    (None, True, "", "X86_V4", "torch"),                # vendor unknown: keep torch's
    ("torch", True, "AuthenticAMD", "X86_V4", "torch"),
    ("sigmoid", False, "GenuineIntel", None, "sigmoid"),
    ("numpy", True, "GenuineIntel", "X86_V3", "numpy"),
])
def test_the_mode_by_mkl_vendor_numpy_target_and_override(env, mkl, vendor, target, mode):
    assert tanh_cpu.choose_mode(env, mkl, vendor, target) == mode


def test_numpy_names_the_target_its_float32_tanh_runs(monkeypatch):
    import numpy as np

    target = tanh_cpu.numpy_tanh_target()
    if int(np.__version__.split(".")[0]) >= 2:  # numpy.lib.introspect can say (numpy 1.x: by its CPU features)
        info = np.lib.introspect.opt_func_info("^tanh$", "float32")["tanh"]["ff"]
        assert target is not None and target in info["available"].replace("(", " ").replace(")", " ").split()
    # a numpy built with AVX-512 as its baseline names it "baseline(X86_V4)": read as X86_V4, so numpy's tanh
    monkeypatch.setattr(np.lib.introspect, "opt_func_info",
                        lambda *a, **k: {"tanh": {"ff": {"current": "baseline(X86_V4)", "available": "baseline(X86_V4)"}}})
    assert tanh_cpu.numpy_tanh_target() == "X86_V4"
    assert tanh_cpu.choose_mode(None, True, "AuthenticAMD", tanh_cpu.numpy_tanh_target()) == "numpy"


def test_a_bad_override_names_the_variable():
    with pytest.raises(ConfigError, match="PROXIMA_CPU_TANH='fast': must be one of torch, sigmoid, numpy"):
        tanh_cpu.choose_mode("fast", True, "AuthenticAMD")


def test_sigmoid_form_is_tanh_within_float_rounding():
    x = torch.cat([torch.linspace(-12, 12, 200_001), torch.tensor([0.0, 1e-30, -1e-8, 40.0, -40.0, 1e4])])
    y = tanh_cpu.sigmoid_tanh(x)
    err = (y.double() - torch.tanh(x.double())).abs()
    assert err.max().item() < 3e-7
    assert y[-3:].tolist() == [1.0, -1.0, 1.0]  # saturates exactly, no overshoot
    assert y.abs().max().item() <= 1.0
    z = x.clone()
    assert torch.equal(tanh_cpu.sigmoid_tanh_(z), y)  # the in-place form: the same ops, the same bits


def test_numpy_tanh_is_tanh_within_float_rounding_relative_to_its_value():
    # relative error, down to tiny inputs where the sigmoid form rounds to 0
    mag = torch.logspace(-30, 1.2, 200_001)
    x = torch.cat([mag, -mag, torch.tensor([0.0, -0.0, 40.0, -40.0, 1e4, float("inf"), -float("inf"), float("nan")])])
    with np.errstate(all="raise"):  # no floating-point warnings on any of these
        y = tanh_cpu.numpy_tanh(x)
    ref = torch.tanh(x[:-1].double())
    finite = ref != 0
    rel = ((y[:-1].double() - ref)[finite] / ref[finite]).abs()
    assert rel.max().item() < 4e-7  # ~3 float32 ulps, room for numpy's other SIMD targets; 1.1e-7 measured on AVX-512
    assert y[-8:-1].tolist() == [0.0, -0.0, 1.0, -1.0, 1.0, 1.0, -1.0] and torch.isnan(y[-1])
    assert torch.signbit(y[-7])  # tanh(-0) = -0
    assert y[:-1].abs().max().item() <= 1.0
    assert torch.equal(tanh_cpu.sigmoid_tanh(mag[:10]), torch.zeros(10))  # why not the sigmoid form here
    # in place, on a strided view: the same bits, the rest of the tensor untouched
    z = torch.randn(300, 64, dtype=torch.float64) * 3
    want = tanh_cpu.numpy_tanh(z[:, ::2])
    before = z.clone()
    tanh_cpu.numpy_tanh_(z[:, ::2])
    assert torch.equal(z[:, ::2], want) and torch.equal(z[:, 1::2], before[:, 1::2])


def test_numpy_module_forward_backward_and_fallbacks(numpy_mode):
    x = torch.randn(300, 64, dtype=torch.float64, requires_grad=True)
    y = tanh_cpu.Tanh()(x)
    assert torch.equal(y, tanh_cpu.numpy_tanh(x.detach())) and y.requires_grad
    g = torch.randn_like(y)
    y.backward(g)
    assert torch.equal(x.grad, torch.ops.aten.tanh_backward(g, y.detach()))
    assert torch.autograd.gradcheck(tanh_cpu.Tanh(), (torch.randn(5, 3, dtype=torch.float64, requires_grad=True),))
    with torch.no_grad():
        assert torch.equal(tanh_cpu.Tanh()(x), tanh_cpu.numpy_tanh(x.detach()))
    with torch.inference_mode():
        v = torch.randn(4, 64)
        assert torch.equal(tanh_cpu.Tanh()(v), tanh_cpu.numpy_tanh(v))
    # no numpy view of a transformed tensor: torch.tanh there, tanh's own derivative
    xs = torch.randn(4, 7, 3, dtype=torch.float64)
    assert torch.equal(torch.func.vmap(tanh_cpu.Tanh())(xs), torch.tanh(xs))
    grad = torch.func.grad(lambda v: tanh_cpu.Tanh()(v).sum())(xs[0])
    assert torch.allclose(grad, 1 - torch.tanh(xs[0]) ** 2, rtol=0, atol=1e-12)
    h = torch.tensor([1e-3, -5e-4, 0.5], dtype=torch.bfloat16)
    assert torch.equal(tanh_cpu.Tanh()(h), torch.tanh(h))


def test_module_forward_and_backward_are_tanh_s(sigmoid_mode):
    x = torch.randn(300, 64, dtype=torch.float64, requires_grad=True)
    y = tanh_cpu.Tanh()(x)
    assert torch.equal(y, tanh_cpu.sigmoid_tanh(x.detach()))
    g = torch.randn_like(y)
    y.backward(g)
    # tanh's derivative from the output, g (1 - y^2), not the derivative of the sigmoid ops
    assert torch.equal(x.grad, torch.ops.aten.tanh_backward(g, y.detach()))
    assert torch.allclose(x.grad, g * (1 - y.detach() ** 2), rtol=0, atol=1e-15)
    assert torch.autograd.gradcheck(tanh_cpu.Tanh(), (torch.randn(5, 3, dtype=torch.float64, requires_grad=True),))


def test_module_under_torch_func(sigmoid_mode):
    act = tanh_cpu.Tanh()
    x = torch.randn(4, 7, 3, dtype=torch.float64)
    assert torch.equal(torch.func.vmap(act)(x), tanh_cpu.sigmoid_tanh(x))
    grad = torch.func.grad(lambda v: act(v).sum())(x[0])
    assert torch.allclose(grad, 1 - tanh_cpu.sigmoid_tanh(x[0]) ** 2, rtol=0, atol=1e-12)


def test_half_precision_keeps_torch_tanh(sigmoid_mode):
    # in bfloat16, 2 sigmoid(2x) - 1 rounds every |x| < 0.002 to 0
    x = torch.tensor([1e-3, -5e-4, 0.5], dtype=torch.bfloat16)
    assert torch.equal(tanh_cpu.Tanh()(x), torch.tanh(x))


@pytest.mark.parametrize("mode", tanh_cpu.MODES)
def test_kernel_and_plain_modules_compute_one_function(monkeypatch, mode):
    # the row-block kernel (more than one block) and the plain modules (one block) run the same
    # activation, so acting and the update agree whatever the mode
    monkeypatch.setattr(tanh_cpu, "MODE", mode)
    torch.manual_seed(0)
    net = mlp(4, [64, 64], 2, out_std=1.0)
    assert [type(m) for m in net][1::2] == [tanh_cpu.Tanh, tanh_cpu.Tanh]
    with torch.no_grad():  # nonzero biases: the kernel doubles them with the weights (mlp_cpu.folded)
        for m in net[0::2]:
            m.bias.normal_(0.0, 0.1)
    x = torch.randn(5000, 4)
    with torch.no_grad():
        kernel = net(x)
        plain = nn.Sequential.forward(net, x)
        # the hidden layers bit for bit (mm + bias in place are addmm's bits; the last layer's
        # W h^T is not, so the outputs agree within rounding): a kernel computing the other
        # function would differ here by up to 1.8e-7, which the outputs' tolerance would not see
        linears, act = mlp_cpu.plan(net)
        outs = mlp_cpu._forward_blocks(x, [l.weight for l in linears], [l.bias for l in linears], act,
                                       mlp_cpu.block_rows([64, 64, 2]), keep_hidden=True)
        assert torch.equal(outs[0], nn.Sequential.forward(net[:2], x))
        assert torch.equal(outs[1], nn.Sequential.forward(net[:4], x))
    assert torch.allclose(kernel, plain, rtol=0, atol=1e-6)
    hidden = nn.Sequential.forward(net[:2], x[:7])
    want = {"sigmoid": tanh_cpu.sigmoid_tanh, "numpy": tanh_cpu.numpy_tanh, "torch": torch.tanh}[mode](net[0](x[:7]))
    assert torch.equal(hidden, want)
    assert mlp_cpu.ACTIVATIONS[tanh_cpu.Tanh][0] is tanh_cpu.tanh_


def test_plain_nn_tanh_stays_torch_tanh_in_the_kernel(sigmoid_mode):
    # a user's nn.Tanh network keeps torch.tanh's numbers, kernel or not
    h = torch.randn(2048, 64)
    assert torch.equal(mlp_cpu.ACTIVATIONS[nn.Tanh][0](h.clone()), torch.tanh(h))


def test_the_cli_refuses_a_bad_override_in_one_line(tmp_path):
    import os
    import sys

    env = dict(os.environ, PROXIMA_CPU_TANH="fast")
    proc = warm_python.run([sys.executable, "-m", "proxima", "train", "CartPole-v1", "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "proxima train: error: PROXIMA_CPU_TANH='fast': must be one of torch, sigmoid, numpy (or unset: chosen by CPU)"]
    assert not (tmp_path / "run").exists()
    # doctor reports it instead of refusing to run
    proc = warm_python.run([sys.executable, "-m", "proxima", "doctor"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "  - PROXIMA_CPU_TANH='fast': must be one of" in proc.stdout


def test_doctor_and_the_tables_name_the_simd_that_decides_the_mode():
    # two "AMD EPYC" machines, one with AVX-512 and one without, choose different modes: the record must tell them apart
    from proxima.cpuinfo import simd_text
    from proxima.doctor import collect

    text = simd_text()
    assert text == f"torch {torch.backends.cpu.get_cpu_capability()}, numpy tanh {tanh_cpu.numpy_tanh_target()}"
    assert collect()["cpu_simd"] == text
