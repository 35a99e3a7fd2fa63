"""Adam for a single run: torch.optim.Adam(fused=True)'s kernel, state and state_dict, without torch.optim.

Why not ``torch.optim.Adam`` itself:

* ``torch.optim.Optimizer`` imports ``torch._dynamo`` the first time it is used (``add_param_group``,
  ``zero_grad``, ``state_dict`` and ``load_state_dict`` are wrapped in ``torch._disable_dynamo``,
  which imports the compiler on its first call): 1.2 s of every launch on this project's CPU
  machine, in a ``--preset fast`` CartPole run of 6-9 s that never compiles anything;
* its ``step`` wraps the one fused kernel in Python that a PPO minibatch pays every time
  (grouping tensors by device and dtype, hooks, profiler records).

This class calls the same kernel, ``torch._fused_adam_``, on the same state (per parameter a float32
``step`` on the parameter's device, ``exp_avg`` and ``exp_avg_sq``), so parameters after any number
of steps are bit-identical to ``torch.optim.Adam(..., fused=True)``, and its ``state_dict`` has
torch.optim's layout: checkpoints move between the two both ways (tests/unit/test_adam.py). It
keeps to what the trainer uses: one parameter group on one device and dtype, a learning rate held
as a tensor (annealed in place, so a compiled or CUDA-graph-captured step sees each new value),
no weight decay, no AMSGrad. ``torch.amp.GradScaler`` drives it as it drives torch's fused Adam
(``grad_scale`` and ``found_inf`` handed to ``step``: a step with an inf gradient changes nothing).
"""

from __future__ import annotations

import math
from typing import Iterable

import torch

#: the hyperparameters torch.optim.Adam writes into a state_dict's param group besides lr, betas, eps
_FIXED = {"weight_decay": 0.0, "amsgrad": False, "maximize": False, "foreach": None, "differentiable": False,
          "fused": True, "decoupled_weight_decay": False}


class Adam:
    """Adam over ``params`` (one device, one floating dtype). ``lr``: a 0-dim float tensor on that
    device (``param_groups[0]["lr"]``, filled in place by the learning-rate schedule).
    ``capturable`` is only recorded in the param group, as torch.optim records it: the fused kernel
    keeps its step counts on the parameters' device either way."""

    #: GradScaler hands this optimizer ``grad_scale`` and ``found_inf`` instead of reading found_inf on the host
    _step_supports_amp_scaling = True

    def __init__(self, params: Iterable[torch.Tensor], lr: torch.Tensor, betas: tuple = (0.9, 0.999),
                 eps: float = 1e-8, capturable: bool = False):
        params = list(params)
        if not params:
            raise ValueError("Adam: no parameters to optimize")
        kinds = {(p.device, p.dtype) for p in params}
        if len(kinds) > 1 or not params[0].is_floating_point():
            raise ValueError(f"Adam: parameters must share one device and floating dtype, got {sorted(map(str, kinds))}")
        if not (torch.is_tensor(lr) and lr.dim() == 0 and lr.device == params[0].device):
            raise ValueError(f"Adam: lr must be a 0-dim tensor on {params[0].device}")
        self.param_groups = [{"params": params, "lr": lr, "betas": tuple(betas), "eps": float(eps),
                              "capturable": bool(capturable), **_FIXED}]
        self.state: dict = {}  # parameter -> {"step", "exp_avg", "exp_avg_sq"}, made at its first step

    def _state_of(self, p: torch.Tensor) -> dict:
        state = self.state.get(p)
        if state is None:
            state = self.state[p] = {"step": torch.zeros((), dtype=torch.float32, device=p.device),
                                     "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                     "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
        return state

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step of every parameter that has a gradient."""
        group = self.param_groups[0]
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        states = [self._state_of(p) for p in params]
        steps = [s["step"] for s in states]
        # set by GradScaler.step for the duration of this call (fp16); None otherwise
        grad_scale, found_inf = getattr(self, "grad_scale", None), getattr(self, "found_inf", None)
        beta1, beta2 = group["betas"]
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(params, [p.grad for p in params], [s["exp_avg"] for s in states],
                           [s["exp_avg_sq"] for s in states], [], steps, amsgrad=False, lr=group["lr"],
                           beta1=beta1, beta2=beta2, weight_decay=0.0, eps=group["eps"], maximize=False,
                           grad_scale=grad_scale, found_inf=found_inf)
        if found_inf is not None:  # the kernel skipped the step: so does the step count
            torch._foreach_sub_(steps, [found_inf] * len(steps))

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.param_groups[0]["params"]:
            if set_to_none:  # unconditionally: a `p.grad is None` test becomes a recompiling guard under torch.compile
                p.grad = None
            elif p.grad is not None:
                p.grad.detach_().zero_()

    # --- checkpoints: torch.optim's layout ----------------------------------------------------------
    def state_dict(self) -> dict:
        """{"state": {index: {"step", "exp_avg", "exp_avg_sq"}}, "param_groups": [{..., "params": [0, ...]}]},
        as torch.optim.Adam writes it (the tensors themselves, not copies)."""
        group = self.param_groups[0]
        params = group["params"]
        packed = {k: v for k, v in group.items() if k != "params"}
        packed["params"] = list(range(len(params)))
        return {"state": {i: self.state[p] for i, p in enumerate(params) if p in self.state},
                "param_groups": [packed]}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state_dict of this class or of torch.optim.Adam (any of its implementations) for
        the same parameters. The learning rate is copied into this optimizer's own lr tensor (a
        compiled or captured step holds it) and moments into its existing state tensors where it
        has them. ValueError, naming what differs, when the state does not fit the parameters."""
        params = self.param_groups[0]["params"]
        if not isinstance(state_dict, dict) or not isinstance(state_dict.get("state"), dict) \
                or not isinstance(state_dict.get("param_groups"), list):
            raise ValueError("optimizer state: not an Adam state_dict (expected 'state' and 'param_groups')")
        groups = state_dict["param_groups"]
        if len(groups) != 1 or not isinstance(groups[0], dict) or list(groups[0].get("params", ())) != list(range(len(params))):
            got = [len(g.get("params", ())) if isinstance(g, dict) else "?" for g in groups]
            raise ValueError(f"optimizer state: parameter groups of sizes {got}, this agent has one of {len(params)}")
        saved = groups[0]
        lr, betas, eps = saved.get("lr"), saved.get("betas"), saved.get("eps")
        lr = float(lr) if torch.is_tensor(lr) and lr.numel() == 1 else lr
        if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not math.isfinite(lr):
            raise ValueError(f"optimizer state: learning rate {lr!r} is not a finite number")
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2 and all(isinstance(b, (int, float)) for b in betas)) \
                or not isinstance(eps, (int, float)):
            raise ValueError(f"optimizer state: betas {betas!r} / eps {eps!r} are not numbers")
        loaded = {}
        for index, entry in state_dict["state"].items():
            if not isinstance(index, int) or not 0 <= index < len(params):
                raise ValueError(f"optimizer state: parameter index {index!r} out of range 0..{len(params) - 1}")
            p = params[index]
            if not isinstance(entry, dict) or any(not torch.is_tensor(entry.get(k)) for k in ("step", "exp_avg", "exp_avg_sq")):
                raise ValueError(f"optimizer state of parameter {index}: needs tensors step, exp_avg and exp_avg_sq")
            for k in ("exp_avg", "exp_avg_sq"):
                if entry[k].shape != p.shape:
                    raise ValueError(f"optimizer state of parameter {index}: {k} has shape {tuple(entry[k].shape)}, "
                                     f"the parameter {tuple(p.shape)}")
            if entry["step"].numel() != 1:
                raise ValueError(f"optimizer state of parameter {index}: step has {entry['step'].numel()} values, not 1")
            loaded[p] = entry
        # checked everything before changing anything: a bad state_dict leaves this optimizer as it was
        group = self.param_groups[0]
        group["lr"].fill_(lr)
        group["betas"], group["eps"] = (float(betas[0]), float(betas[1])), float(eps)
        for p in params:
            entry = loaded.get(p)
            if entry is None:
                self.state.pop(p, None)
                continue
            own = self._state_of(p)
            own["step"].copy_(entry["step"].reshape(()))
            own["exp_avg"].copy_(entry["exp_avg"])
            own["exp_avg_sq"].copy_(entry["exp_avg_sq"])
