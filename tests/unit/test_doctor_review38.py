"""Review 38 of `proxima doctor` and --compile: a C++ compiler that is there but broken makes doctor say
"torch.compile no" with its error and `train --compile` refuse in one line (exit 2) before training,
instead of a 117-line InductorError 15 s in; a compile failure that still comes at the first compiled
call is one line too; the first compiled iteration says it is compiling; doctor's hints are commands
that run, and it reports Proxima's version."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
import torch

import proxima
from proxima import accel, doctor
from proxima import trainer as trainer_mod
from proxima.config import ConfigError, PPOConfig
from proxima.trainer import check_device_flags
from tests.cli_helpers import TINY_RUN, one_error_line, run_main

GXX = shutil.which("g++")
needs_posix = pytest.mark.skipif(sys.platform == "win32", reason="fake compilers are shell scripts")


@pytest.fixture(autouse=True)
def inductor_config_unread(monkeypatch):
    """inductor snapshots $CXX when torch._inductor.config is imported, and doctor reads that snapshot
    once something imported it: hidden, so the CXX set here is what counts."""
    monkeypatch.delitem(sys.modules, "torch._inductor.config", raising=False)
    monkeypatch.delenv("TORCH_INDUCTOR_INSTALL_GXX", raising=False)


def _script(tmp_path, name: str, body: str) -> str:
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _broken(tmp_path) -> str:
    """The reviewer's compiler: found on disk, fails whatever it is asked."""
    return _script(tmp_path, "g++", 'echo "g++: fatal error: broken toolchain" >&2; exit 1\n')


def _compile_row(info) -> str:
    return next(line for line in doctor.format_report(info).splitlines() if line.split()[:1] == ["torch.compile"])


def _train(tmp_path, *extra):
    return ["train", "CartPole-v1", "--backend", "native", *TINY_RUN, "--total-timesteps", "64", "--no-progress",
            "--run-dir", str(tmp_path / "run"), "--compile", *extra]


@pytest.fixture
def no_compiling(monkeypatch):
    """Were the check to let the run through, it would fail here at once, not compile for a minute."""
    def tripwire(trainer):
        raise AssertionError("torch.compile was about to start")

    monkeypatch.setattr(accel, "accelerate", tripwire)


@needs_posix
def test_doctor_says_no_for_a_compiler_that_fails(tmp_path, monkeypatch):
    cxx = _broken(tmp_path)
    monkeypatch.setenv("CXX", cxx)
    info = doctor.collect()
    assert info["compile"]["cxx"] == cxx and info["compile"]["ok"] is False
    assert _compile_row(info).split(None, 1)[1].startswith(f"no (c++ {cxx} fails: g++: fatal error: broken toolchain, Python.h: ")
    assert [h for h in info["hints"] if h.startswith("torch.compile unavailable")] == [
        f"torch.compile unavailable (it builds C++ kernels on the CPU): `{cxx} --version` (inductor's own check) fails: "
        "g++: fatal error: broken toolchain; fix or reinstall that compiler, or set CXX to one that works, or train with "
        "compile off"]


@needs_posix
def test_train_compile_refuses_a_broken_compiler_before_training(tmp_path, monkeypatch, no_compiling, capsys):
    cxx = _broken(tmp_path)
    monkeypatch.setenv("CXX", cxx)
    code, out, err = run_main(_train(tmp_path), capsys)
    assert code == 2 and one_error_line(err, "proxima train") == (
        f"--compile: torch.compile on the CPU needs a working C++ compiler (`{cxx} --version` (inductor's own check) "
        "fails: g++: fatal error: broken toolchain); fix it or set CXX to one that works, or drop --compile")
    assert out == "" and not (tmp_path / "run").exists()


@needs_posix
@pytest.mark.skipif(GXX is None, reason="no g++ to answer --version")
def test_a_compiler_that_answers_version_but_cannot_build_is_caught(tmp_path, monkeypatch):
    """Inductor's own check (`$CXX --version`) passes; the kernels' build would not: the test build says so."""
    cxx = _script(tmp_path, "half-g++", f'[ "$1" = --version ] && exec {GXX} --version\n'
                                        'echo "probe.cpp:1:10: fatal error: cmath: No such file or directory" >&2; exit 1\n')
    monkeypatch.setenv("CXX", cxx)
    with pytest.raises(ConfigError) as e:
        check_device_flags(PPOConfig(env_id="CartPole-v1", compile=True), torch.device("cpu"))
    assert f"c++ {cxx} fails to build a one-line C++ file that includes Python.h: probe.cpp:1:10: fatal error: cmath: " \
           "No such file or directory" in str(e.value)


@needs_posix
def test_a_compiler_that_hangs_is_given_up_on(tmp_path, monkeypatch):
    cxx = _script(tmp_path, "slow-g++", "sleep 30\n")
    monkeypatch.setattr(doctor, "CXX_CHECK_TIMEOUT", 0.5)
    assert doctor.cxx_problem(cxx, None) == f"`{cxx} --version` (inductor's own check) fails: no answer in 0.5 s"


@pytest.mark.skipif(GXX is None, reason="no g++ here")
def test_a_working_compiler_passes_the_test_build():
    found, _ = doctor.python_headers()
    assert doctor.cxx_problem(GXX, found) == ""


def test_a_compile_failure_at_the_first_compiled_call_is_one_line(tmp_path, monkeypatch, capsys):
    """What the start-up check cannot foresee (a kernel the compiler rejects): inductor's InductorError from
    the first compiled call is one line naming --compile and the way out, exit 2, and the note came first."""
    from torch._inductor.exc import InductorError, InvalidCxxCompiler

    def failing_accelerate(trainer):
        def policy_step(*args):
            raise InductorError(InvalidCxxCompiler(), None)

        trainer.compiled_eager = set()
        return policy_step, trainer.grad_step

    monkeypatch.setattr(trainer_mod, "_check_compile", lambda *a, **k: None)
    monkeypatch.setattr(accel, "accelerate", failing_accelerate)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    code, out, err = run_main(_train(tmp_path), capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err, err
    assert lines[0] == ("proxima: note: --compile: compiling the rollout and update steps; the first launch takes about a "
                        f"minute on a CPU, a later one reads the kernels cached in {tmp_path / 'cache' / 'proxima' / 'inductor'}")
    assert one_error_line("\n".join(lines[1:]), "proxima train").startswith(
        "--compile: torch.compile failed to build a compiled step (InvalidCxxCompiler: No working C++ compiler found in "
        "torch._inductor.config.cpp.cxx: ")
    assert lines[1].endswith("); run without --compile (a resume: --no-compile), or run `proxima doctor` to see what the "
                             "compiler lacks")


def test_other_errors_of_a_compiled_iteration_pass_through(monkeypatch):
    """Only torch.compile's own failures become the --compile line: a bug elsewhere keeps its type."""
    from torch._inductor.exc import InductorError, InvalidCxxCompiler

    assert trainer_mod._compile_failure(ValueError("mine")) is None
    assert trainer_mod._compile_failure(InductorError(InvalidCxxCompiler("/x/g++"), None)) == \
        "InvalidCxxCompiler: Compiler: /x/g++ is not found."


def test_doctor_reports_proxima_version(capsys, monkeypatch):
    info = doctor.collect()
    assert info["proxima"] == proxima.__version__
    assert doctor.format_report(info).splitlines()[1].split() == ["proxima", proxima.__version__]
    rc, out, _ = run_main(["doctor", "--json"], capsys)
    assert rc == 0 and json.loads(out)["proxima"] == proxima.__version__


@pytest.mark.skipif(sys.platform != "linux", reason="PyPI's torch is the CUDA build on Linux only")
def test_cuda_hint_is_a_pip_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    hints = [h for h in doctor.collect()["hints"] if h.startswith("CUDA not usable")]
    assert len(hints) == 1 and hints[0].endswith(
        f"to train on GPUs, install PyPI's CUDA build: pip uninstall -y torch && pip install torch=={doctor.TORCH_PIN} "
        "--index-url https://pypi.org/simple")


def test_bf16_hint_names_a_command_the_package_ships(monkeypatch, capsys):
    """`python benchmarks/accel.py` is not installed with the package; `proxima bench --amp bf16` is."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(doctor, "cpuinfo", lambda key: "avx2 avx512_bf16" if key == "flags" else "")
    hint = next(h for h in doctor.collect()["hints"] if h.startswith("bf16"))
    assert hint.endswith("measure first with proxima bench ENV_ID --amp bf16")
    code, out, _ = run_main(["bench", "--help"], capsys)
    assert code == 0 and "--amp {none,bf16,fp16}" in out


def test_require_cuda_help_says_what_it_prints(capsys):
    code, out, _ = run_main(["doctor", "--help"], capsys)
    assert code == 0 and "the report, then a one-line reason on stderr, exit 1" in " ".join(out.split())
