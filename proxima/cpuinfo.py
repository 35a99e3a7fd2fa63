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


def numpy_tanh_target() -> "str | None":
    """The SIMD target numpy's float32 tanh dispatches to on this CPU ("X86_V4" or "AVX512_SKX" for AVX-512,
    "X86_V3" or "AVX2" ...), None where this numpy cannot say (numpy.lib.introspect is numpy >= 2.0)."""
    try:
        from numpy.lib.introspect import opt_func_info

        current = str(opt_func_info(func_name="^tanh$", signature="float32")["tanh"]["ff"]["current"])
        # a numpy built for the target as its baseline says so: "baseline(X86_V4)"
        return current[len("baseline("):-1] if current.startswith("baseline(") and current.endswith(")") else current
    except Exception:  # an older numpy, or a layout this code does not know: its CPU features, below
        pass
    try:  # numpy 1.x: its float32 tanh has AVX-512 (SKX) code, used where the CPU has those features
        from numpy.core._multiarray_umath import __cpu_features__

        return "AVX512_SKX" if __cpu_features__.get("AVX512_SKX") else None
    except Exception:
        return None


def simd_text() -> str:
    """The vector instructions the CPU code runs here, which decide which CPU tanh is fast: torch's kernels'
    ("AVX2", "AVX512", ...) and numpy's float32 tanh's target; e.g. "torch AVX2, numpy tanh X86_V3"."""
    try:
        import torch

        torch_simd = torch.backends.cpu.get_cpu_capability()
    except Exception:
        torch_simd = None
    return f"torch {torch_simd or 'unknown'}, numpy tanh {numpy_tanh_target() or 'unknown'}"
