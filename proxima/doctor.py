"""`proxima doctor`: what this machine can do for training, and what to fix when it can't.

`collect()` probes Python, torch, CUDA/cuDNN/NCCL, GPUs, bf16 (and whether in hardware or
emulated), torch.compile (its C++ compiler, tried on a one-line build that includes Python.h, and
where its caches go), distributed backends, CPU threads, the CPU's vendor and tanh (tanh_cpu.MODE)
and optional packages. Every probe
is wrapped: on a strange machine a probe reports None/False and leaves a hint; `collect()` itself
never raises. Nothing here allocates more than a few bytes on a device, so it runs in a few seconds
(most of it is `import torch`, then about half a second for the test build).

    proxima doctor                 human-readable report, hints at the end
    proxima doctor --json          one JSON object (the dict collect() returns)
    proxima doctor --require-cuda  the report, then a one-line reason on stderr and exit 1 when CUDA is not usable

A stdout that takes nothing (a full disk) is one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import glob
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any, Callable

from .config import CPU_BF16_SPEED, CPU_COMPILE_SPEED, install_hint, pip  # the speed words: config's help says them too
from .cpuinfo import cpu_model, cpu_vendor, cpuinfo, simd_text, usable_cpus

TORCH_PIN = "2.13.0"
CXX_CHECK_TIMEOUT = 30.0  # seconds for the one-line test build (about 0.5 s with a working g++)


# package -> how to install it when it is missing (install_hint(""): Proxima's core dependencies, at the locked versions)
OPTIONAL_PACKAGES = {
    "gymnasium": install_hint(""),
    "tensorboard": install_hint(""),
    "matplotlib": install_hint(""),
    "pyyaml": install_hint(""),
    "tqdm": install_hint(""),
    "mujoco": install_hint("mujoco"),
    "box2d": install_hint("box2d"),
    "envpool": install_hint("atari"),
    "ale-py": install_hint("atari"),
    "opencv": install_hint("atari"),
    "imageio": install_hint("video"),
    "imageio-ffmpeg": install_hint("video"),
    "pygame": install_hint("video"),
    "transformers": install_hint("rlhf"),
    "peft": install_hint("rlhf"),
}

_WHAT_NEEDS = {
    "gymnasium": "needed for Gymnasium env ids",
    "tensorboard": "a core dependency: commands other than doctor refuse to start without it",
    "matplotlib": "a core dependency: commands other than doctor refuse to start without it",
    "pyyaml": "a core dependency: commands other than doctor refuse to start without it",
    "tqdm": "a core dependency: commands other than doctor refuse to start without it",
    "mujoco": "needed for MuJoCo envs such as HalfCheetah-v5",
    "box2d": "needed for Box2D envs such as LunarLander-v3",
    "envpool": "the fast Atari backend, --backend envpool; else Atari uses ale-py",
    "ale-py": "needed for Atari envs such as Pong-v5 without EnvPool",
    "opencv": "needed with ale-py for Atari envs without EnvPool",
    "imageio": "needed for `proxima eval --video` without Pillow",
    "imageio-ffmpeg": "needed for MP4/WebM videos; without it --video writes a GIF",
    "transformers": "needed for `proxima rlhf`",
    "pygame": "needed for `proxima eval --video` of Gymnasium envs (CartPole, LunarLander, ... draw with it)",
    "peft": "needed for LoRA in `proxima rlhf`",
}

# package -> (the module it is imported as, the distributions whose version is reported). The
# packages in _FIND_ONLY are slow to import and only looked up (found on sys.path counts as
# importable); the others are imported, so a wheel built for another platform shows up here.
_MODULES = {
    "gymnasium": ("gymnasium", ("gymnasium",)),
    "tensorboard": ("tensorboard", ("tensorboard",)),
    "matplotlib": ("matplotlib", ("matplotlib",)),
    "pyyaml": ("yaml", ("PyYAML",)),
    "tqdm": ("tqdm", ("tqdm",)),
    "mujoco": ("mujoco", ("mujoco",)),
    "box2d": ("Box2D", ("box2d", "box2d-py", "Box2D")),
    "envpool": ("envpool", ("envpool",)),
    "ale-py": ("ale_py", ("ale-py",)),
    "opencv": ("cv2", ("opencv-python-headless", "opencv-python", "opencv-contrib-python-headless", "opencv-contrib-python")),
    "imageio": ("imageio", ("imageio",)),
    "imageio-ffmpeg": ("imageio_ffmpeg", ("imageio-ffmpeg",)),
    "transformers": ("transformers", ("transformers",)),
    "pygame": ("pygame", ("pygame-ce", "pygame")),
    "peft": ("peft", ("peft",)),
}
_FIND_ONLY = {"transformers", "peft", "tensorboard", "matplotlib", "pygame"}  # pygame's import prints a banner


def module_name(package: str) -> str:
    """The module ``package`` (a key of OPTIONAL_PACKAGES: "box2d") is imported as ("Box2D")."""
    return _MODULES[package][0]


def module_found(name: str) -> bool:
    """Whether the module ``name`` is found on sys.path, without importing it (importlib.util.find_spec): False,
    not an error, for one whose parent fails to import or that sys.modules sets to None."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _probe(errors: dict, name: str, fn: Callable[[], Any], default: Any = None) -> Any:
    """Run one probe; on any exception record it and return `default`."""
    try:
        return fn()
    except BaseException as e:  # noqa: BLE001 - a probe must never take the report down
        if isinstance(e, KeyboardInterrupt):
            from .signals import TrainingInterrupted

            # a run's stop landing in meta.json's probes stays a probe's failure, as before it was a KeyboardInterrupt:
            # OutsideLoop kept its signal and raises it as the loop starts, where the run's own cleanup is tested
            if not isinstance(e, TrainingInterrupted):
                raise
        _record(errors, name, e)
        return default


def _record(errors: dict, name: str, e: BaseException) -> None:
    errors[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"


def _version_str(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, (tuple, list)):
        return ".".join(str(p) for p in v)
    if isinstance(v, int) and v > 1000:  # cuDNN style: 90100 -> 9.1.0, 8902 -> 8.9.2
        major = v // 10000 if v >= 10000 else v // 1000
        rest = v % 10000 if v >= 10000 else v % 1000
        return f"{major}.{rest // 100}.{rest % 100}"
    return str(v)


def inductor_cxx() -> tuple[str | None, str]:
    """The C++ compiler torch.compile's CPU backend (inductor) will use, found as
    ``torch._inductor.cpp_builder.get_cpp_compiler`` finds it, without running or importing anything
    (importing torch._inductor costs seconds; ``--compile`` checks this before every start).

    Inductor tries, in order, ``torch._inductor.config.cpp.cxx``: ``(None, $CXX or "g++")`` as read
    when that module was first imported. ``None`` is a gcc it downloads with conda, only when
    $TORCH_INDUCTOR_INSTALL_GXX is set on Linux; a name is run as ONE program (``[cxx, "--version"]``,
    no arguments, looked up on PATH as shutil.which does), and a set $CXX is the only name tried: it
    never falls back to g++. Returns ``(path, "")``, or ``(None, why)``: one clause saying what was
    not found and what to do, for ``--compile``'s refusal and doctor's hint."""
    default = "clang++" if sys.platform == "darwin" else ("cl" if sys.platform == "win32" else "g++")
    config = sys.modules.get("torch._inductor.config")  # read only when something already imported it
    env = os.environ.get("CXX")
    try:
        cxx = config.cpp.cxx if config is not None and sys.platform != "win32" else (None, env if env is not None else default)
    except AttributeError:
        cxx = (None, env if env is not None else default)
    search = tuple(cxx) if isinstance(cxx, (list, tuple)) else (cxx,)
    for name in search:
        if name is None:
            if sys.platform == "linux" and os.environ.get("TORCH_INDUCTOR_INSTALL_GXX"):
                conda = shutil.which(os.environ.get("CONDA_EXE", "conda"))
                if conda:
                    return conda, ""  # inductor installs gcc with it on first use
            continue
        found = shutil.which(name) if isinstance(name, str) and name.strip() else None
        if found:
            return found, ""
    names = [n for n in search if n is not None]
    if not (len(names) == 1 and names[0] == (env if env is not None else default)):
        return None, (f"torch._inductor.config.cpp.cxx = {cxx!r} names no installed compiler: "
                      "set it to one, or leave it unset to use $CXX or g++")
    if env is None:
        return None, f"none found: {default} is not on PATH; install {default} or set CXX to one"
    if not env.strip():
        return None, "CXX is set but empty: unset it or set it to a compiler"
    shown = f"CXX={env}" if env == env.strip() and " " not in env else f"CXX={env!r}"
    if len(env.split()) > 1:
        return None, (f"{shown} not found: inductor runs $CXX as one program, without arguments; "
                      "set CXX to the compiler itself")
    fallback = shutil.which(default)
    fix = f"unset it to use {fallback}" if fallback else f"install {default} and unset CXX"
    return None, f"{shown} not found, and inductor tries no other compiler while CXX is set: set CXX to an installed one or {fix}"


def python_headers() -> tuple[str | None, str]:
    """Python.h, which every C++ kernel inductor builds includes (and triton's launchers on a GPU):
    looked up in the folders ``torch._inductor.cpp_builder._get_python_related_args`` passes with -I
    (sysconfig's "include" path, with a macOS framework's Headers in its place when it does not
    exist, and the "include" of the posix_prefix scheme), nothing imported or run. A Debian or Ubuntu
    Python without its -dev package has the folder name but not the file, and inductor then fails
    with a C++ compiler error deep inside the first compiled call. Returns ``(path of Python.h, "")``,
    or ``(None, why)``: one clause naming the folder and the package to install."""
    first = Path(sysconfig.get_path("include"))
    if not first.exists() and platform.system() == "Darwin":
        first = (Path(sysconfig.get_path("stdlib")).parent.parent / "Headers").absolute()
    folders = [first]
    extra = sysconfig.get_path("include", scheme="nt" if sys.platform == "win32" else "posix_prefix")
    if extra:
        folders.append(Path(extra))
    for folder in folders:
        if (folder / "Python.h").is_file():
            return str(folder / "Python.h"), ""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if sys.platform == "linux":
        fix = (f"install python{version}-dev on Debian or Ubuntu, python{version}-devel on Fedora, "
               "or your distribution's Python headers")
    else:
        fix = f"install a Python {version} that ships its C headers"
    return None, f"Python.h is not in {first}: {fix}"


def cxx_problem(cxx: str, python_h: str | None) -> str:
    """"" when ``cxx`` (inductor_cxx's) runs as inductor first runs it (``cxx --version``) and builds a
    one-line shared library that includes Python.h (``python_h``'s folder with -I, as inductor's CPU
    kernels do; without ``python_h``, the compiler alone), else one clause: the compiler and the first
    line of its error. Finding the file proved nothing: a broken toolchain (wrong $CXX, a conda
    compiler without its sysroot, missing libstdc++ headers) passed, and ``train --compile`` died in
    the first compiled call a hundred lines of traceback later. Not checked on Windows (cl's flags
    differ) nor for the conda that installs gcc. Cached per process: about half a second."""
    if sys.platform == "win32":
        return ""
    if os.environ.get("TORCH_INDUCTOR_INSTALL_GXX") and cxx == shutil.which(os.environ.get("CONDA_EXE", "conda")):
        return ""  # inductor's conda download of gcc: no compiler to try yet
    return _cxx_problem(cxx, str(Path(python_h).parent) if python_h else "")


@functools.lru_cache(maxsize=None)
def _cxx_problem(cxx: str, include: str) -> str:
    def first_line(out: str, err: str, code: int) -> str:
        text = (err or "").strip() or (out or "").strip()
        return text.splitlines()[0].strip() if text else f"exit status {code}, no message"

    what = "a one-line C++ file that includes Python.h" if include else "a one-line C++ file"
    with tempfile.TemporaryDirectory(prefix="proxima-cxx-") as tmp:
        source = Path(tmp) / "probe.cpp"
        source.write_text(("#include <Python.h>\n" if include else "") +
                          '#include <cmath>\nextern "C" double proxima_probe(double x) { return std::tanh(x); }\n')
        commands = [([cxx, "--version"], f"`{cxx} --version` (inductor's own check) fails"),
                    ([cxx, *([f"-I{include}"] if include else []), "-shared", "-fPIC", str(source), "-o",
                      str(Path(tmp) / "probe.so")], f"c++ {cxx} fails to build {what}")]
        for command, failed in commands:
            try:
                # a session of its own: on a timeout the compiler's children (cc1plus, as) are killed too,
                # else they hold the pipes open and the wait goes on past the timeout
                proc = subprocess.Popen(command, cwd=tmp, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
            except OSError as e:  # not executable, a bad #! line
                return f"{failed}: {e.strerror or type(e).__name__}"
            try:
                out, err = proc.communicate(timeout=CXX_CHECK_TIMEOUT)
            except BaseException as e:  # a Ctrl-C too: the compiler's own session does not get it
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                if isinstance(e, subprocess.TimeoutExpired):
                    return f"{failed}: no answer in {CXX_CHECK_TIMEOUT:g} s"
                raise
            if proc.returncode != 0:
                return f"{failed}: {first_line(out, err, proc.returncode)}"
    return ""


def cpu_bf16_native() -> tuple[bool | None, str]:
    """Whether this CPU has bf16 arithmetic in hardware, from the flags Linux lists in /proc/cpuinfo:
    x86's avx512_bf16 or amx_bf16, Arm's bf16. Without them torch still computes bf16 (collect()'s
    probe passes), converting to and from float32 in software: slower than float32 itself (--amp
    bf16 trained about 9x slower than fp32 on an AVX2 EPYC). Returns ``(True, the flags
    found)``, ``(False, the flags looked for)``, or ``(None, "")`` where the OS lists no flags."""
    x86 = cpuinfo("flags")
    listed = x86 or cpuinfo("features")
    if not listed:
        return None, ""
    wanted = ("avx512_bf16", "amx_bf16") if x86 else ("bf16",)
    found = [flag for flag in wanted if flag in listed.split()]
    return (True, ", ".join(found)) if found else (False, " or ".join(wanted))


def _compile_cache_dir() -> str:
    """The on-disk torch.compile cache --compile uses, as a plain path (``doctor --json``)."""
    from .accel import compile_cache_dir

    return str(compile_cache_dir())


def _precompiled_header_dir() -> str:
    """Where --compile puts inductor's precompiled headers (accel.precompiled_header_dir)."""
    from .accel import precompiled_header_dir

    return str(precompiled_header_dir())


def _compile_cache_problem() -> str:
    """What --compile checks before importing inductor (accel.setup_compile_cache), the folders it
    creates for that removed again."""
    from .accel import compile_cache_problem

    return compile_cache_problem(keep=False)


def _compile_cache(problem: str = "") -> str:
    """The on-disk torch.compile cache --compile uses (accel.compile_cache_dir), and its size;
    ``problem``: accel.compile_cache_problem's, when it cannot be created or written."""
    from .accel import compile_cache_dir

    path = compile_cache_dir()
    if problem:
        return f"{path} (not usable: see the hints)"
    if not path.is_dir():
        return f"{path} (empty: the first --compile run fills it)"
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return f"{path} ({size / 2**20:.1f} MiB)"


def _pkg_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _package(name: str) -> tuple[str | None, bool, str]:
    """(version or None, importable, why not importable) of one OPTIONAL_PACKAGES entry."""
    import importlib

    module, dists = _MODULES[name]
    version = next((v for v in (_pkg_version(d) for d in dists) if v), None)
    if not module_found(module):
        return version, False, "not found"
    if name in _FIND_ONLY:
        return version, True, ""
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # a wheel for another platform, a missing shared library, ...
        text = str(e).strip().splitlines()
        return version, False, f"{type(e).__name__}: {text[0] if text else ''}".strip().rstrip(":")
    return version or str(getattr(mod, "__version__", "") or "") or "unknown version", True, ""


def _ffmpeg_info() -> dict:
    """imageio-ffmpeg's ffmpeg as ``eval --video`` finds it (video.ffmpeg_status: one run of the binary,
    a short timeout, cached): its path, whether it runs and why not, and what ``eval --video FILE.mp4``
    writes: "mp4", "gif" (the fallback, said before the episodes) or "refused" (no libx264 encoder)."""
    from . import video

    exe, problem = video.ffmpeg_status()
    writes = "gif" if video.mp4_problem() else "mp4" if "libx264" in video._ffmpeg_encoders() else "refused"
    return {"path": exe, "runs": not problem, "problem": problem or None, "eval_video": writes}


def _ffmpeg_row(version: str, ff: dict) -> str:
    """The imageio-ffmpeg row: importable, and whether its ffmpeg runs and what eval --video writes."""
    if ff.get("problem"):
        return f"{version}, importable, but eval --video writes a GIF instead of MP4: {ff['problem']}"
    runs = f"{version}, importable; its ffmpeg runs ({ff.get('path')})"
    if ff.get("eval_video") == "refused":
        return f"{runs} but has no libx264 encoder: eval --video FILE.mp4 is refused, FILE.gif works"
    if ff.get("eval_video") == "gif":
        return f"{runs}; eval --video writes a GIF instead of MP4 until imageio is installed"
    return f"{runs}: eval --video writes MP4"


def collect(device: Any = None, threads: int | None = None, test_build: bool = True) -> dict:
    """Probe the machine; return a JSON-serialisable dict (see module docstring). Never raises.

    A run's meta.json records it with its own ``device`` (the CUDA device the tiny op runs on:
    probing the current one from a --device cuda:1 run would hold a context on GPU 0 for the run's
    life; None: the current one; a CPU device: none, cuda_usable None, "not probed") and ``threads`` (its --threads, recorded as
    torch_threads: this thread's count is a side thread's threads // 2 by then). ``test_build`` False
    (a run's meta.json) skips the C++ test build (cxx_problem: half a second or more of compiling at every
    run's start); --compile's own start-up check (trainer._check_compile) builds it where it matters."""
    errors: dict[str, str] = {}
    hints: list[str] = []
    from . import __version__

    info: dict[str, Any] = {
        "proxima": __version__,
        "python": _probe(errors, "python", lambda: platform.python_version()),
        "python_implementation": _probe(errors, "python", platform.python_implementation),
        "python_executable": sys.executable,
        "platform": _probe(errors, "platform", platform.platform),
        "machine": _probe(errors, "platform", platform.machine),
        "torch": None,
        "torch_build": None,
        "cuda_usable": False,
        "cuda": None,
        "cuda_driver": None,
        "cudnn": None,
        "nccl": None,
        "gpu_count": 0,
        "gpus": [],
        "bf16": False,
        "bf16_native": None,  # bf16 in hardware (None: not known); False: emulated, slower than fp32
        "bf16_flags": None,  # the CPU flags that say so: those found, or (not native) those looked for
        "compile": {"cxx": None, "cxx_error": None, "python_h": None, "triton": None, "ok": False, "cache": None, "cache_dir": None,
                    "precompiled_headers": None},
        "distributed": {"gloo": False, "nccl": False, "mpi": False},
        "gloo_ifname_problem": None,  # GLOO_SOCKET_IFNAME's problem (distributed.check_socket_ifname), None: none
        "nccl_ifname_problem": None,  # NCCL_SOCKET_IFNAME's where CUDA and NCCL are (distributed.check_nccl_ifname)
        "cpu_count": _probe(errors, "cpu_count", os.cpu_count),
        # the affinity mask (taskset, a cpuset), and what this process may use: that and the cgroup quota
        "cpu_affinity": _probe(
            errors, "cpu_affinity", lambda: len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        ),
        "usable_cpus": _probe(errors, "usable_cpus", usable_cpus),
        "torch_threads": None,
        "cpu_model": _probe(errors, "cpu_model", cpu_model) or None,
        "cpu_vendor": None,
        "cpu_tanh": None,
        "cpu_simd": None,
        "packages": {},
        "importable": {},
        "hints": hints,
        "errors": errors,
    }

    torch = _probe(errors, "torch", lambda: __import__("torch"))
    if torch is None:
        hints.append(f"torch not importable ({errors.get('torch', 'unknown error')}): {_torch_install(_pkg_version('torch'))}")
    else:
        _collect_torch(torch, info, errors, hints, device)
        if threads is not None:
            info["torch_threads"] = int(threads)
        _check_settings(errors, hints)

    compile_info = info["compile"]
    cxx_found, cxx_why = _probe(errors, "cxx", inductor_cxx, (None, "the compiler probe failed"))
    compile_info["cxx"] = cxx_found
    python_h, python_h_why = _probe(errors, "python_h", python_headers, (None, "the Python.h probe failed"))
    compile_info["python_h"] = python_h
    if cxx_found is not None and test_build:  # built with, not only found: a broken compiler is a "no" with its error
        cxx_error = _probe(errors, "cxx", lambda: cxx_problem(cxx_found, python_h), "the test build failed to start")
        compile_info["cxx_error"] = cxx_error or None
    cache_problem = _probe(errors, "compile_cache", _compile_cache_problem, "")
    compile_info["cache"] = _probe(errors, "compile_cache", lambda: _compile_cache(cache_problem))  # for people: the path and its size
    compile_info["cache_dir"] = _probe(errors, "compile_cache", _compile_cache_dir)  # for programs (--json): the path
    compile_info["precompiled_headers"] = _probe(errors, "compile_cache", _precompiled_header_dir)
    compile_info["triton"] = _probe(errors, "triton", lambda: _pkg_version("triton")) or _probe(
        errors, "triton", lambda: _pkg_version("pytorch-triton")
    )
    if info["cuda_usable"] and compile_info["triton"] is not None:
        # On GPU inductor generates triton kernels: it must be importable from this interpreter.
        # (find_spec, not import: importing triton costs about a second.)
        if _probe(errors, "triton", lambda: importlib.util.find_spec("triton")) is None:
            compile_info["triton"] = None
    if compile_info["cxx"] is None:
        hints.append(f"torch.compile unavailable (it needs a C++ compiler on the CPU): {cxx_why}; train with compile off")
    elif compile_info["cxx_error"]:
        hints.append(f"torch.compile unavailable (it builds C++ kernels on the CPU): {compile_info['cxx_error']}; "
                     "fix or reinstall that compiler, or set CXX to one that works, or train with compile off")
    if python_h is None:
        hints.append(f"torch.compile unavailable (its C++ kernels include Python.h): {python_h_why}; train with compile off")
    if info["cuda_usable"] and compile_info["triton"] is None:
        hints.append(f"torch.compile on GPU unavailable: triton not importable; {pip()} install triton (matching torch)")
    if cache_problem:
        hints.append(f"torch.compile unavailable: {cache_problem}; or train with compile off")
    compile_info["ok"] = torch is not None and compile_info["cxx"] is not None and not compile_info["cxx_error"] and python_h is not None and (
        not info["cuda_usable"] or compile_info["triton"] is not None
    ) and not cache_problem
    if compile_info["ok"] and not info["cuda_usable"]:
        # as bf16's hint: what works is not what is fast, and a CPU run's compile is minutes on a cold cache
        hints.append(f"torch.compile works on this CPU, but on CPUs {CPU_COMPILE_SPEED}, plus about a minute of "
                     "compiling on a cold cache: measure first with proxima bench ENV_ID --compile")

    for name, how in OPTIONAL_PACKAGES.items():
        version, importable, why = _probe(errors, f"package:{name}", lambda n=name: _package(n), (None, False, "probe failed"))
        info["packages"][name], info["importable"][name] = version, importable
        if how.startswith("pip "):  # the running interpreter's pip, as the torch hints say
            how = pip() + how[3:]
        if version is None and not importable:
            hints.append(f"{name} not installed: {how} ({_WHAT_NEEDS[name]})")
        elif not importable:
            hints.append(f"{name} {version} is installed but does not import ({why}): {how} ({_WHAT_NEEDS[name]})")
    if info["importable"].get("imageio-ffmpeg") and test_build:  # run, not only imported: doctor's, not meta.json's
        info["ffmpeg"] = _probe(errors, "ffmpeg", _ffmpeg_info)

    for probe, err in errors.items():
        if probe != "torch":
            hints.append(f"probe {probe} failed: {err}")
    return info


def _check_settings(errors: dict, hints: list) -> None:
    """Proxima's environment variables that train refuses, each a hint saying what to set: a
    setting to fix, not a probe that failed."""
    from .config import ConfigError

    try:
        from .distributed import dist_timeout

        dist_timeout()  # read only: what `train --nproc K` refuses before starting torchrun
    except ConfigError as e:
        hints.append(str(e))
    except Exception as e:  # noqa: BLE001 - a distributed module that does not import: a probe failure
        _record(errors, "dist_timeout", e)


def _collect_torch(torch, info: dict, errors: dict, hints: list, device: Any = None) -> None:
    info["torch"] = str(torch.__version__)
    info["torch_threads"] = _probe(errors, "torch_threads", torch.get_num_threads)
    # which tanh the MLPs compute on this CPU (tanh_cpu: MKL's is slow where the CPU is not Intel's)
    info["cpu_vendor"] = _probe(errors, "cpu_vendor", cpu_vendor) or None  # not tanh_cpu's: its import fails on a bad setting
    from .config import ConfigError

    try:
        info["cpu_tanh"] = importlib.import_module("proxima.tanh_cpu").MODE
    except ConfigError as e:  # PROXIMA_CPU_TANH: a setting to fix, worded as train refuses it
        hints.append(str(e))
    except Exception as e:  # noqa: BLE001
        _record(errors, "cpu_tanh", e)
    info["cpu_simd"] = _probe(errors, "cpu_simd", simd_text)  # what decides that choice on a CPU not Intel's
    cuda_built = _probe(errors, "torch_build", lambda: torch.version.cuda)
    hip_built = _probe(errors, "torch_build", lambda: getattr(torch.version, "hip", None))
    if cuda_built:
        info["torch_build"] = f"cuda {cuda_built}"
    elif hip_built:
        info["torch_build"] = f"rocm {hip_built}"
    else:
        info["torch_build"] = "cpu"
    base = info["torch"].split("+")[0]
    if base != TORCH_PIN:
        hints.append(f"torch {info['torch']} differs from the pinned torch=={TORCH_PIN}: {_torch_install(info['torch'])}")

    # --- CUDA ------------------------------------------------------------------------------------
    available = bool(_probe(errors, "cuda", torch.cuda.is_available, False))
    op_error = ""
    # a CPU run's meta.json probes no GPU: the tiny op would hold a CUDA context (hundreds of MiB) on
    # cuda:0 for the run's whole life on a shared GPU machine; None says "not probed"
    cpu_run = device is not None and torch.device(device).type == "cpu"
    if available and cpu_run:
        info["cuda_usable"] = None
    elif available:
        from .device import cuda_op_problem  # the check --device auto and --device cuda make

        op_error = _probe(errors, "cuda", lambda: cuda_op_problem(device), "the tiny-op probe failed")
        info["cuda_usable"] = not op_error
    if cuda_built:
        info["cuda"] = str(cuda_built)
    elif hip_built:
        info["cuda"] = None
    if cuda_built or hip_built:
        info["cudnn"] = _version_str(_probe(errors, "cudnn", torch.backends.cudnn.version))
        if cuda_built:
            info["nccl"] = _version_str(_probe(errors, "nccl", lambda: torch.cuda.nccl.version()))
            drv = getattr(torch._C, "_cuda_getDriverVersion", None)
            if drv is not None and available:
                v = _probe(errors, "cuda_driver", drv)
                if isinstance(v, int) and v > 0:
                    info["cuda_driver"] = f"{v // 1000}.{(v % 1000) // 10}"

    if info["cuda_usable"] is False:  # None: a CPU run's record, which probes no GPU (no hint either way)
        if info["torch_build"] == "cpu" and not nvidia_visible():
            # no GPU to use: the CUDA build (gigabytes) would change nothing on this machine
            hints.append(
                f"CUDA not usable: this torch is a CPU build ({info['torch']}), the right one here: no NVIDIA "
                "GPU or driver is visible (no /dev/nvidia*, no nvidia-smi); on a machine with an NVIDIA GPU "
                f"and driver, {_cuda_install()}"
            )
        elif info["torch_build"] == "cpu":
            hints.append(
                f"CUDA not usable: this torch is a CPU build ({info['torch']}); to train on GPUs, {_cuda_install()}"
            )
        elif not available:
            hints.append(
                f"CUDA not usable: torch is built for {info['torch_build']} but sees no GPU "
                "(no driver, CUDA_VISIBLE_DEVICES hides them, or the container was started without --gpus); "
                "check nvidia-smi"
            )
        else:
            hints.append(f"CUDA not usable: {op_error}; the driver may be too old for CUDA {cuda_built}")

    # --- GPUs ------------------------------------------------------------------------------------
    if available:
        count = int(_probe(errors, "gpu_count", torch.cuda.device_count, 0) or 0)
        info["gpu_count"] = count
        for i in range(count):
            def props(i=i):
                p = torch.cuda.get_device_properties(i)
                return {
                    "index": i,
                    "name": str(p.name),
                    "memory_gib": round(p.total_memory / 2**30, 1),
                    "capability": f"{p.major}.{p.minor}",
                }

            gpu = _probe(errors, f"gpu{i}", props)
            if gpu is not None:
                info["gpus"].append(gpu)

    # --- bf16 ------------------------------------------------------------------------------------
    # "bf16" says whether bf16 works at all; "bf16_native" whether it is fast (None: not known), so
    # a program reading --json keeps its bool
    if info["cuda_usable"]:
        info["bf16"] = bool(_probe(errors, "bf16", torch.cuda.is_bf16_supported, False))
        if info["bf16"]:
            info["bf16_native"] = _probe(
                errors, "bf16", lambda: bool(torch.cuda.is_bf16_supported(including_emulation=False)))
        where = "this GPU"
    else:
        def cpu_bf16():
            a = torch.ones(4, 4, dtype=torch.bfloat16)
            return bool(torch.isfinite((a @ a).float()).all())

        info["bf16"] = bool(_probe(errors, "bf16", cpu_bf16, False))
        native, flags = _probe(errors, "bf16", cpu_bf16_native, (None, ""))
        if info["bf16"]:
            info["bf16_native"] = native
            info["bf16_flags"] = flags or None
        where = "this CPU"
    if not info["bf16"]:
        hints.append(f"bf16 not supported on {where}: train in fp32 (or fp16 AMP on a GPU)")
    elif info["bf16_native"] is False and info["cuda_usable"]:
        hints.append("bf16 on this GPU is emulated (compute capability below 8.0): --amp bf16 is slower than "
                     "fp32 here; use --amp fp16 or none")
    elif info["bf16_native"] is False:
        hints.append(f"bf16 on this CPU is emulated (no {info['bf16_flags']} in /proc/cpuinfo): --amp bf16 trains "
                     "several times slower than fp32 here; keep --amp none on CPU")
    elif info["bf16_native"] and not info["cuda_usable"]:
        # native bf16 is no speed-up for this library's small MLPs: casts cost more than the arithmetic
        # saves, and bf16 skips the CPU MLP kernel (docs/performance.md, "When each switch helps")
        hints.append(f"bf16 on this CPU is native ({info['bf16_flags']}), but on such CPUs too {CPU_BF16_SPEED}: "
                     "measure first with proxima bench ENV_ID --amp bf16")

    # --- distributed -----------------------------------------------------------------------------
    dist = info["distributed"]
    dist_available = bool(_probe(errors, "distributed", lambda: torch.distributed.is_available(), False))
    if dist_available:
        dist["gloo"] = bool(_probe(errors, "gloo", torch.distributed.is_gloo_available, False))
        dist["nccl"] = bool(_probe(errors, "nccl_backend", torch.distributed.is_nccl_available, False))
        dist["mpi"] = bool(_probe(errors, "mpi", torch.distributed.is_mpi_available, False))
    else:
        hints.append("torch.distributed not available in this torch build: torchrun / DDP will not work")
    if dist_available and not dist["gloo"]:
        hints.append("gloo backend not available: CPU torchrun runs will not work")
    if dist["gloo"]:  # a setting every rank would fail on as it joins (distributed.check_socket_ifname)
        _ifname_check(info, hints, errors, "gloo", "check_socket_ifname",
                      "every rank of a torchrun or --nproc run would fail to start")
    if info["cuda_usable"] and not dist["nccl"]:
        hints.append("NCCL backend not available: multi-GPU torchrun would fall back to gloo (slow)")
    if info["cuda_usable"] and dist["nccl"]:  # the ranks' GPU collectives would fail (distributed.check_nccl_ifname)
        _ifname_check(info, hints, errors, "nccl", "check_nccl_ifname",
                      "every rank of a multi-GPU torchrun or --nproc run would fail at its first collective")


def _ifname_check(info: dict, hints: list, errors: dict, backend: str, check: str, consequence: str) -> None:
    """Run distributed's ``check`` of ``{BACKEND}_SOCKET_IFNAME``: its one line becomes a hint (with what it would
    break) and ``info["{backend}_ifname_problem"]``; anything else it raises is recorded, never doctor's crash."""
    from . import distributed
    from .config import ConfigError

    try:
        getattr(distributed, check)()
    except ConfigError as e:
        info[f"{backend}_ifname_problem"] = str(e)
        hints.append(f"{e} ({consequence})")
    except Exception as e:  # noqa: BLE001
        _record(errors, f"{backend}_socket_ifname", e)


def _cuda_install() -> str:
    """A command that puts a CUDA build of the pinned torch in place of a CPU one. On Linux PyPI's torch
    wheel is the CUDA build (README); the CPU build satisfies ``torch==PIN`` too, so pip would keep
    it: uninstalled first (not --force-reinstall, which would reinstall torch's dependencies past
    requirements.lock)."""
    if sys.platform == "linux":
        return (f"install PyPI's CUDA build: {pip()} uninstall -y torch && {pip()} install torch=={TORCH_PIN} "
                "--index-url https://pypi.org/simple")
    return f"install a CUDA build of torch=={TORCH_PIN} (pytorch.org lists the pip line for each platform; none exists for macOS)"


def _torch_install(installed: str | None) -> str:
    """The pip line of the pinned torch. On Linux, for a CPU build (``+cpu``) or a machine that shows no
    NVIDIA GPU, from PyTorch's CPU index: PyPI's Linux wheel is the CUDA build, GBs of CUDA libraries (README)."""
    if sys.platform == "linux" and ("+cpu" in (installed or "") or not nvidia_visible()):
        return f"{pip()} install torch=={TORCH_PIN} --index-url https://download.pytorch.org/whl/cpu"
    return f"{pip()} install torch=={TORCH_PIN}"


def nvidia_visible() -> bool:
    """Whether this machine shows an NVIDIA GPU or driver (a /dev/nvidia* device or nvidia-smi)."""
    return bool(glob.glob("/dev/nvidia*")) or shutil.which("nvidia-smi") is not None


def _yn(flag: Any) -> str:
    return "yes" if flag else "no"


def _or_dash(v: Any) -> str:
    return "-" if v is None else str(v)


def _bf16_text(info: dict) -> str:
    """The bf16 row: whether it works, and whether in hardware or emulated (slow)."""
    if not info.get("bf16"):
        return "no"
    flags = info.get("bf16_flags")
    if info.get("bf16_native") is False:
        where = f"this CPU has no {flags}" if flags else "no native bf16 on this GPU"
        return f"yes, emulated: slower than fp32 ({where})"
    if info.get("bf16_native") and flags:
        return f"yes, native ({flags})"
    return "yes"


def _cxx_text(comp: dict) -> str:
    """The compiler in the torch.compile row: its path, or that it fails and its first error line."""
    error = comp.get("cxx_error")
    if error and comp.get("cxx"):
        detail = error.split(comp["cxx"], 1)[-1].partition(": ")[2]  # the compiler's own line, after the path
        return f"c++ {comp['cxx']} fails: {detail or error}"
    return f"c++: {_or_dash(comp.get('cxx'))}"


def format_report(info: dict) -> str:
    """Aligned human-readable lines, hints at the end."""
    rows: list[tuple[str, str]] = [("proxima", _or_dash(info.get("proxima")))]
    py = f"{_or_dash(info.get('python'))} ({_or_dash(info.get('python_implementation'))})"
    rows.append(("python", py))
    rows.append(("platform", f"{_or_dash(info.get('platform'))} [{_or_dash(info.get('machine'))}]"))
    rows.append(("torch", f"{_or_dash(info.get('torch'))} (build: {_or_dash(info.get('torch_build'))})"))
    usable = info.get("cuda_usable")
    rows.append(("cuda usable", "not probed (a CPU run's record)" if usable is None else _yn(usable)))
    cuda = _or_dash(info.get("cuda"))
    if info.get("cuda_driver"):
        cuda += f" (driver supports {info['cuda_driver']})"
    rows.append(("cuda", cuda))
    rows.append(("cudnn", _or_dash(info.get("cudnn"))))
    rows.append(("nccl", _or_dash(info.get("nccl"))))
    rows.append(("gpus", str(info.get("gpu_count", 0))))
    for gpu in info.get("gpus") or []:
        rows.append(
            (f"  gpu {gpu.get('index')}", f"{gpu.get('name')}, {gpu.get('memory_gib')} GiB, sm {gpu.get('capability')}")
        )
    rows.append(("bf16", _bf16_text(info)))
    comp = info.get("compile") or {}
    rows.append(
        (
            "torch.compile",
            f"{_yn(comp.get('ok'))} ("
            f"{_cxx_text(comp)}, Python.h: "
            f"{'found' if comp.get('python_h') else 'missing'}, "
            f"triton: {_or_dash(comp.get('triton'))})",
        )
    )
    if comp.get("cache"):
        rows.append(("compile cache", comp["cache"]))
    if comp.get("precompiled_headers"):
        rows.append(("compile headers", f"{comp['precompiled_headers']} (inductor's precompiled C++ headers)"))
    dist = info.get("distributed") or {}
    ifname = " (GLOO_SOCKET_IFNAME names no interface with an address: see the hints)" if info.get("gloo_ifname_problem") else ""
    if info.get("nccl_ifname_problem"):
        ifname += " (NCCL_SOCKET_IFNAME selects no interface with an address: see the hints)"
    rows.append(("distributed", ", ".join(f"{k} {_yn(dist.get(k))}" for k in ("gloo", "nccl", "mpi")) + ifname))
    rows.append(
        (
            "cpu",
            f"{_or_dash(info.get('cpu_count'))} cores ({_or_dash(info.get('usable_cpus'))} usable), "
            f"torch's default threads {_or_dash(info.get('torch_threads'))} (train uses --threads, default 1), "
            f"model {_or_dash(info.get('cpu_model'))}, vendor {_or_dash(info.get('cpu_vendor'))}, "
            f"tanh {_or_dash(info.get('cpu_tanh'))} (SIMD: {_or_dash(info.get('cpu_simd'))})",
        )
    )
    importable = info.get("importable") or {}
    for name, version in (info.get("packages") or {}).items():
        if importable.get(name, version is not None) and name == "imageio-ffmpeg" and info.get("ffmpeg"):
            rows.append((name, _ffmpeg_row(version or "unknown version", info["ffmpeg"])))
        elif importable.get(name, version is not None):
            rows.append((name, f"{version or 'unknown version'}, importable"))
        else:
            rows.append((name, f"{version}, installed but not importable" if version else "not installed"))

    width = max(len(k) for k, _ in rows)
    lines = ["proxima doctor"] + [f"  {k.ljust(width)}  {v}" for k, v in rows]
    hints = info.get("hints") or []
    if hints:
        lines.append("hints:")
        lines.extend(f"  - {h}" for h in hints)
    else:
        lines.append("hints: none, all set")
    return "\n".join(lines)


def cuda_reason(info: dict) -> str:
    """One line saying why CUDA is not usable (empty when it is)."""
    if info.get("cuda_usable"):
        return ""
    for h in info.get("hints") or []:
        if h.startswith("CUDA not usable") or h.startswith("torch not importable"):
            return h
    return "CUDA not usable"


def run(args: argparse.Namespace) -> int:
    """Entry point of `proxima doctor`; returns the exit status."""
    from .terminal import machine_stdout

    # --json's object is for a program: a library that prints as the probes import or call it writes to stderr
    with machine_stdout(getattr(args, "json", False)):
        info = collect()
    try:
        print(json.dumps(info, sort_keys=False) if getattr(args, "json", False) else format_report(info))
        sys.stdout.flush()  # a full disk shows here, not in a traceback at exit
    except BrokenPipeError:
        raise  # `proxima doctor | head`: the CLI's exit 141, no traceback
    except OSError as e:
        from .diskspace import stdout_problem

        why = stdout_problem(e, "the report")
        print(f"proxima doctor: error: {why}", file=sys.stderr)
        return 2
    if getattr(args, "require_cuda", False) and not info.get("cuda_usable"):
        reason = cuda_reason(info)
        if "CUDA" not in reason:
            reason = f"CUDA not usable: {reason}"
        print(f"proxima doctor: {reason}", file=sys.stderr)
        return 1
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    parser.add_argument(
        "--require-cuda", action="store_true", help="when CUDA is not usable: the report, then a one-line reason on stderr, exit 1"
    )


def register(subparsers) -> argparse.ArgumentParser:
    """Add the `doctor` subcommand to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "doctor",
        help="report Python, torch, CUDA, GPUs, bf16, torch.compile and package support, with fixes",
        description=__doc__.splitlines()[0],
    )
    add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proxima.doctor", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
