"""Review 43 of the accelerator flags on a CPU: --compile's note says whether this launch compiles or
reads cached kernels; bench takes --compile-mode as train does and says which switches its table ran
with. Nothing compiles for real: accel.accelerate is stubbed with the eager steps."""

from __future__ import annotations

import json

import pytest

from proxima import accel, bench
from proxima import trainer as trainer_mod
from tests.cli_helpers import one_error_line, run_main


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """compile_cache_dir() under tmp_path, not yet created."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "proxima" / "inductor"


def test_compiling_note_on_an_empty_cache_says_the_launch_compiles(cache):
    # the folder and its bookkeeping subfolders exist before any kernel (setup_compile_cache, inductor's import)
    (cache / "precompiled_headers").mkdir(parents=True)
    (cache / "fxgraph").mkdir()
    assert accel.compiling_note() == (
        "--compile: compiling the rollout and update steps; the first launch compiles: about a minute on a CPU "
        f"(its kernels are cached in {cache}; a later launch reads them: ~10-20 s)")


def test_compiling_note_on_a_filled_cache_says_it_reads_kernels_and_what_that_costs(cache):
    (cache / "fxgraph" / "ab").mkdir(parents=True)
    assert accel.compiling_note() == (
        f"--compile: compiling the rollout and update steps, reading kernels cached in {cache}: ~10-20 s on a CPU "
        "(a model or shape not compiled before compiles again: about a minute)")


def test_a_cache_path_that_is_a_file_reads_as_empty(cache):
    cache.mkdir(parents=True)
    (cache / "fxgraph").write_text("not a folder")
    assert not accel.holds_kernels(cache)


@pytest.fixture
def recorded_compile(monkeypatch, cache):
    """--compile's set-up with nothing compiled; returns the list of compile_options each Trainer got."""
    seen = []

    def accelerate(trainer):
        seen.append(accel.compile_options(trainer.cfg))
        trainer.compiled_eager = set()
        return trainer.policy_step, trainer.grad_step

    monkeypatch.setattr(trainer_mod, "_check_compile", lambda *a, **k: None)
    monkeypatch.setattr(accel, "accelerate", accelerate)
    return seen


BENCH = ["bench", "CartPole-v1", "--num-envs", "4", "--backend", "native", "--train-only", "--repeats", "1",
         "--seconds", "0.05"]


def test_bench_compile_mode_reaches_the_compiled_steps_and_the_json(recorded_compile, capsys):
    code, out, err = run_main([*BENCH, "--compile", "--compile-mode", "max-autotune", "--json"], capsys)
    assert code == 0, err
    from torch._inductor import list_mode_options

    assert recorded_compile and all(options == {**list_mode_options("max-autotune"), "fallback_random": True}
                                    for options in recorded_compile)
    doc = json.loads(out.splitlines()[0])
    assert (doc["compile"], doc["compile_mode"]) == (True, "max-autotune")
    assert doc["command"].split().count("--compile-mode") == 1 and "--compile-mode max-autotune" in doc["command"]


def test_bench_refuses_an_unknown_compile_mode_in_trains_words(capsys):
    code, _, err = run_main([*BENCH, "--compile-mode", "fast"], capsys)
    assert code == 2
    assert one_error_line(err, "proxima bench") == \
        "--compile-mode 'fast': must be one of default, reduce-overhead, max-autotune"
    code, _, err = run_main(["train", "CartPole-v1", "--compile-mode", "fast"], capsys)
    assert one_error_line(err, "proxima train") == \
        "--compile-mode 'fast': must be one of default, reduce-overhead, max-autotune"


def test_bench_compile_mode_without_compile_is_noted_as_train_notes_it(capsys):
    code, out, err = run_main([*BENCH, "--compile-mode", "reduce-overhead", "--json"], capsys)
    assert code == 0, err
    assert "proxima: note: --compile-mode reduce-overhead has no effect without --compile" in err.splitlines()
    doc = json.loads(out.splitlines()[0])
    assert (doc["compile"], doc["compile_mode"]) == (False, None) and "--compile-mode" not in doc["command"]


def test_bench_help_takes_compile_modes_help_from_the_config_field(capsys):
    from proxima.config import FIELDS

    code, out, _ = run_main(["bench", "--help"], capsys)
    assert code == 0 and "--compile-mode {default,reduce-overhead,max-autotune}" in out
    assert f"{FIELDS['compile_mode'].metadata['help']} (default: the preset's, default)" in " ".join(out.split())


def test_bench_table_names_the_switches_it_ran_with(recorded_compile, capsys):
    code, eager, err = run_main(BENCH, capsys)
    assert code == 0, err
    code, switched, err = run_main([*BENCH, "--amp", "bf16", "--compile", "--compile-mode", "reduce-overhead"], capsys)
    assert code == 0, err
    assert eager.splitlines()[0] == ("CartPole-v1 on cpu: threads 1, amp none, compile off, cudagraphs off, "
                                     "backend native, train only")
    # the mode that ran: reduce-overhead compiles in the default mode on a CPU (test_perf47)
    assert switched.splitlines()[0] == ("CartPole-v1 on cpu: threads 1, amp bf16, compile on (mode default: reduce-overhead "
                                        "has only CUDA graphs), cudagraphs off, backend native, train only")
    assert eager.splitlines()[1].split()[:2] == switched.splitlines()[1].split()[:2] == list(bench.HEADER[:2])
