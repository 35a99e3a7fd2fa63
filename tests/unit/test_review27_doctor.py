"""Review 27 of `proxima doctor` and --compile: Python.h (a Debian Python without its -dev package) makes
doctor say no and `train --compile` refuse in one line, and inductor's precompiled headers live in
Proxima's compile cache, not under /tmp. The bf16 wording is in test_doctor.py."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

from cli_helpers import one_error_line, run_main
from proxima import accel, doctor
from proxima.config import ConfigError, PPOConfig
from proxima.trainer import check_device_flags

GXX = doctor.shutil.which("g++")
VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def inductor_config_unread(monkeypatch):
    """doctor reads inductor's $CXX snapshot once something imported torch._inductor.config: hidden."""
    monkeypatch.delitem(sys.modules, "torch._inductor.config", raising=False)
    monkeypatch.delenv("CXX", raising=False)


@pytest.fixture
def no_python_h(tmp_path, monkeypatch):
    """sysconfig's include folder exists but holds no Python.h (python3.X-venv without python3.X-dev)."""
    empty = tmp_path / "include" / f"python{VERSION}"
    empty.mkdir(parents=True)
    real = sysconfig.get_path
    monkeypatch.setattr(sysconfig, "get_path", lambda name, *a, **k: str(empty) if name == "include" else real(name, *a, **k))
    return empty


@pytest.fixture
def no_compiling(monkeypatch):
    def tripwire(trainer):
        raise AssertionError("torch.compile was about to start")

    monkeypatch.setattr(accel, "accelerate", tripwire)


def _fix(folder) -> str:
    return (f"Python.h is not in {folder}: install python{VERSION}-dev on Debian or Ubuntu, python{VERSION}-devel on "
            "Fedora, or your distribution's Python headers")


@pytest.mark.skipif(sys.platform != "linux", reason="the package names are Linux's")
@pytest.mark.skipif(GXX is None, reason="no g++: compile is off for that reason already")
def test_doctor_says_no_without_python_h_and_names_the_package(no_python_h, capsys):
    info = doctor.collect()
    assert info["compile"]["cxx"] == GXX and info["compile"]["python_h"] is None and info["compile"]["ok"] is False
    assert f"torch.compile unavailable (its C++ kernels include Python.h): {_fix(no_python_h)}; train with compile off" \
           in info["hints"]
    rows = doctor.format_report(info).splitlines()
    assert any(r.split()[:2] == ["torch.compile", "no"] and "Python.h: missing" in r for r in rows), rows


def test_python_h_is_looked_up_where_sysconfig_says(tmp_path, monkeypatch):
    include = tmp_path / "inc"
    include.mkdir()
    (include / "Python.h").write_text("/* stand-in */\n")
    real = sysconfig.get_path
    monkeypatch.setattr(sysconfig, "get_path", lambda name, *a, **k: str(include) if name == "include" else real(name, *a, **k))
    assert doctor.python_headers() == (str(include / "Python.h"), "")
    monkeypatch.setattr(sysconfig, "get_path", real)
    assert doctor.python_headers()[0] == doctor.collect()["compile"]["python_h"]


@pytest.mark.skipif(sys.platform != "linux", reason="the package names are Linux's")
@pytest.mark.skipif(GXX is None, reason="no g++: refused for the compiler first")
@pytest.mark.parametrize("dry_run", [False, True])
def test_train_compile_without_python_h_is_one_line_exit_2(dry_run, no_python_h, tmp_path, no_compiling, capsys):
    argv = ["train", "CartPole-v1", "--backend", "native", "--num-envs", "8", "--num-steps", "16", "--total-timesteps",
            "1024", "--threads", "1", "--run-dir", str(tmp_path / "run"), "--no-progress", "--quiet", "--compile"]
    code, out, err = run_main(argv + (["--dry-run"] if dry_run else []), capsys)
    assert code == 2 and one_error_line(err, "proxima train") == (
        f"--compile: torch.compile on the CPU needs Python's C headers ({_fix(no_python_h)}); or drop --compile")
    assert out == "" and not (tmp_path / "run").exists()
    with pytest.raises(ConfigError):
        check_device_flags(PPOConfig(env_id="CartPole-v1", compile=True), torch.device("cpu"))
    check_device_flags(PPOConfig(env_id="CartPole-v1"), torch.device("cpu"))  # no --compile: no headers needed


@pytest.mark.skipif(sys.platform != "linux", reason="the package names are Linux's")
@pytest.mark.skipif(GXX is None, reason="no g++: refused for the compiler first")
def test_a_python_without_headers_is_refused_before_training(tmp_path):
    """The reviewer's repro: sysconfig patched at start-up (sitecustomize), a real `proxima train
    --compile`; it used to fail after a 117-line CppCompileError, exit 1."""
    site = tmp_path / "site"
    site.mkdir()
    noinc = tmp_path / "noinc"
    noinc.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sysconfig\n"
        "_real = sysconfig.get_path\n"
        f"sysconfig.get_path = lambda name, *a, **k: {str(noinc)!r} if name == 'include' else _real(name, *a, **k)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "OMP_NUM_THREADS": "1",
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("CXX", None)
    proc = subprocess.run([sys.executable, "-m", "proxima", "train", "CartPole-v1", "--threads", "1", "--total-timesteps",
                           "1024", "--compile", "--run-dir", str(tmp_path / "run"), "--no-progress"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [f"proxima train: error: --compile: torch.compile on the CPU needs Python's C "
                                        f"headers ({_fix(noinc)}); or drop --compile"]
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


def test_precompiled_headers_go_inside_the_compile_cache(tmp_path, monkeypatch, small_config):
    """torch computes its header folder under tempfile.gettempdir() whatever $TORCHINDUCTOR_CACHE_DIR
    says; a --compile trainer puts it in Proxima's cache, and doctor names that folder."""
    from torch._inductor import codecache

    from proxima.trainer import Trainer

    for name in ("_HEADER_DIR", "_HEADER_LOCK_DIR"):  # put back after the test: the folder is process-wide
        monkeypatch.setattr(codecache, name, getattr(codecache, name))
    cache = tmp_path / "cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    trainer = Trainer(small_config(compile=True, run_dir=str(tmp_path / "run")))  # sets up, compiles nothing yet
    try:
        assert Path(codecache._HEADER_DIR) == cache / "precompiled_headers"
        assert Path(codecache._HEADER_LOCK_DIR) == cache / "precompiled_headers" / "locks"
    finally:
        trainer.close()
    assert doctor.collect()["compile"]["precompiled_headers"] == str(cache / "precompiled_headers")
    assert accel.setup_compile_cache() == cache / "precompiled_headers"


def test_header_setup_survives_a_torch_without_the_private_names(tmp_path, monkeypatch):
    from torch._inductor import codecache

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delattr(codecache, "_HEADER_DIR")
    monkeypatch.delattr(codecache, "_HEADER_LOCK_DIR")
    assert accel.setup_compile_cache() == tmp_path / "c" / "precompiled_headers"
    assert not hasattr(codecache, "_HEADER_DIR")  # nothing invented on a torch that has no such name
