"""tanh on the CPU where ``torch.tanh`` is slow: MKL's vector math on a CPU that is not Intel's.

Why: on the CPU ``torch.tanh`` calls MKL's vector math (VML) when torch is built with MKL, as the
x86 wheels are, and MKL picks its fast code paths by CPU vendor. On an AMD EPYC (Zen 4, AVX-512) a
2,048 x 64 block takes 340-460 us, against 54 us on the Intel Xeon this project was tuned on (one-off
micro-timings; docs/performance.md, "A second CPU"). The hidden tanh of the actor and critic then
took ~40% of a 4,096-env CartPole iteration. Where that is the case, tanh runs as **numpy's own
vectorized tanh** on the tensor's memory (``np.tanh(a, out=a)`` on ``x.numpy()``, no copy; numpy
releases the GIL inside it, as torch's ops do): a 4,096 x 64 block in 126 against 155 us for the
form before it, 1.25x (benchmarks/results/cpu-parts.md; MKL's ~680, a micro-timing), within 1.1e-7
relative of tanh (float32's rounding is 6e-8) down to tiny inputs, saturating exactly, NaN kept. Its derivative is tanh's, ``1 - y^2`` from
the output, by the same ``tanh_backward`` autograd uses.

The form before it (2026-12-01 to 12-02) stays as the mode "sigmoid": ``2 sigmoid(2x) - 1``
(torch's own vectorized sigmoid), within 1.8e-7 absolute of tanh but not relative (it rounds
|x| < 4.5e-8 to 0 and has large relative errors near 0), 364 -> 95 us a 2,048 x 64 block against
MKL's (benchmarks/results/cpu-parts.md). In ``mlp_cpu``'s kernel its first op folds into the layer
(``folded``: weights and bias doubled, which is exact), the same bits with one pass less a block.
``PROXIMA_CPU_TANH=sigmoid`` computes what runs of that time computed, bit for bit.

``MODE`` is chosen once per process, so a run computes one function throughout: where torch has
MKL and the CPU's vendor is known and is not Intel, "numpy" when numpy's float32 tanh runs its
AVX-512 code here, else "sigmoid" (numpy's AVX2 tanh, on an EPYC without AVX-512, took 2-2.5x the
sigmoid form's time: 918 against 396 us a 4,096 x 64 block); "torch" otherwise (Intel, ARM, an
unknown vendor); the environment variable ``PROXIMA_CPU_TANH=torch|sigmoid|numpy`` overrides it
(for A/B measurements, or to compute bit for bit what another machine computes). ``proxima doctor``
and each run's meta.json (its "machine" record) say which. On CUDA, and inside ``torch.compile``
(inductor writes its own tanh), it is always ``torch.tanh``, and so under torch.func transforms
(``vmap``, ``grad``: a transformed tensor has no numpy view) in "numpy" mode; a ``--compile``
run's eager parts (the bootstrap values, evaluation) still follow MODE, so there the two agree
within float rounding.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import nn

from .config import ConfigError
from .cpuinfo import cpu_vendor, numpy_tanh_target

MODES = ("torch", "sigmoid", "numpy")
ENV_VAR = "PROXIMA_CPU_TANH"


def _avx512(target: str | None) -> bool:
    return bool(target) and (target == "X86_V4" or target.startswith("AVX512"))


def choose_mode(env: str | None, mkl: bool, vendor: str, numpy_target: str | None = None) -> str:
    """The mode for an ``env`` override (None or "" for none), whether torch has MKL, the vendor and
    the target numpy's float32 tanh runs (numpy_tanh_target). ConfigError naming the variable when the
    override is not a mode."""
    if env:
        if env not in MODES:
            raise ConfigError(f"{ENV_VAR}={env!r}: must be one of {', '.join(MODES)} (or unset: chosen by CPU)")
        return env
    if not (mkl and vendor and vendor != "GenuineIntel"):
        return "torch"
    # numpy's AVX-512 tanh beats the sigmoid form 1.25x; its AVX2 one (an EPYC before Zen 4) is 2-2.5x slower
    # than it, as MKL's own is: benchmarks/results/cpu-parts.md
    return "numpy" if _avx512(numpy_target) else "sigmoid"


# importing this module (every CLI command does: nets imports it) raises ConfigError on a bad override
MODE = choose_mode(os.environ.get(ENV_VAR), torch.backends.mkl.is_available(), cpu_vendor(), numpy_tanh_target())


#: -1 as a 0-dim tensor per dtype: ``torch.add(-1, s, alpha=2)`` takes a tensor first
_MINUS_ONE = {dtype: torch.tensor(-1.0, dtype=dtype) for dtype in (torch.float32, torch.float64)}


def sigmoid_tanh_(x: torch.Tensor) -> torch.Tensor:
    """tanh(x) as 2 sigmoid(2x) - 1, in place (x float32 or float64, any shape); returns x."""
    x.mul_(2).sigmoid_()
    return torch.add(_MINUS_ONE[x.dtype], x, alpha=2, out=x)


def sigmoid_tanh(x: torch.Tensor) -> torch.Tensor:
    """sigmoid_tanh_ into a new tensor: the same ops, so the same bits (differentiable as they are)."""
    return torch.add(_MINUS_ONE[x.dtype], torch.mul(x, 2).sigmoid_(), alpha=2)


def numpy_tanh_(x: torch.Tensor) -> torch.Tensor:
    """tanh(x) by numpy's own vectorized tanh, in place on x's memory (a CPU float32 or float64
    tensor that needs no gradient, any strides); returns x."""
    a = x.numpy()
    np.tanh(a, out=a)
    return x


def numpy_tanh(x: torch.Tensor) -> torch.Tensor:
    """numpy_tanh_ into a new tensor (x not modified; its gradient, if any, is not tracked)."""
    y = torch.empty_like(x)
    np.tanh(x.detach().numpy(), out=y.numpy())
    return y


def tanh_(x: torch.Tensor) -> torch.Tensor:
    """tanh in place by this process's MODE (``mlp_cpu``'s kernel, on CPU float32 blocks); returns x."""
    if MODE == "sigmoid":
        return sigmoid_tanh_(x)
    return numpy_tanh_(x) if MODE == "numpy" else x.tanh_()


def tanh_of_doubled_(u: torch.Tensor) -> torch.Tensor:
    """sigmoid_tanh_ of u / 2, in place: 2 sigmoid(u) - 1, sigmoid_tanh_'s ops after its ``mul_(2)``;
    returns u. For a layer whose weights and bias were doubled (``mlp_cpu.folded``): doubling is
    exact in floating point, so the matmul gives 2z bit for bit and this gives sigmoid_tanh_(z)'s bits
    without its pass over the block."""
    u.sigmoid_()
    return torch.add(_MINUS_ONE[u.dtype], u, alpha=2, out=u)


def folded() -> tuple:
    """(s, f_): tanh_(z) == f_(s z) bit for bit, s a power of two that ``mlp_cpu`` multiplies a
    layer's weights and bias by: (2.0, tanh_of_doubled_) in sigmoid MODE, (1.0, tanh_) otherwise
    (numpy's tanh and torch's are one op: nothing to fold)."""
    return (2.0, tanh_of_doubled_) if MODE == "sigmoid" else (1.0, tanh_)


class _TanhFromOutput(torch.autograd.Function):
    """y = fn(x), a tanh of this module (``sigmoid_tanh`` or ``numpy_tanh``), with tanh's own backward,
    g (1 - y^2), from the saved output (not the derivative of fn's ops)."""

    @staticmethod
    def forward(ctx, x, fn):
        y = fn(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(g, y), None


class Tanh(nn.Tanh):
    """``nn.Tanh`` that computes tanh by this process's MODE on the CPU (the hidden activation of
    ``nets.mlp``) in float32 and float64; ``torch.tanh`` on other devices, in half precision
    (2 sigmoid(2x) - 1 in bfloat16 would round every |x| < 0.002 to 0; numpy has no bfloat16), under
    ``torch.compile``, and in numpy MODE under torch.func transforms.
    No parameters: state_dicts are nn.Tanh's (none)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (MODE == "torch" or x.device.type != "cpu" or x.dtype not in _MINUS_ONE
                or torch.compiler.is_compiling()):
            return torch.tanh(x)
        wrapped = torch._C._functorch.is_functorch_wrapped_tensor(x)
        if MODE == "numpy" and wrapped:  # no numpy view of a vmap/grad tensor
            return torch.tanh(x)
        fn = numpy_tanh if MODE == "numpy" else sigmoid_tanh
        # acting (no graph) and torch.func transforms (which differentiate sigmoid_tanh's ops themselves)
        # call fn; a graph that needs tanh's derivative takes the Function (6 us more a call)
        if x.requires_grad and torch.is_grad_enabled() and not wrapped:
            return _TanhFromOutput.apply(x, fn)
        return fn(x)
