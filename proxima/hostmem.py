"""Host memory of the CPU hot loop: keep freed tensor memory in the process.

PyTorch's CPU tensors come from the C library's malloc. glibc serves a block of 128 KiB or more
with its own ``mmap`` and gives it back with ``munmap`` when it is freed (and trims the top of the
heap likewise), so a PPO minibatch step, which frees and allocates the same few MB of activations
and gradients over and over, takes a page fault and a kernel zero-fill for every 4 KiB of every new
tensor: ~9,000-11,000 minor faults per iteration at 4,096 CartPole envs against 2-1,200 with the
memory kept; 1.12x (0.85-1.27) the training steps/s kept before the CPU MLP kernel (mlp_cpu.py),
1.05x (0.64-1.19) with it, within this machine's noise (docs/performance.md;
``benchmarks/hostmem.py``, benchmarks/results/hostmem-cpu.md). jemalloc and tcmalloc, which PyTorch's CPU
performance guide recommends preloading, keep it by design; this does the same with glibc's own
``mallopt`` (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD), without preloading anything.

Process-wide and one-way (glibc has no call that restores its adaptive threshold), like a
preloaded allocator: the process keeps its peak heap until it exits. A no-op where the C library
is not glibc (macOS, musl): ``keep_freed_memory`` then returns False.
"""

from __future__ import annotations

import ctypes
import ctypes.util

#: glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: blocks below this come from the heap and are reused; older glibc versions refuse more than
#: 32 MiB (HEAP_MAX_SIZE / 2), which is then used instead
MMAP_THRESHOLDS = (1 << 30, 32 * 1024 * 1024)
#: never trim the top of the heap below this much free memory
TRIM_THRESHOLD = 1 << 30

_applied = False


def keep_freed_memory() -> bool:
    """Make glibc keep freed blocks (below 1 GiB, or 32 MiB on older glibc) for reuse; True once
    applied (idempotent), False where the C library is not glibc or refuses."""
    global _applied
    if _applied:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        gnu_version = libc.gnu_get_libc_version  # glibc only: musl and macOS have no such symbol
    except (OSError, AttributeError):
        return False
    del gnu_version
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success, 0 on error
    mmap_ok = any(mallopt(M_MMAP_THRESHOLD, value) for value in MMAP_THRESHOLDS)
    _applied = mmap_ok and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _applied


def applied() -> bool:
    """Whether this process keeps freed memory (``keep_freed_memory`` succeeded)."""
    return _applied
