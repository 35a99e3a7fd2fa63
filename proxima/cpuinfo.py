"""What the CPU is, read from the OS: no torch, no settings, so any module (doctor among them, which
must report a bad PROXIMA_CPU_TANH rather than fail on it) can read it."""

from __future__ import annotations

import platform


def cpuinfo(key: str) -> str:
    """The first ``key`` line of Linux's /proc/cpuinfo ("vendor_id", "model name", ...); "" elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            for row in f:
                if row.lower().startswith(key):
                    return row.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_vendor() -> str:
    """The CPU's vendor id ("GenuineIntel", "AuthenticAMD", ...) where the OS says it; "" otherwise."""
    name = platform.processor()  # e.g. Windows: "AMD64 Family 25 Model 17 Stepping 1, AuthenticAMD"
    return cpuinfo("vendor_id") or next((v for v in ("GenuineIntel", "AuthenticAMD") if v in name), "")
