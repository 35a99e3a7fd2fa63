"""The CPU kernel of an MLP (Linear, activation, ..., Linear): forward and backward by row blocks.

Why: on one CPU core a PPO minibatch of CartPole's 64x64 tanh MLPs (16,384 rows, 4 MB per
activation) spends as much time moving activations through memory as multiplying them. Autograd
runs each op over the whole batch (the bias copy of ``addmm``, the matmul, ``tanh``, and in the
backward ``tanh_backward`` and the bias sum), and each op writes a new 4 MB tensor that is cold in
the cache. Here the forward runs block by block of rows sized to the L2 cache (1 MiB of
the widest layer: ``BLOCK_BYTES``), the activation applied in place; the backward runs the same blocks, applying the
activation's derivative in place and adding each block's weight gradient into one (out, in)
tensor. Autograd's ops but for the last layer's forward, which runs as W h^T (``_forward_blocks``
says why): for one block the gradients are bit-identical to the plain ``nn.Sequential``'s (the
first layer's weight gradient within rounding on AMD's MKL: ``flipped``) and the output equal
within float rounding (tests/unit/test_mlp_cpu.py); with several blocks the weight
gradients are sums of per-block matmuls, equal within float rounding. Used only for batches of more than one block
(``block_rows(widths)`` rows, 4,096 for 64-wide layers): below that the plain modules are as fast
and skip this file's Python overhead, so every preset's minibatches (at most 2,048 rows) train
exactly as before. Measured: 1.15x (1.10-1.34) the training steps/s of the plain modules at
4,096 CartPole envs (benchmarks/mlp_kernel.py, benchmarks/results/mlp-kernel-cpu.md; on the Intel
Xeon, with the 512 KiB blocks of then).

Only for what it handles: float32 (B, in) inputs on the CPU, tanh or ReLU between ``nn.Linear``
layers, no autocast, no ``torch.compile`` tracing and no functorch transform (``vmap``,
``torch.func.grad``). ``nets.MLP`` checks that before every call and runs the plain modules
otherwise (on CUDA too, where a CUDA graph or a compiled kernel does the fusing). Forward hooks on
the MLP's child modules are not called on this path.
"""

from __future__ import annotations

import torch
from torch import nn

from . import tanh_cpu

#: bytes of the widest activation one row block may hold: 1 MiB, an AMD EPYC's L2 cache (half an
#: Intel Xeon's). Bigger blocks mean fewer ops issued from Python per row: 1 MiB against 512 KiB
#: gave 1.02-1.03x at 4,096 CartPole envs on the EPYC (in-process A/Bs, one-off); with ``folded``,
#: 1.11x (1.01-1.29) whole processes against the tree before (benchmarks/results/vs-revision-cpu.md)
BLOCK_BYTES = 1024 * 1024
MIN_BLOCK_ROWS = 256


def _tanh_backward_(g, y):
    return torch.ops.aten.tanh_backward.grad_input(g, y, grad_input=g)


#: activation module -> (in-place forward, backward writing into the incoming gradient);
#: tanh_cpu.Tanh (nets.mlp's) computes what its forward does on the CPU, by tanh_cpu.MODE
ACTIVATIONS = {
    nn.Tanh: (torch.Tensor.tanh_, _tanh_backward_),
    tanh_cpu.Tanh: (tanh_cpu.tanh_, _tanh_backward_),
    nn.ReLU: (torch.Tensor.relu_,
              lambda g, y: torch.ops.aten.threshold_backward.grad_input(g, y, 0, grad_input=g)),
}


def folded(act) -> tuple:
    """(s, f_) for activation module type ``act``: ACTIVATIONS[act]'s forward of z equals f_(s z) bit
    for bit. s is a power of two, so multiplying a layer's weights and bias by it makes the matmul
    and bias give s z exactly (but for a product that over- or underflows float32); f_ then skips a
    pass over the block: tanh_cpu's sigmoid form takes 2z (``tanh_cpu.folded``). (1.0, the forward)
    for the rest."""
    return tanh_cpu.folded() if act is tanh_cpu.Tanh else (1.0, ACTIVATIONS[act][0])


#: batches of fewer rows keep the activation unfolded: scaling the weights costs a few small ops a
#: call, more than the pass it saves on 128-512 rows (+5-8 us a forward, micro-timings)
FOLD_MIN_ROWS = 1024


def forward_operands(weights, biases, act, activated: int, rows: int) -> tuple:
    """(w_t, biases, f_) for ``forward_block`` on a batch of ``rows`` rows: the (in_i, out_i)
    transposes of the (out_i, in_i) ``weights`` and the biases, the first ``activated`` layers'
    multiplied by ``folded(act)``'s s, and its f_ (the in-place activation of those layers'
    outputs); below FOLD_MIN_ROWS rows unscaled, with ACTIVATIONS[act]'s forward (the same bits)."""
    s, act_ = folded(act) if rows >= FOLD_MIN_ROWS else (1.0, ACTIVATIONS[act][0])
    w_t = [w.t() * s if i < activated and s != 1 else w.t() for i, w in enumerate(weights)]
    biases = [b * s if i < activated and s != 1 else b for i, b in enumerate(biases)]
    return w_t, biases, act_


def block_rows(widths) -> int:
    """Rows per block: the widest layer's activation of one block fills BLOCK_BYTES (float32)."""
    return max(MIN_BLOCK_ROWS, BLOCK_BYTES // (4 * max(widths)))


def plan(layers) -> tuple | None:
    """(linears, activation type) when ``layers`` is Linear, act, Linear, ..., Linear with one
    activation type from ACTIVATIONS; None otherwise (e.g. a population's StackedLinear)."""
    linears, acts = list(layers)[0::2], list(layers)[1::2]
    if not linears or any(type(l) is not nn.Linear or l.bias is None for l in linears):
        return None
    if len({type(a) for a in acts}) > 1 or any(type(a) not in ACTIVATIONS for a in acts):
        return None
    return linears, (type(acts[0]) if acts else tanh_cpu.Tanh)


def eligible(x: torch.Tensor, linears) -> bool:
    """Whether this kernel computes what the plain modules would for input ``x`` (whether it pays,
    more than one block of rows, is ``nets.MLP``'s first check)."""
    if x.device.type != "cpu" or x.dim() != 2 or x.dtype != torch.float32:
        return False
    if torch.compiler.is_compiling() or torch.is_autocast_enabled("cpu"):
        return False
    if torch._C._functorch.is_functorch_wrapped_tensor(x):  # vmap / grad transforms see plain ops
        return False
    return all(l.weight.dtype == torch.float32 and l.weight.device.type == "cpu" for l in linears)


def forward_block(h, w_t, biases, forward_act, outs, activate_last: bool = False) -> torch.Tensor:
    """One row block through every layer: h (r, in), w_t[i] the (in_i, out_i) transposes of the
    weights and biases[i] the biases (``forward_operands``: the activated layers' scaled for
    ``forward_act``, the in-place activation), outs[i] (r, out_i) the block's output buffers,
    written in place (activations applied but on the last, unless ``activate_last``); returns outs[-1]."""
    last = len(w_t) - 1
    for i, o in enumerate(outs):
        # mm then the bias in place, not addmm: addmm first broadcasts the bias into o, a pass
        # over cold memory; here the bias lands on the block the matmul just wrote. The same
        # sums (MKL adds C after the products): bit-identical to addmm, as the tests check
        torch.mm(h, w_t[i], out=o)
        o.add_(biases[i])
        if i < last or activate_last:
            forward_act(o)
        h = o
    return h


def backward_block(g, inputs, weights, gw, gb, backward_act, gx=None) -> None:
    """One row block backward through every layer, autograd's ops: g (r, out_last) the gradient
    at the output, inputs[i] (r, in_i) layer i's input in this block (inputs[i + 1] its activated
    output), weights[i] (out_i, in_i). Adds the block's weight and bias gradients into gw[i] and
    gb[i] (the first block, where gw[i] is None, sets them, as a plain mm and sum); gw[i] is
    (in_i, out_i) for a layer with fewer inputs than outputs (``flipped``), else (out_i, in_i).
    Writes the input's gradient into gx (r, in_0) when given."""
    for i in range(len(weights) - 1, -1, -1):
        inp = inputs[i]
        a, c = (inp.t(), g) if flipped(weights[i]) else (g.t(), inp)
        if gw[i] is None:  # the first block: plain mm and sum, as autograd's addmm backward
            gw[i], gb[i] = a.mm(c), g.sum(0)
        else:
            gw[i].addmm_(a, c)
            gb[i].add_(g.sum(0))
        if i > 0:
            # a one-output layer (the critic's): an outer product, one multiply per element
            # either way, so the broadcast mul is exact and skips a K=1 matmul
            g = g * weights[i] if weights[i].shape[0] == 1 else g.mm(weights[i])
            backward_act(g, inputs[i])  # inputs[i] is layer i-1's activated output
        elif gx is not None:
            torch.mm(g, weights[0], out=gx)


def flipped(w: torch.Tensor) -> bool:
    """Whether backward_block computes this (out, in) weight's gradient as (in, out) = inp^T g: for a
    layer with fewer inputs than outputs (the first: 4 -> 64 for CartPole) 18 us against 57 us for
    g^T inp on a 2,048-row block on an Intel Xeon, 35 against 202 us on an AMD EPYC (MKL,
    micro-timings). The same bits as autograd's g^T inp on Intel's MKL paths; within rounding on
    AMD's, which sum in another order (tests/unit/test_mlp_cpu.py)."""
    return w.shape[1] < w.shape[0]


def weight_grads(weights, gw) -> list:
    """backward_block's gw as (out_i, in_i) gradients of the weights."""
    return [g.t().contiguous() if flipped(w) else g for w, g in zip(weights, gw)]


def _forward_blocks(x, weights, biases, act, rows: int, keep_hidden: bool) -> list:
    """Every layer's output [(B, out_i)], activations applied, computed block by block of ``rows``.
    Without ``keep_hidden`` (nothing to differentiate) the hidden layers write one block-sized
    scratch buffer each, reused by every block and so never cold; only the last output is (B, out).

    The last layer runs as W h^T into an (out, B) tensor, returned as its (B, out) transpose (a
    view): a few outputs (CartPole's 2 logits, the critic's value) as h W^T make MKL's slowest
    shape (a 2,048 x 64 block times 64 x 2: 39 against 15 us as W h^T, a micro-timing on this
    machine), and the categorical head wants the logits as (n, B) anyway (its movedim is then no
    copy). Acting at 4,096 CartPole envs (actor, sample, log-prob) 1.11x (0.98-1.14) with the
    sample of ``agent._categorical_sample`` (benchmarks/results/cpu-parts.md). Equal to h W^T within
    float rounding, not bit for bit."""
    b, last = x.shape[0], len(weights) - 1
    hidden = [x.new_empty(b if keep_hidden else min(rows, b), w.shape[0]) for w in weights[:-1]]
    out_t = x.new_empty(weights[-1].shape[0], b)
    # every block view and (scaled) transpose made once per call, not once per block and layer
    w_t, hidden_biases, forward_act = forward_operands(weights[:-1], biases[:-1], act, last, b)
    hidden_blocks = [o.split(rows) if keep_hidden else None for o in hidden]
    bias_col = biases[-1].unsqueeze(1)
    for k, (h, o_t) in enumerate(zip(x.split(rows), out_t.split(rows, dim=1))):
        if last:
            h = forward_block(h, w_t, hidden_biases, forward_act,
                              [hb[k] if hb is not None else o[:h.shape[0]] for hb, o in zip(hidden_blocks, hidden)],
                              activate_last=True)
        torch.mm(weights[-1], h.t(), out=o_t)
        o_t.add_(bias_col)
    return hidden + [out_t.t()]


class _MLPFunction(torch.autograd.Function):
    """x (B, in), weights (out_i, in_i), biases (out_i,) -> (B, out_last)."""

    @staticmethod
    def forward(ctx, x, act, rows, *params):
        weights, biases = params[0::2], params[1::2]
        outs = _forward_blocks(x, weights, biases, act, rows, keep_hidden=True)
        ctx.act, ctx.rows, ctx.layers = act, rows, len(weights)
        ctx.save_for_backward(x, *weights, *outs[:-1])
        return outs[-1]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        n = ctx.layers
        saved = ctx.saved_tensors
        x, weights, hidden = saved[0], saved[1:1 + n], saved[1 + n:]
        gx, w_grads, b_grads = backward_blocks(grad_out, (x, *hidden), weights, ctx.act, ctx.rows, ctx.needs_input_grad[0])
        grads = [gx, None, None]
        for w_grad, b_grad in zip(w_grads, b_grads):
            grads += [w_grad, b_grad]
        return tuple(grads)


def backward_blocks(grad_out, inputs, weights, act, rows: int, need_x: bool = False) -> tuple:
    """The backward of ``_forward_blocks``, block by block of ``rows``: grad_out (B, out_last) the
    gradient at the output, inputs[i] (B, in_i) layer i's input (x, then each hidden layer's
    activated output), weights[i] (out_i, in_i). Returns (the input's gradient (B, in_0) or None,
    the weights' gradients [(out_i, in_i)], the biases' [(out_i,)])."""
    n = len(weights)
    _, backward_act = ACTIVATIONS[act]
    gw, gb = [None] * n, [None] * n
    x = inputs[0]
    gx = x.new_empty(x.shape) if need_x else None
    input_blocks = [t.split(rows) for t in inputs]
    gx_blocks = gx.split(rows) if need_x else None
    for k, g in enumerate(grad_out.contiguous().split(rows)):
        backward_block(g, [t[k] for t in input_blocks], weights, gw, gb, backward_act, gx_blocks[k] if need_x else None)
    return gx, weight_grads(weights, gw), gb


def mlp_forward(x: torch.Tensor, linears, act) -> torch.Tensor:
    """The MLP of ``linears`` with activation ``act`` between them on x (B, in), by row blocks."""
    params = [t for l in linears for t in (l.weight, l.bias)]
    rows = block_rows([l.out_features for l in linears])
    if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in params)):
        return _MLPFunction.apply(x, act, rows, *params)
    # acting and evaluation: nothing is kept for a backward
    return _forward_blocks(x, params[0::2], params[1::2], act, rows, keep_hidden=False)[-1]
