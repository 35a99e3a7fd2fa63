"""--compile on the CPU without the C++ compiler inductor will use: one line before anything starts
(train, train --dry-run, the Trainer), never a traceback from inside the first rollout. The compiler is
found as inductor finds it (doctor.inductor_cxx): $CXX alone when set, else g++ on PATH, nothing run.
No test here compiles anything: accel.accelerate is replaced by a tripwire."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cli_helpers import one_error_line, run_main
from proxima import accel, doctor
from proxima.config import ConfigError, PPOConfig
from proxima.trainer import check_device_flags

GXX = shutil.which("g++")
NONE_FOUND = ("--compile: torch.compile on the CPU needs a C++ compiler (none found: g++ is not on PATH; install g++ or "
              "set CXX to one); or drop --compile")


@pytest.fixture(autouse=True)
def inductor_unloaded(monkeypatch):
    """inductor reads $CXX when torch._inductor.config is first imported, and inductor_cxx reads that
    module when something imported it: hide it so the environment set here is what counts."""
    monkeypatch.delitem(sys.modules, "torch._inductor.config", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("TORCH_INDUCTOR_INSTALL_GXX", raising=False)


@pytest.fixture
def no_compiling(monkeypatch):
    """Were the check to let a run through, it would fail here at once, not compile for minutes."""
    def tripwire(trainer):
        raise AssertionError("torch.compile was about to start")

    monkeypatch.setattr(accel, "accelerate", tripwire)


@pytest.fixture
def bare_path(tmp_path, monkeypatch):
    """PATH of one empty folder: no g++ anywhere (repro A: PATH=.venv/bin)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def _train(tmp_path, *extra):
    return ["train", "CartPole-v1", "--backend", "native", "--num-envs", "8", "--num-steps", "16", "--num-minibatches", "2",
            "--update-epochs", "2", "--total-timesteps", "1024", "--eval-episodes", "0", "--threads", "1",
            "--run-dir", str(tmp_path / "run"), "--no-progress", "--quiet", "--compile", *extra]


def _cfg(**kw):
    return PPOConfig(env_id="CartPole-v1", compile=True, **kw)


@pytest.mark.parametrize("dry_run", [False, True])
def test_train_compile_without_any_compiler_is_one_line(dry_run, tmp_path, bare_path, no_compiling, capsys):
    code, out, err = run_main(_train(tmp_path, *(["--dry-run"] if dry_run else [])), capsys)
    assert code == 2 and one_error_line(err, "proxima train") == NONE_FOUND
    assert out == "" and not (tmp_path / "run").exists()


@pytest.mark.skipif(GXX is None, reason="no g++ on PATH here")
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_dangling_cxx_is_named_even_with_g_plus_plus_on_path(dry_run, tmp_path, monkeypatch, no_compiling, capsys):
    """Repro B: inductor tries only $CXX once it is set, so g++ on PATH does not help."""
    cxx = str(tmp_path / "nonexistent" / "g++")
    monkeypatch.setenv("CXX", cxx)
    code, out, err = run_main(_train(tmp_path, *(["--dry-run"] if dry_run else [])), capsys)
    assert code == 2 and one_error_line(err, "proxima train") == (
        f"--compile: torch.compile on the CPU needs a C++ compiler (CXX={cxx} not found, and inductor tries no other "
        f"compiler while CXX is set: set CXX to an installed one or unset it to use {GXX}); or drop --compile")
    assert out == "" and not (tmp_path / "run").exists()


def test_a_dangling_cxx_without_g_plus_plus_says_to_install_it(tmp_path, bare_path, monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    with pytest.raises(ConfigError, match=r"CXX=/nonexistent/g\+\+ not found, .*: set CXX to an installed one or install g\+\+ "
                                          r"and unset CXX\); or drop --compile$"):
        check_device_flags(_cfg(), torch.device("cpu"))


@pytest.mark.parametrize("value, needle", [
    ("", "CXX is set but empty: unset it or set it to a compiler"),
    ("ccache g++", "CXX='ccache g++' not found: inductor runs $CXX as one program, without arguments; set CXX to the "
                   "compiler itself"),
])
def test_cxx_values_inductor_cannot_run(value, needle, monkeypatch):
    monkeypatch.setenv("CXX", value)
    with pytest.raises(ConfigError) as e:
        check_device_flags(_cfg(), torch.device("cpu"))
    assert str(e.value) == f"--compile: torch.compile on the CPU needs a C++ compiler ({needle}); or drop --compile"


@pytest.mark.skipif(GXX is None, reason="no g++ on PATH here")
def test_the_real_compiler_passes(tmp_path, monkeypatch, no_compiling, capsys):
    check_device_flags(_cfg(), torch.device("cpu"))  # $CXX unset: g++ on PATH
    monkeypatch.setenv("CXX", GXX)
    check_device_flags(_cfg(), torch.device("cpu"))
    monkeypatch.setenv("CXX", "g++")  # a name, looked up on PATH as inductor's subprocess does
    check_device_flags(_cfg(), torch.device("cpu"))
    assert doctor.inductor_cxx() == (GXX, "")
    code, out, err = run_main(_train(tmp_path, "--dry-run"), capsys)
    assert code == 0 and "compile: true" in out and "error" not in err, err
    assert not (tmp_path / "run").exists()


def test_only_compile_on_the_cpu_is_checked(bare_path):
    check_device_flags(PPOConfig(env_id="CartPole-v1"), torch.device("cpu"))  # no --compile: no compiler needed
    check_device_flags(_cfg(), torch.device("cuda"))  # the GPU's kernels are triton's: not this check


def test_the_check_runs_nothing(monkeypatch):
    """A PATH lookup per start, no subprocess (inductor's own `g++ --version` comes at the first compile)."""
    def no_process(*a, **k):
        raise AssertionError("a subprocess was started")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    with pytest.raises(ConfigError):
        check_device_flags(_cfg(), torch.device("cpu"))
    monkeypatch.delenv("CXX")
    doctor.inductor_cxx()


def test_an_imported_inductor_config_is_what_counts(monkeypatch, bare_path):
    """Once torch._inductor.config is imported, inductor reads its cpp.cxx (the $CXX of that moment, or
    what a program set): so does the check."""
    fake = SimpleNamespace(cpp=SimpleNamespace(cxx=(None, "/nonexistent/clang++")))
    monkeypatch.setitem(sys.modules, "torch._inductor.config", fake)
    found, why = doctor.inductor_cxx()
    assert found is None and why == ("torch._inductor.config.cpp.cxx = (None, '/nonexistent/clang++') names no installed "
                                     "compiler: set it to one, or leave it unset to use $CXX or g++")
    if GXX:
        fake.cpp.cxx = (None, GXX)
        assert doctor.inductor_cxx() == (GXX, "")


def test_conda_gcc_download_counts_when_inductor_would_do_it(tmp_path, monkeypatch, bare_path):
    """config.cpp.cxx's None: with $TORCH_INDUCTOR_INSTALL_GXX set on Linux inductor installs gcc with conda."""
    conda = tmp_path / "conda"
    conda.write_text("#!/bin/sh\n")
    conda.chmod(0o755)
    monkeypatch.setenv("CONDA_EXE", str(conda))
    assert doctor.inductor_cxx()[0] is None  # not asked for
    monkeypatch.setenv("TORCH_INDUCTOR_INSTALL_GXX", "1")
    assert doctor.inductor_cxx()[0] == (str(conda) if sys.platform == "linux" else None)


def test_inductor_still_searches_as_mirrored():
    """A tripwire for a torch upgrade: the installed inductor's source still reads $CXX (default g++) into
    config.cpp.cxx and runs each candidate alone (read as text: importing torch._inductor costs seconds)."""
    root = Path(torch.__file__).parent / "_inductor"
    config = (root / "config.py").read_text()
    builder = (root / "cpp_builder.py").read_text()
    assert 'os.environ.get("CXX", "clang++" if sys.platform == "darwin" else "g++")' in config
    assert "def cpp_compiler_search(search" in builder and 'subprocess.check_output([cxx, "--version"])' in builder
    assert 'os.getenv("TORCH_INDUCTOR_INSTALL_GXX")' in builder
    assert "search = tuple(config.cpp.cxx)" in builder
