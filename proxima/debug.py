"""Debugging aids for the hot loop: make a host sync an error instead of a silent slowdown.

``forbid_host_sync()`` guards a block of code that must keep its data on the device (DESIGN.md:
no ``.item()``, ``.cpu()``, ``.numpy()`` or Python lists inside an iteration)::

    with forbid_host_sync(device):
        next_obs = ppo.collect_rollout(env, agent.policy_step, rollout, next_obs)

On CUDA it is ``torch.cuda.set_sync_debug_mode("error")``: the CUDA runtime itself reports every
synchronizing call. On CPU nothing ever "syncs", so the guard catches the Python-side reads that
would sync on an accelerator: it patches the ``torch.Tensor`` methods that turn a tensor value into
a Python value or a host copy (``item``, ``__bool__``, ``__int__``, ``__float__``, ``__complex__``, ``__index__``,
``__format__``, ``__repr__`` (``str`` too), ``__array__``, ``tolist``, ``numpy``, ``cpu``, ``equal``,
``allclose``, ``is_nonzero`` and ``to`` with an explicit CPU target), and the functions
``torch.equal``, ``torch.allclose`` and ``torch.is_nonzero``, so that they raise
:class:`HostSyncError`. Ops whose output shape depends on the data (``nonzero``, indexing with a
boolean mask, ``masked_select``) sync on an accelerator too but read no value into Python: the CPU
guard does not see them (the CUDA mode does), so a CPU-only test is no proof for those. Calls made by torch's own Python code (the optimizer
reading its CPU step counter, for instance) are let through: whether those sync is for the CUDA
mode to judge, and on CPU they are not a property of the code under test. So is ``numpy()`` from
``proxima/tanh_cpu.py``: a view of a CPU tensor's memory that numpy's tanh writes in place, taken
only for CPU tensors (CUDA tensors get ``torch.tanh``), no value read by Python.

The patches are process-wide while the block runs; use it in tests and debugging, not in
production code, and not from several threads at once.

``forbid_host_tensors()`` guards the other direction, host to device: inside the block no tensor
may be made from Python numbers or data (``torch.tensor(...)``, ``torch.where(c, 1.0, x)``, which
wraps the 1.0 in a new tensor, ``torch.full``) and nothing may be copied between devices. On CUDA
each of these is a small host-to-device copy or an extra kernel per call, and a value baked into a
captured CUDA graph at capture time. Python numbers passed as scalar arguments (``x * 0.5``,
``clamp(x, -1, 1)``, ``masked_fill_(m, 0)``) are fine: they travel as kernel arguments. It is a
``TorchDispatchMode``, so it sees what every line, torch's own included, asks of the device.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from typing import Iterator, Optional

import torch

__all__ = ["HostSyncError", "forbid_host_sync", "HostTensorError", "forbid_host_tensors"]

#: Tensor methods that hand a tensor's value to Python (or to host memory).
VALUE_READS = ("item", "__bool__", "__int__", "__float__", "__complex__", "__index__", "__format__", "__repr__", "__array__",
               "tolist", "numpy", "cpu", "equal", "allclose", "is_nonzero")

#: torch functions that compare or test tensor values into a Python bool
VALUE_READ_FUNCTIONS = ("equal", "allclose", "is_nonzero")

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


class HostSyncError(RuntimeError):
    """A tensor value was read on the host inside a ``forbid_host_sync()`` block."""


def _caller_is_torch(depth: int = 2) -> bool:
    """True when the Python frame that called the patched method is torch's own code."""
    frame = sys._getframe(depth)
    return frame.f_code.co_filename.startswith(_TORCH_DIR)


def _where(depth: int = 2) -> str:
    frame = sys._getframe(depth)
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


def _raise(name: str) -> None:
    what = name if name.startswith("torch.") else f"Tensor.{name}"
    raise HostSyncError(f"host sync in a forbid_host_sync() block: {what}() at {_where(3)}; "
                        "keep the value a tensor (torch.where, in-place ops) and read it once per iteration")


#: (method, file) pairs let through: CPU-only code that hands a tensor's memory, not its value, to a kernel
_CPU_MEMORY_VIEWS = {("numpy", os.path.join(os.path.dirname(os.path.abspath(__file__)), "tanh_cpu.py"))}


def _guarded(name: str, original):
    @functools.wraps(original)
    def guarded(self, *args, **kwargs):
        if not _caller_is_torch() and (name, sys._getframe(1).f_code.co_filename) not in _CPU_MEMORY_VIEWS:
            _raise(name)
        return original(self, *args, **kwargs)

    return guarded


def _to_target_is_cpu(args: tuple, kwargs: dict) -> bool:
    """Does ``Tensor.to(*args, **kwargs)`` name the CPU as its device? (``to(dtype)`` and
    ``to(other_tensor)`` do not: they are device-agnostic.)"""
    device = kwargs.get("device")
    if device is None and args and isinstance(args[0], (str, torch.device, int)):
        device = args[0]
    if device is None:
        return False
    try:
        return torch.device(device).type == "cpu"
    except (RuntimeError, TypeError):
        return False


def _guarded_to(original):
    @functools.wraps(original)
    def guarded_to(self, *args, **kwargs):
        if _to_target_is_cpu(args, kwargs) and not _caller_is_torch():
            _raise("to('cpu')")
        return original(self, *args, **kwargs)

    return guarded_to


@contextlib.contextmanager
def _patched_tensor_methods() -> Iterator[None]:
    cls = torch.Tensor
    saved = {name: cls.__dict__.get(name) for name in (*VALUE_READS, "to")}
    saved_functions = {name: getattr(torch, name) for name in VALUE_READ_FUNCTIONS}
    try:
        for name in VALUE_READS:
            setattr(cls, name, _guarded(name, getattr(cls, name)))
        cls.to = _guarded_to(cls.to)
        for name, function in saved_functions.items():
            setattr(torch, name, _guarded(f"torch.{name}", function))
        yield
    finally:
        for name, function in saved_functions.items():
            setattr(torch, name, function)
        for name, own in saved.items():
            if own is None:  # inherited from torch._C.TensorBase: drop the patch to expose it again
                if name in cls.__dict__:
                    delattr(cls, name)
            else:
                setattr(cls, name, own)


@contextlib.contextmanager
def forbid_host_sync(device: Optional[torch.device | str] = None) -> Iterator[None]:
    """Raise on any host read of a tensor value inside the block (see the module docstring).

    device: where the guarded code runs (default cpu). ``cuda`` uses the CUDA sync debug mode
    (a ``RuntimeError`` from the CUDA runtime); anything else patches ``torch.Tensor``
    (:class:`HostSyncError`).
    """
    dev = torch.device(device if device is not None else "cpu")
    if dev.type == "cuda":
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(previous)
        return
    with _patched_tensor_methods():
        yield


class HostTensorError(RuntimeError):
    """A tensor was made from Python data, or copied across devices, inside ``forbid_host_tensors()``."""


def _host_tensor_mode():
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    from_python = {aten.scalar_tensor.default: "a tensor from a Python number (torch.where/full with a Python scalar?)",
                   aten.lift_fresh.default: "torch.tensor(...) from Python data",
                   aten.lift_fresh_copy.default: "torch.tensor(...) from Python data",
                   aten.full.default: "torch.full(...) from a Python number"}

    class _Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            what = from_python.get(func)
            if what is None and func in (aten._to_copy.default, aten.copy_.default):
                src = args[0] if func is aten._to_copy.default else args[1]
                dst = kwargs.get("device") if func is aten._to_copy.default else args[0].device
                if isinstance(src, torch.Tensor) and dst is not None and torch.device(dst) != src.device:
                    what = f"a copy from {src.device} to {torch.device(dst)}"
            if what is not None:
                caller = _caller_frame()
                # torch's own code (autograd formulas such as clamp's backward, the optimizer) is
                # let through, as in forbid_host_sync: the guard judges the code under test
                if caller is not None and not caller.f_code.co_filename.startswith(_TORCH_DIR):
                    raise HostTensorError(f"{func} in a forbid_host_tensors() block: {what} at "
                                          f"{caller.f_code.co_filename}:{caller.f_lineno} in {caller.f_code.co_name}; "
                                          "make constants once outside the loop or pass the number as a scalar argument")
            return func(*args, **kwargs)

    return _Mode()


def _caller_frame():
    """The innermost Python frame that asked for the op (skipping this module and torch's dispatch
    machinery); None when the op came from C++ with no Python frame above this one."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename == __file__ or frame.f_code.co_filename in _DISPATCH_FILES):
        frame = frame.f_back
    return frame


#: torch's wrappers between a Python call of an op and a dispatch mode's __torch_dispatch__
_DISPATCH_FILES = {os.path.join(_TORCH_DIR, *parts) for parts in
                   (("utils", "_python_dispatch.py"), ("_compile.py",), ("_dynamo", "eval_frame.py"))}


@contextlib.contextmanager
def forbid_host_tensors() -> Iterator[None]:
    """Raise :class:`HostTensorError` on a tensor made from Python data or a cross-device copy
    inside the block (see the module docstring); any device."""
    with _host_tensor_mode():
        yield
