"""proxima.doctor: collect() shape and hints, the report, and the `doctor` subcommand."""

import argparse
import importlib
import json

import pytest
import torch

from proxima import doctor


@pytest.fixture(autouse=True)
def inductor_config_unread(monkeypatch):
    """inductor reads $CXX once, when torch._inductor.config is first imported, and doctor reads that
    module's setting when something in this process imported it (an earlier compile test): hidden
    here, so what a test sets in the environment is what a fresh `proxima doctor` would see."""
    import sys

    monkeypatch.delitem(sys.modules, "torch._inductor.config", raising=False)


def _cuda_works() -> bool:
    try:
        return torch.cuda.is_available() and torch.ones(1, device="cuda").sum().item() == 1.0
    except Exception:
        return False


CUDA = _cuda_works()


def run_cli(argv, capsys):
    """Tiny harness standing in for `proxima doctor`: register() then dispatch to args.func."""
    parser = argparse.ArgumentParser(prog="proxima")
    sub = parser.add_subparsers(dest="command")
    doctor.register(sub)
    args = parser.parse_args(["doctor", *argv])
    rc = args.func(args)
    out, err = capsys.readouterr()
    return rc, out, err


def test_collect_keys_and_types(monkeypatch):
    for name in ("PROXIMA_CPU_TANH", "PROXIMA_DIST_TIMEOUT", "CXX"):  # the developer's settings: not this test's
        monkeypatch.delenv(name, raising=False)
    info = doctor.collect()
    assert isinstance(info["python"], str) and info["python"].count(".") == 2
    assert isinstance(info["platform"], str) and info["platform"]
    assert info["torch"] == torch.__version__
    assert isinstance(info["torch_build"], str)
    assert info["torch_build"] == "cpu" or info["torch_build"].startswith(("cuda ", "rocm "))
    assert isinstance(info["cuda_usable"], bool)
    for key in ("cuda", "cudnn", "nccl", "cuda_driver"):
        assert info[key] is None or isinstance(info[key], str), key
    assert isinstance(info["gpu_count"], int) and isinstance(info["gpus"], list)
    assert len(info["gpus"]) == info["gpu_count"]
    for gpu in info["gpus"]:
        assert isinstance(gpu["name"], str) and isinstance(gpu["memory_gib"], float)
        assert isinstance(gpu["capability"], str) and "." in gpu["capability"]
    assert isinstance(info["bf16"], bool) and info["bf16_native"] in (True, False, None)
    assert info["bf16_flags"] is None or isinstance(info["bf16_flags"], str)
    assert set(info["compile"]) == {"cxx", "cxx_error", "python_h", "triton", "ok", "cache", "cache_dir", "precompiled_headers"}
    assert isinstance(info["compile"]["ok"], bool)
    assert info["compile"]["precompiled_headers"] == __import__("os").path.join(
        __import__("os").path.abspath(info["compile"]["cache_dir"]), "precompiled_headers")
    assert info["compile"]["cache"].startswith(info["compile"]["cache_dir"] + " (")  # the display string starts with the path
    assert "proxima" in info["compile"]["cache"] or "TORCHINDUCTOR_CACHE_DIR" in __import__("os").environ
    assert set(info["distributed"]) == {"gloo", "nccl", "mpi"}
    assert all(isinstance(v, bool) for v in info["distributed"].values())
    assert isinstance(info["cpu_count"], int) and info["cpu_count"] >= 1
    assert isinstance(info["torch_threads"], int) and info["torch_threads"] >= 1
    assert set(info["packages"]) == {"gymnasium", "mujoco", "box2d", "envpool", "ale-py", "opencv", "imageio",
                                     "imageio-ffmpeg", "transformers", "peft", "tensorboard", "matplotlib", "pyyaml",
                                     "pygame", "tqdm"}
    assert all(v is None or isinstance(v, str) for v in info["packages"].values())
    assert set(info["importable"]) == set(info["packages"]) and all(isinstance(v, bool) for v in info["importable"].values())
    assert isinstance(info["hints"], list) and all(isinstance(h, str) and "\n" not in h for h in info["hints"])
    assert info["errors"] == {}, info["errors"]  # no probe failed on this ordinary machine
    json.dumps(info)  # JSON-serialisable as is


@pytest.mark.skipif(CUDA, reason="this machine has a usable CUDA device")
def test_cpu_machine_reports_cuda_not_usable_with_a_hint():
    info = doctor.collect()
    assert info["cuda_usable"] is False
    assert info["gpu_count"] == 0 and info["gpus"] == []
    cuda_hints = [h for h in info["hints"] if h.startswith("CUDA not usable")]
    assert len(cuda_hints) == 1
    if info["torch_build"] == "cpu":
        assert "CPU build" in cuda_hints[0] and "torch==2.13.0" in cuda_hints[0]
        assert info["cuda"] is None and info["cudnn"] is None and info["nccl"] is None
        assert info["distributed"]["nccl"] is False


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a usable CUDA device")
def test_gpu_machine_reports_gpus():
    info = doctor.collect()
    assert info["cuda_usable"] is True and info["gpu_count"] >= 1
    assert not any(h.startswith("CUDA not usable") for h in info["hints"])


#: /proc/cpuinfo's flags of an AVX2 EPYC (bf16 emulated: --amp bf16 trained ~9x slower than fp32 there)
AVX2_FLAGS = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi2 sha_ni"


@pytest.mark.parametrize("flags, native, row, hint", [
    (AVX2_FLAGS, False, "yes, emulated: slower than fp32 (this CPU has no avx512_bf16 or amx_bf16)",
     "bf16 on this CPU is emulated (no avx512_bf16 or amx_bf16 in /proc/cpuinfo): --amp bf16 trains several times "
     "slower than fp32 here; keep --amp none on CPU"),
    (AVX2_FLAGS + " avx512f avx512_bf16", True, "yes, native (avx512_bf16)",
     "bf16 on this CPU is native (avx512_bf16), but on such CPUs too small MLPs trained slower in bf16 than in fp32 in "
     "our runs (docs/performance.md): measure first with proxima bench ENV_ID --amp bf16"),
    (AVX2_FLAGS + " amx_tile amx_bf16", True, "yes, native (amx_bf16)",
     "bf16 on this CPU is native (amx_bf16), but on such CPUs too small MLPs trained slower in bf16 than in fp32 in "
     "our runs (docs/performance.md): measure first with proxima bench ENV_ID --amp bf16"),
    (None, None, "yes", None),  # the OS lists no flags (not Linux): not known, no claim either way
])
def test_cpu_bf16_says_whether_native_or_emulated(flags, native, row, hint, monkeypatch, capsys):
    """The CPU's flags decide the wording (torch computes bf16 either way, so the old probe said "yes"
    on an AVX2 CPU where --amp bf16 was ~9x slower than fp32)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the CPU's bf16, on any machine
    # raising=False: against a doctor that never read the flags this fails on the wording, not on setattr
    monkeypatch.setattr(doctor, "cpuinfo", lambda key: (flags or "") if key == "flags" else "", raising=False)
    info = doctor.collect()
    assert [line.split(None, 1)[1] for line in doctor.format_report(info).splitlines()
            if line.split(None, 1)[:1] == ["bf16"]] == [row]
    assert [h for h in info["hints"] if h.startswith("bf16")] == ([hint] if hint else [])
    assert info["bf16"] is True and info["bf16_native"] is native
    rc, out, _ = run_cli(["--json"], capsys)
    js = json.loads(out)
    assert rc == 0 and js["bf16"] is True and js["bf16_native"] is native  # the bool stays a bool


def test_arm_bf16_flag_counts_as_native(monkeypatch):
    monkeypatch.setattr(doctor, "cpuinfo", lambda key: "fp asimd sve bf16 i8mm" if key == "features" else "")
    assert doctor.cpu_bf16_native() == (True, "bf16")
    monkeypatch.setattr(doctor, "cpuinfo", lambda key: "fp asimd sve" if key == "features" else "")
    assert doctor.cpu_bf16_native() == (False, "bf16")


def test_missing_package_and_compiler_get_hints(monkeypatch):
    real = doctor._pkg_version
    monkeypatch.setattr(doctor, "_pkg_version", lambda name: None if name == "mujoco" else real(name))
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    info = doctor.collect()
    assert info["packages"]["mujoco"] is None
    assert ("mujoco not installed: install it from the repository root with: .venv/bin/pip install -c requirements.lock "
            "-e '.[mujoco]' (needed for MuJoCo envs such as HalfCheetah-v5)") in info["hints"]
    assert not any("proxima[" in h for h in info["hints"])  # PyPI's `proxima` is another package
    assert info["compile"]["cxx"] is None and info["compile"]["ok"] is False
    assert any("torch.compile unavailable" in h for h in info["hints"])


def test_env_and_video_packages_are_reported_with_install_hints(monkeypatch, capsys):
    """Box2D, the Atari backends and the video writers: each row says whether it imports, and a
    missing one gets the repository install command of its extra (text report and --json alike)."""
    real_find, real_version = importlib.util.find_spec, doctor._pkg_version
    gone = {"Box2D", "envpool", "ale_py", "cv2", "imageio_ffmpeg"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in gone else real_find(name, *a))
    monkeypatch.setattr(doctor, "_pkg_version", lambda d: None if d.lower() in {"box2d", "box2d-py", "envpool", "ale-py",
                        "imageio-ffmpeg"} or d.startswith("opencv") else real_version(d))
    info = doctor.collect()
    for name, extra in (("box2d", "box2d"), ("envpool", "atari"), ("ale-py", "atari"), ("opencv", "atari"), ("imageio-ffmpeg", "video")):
        assert info["packages"][name] is None and info["importable"][name] is False
        assert sum(h.startswith(f"{name} not installed: install it from the repository root with: .venv/bin/pip install "
                                f"-c requirements.lock -e '.[{extra}]' (") for h in info["hints"]) == 1, name
    assert "box2d not installed: install it from the repository root with: .venv/bin/pip install -c requirements.lock " \
           "-e '.[box2d]' (needed for Box2D envs such as LunarLander-v3)" in info["hints"]
    assert info["importable"]["imageio"] is True and isinstance(info["packages"]["imageio"], str)
    rc, out, _ = run_cli([], capsys)
    assert rc == 0 and any(line.split(None, 1) == ["box2d", "not installed"] for line in out.splitlines())
    assert any(line.split(None, 1)[:1] == ["imageio"] and line.rstrip().endswith(", importable") for line in out.splitlines())
    rc, out, _ = run_cli(["--json"], capsys)
    js = json.loads(out)
    assert js["importable"]["ale-py"] is False and js["packages"]["ale-py"] is None and js["importable"]["imageio"] is True


def test_installed_package_that_does_not_import_is_named(monkeypatch):
    """A wheel built for another platform: its version is found, importing it fails: one hint."""
    real_find, real_import, real_version = importlib.util.find_spec, importlib.import_module, doctor._pkg_version
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "envpool" else real_find(name, *a))
    monkeypatch.setattr(doctor, "_pkg_version", lambda d: "0.8.4" if d == "envpool" else real_version(d))

    def fake_import(name, *a, **k):
        if name == "envpool":
            raise ImportError("libstdc++.so.6: version `GLIBCXX_3.4.30' not found\nmore")
        return real_import(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", fake_import)
    info = doctor.collect()
    assert info["packages"]["envpool"] == "0.8.4" and info["importable"]["envpool"] is False
    assert ("envpool 0.8.4 is installed but does not import (ImportError: libstdc++.so.6: version `GLIBCXX_3.4.30' not "
            "found): install it from the repository root with: .venv/bin/pip install -c requirements.lock "
            "-e '.[atari]' (the fast Atari backend, --backend envpool; else Atari uses ale-py)") in info["hints"]


def test_cxx_env_var_is_honoured(monkeypatch, tmp_path):
    fake = tmp_path / "my-c++"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    assert doctor.inductor_cxx()[0] == str(fake)


def test_collect_never_raises_when_probes_blow_up(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("driver exploded\nsecond line")

    monkeypatch.setattr(torch.cuda, "is_available", boom)
    monkeypatch.setattr(torch.distributed, "is_available", boom)
    monkeypatch.setattr(doctor.os, "cpu_count", boom)
    info = doctor.collect()
    assert info["cuda_usable"] is False and info["cpu_count"] is None
    assert "RuntimeError: driver exploded" == info["errors"]["cuda"]
    assert any(h.startswith("probe cuda failed") for h in info["hints"])
    assert any("torch.distributed not available" in h for h in info["hints"])
    doctor.format_report(info)  # still renders


def test_failing_tiny_cuda_op_is_reported(monkeypatch):
    if CUDA:
        pytest.skip("real CUDA works here")
    # A CUDA build that claims a GPU, but using it fails (here: device='cuda' on a CPU build raises).
    monkeypatch.setattr(torch.version, "cuda", torch.version.cuda or "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    info = doctor.collect()
    assert info["cuda_usable"] is False and info["torch_build"].startswith("cuda ")
    assert any(h.startswith("CUDA not usable: a tiny tensor op on cuda:0 failed") for h in info["hints"]), info["hints"]


def test_cuda_build_without_gpu_is_explained(monkeypatch):
    if CUDA:
        pytest.skip("real CUDA works here")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    info = doctor.collect()
    hint = next(h for h in info["hints"] if h.startswith("CUDA not usable"))
    assert "cuda 13.0" in hint and "--gpus" in hint and "nvidia-smi" in hint


def test_format_report_aligned_with_hints_last():
    info = doctor.collect()
    info["gpus"] = [{"index": 0, "name": "NVIDIA H200", "memory_gib": 139.8, "capability": "9.0"}]
    info["gpu_count"] = 1
    info["hints"] = ["first hint", "second hint"]
    text = doctor.format_report(info)
    lines = text.splitlines()
    assert lines[0] == "proxima doctor"
    assert lines[-3:] == ["hints:", "  - first hint", "  - second hint"]
    body = lines[1 : lines.index("hints:")]
    value_cols = {len(line) - len(line[2:].split("  ", 1)[1].lstrip()) for line in body if not line.startswith("    ")}
    assert len(value_cols) == 1, body  # every value starts in the same column
    assert any("NVIDIA H200, 139.8 GiB, sm 9.0" in line for line in body)
    for label in ("python", "torch", "cuda usable", "cudnn", "nccl", "bf16", "torch.compile", "distributed", "cpu"):
        assert any(line[2:].startswith(label) for line in body), label
    info["hints"] = []
    assert doctor.format_report(info).splitlines()[-1] == "hints: none, all set"


def test_cli_report(capsys):
    rc, out, err = run_cli([], capsys)
    assert rc == 0 and out.startswith("proxima doctor") and "torch" in out and err == ""


def test_cli_json_is_one_object(capsys):
    rc, out, _ = run_cli(["--json"], capsys)
    assert rc == 0
    info = json.loads(out)
    assert isinstance(info, dict) and "cuda_usable" in info and isinstance(info["hints"], list)
    assert out.strip().count("\n") == 0  # one line, one object


@pytest.mark.skipif(CUDA, reason="this machine has a usable CUDA device")
def test_cli_require_cuda_fails_with_one_line_reason(capsys):
    rc, out, err = run_cli(["--require-cuda"], capsys)
    assert rc == 1
    assert err.count("\n") == 1 and "CUDA" in err, err
    assert out.startswith("proxima doctor")  # the report is still printed
    rc, out, err = run_cli(["--json", "--require-cuda"], capsys)
    assert rc == 1 and "CUDA" in err
    json.loads(out)  # stdout stays pure JSON


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a usable CUDA device")
def test_cli_require_cuda_passes_on_gpu(capsys):
    rc, _, err = run_cli(["--require-cuda"], capsys)
    assert rc == 0 and err == ""


def test_module_main(capsys):
    assert doctor.main(["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["torch"] == torch.__version__


def test_doctor_names_the_compile_cache_and_its_size(tmp_path, monkeypatch):
    from proxima.doctor import collect, format_report

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    assert collect()["compile"]["cache"].startswith(f"{tmp_path / 'cache'} (empty")
    (tmp_path / "cache" / "fxgraph").mkdir(parents=True)
    (tmp_path / "cache" / "fxgraph" / "entry").write_bytes(b"x" * 2**20)
    info = collect()
    assert info["compile"]["cache"] == f"{tmp_path / 'cache'} (1.0 MiB)"
    assert any(line.split(None, 2)[:2] == ["compile", "cache"] and line.endswith(f"  {tmp_path / 'cache'} (1.0 MiB)")
               for line in format_report(info).splitlines())


def test_a_dangling_cxx_makes_compile_unavailable(monkeypatch, tmp_path, capsys):
    """Inductor tries only $CXX once it is set: g++ on PATH does not make a dangling CXX work, and the
    report says so as `train --compile` refuses it (the same lookup, doctor.inductor_cxx)."""
    import sys

    monkeypatch.delitem(sys.modules, "torch._inductor.config", raising=False)  # inductor's snapshot of $CXX
    cxx = str(tmp_path / "nonexistent" / "g++")
    monkeypatch.setenv("CXX", cxx)
    info = doctor.collect()
    assert info["compile"]["cxx"] is None and info["compile"]["ok"] is False
    hint = [h for h in info["hints"] if h.startswith("torch.compile unavailable")]
    assert len(hint) == 1 and f"CXX={cxx} not found" in hint[0] and hint[0].endswith("; train with compile off")
    rc, out, _ = run_cli([], capsys)
    assert rc == 0 and any(line.split()[:2] == ["torch.compile", "no"] for line in out.splitlines())
    assert f"CXX={cxx} not found" in out
    monkeypatch.delenv("CXX")
    assert doctor.inductor_cxx()[0] == doctor.shutil.which("g++")  # unset: g++ on PATH, as inductor (None here without one)


# --- a torch or gymnasium that does not import ----------------------------------------------------------------
#: what a stand-in package raises on import: a CUDA wheel missing its cuDNN, a gymnasium half-removed
BROKEN = {"torch": "libcudnn.so.9: cannot open shared object file: No such file or directory",
          "gymnasium": "No module named gymnasium (simulated)"}


def _run_with_broken(package: str, tmp_path, *argv: str):
    """``python ARGV`` with a stand-in ``package`` first on the path whose import raises ImportError."""
    import os
    import subprocess
    import sys

    fake = tmp_path / "fake"
    (fake / package).mkdir(parents=True, exist_ok=True)
    (fake / package / "__init__.py").write_text(f"raise ImportError({BROKEN[package]!r})\n")
    path = os.pathsep.join(p for p in (str(fake), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("package, hint", [
    ("torch", f"torch not importable (ImportError: {BROKEN['torch']})"),
    ("gymnasium", f"is installed but does not import (ImportError: {BROKEN['gymnasium']})")])
def test_doctor_reports_a_package_that_does_not_import(package, hint, tmp_path):
    """Doctor is what a user runs when torch or gymnasium is broken: neither the package's import nor
    the CLI's may need them (it died with the import's traceback)."""
    proc = _run_with_broken(package, tmp_path, "-m", "proxima", "doctor")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("proxima doctor") and hint in proc.stdout and proc.stderr == ""
    proc = _run_with_broken(package, tmp_path, "-m", "proxima", "doctor", "--json", "--require-cuda")
    assert proc.returncode == 1, proc.stderr
    info = json.loads(proc.stdout)  # stdout stays one JSON object
    assert any(hint in h for h in info["hints"])
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("proxima doctor: CUDA not usable"), proc.stderr
    proc = _run_with_broken(package, tmp_path, "-m", "proxima.doctor", "--json")
    assert proc.returncode == 0, proc.stderr
    assert any(hint in h for h in json.loads(proc.stdout)["hints"])


@pytest.mark.parametrize("package", ["torch", "gymnasium"])
def test_other_commands_name_a_package_that_does_not_import_in_one_line(package, tmp_path):
    proc = _run_with_broken(package, tmp_path, "-m", "proxima", "train", "CartPole-v1", "--run-dir", str(tmp_path / "run"))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"proxima train: error: {package} does not import (ImportError: {BROKEN[package]}); "
                                        "run proxima doctor for what to fix"]
    assert not (tmp_path / "run").exists()


def test_the_cli_s_doctor_takes_the_report_s_flags_only(capsys):
    """``proxima doctor`` is parsed apart from the other commands (above): it still refuses a typo in one line."""
    from cli_helpers import one_error_line, run_main

    code, _, err = run_main(["doctor", "--jsn"], capsys)
    assert code == 2
    assert one_error_line(err, "proxima doctor") == ("unrecognized arguments: --jsn; did you mean --json? "
                                                     "(see proxima doctor --help)")
    code, out, err = run_main(["doctor", "--json"], capsys)
    assert code == 0 and json.loads(out)["torch"] == torch.__version__
