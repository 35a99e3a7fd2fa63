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
from proxima import accel, cli, doctor
from proxima import trainer as trainer_mod
from proxima.config import ConfigError, PPOConfig
from proxima.trainer import check_device_flags
from tests.cli_helpers import TINY_RUN, one_error_line, run_main, without_spaces_line

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
    assert code == 2 and "Traceback" not in err, err
    assert err.count("proxima: spaces: ") == 1, err  # the run's spaces line (tested in test_spaces_summary39)
    lines = [line for line in without_spaces_line(err).splitlines() if line.strip()]
    assert lines[0] == ("proxima: note: --compile: compiling the rollout and update steps; the first launch compiles: "
                        f"about a minute on a CPU (its kernels are cached in {tmp_path / 'cache' / 'proxima' / 'inductor'}; "
                        "a later launch reads them: ~10-20 s); on a CPU, compiled small MLPs trained slower than eager "
                        "in our runs (docs/performance.md); measure with proxima bench CartPole-v1 --compile")  # an empty cache: compiling_note's first case,
    # one --compile note on a CPU: the speed clause ends it (tests/unit/test_fresh47.py)
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
    monkeypatch.setattr(doctor, "nvidia_visible", lambda: True)  # a GPU machine with a CPU torch
    hints = [h for h in doctor.collect()["hints"] if h.startswith("CUDA not usable")]
    pip = doctor.pip()
    assert len(hints) == 1 and hints[0].endswith(
        f"to train on GPUs, install PyPI's CUDA build: {pip} uninstall -y torch && {pip} install torch=={doctor.TORCH_PIN} "
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


# --- review 38, mutation survivors -------------------------------------------------------------------------------

NOTE = "compiling the rollout"


@pytest.fixture
def eager_compile(monkeypatch, tmp_path):
    """--compile's set-up with nothing compiled: the eager steps stand in for the compiled ones."""
    def accelerate(trainer):
        trainer.compiled_eager = set()
        return trainer.policy_step, trainer.grad_step

    monkeypatch.setattr(trainer_mod, "_check_compile", lambda *a, **k: None)
    monkeypatch.setattr(accel, "accelerate", accelerate)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _train3(tmp_path, *extra):  # 3 iterations of 64 steps
    return [arg if arg != "64" else "192" for arg in _train(tmp_path, *extra)]


def test_the_compiling_note_comes_once_a_run(tmp_path, eager_compile, capsys):
    code, _, err = run_main(_train3(tmp_path), capsys)
    assert code == 0, err
    assert err.count(NOTE) == 1, err


def test_quiet_has_no_compiling_note(tmp_path, eager_compile, capsys):
    code, _, err = run_main(_train3(tmp_path, "--quiet"), capsys)
    assert code == 0, err
    assert NOTE not in err


def test_an_inductor_error_without_compile_is_not_called_a_compile_failure(tmp_path, monkeypatch, capsys):
    """compile off: torch.compile did not run, so an InductorError (raised by the user's own code, say)
    keeps its type and is not turned into the --compile line."""
    from torch._inductor.exc import InductorError, InvalidCxxCompiler

    build_parts = trainer_mod.graphs.build_parts

    def failing_rollout(trainer):
        parts, _, advantages, update = build_parts(trainer)

        def rollout():
            raise InductorError(InvalidCxxCompiler("/x/g++"), None)

        return parts, rollout, advantages, update

    monkeypatch.setattr(trainer_mod.graphs, "build_parts", failing_rollout)
    argv = [arg for arg in _train(tmp_path) if arg != "--compile"]
    with pytest.raises(InductorError):
        run_main(argv, capsys)


def test_a_compile_failure_names_the_compilers_error_line():
    from torch._inductor.exc import CppCompileError

    said = trainer_mod._compile_failure(CppCompileError(["g++"], "x.cpp:1: error: boom\n"))
    assert said is not None and said.endswith(": x.cpp:1: error: boom"), said


@pytest.mark.parametrize("oom", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                                 RuntimeError("DefaultCPUAllocator: not enough memory: out of memory")])
def test_out_of_memory_while_compiling_is_not_a_compile_failure(oom):
    """dynamo wraps whatever compiling raised: an OOM while inductor autotunes is no compiler's fault and
    must propagate as itself, not as "run without --compile"."""
    from torch._dynamo.exc import BackendCompilerFailed

    assert trainer_mod._compile_failure(BackendCompilerFailed(lambda *a: None, oom, None)) is None
    assert trainer_mod._compile_failure(BackendCompilerFailed(lambda *a: None, ValueError("bad kernel"), None)) == \
        "ValueError: bad kernel"


@needs_posix
def test_a_compiler_killed_by_a_signal_fails(tmp_path):
    cxx = _script(tmp_path, "killed-g++", "kill -9 $$\n")
    said = doctor.cxx_problem(cxx, None)
    assert said.startswith(f"`{cxx} --version` (inductor's own check) fails: "), said


@needs_posix
def test_the_compilers_stderr_is_quoted_before_its_stdout(tmp_path):
    cxx = _script(tmp_path, "noisy-g++", "echo banner; echo fatal >&2; exit 1\n")
    assert doctor.cxx_problem(cxx, None) == f"`{cxx} --version` (inductor's own check) fails: fatal"


@needs_posix
def test_the_test_build_includes_python_h(tmp_path):
    """A compiler that builds anything but a file including Python.h (its headers are missing) is caught."""
    cxx = _script(tmp_path, "nopy-g++", 'for a; do case "$a" in *.cpp) grep -q "<Python.h>" "$a" && '
                                        '{ echo "probe.cpp:1:10: fatal error: Python.h: No such file" >&2; exit 1; };; esac; done\n'
                                        "exit 0\n")
    empty = tmp_path / "include"
    empty.mkdir()
    said = doctor.cxx_problem(cxx, str(empty / "Python.h"))
    assert said == f"c++ {cxx} fails to build a one-line C++ file that includes Python.h: probe.cpp:1:10: fatal error: " \
                   "Python.h: No such file", said


@needs_posix
def test_ctrl_c_during_the_compiler_check_propagates(tmp_path, monkeypatch):
    import subprocess

    cxx = _script(tmp_path, "slow-g++", "sleep 30; exit 0\n")
    real = subprocess.Popen.communicate

    def communicate(self, input=None, timeout=None):
        if timeout is not None:
            raise KeyboardInterrupt
        return real(self, input, timeout)

    monkeypatch.setattr(subprocess.Popen, "communicate", communicate)
    with pytest.raises(KeyboardInterrupt):
        doctor.cxx_problem(cxx, None)


@needs_posix
def test_a_hung_compilers_children_are_killed_with_it(tmp_path, monkeypatch):
    """The compiler's children (here sleep) hold its pipes: only killing its whole session ends the wait."""
    import time

    cxx = _script(tmp_path, "slow-g++", "sleep 30; exit 0\n")
    monkeypatch.setattr(doctor, "CXX_CHECK_TIMEOUT", 0.5)
    start = time.monotonic()
    assert doctor.cxx_problem(cxx, None) == f"`{cxx} --version` (inductor's own check) fails: no answer in 0.5 s"
    assert time.monotonic() - start < 3


def test_a_runs_meta_json_does_not_test_build_the_compiler(tmp_path, monkeypatch):
    # meta.json records doctor.collect() at every run's start: a C++ test build there cost every run half a
    # second or more of compiling; --compile's own start-up check builds it where it matters
    def no_build(*args, **kwargs):
        raise AssertionError("the C++ test build ran for a run's meta.json")

    monkeypatch.setattr(doctor, "cxx_problem", no_build)
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(tmp_path / "r"),
                     "--quiet"]) == 0
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert meta["machine"]["compile"]["cxx_error"] is None
