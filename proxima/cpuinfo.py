"""What the CPU is, and how much of it (and of memory) this process may use, read from the OS: no torch,
no settings, so any module (doctor among them, which must report a bad PROXIMA_CPU_TANH rather than
fail on it) can read it."""

from __future__ import annotations

import math
import os
import platform
from pathlib import Path
from typing import Optional


def cpuinfo(key: str) -> str:
    """The value of the first ``key`` line of Linux's /proc/cpuinfo ("vendor_id", "model name", ...;
    the whole name before the colon, in any case: "model" is not "model name"); "" elsewhere."""
    key = key.strip().lower()
    try:
        with open("/proc/cpuinfo") as f:
            for row in f:
                name, colon, value = row.partition(":")
                if colon and name.strip().lower() == key:
                    return value.strip()
    except OSError:
        pass
    return ""


def cpu_model() -> str:
    """The CPU's model name ("AMD EPYC 7R13 Processor", "Intel(R) Xeon(R) Platinum 8480+") where the OS
    says it (Linux's /proc/cpuinfo "model name", else platform.processor(): Windows' "Intel64 Family 6
    Model 85 ..."), for telling one benchmark machine from another; where neither names one (arm64
    Linux), the architecture ("aarch64"); "" where nothing is known."""
    return cpuinfo("model name") or platform.processor() or platform.machine()


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


# ------------------------------------------------------------------ what this process may use

#: where the cgroup file systems are mounted, and this process's own cgroups: module values so that
#: tests can point them at a fake tree
CGROUP_ROOT = "/sys/fs/cgroup"
SELF_CGROUP = "/proc/self/cgroup"
#: a memory limit at or above this is none: cgroup v1 writes "no limit" as LONG_MAX rounded down to a page
NO_LIMIT = 1 << 60


def _words(path: Path) -> Optional[list]:
    """The whitespace-separated words of a small kernel file; None where it cannot be read. A cgroup
    file that is missing, unreadable or not text limits nothing: the caller then ignores it."""
    try:
        with open(path, encoding="ascii") as f:
            return f.read(65536).split()
    except (OSError, ValueError):  # ValueError: bytes that are not ASCII (UnicodeDecodeError)
        return None


def _number(path: Path) -> Optional[int]:
    """The one integer ``path`` holds, None otherwise (missing, "max", garbage)."""
    words = _words(path)
    try:
        return int(words[0]) if words is not None and len(words) == 1 else None
    except ValueError:
        return None


def _cgroup_dirs(controller: str, root=None) -> list:
    """The directories whose ``controller`` limits bind this process: its own cgroup's and each one
    above it up to the mount, those that exist. A container shows its own cgroup as the mount
    (while /proc/self/cgroup may name the host's path for it), and a limit set on a parent (a
    systemd slice) binds every cgroup under it, hence the walk. [] where there is no cgroup file system."""
    root = Path(CGROUP_ROOT if root is None else root)
    # cgroup v2 is mounted there; else v1 (or hybrid): one mount per controller
    unified = (root / "cgroup.controllers").is_file()
    if unified:
        mount = root
    else:
        try:
            names = sorted(os.listdir(root))
        except OSError:
            return []
        mount = next((root / n for n in names if controller in n.split(",") and (root / n).is_dir()), None)
        if mount is None:
            return []
    own = ""
    try:
        with open(SELF_CGROUP, encoding="utf-8", errors="replace") as f:
            for line in f:
                hierarchy, _, rest = line.rstrip("\n").partition(":")
                controllers, _, path = rest.partition(":")
                if (controllers == "" and hierarchy == "0") if unified else controller in controllers.split(","):
                    own = path
                    break
    except OSError:
        pass
    # "/.." leads out of a cgroup namespace (a cgroup outside the container's): only the mount is ours to read
    own = own.strip("/") if ".." not in own.split("/") else ""
    dirs, here = [], mount / own if own else mount
    while True:
        if here.is_dir():
            dirs.append(here)
        if here == mount or mount not in here.parents:
            return dirs
        here = here.parent


def _dirs(controller: str, root) -> list:
    """_cgroup_dirs, [] where the tree cannot be read (pathlib's is_dir raises on EACCES)."""
    try:
        return _cgroup_dirs(controller, root)
    except (OSError, ValueError):
        return []


def cgroup_cpus(root=None) -> Optional[int]:
    """The CPUs a cgroup CPU quota allows (``docker --cpus=1.5``: 2), None where none is set or readable."""
    found = []
    for d in _dirs("cpu", root):
        words = _words(d / "cpu.max")  # v2: "QUOTA PERIOD", or "max PERIOD" for none
        if words is not None and len(words) == 2:
            quota, period = words
        else:  # v1: a quota of -1 is none
            quota, period = _number(d / "cpu.cfs_quota_us"), _number(d / "cpu.cfs_period_us")
        try:
            quota, period = int(quota), int(period)
        except (TypeError, ValueError):
            continue
        if quota > 0 and period > 0:
            found.append(max(1, math.ceil(quota / period)))
    return min(found) if found else None


def usable_cpus(root=None) -> int:
    """The CPUs this process may use: the fewest of the machine's, its affinity mask's (``taskset``,
    a cpuset) and its cgroup quota's (``docker --cpus``). Reads files: call it once per command,
    never per step."""
    counts = [os.cpu_count() or 1]
    try:
        counts.append(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS and Windows have no affinity mask
        pass
    quota = cgroup_cpus(root)
    if quota is not None:
        counts.append(quota)
    return max(1, min(counts))


def cpus_text(cpus: int) -> str:
    """How a limit names ``cpus`` (usable_cpus): "this machine's 8 CPUs", or where the affinity mask or
    a cgroup allows fewer than the machine has, "the 2 CPUs this process may use"."""
    plural = "s" if cpus != 1 else ""
    if cpus >= (os.cpu_count() or 1):
        return f"this machine's {cpus} CPU{plural}"
    return f"the {cpus} CPU{plural} this process may use"


def cgroup_free_memory(root=None) -> Optional[int]:
    """Bytes this process's cgroups still let it allocate: the least, over its cgroup and each above it
    with a memory limit, of the limit less the memory in use, less the page cache on the file LRU lists
    (active_file + inactive_file: the kernel reclaims both before its OOM killer acts, and /proc/meminfo's
    MemAvailable counts them as available; shmem is on the anon lists, so it stays counted as used). None
    where no limit is set or readable. Past the limit the OOM killer sends SIGKILL, with no message,
    whatever /proc/meminfo says."""
    found = []
    for d in _dirs("memory", root):
        if _words(d / "memory.max") is not None:  # v2 ("max": none)
            limit, usage, cache_keys = (_number(d / "memory.max"), _number(d / "memory.current"),
                                        ("active_file", "inactive_file"))
        else:  # v1
            limit, usage, cache_keys = (_number(d / "memory.limit_in_bytes"), _number(d / "memory.usage_in_bytes"),
                                        ("total_active_file", "total_inactive_file"))
        if limit is None or usage is None or not 0 <= limit < NO_LIMIT:
            continue
        stat = _words(d / "memory.stat") or []
        values = {stat[i]: stat[i + 1] for i in range(0, len(stat) - 1, 2)}
        cache = sum(int(values[k]) for k in cache_keys if values.get(k, "").isdigit())
        found.append(max(0, limit - max(0, usage - cache)))
    return min(found) if found else None
