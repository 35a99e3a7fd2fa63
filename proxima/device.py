"""Device names as users type them (cpu, cuda, cuda:1, auto) -> torch.device, with one-line errors."""

from __future__ import annotations

import torch

from .config import ConfigError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"--device {name!r}: not a torch device (cpu, cuda, cuda:1, auto)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name!r}: CUDA is not usable here (run `proxima doctor`); use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(f"--device {name!r}: only {torch.cuda.device_count()} CUDA device(s) here (cuda:0 ...)")
    if dev.type not in ("cpu", "cuda"):  # meta, mps, xpu, ...: torch parses them, training would crash later
        raise ConfigError(f"--device {name!r}: not supported; use cpu, cuda, cuda:1 or auto")
    return dev
