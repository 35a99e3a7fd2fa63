"""Device names as users type them (cpu, cuda, cuda:1, auto) -> torch.device, with one-line errors."""

from __future__ import annotations

import os
import sys
from typing import Optional, Union

import torch

from .config import ConfigError

#: the notes resolve_device has printed in this process: it runs several times a launch (preflight,
#: the trainer, evaluation), and one note is enough
_NOTED: set = set()


def probe_device(device: Optional[Union[str, torch.device]] = None) -> torch.device:
    """The CUDA device a tiny-op check of ``device`` runs on: its index when it names one; else a
    torchrun rank's cuda:LOCAL_RANK (the GPU it will train on: a rank that probed the current device
    before set_device would put a context, hundreds of MiB, on GPU 0 from every rank); else the
    current device. A device that is not CUDA's (a CPU run's) stands for none."""
    dev = torch.device(device) if device is not None else None
    if dev is not None and dev.type == "cuda" and dev.index is not None:
        return dev
    local = os.environ.get("LOCAL_RANK", "")
    try:
        if local.isdigit() and int(local) < torch.cuda.device_count():
            return torch.device("cuda", int(local))
        return torch.device("cuda", torch.cuda.current_device())
    except Exception:  # noqa: BLE001 - a CUDA that does not initialize: the op itself says why
        return torch.device("cuda", 0)


def cuda_op_problem(device: Optional[Union[str, torch.device]] = None) -> str:
    """"" when a tiny tensor op runs on ``device`` (probe_device) and gives the right answer, else
    one clause saying what failed: ``a tiny tensor op on cuda:0 failed (RuntimeError: ...)``.
    torch.cuda.is_available() only counts devices: a driver too old for this torch, a GPU in an
    exclusive or broken state, or one without memory left still counts. ``proxima doctor`` and
    ``--device auto|cuda`` ask the same question. Creates the device's CUDA context, as training
    on it does: call it only for the device a process will use."""
    dev = probe_device(device)
    where = str(dev)
    try:
        x = torch.ones(4, device=dev)
        y = (x * 2).sum()
        torch.cuda.synchronize(dev)
        if float(y.item()) != 8.0:
            return f"a tiny tensor op on {where} gave a wrong result"
    except Exception as e:  # noqa: BLE001 - whatever the driver raises is the answer
        text = str(e).strip().splitlines()
        why = f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
        return f"a tiny tensor op on {where} failed ({why})"
    return ""


def _note(text: str) -> None:
    if text not in _NOTED:
        _NOTED.add(text)
        print(f"proxima: note: {text}", file=sys.stderr)


def resolve_device(name: str, arg: str = "--device") -> torch.device:
    """``name`` (cpu, cuda, cuda:1, auto) as a torch.device (cpu:N as cpu), or a one-line ConfigError. ``arg``: what the
    caller typed it as, the flag ``--device`` (``--device 'cuda': ...; use --device cpu``) or a Python
    argument (``"device"``: ``device='cuda': ...; use device='cpu'``, proxima.load's)."""
    flag = arg.startswith("--")
    given = f"{arg} {name!r}" if flag else f"{arg}={name!r}"

    def use(value: str) -> str:
        return f"{arg} {value}" if flag else f"{arg}={value!r}"

    if name == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        problem = cuda_op_problem()
        if problem:  # a visible GPU that does not compute: the CPU trains, where cuda would die in a traceback
            _note(f"{use('auto')}: CUDA is not usable here ({problem}); using the CPU (proxima doctor says more)")
            return torch.device("cpu")
        return torch.device("cuda")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"{given}: not a torch device (cpu, cuda, cuda:1, auto)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{given}: CUDA is not usable here (run `proxima doctor`); use {use('cpu')}")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(f"{given}: only {torch.cuda.device_count()} CUDA device(s) here (cuda:0 ...)")
    if dev.type not in ("cpu", "cuda"):  # meta, mps, xpu, ...: torch parses them, training would crash later
        raise ConfigError(f"{given}: not supported; use cpu, cuda, cuda:1 or auto")
    if dev.type == "cpu":  # cpu:0 is the one CPU, and torch drops the index from every CPU tensor it makes:
        return torch.device("cpu")  # a cpu:0 kept here would fail every "on the env's device" check
    if dev.type == "cuda":
        problem = cuda_op_problem(dev)
        if problem:
            raise ConfigError(f"{given}: CUDA is not usable here: {problem}; "
                              f"run `proxima doctor` for the cause, or use {use('cpu')}")
    return dev
