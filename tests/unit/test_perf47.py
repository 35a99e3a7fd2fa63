"""Review 47 of CPU performance: the switches that make small MLPs slower on a CPU say so. --compile and
--amp bf16 get a note on train, resume and bench (and doctor a hint for compile, as for bf16);
--compile-mode reduce-overhead compiles in the default mode on a CPU (its only option is CUDA graphs);
bench's line above its table names the preset, T and the vector mode; bench notes an ignored --vector
and train an unpaired --threads 2, each in the other's words. Nothing compiles for real: accel.accelerate
is stubbed with the eager steps (test_accel43's recorded_compile)."""

from __future__ import annotations

import argparse
import json

import os

import pytest
import torch
import yaml

from proxima import accel, bench, cpuinfo, doctor, trainer
from tests.cli_helpers import run_main
from tests.unit import test_accel43 as accel43

cache, recorded_compile = accel43.cache, accel43.recorded_compile  # fixtures: compile stubbed, a fresh cache folder
BENCH = accel43.BENCH  # CartPole-v1, 4 envs, native, --train-only, one short repeat
TRAIN = ["train", "CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--total-timesteps", "64", "--eval-episodes", "0",
         "--no-plot"]

# our runs, not "here", and no figure: none of those runs is in a recorded table (test_benchcli50)
COMPILE_NOTE = ("on a CPU, compiled small MLPs trained slower than eager in our runs (docs/performance.md); "
                "measure with proxima bench CartPole-v1 --compile")
BF16_NOTE = ("proxima: note: --amp bf16: on a CPU, small MLPs trained slower in bf16 than in fp32 in our runs "
             "(docs/performance.md); measure with proxima bench CartPole-v1 --amp bf16")
MODE_NOTE = ("note: --compile-mode reduce-overhead: CUDA graphs, which a CPU has none of: compiling in the default mode")
UNPAIRED = "threads 1 (--threads 2: not paired, every batch below 2,048 rows: the same as --threads 1)"  # bench's cell
UNPAIRED_NOTE = ("proxima: note: --threads 2: no batch reaches 2,048 rows, so the paired side thread is not used "
                 "(1 intra-op thread); drop --threads, or train with more envs (num_envs >= 2,048 or num_envs x num_steps / "
                 "num_minibatches >= 2,048)")


def compiling(speed: str) -> str:
    """train's one --compile note on a CPU: accel.compiling_note (the stub compiles nothing, so the cache
    stays empty), then the speed clause."""
    return f"proxima: note: {accel.compiling_note()}; {speed}"


@pytest.fixture
def two_cpus(monkeypatch):
    """A 2-CPU machine: --threads 2 draws no note on more threads than CPUs (test_dist_review45's)."""
    monkeypatch.setattr(cpuinfo, "usable_cpus", lambda root=None: 2)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


# ------------------------------------------------------------------------------------ 1. --compile, --amp bf16 on a CPU
def test_train_and_resume_with_compile_on_a_cpu_note_it_is_usually_no_faster(recorded_compile, tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = run_main([*TRAIN, "--compile", "--run-dir", str(run)], capsys)
    assert code == 0, err
    # one --compile note: the compiling one, ending with the speed on a CPU (test_fresh47)
    assert [line for line in err.splitlines() if "--compile" in line] == [compiling(COMPILE_NOTE)], err
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128"], capsys)
    assert code == 0, err
    assert [line for line in err.splitlines() if "--compile" in line] == [compiling(COMPILE_NOTE)], err


def test_train_with_amp_bf16_on_a_cpu_notes_it_trains_slower(tmp_path, capsys):
    code, _, err = run_main([*TRAIN, "--amp", "bf16", "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 0, err
    assert err.splitlines().count(BF16_NOTE) == 1, err
    assert "--compile" not in err


def test_train_without_the_switches_prints_no_speed_note(tmp_path, capsys):
    code, _, err = run_main([*TRAIN, "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 0, err
    assert "on a CPU" not in err and "not paired" not in err, err


def test_no_speed_note_off_the_cpu():
    cfg = trainer.PPOConfig(compile=True, compile_mode="reduce-overhead", amp="bf16")
    assert trainer.cpu_switch_notes(cfg, torch.device("cuda")) == []
    assert trainer.compile_mode_run(cfg, torch.device("cuda")) == "reduce-overhead"


def test_bench_with_compile_and_bf16_on_a_cpu_notes_both_in_benchs_words(recorded_compile, capsys):
    code, _, err = run_main([*BENCH, "--compile", "--amp", "bf16"], capsys)
    assert code == 0, err
    assert ("proxima bench: note: --compile: on a CPU, compiled small MLPs trained slower than eager in our runs "
            "(docs/performance.md); compare with the same bench without --compile") in err.splitlines()
    assert ("proxima bench: note: --amp bf16: on a CPU, small MLPs trained slower in bf16 than in fp32 in our runs "
            "(docs/performance.md); compare with the same bench without --amp bf16") in err.splitlines()


def test_doctor_hints_that_compile_on_this_cpu_is_usually_no_faster(cache, monkeypatch):
    monkeypatch.setattr(doctor, "inductor_cxx", lambda: ("/usr/bin/g++", ""))
    monkeypatch.setattr(doctor, "python_headers", lambda: ("/usr/include/python3/Python.h", ""))
    info = doctor.collect(device=torch.device("cpu"), test_build=False)
    assert info["compile"]["ok"]
    assert ("torch.compile works on this CPU, but on CPUs compiled small MLPs trained slower than eager in our runs "
            "(docs/performance.md), plus about a minute of compiling on a cold cache: measure first with proxima bench "
            "ENV_ID --compile") in info["hints"]


def test_compile_help_says_what_it_does_on_a_cpu(capsys):
    code, out, _ = run_main(["train", "--help"], capsys)
    text = " ".join(out.split())
    assert code == 0 and "On a CPU compiled small MLPs trained slower than eager in our runs (docs/performance.md)," in text
    assert "reduce-overhead adds only CUDA graphs: on a CPU it compiles in the default mode" in text


# ------------------------------------------------------------------------------------ 2. reduce-overhead on a CPU
def test_reduce_overhead_on_a_cpu_compiles_in_the_default_mode_and_says_so(recorded_compile, tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = run_main([*TRAIN, "--compile", "--compile-mode", "reduce-overhead", "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert err.splitlines().count(f"proxima: {MODE_NOTE}") == 1, err
    # the default mode's options (no triton.cudagraphs): the same cache key as --compile-mode default
    assert recorded_compile == [{"fallback_random": True}]
    # config.yaml keeps the mode asked: a resume is not refused for it, and on CUDA it would compile in it
    assert yaml.safe_load((run / "config.yaml").read_text())["compile_mode"] == "reduce-overhead"
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128"], capsys)
    assert code == 0, err
    assert err.splitlines().count(f"proxima: {MODE_NOTE}") == 1 and recorded_compile[-1] == {"fallback_random": True}


def test_bench_reduce_overhead_on_a_cpu_names_the_mode_that_ran(recorded_compile, capsys):
    code, out, err = run_main([*BENCH, "--compile", "--compile-mode", "reduce-overhead"], capsys)
    assert code == 0, err
    assert f"proxima bench: {MODE_NOTE}" in err.splitlines()
    assert out.splitlines()[0] == ("CartPole-v1 on cpu: threads 1, amp none, compile on (mode default: reduce-overhead "
                                   "has only CUDA graphs), cudagraphs off, backend native, train only")
    code, out, err = run_main([*BENCH, "--compile", "--compile-mode", "reduce-overhead", "--json"], capsys)
    doc = json.loads(out.splitlines()[0])
    assert (code, doc["compile_mode"]) == (0, "default") and "--compile-mode reduce-overhead" in doc["command"]


# ------------------------------------------------------------------------------------ 3. bench's line above the table
def test_bench_switches_line_names_a_preset_its_t_and_epochs(capsys):
    code, out, err = run_main(["bench", "CartPole-v1", "--preset", "fast", "--num-envs", "4", "--backend", "native",
                               "--train-only", "--repeats", "1", "--seconds", "0.05"], capsys)
    assert code == 0, err
    assert out.splitlines()[0] == ("CartPole-v1 on cpu: preset fast, T 16, 2 epochs x 4 minibatches, threads 1, amp none, "
                                   "compile off, cudagraphs off, backend native, train only")
    code, out, err = run_main([*BENCH, "--num-steps", "8"], capsys)
    assert code == 0, err
    assert out.splitlines()[0].startswith("CartPole-v1 on cpu: T 8, 4 epochs x 4 minibatches, threads 1, ")


def test_bench_switches_line_names_async_vector_where_a_gymnasium_line_ran():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["CartPole-v1", "--vector", "async"])
    line, gym_line = (bench.Line(b, 4, intra_op=1, paired=False) for b in ("native", "gymnasium"))
    assert bench.switches_line(args, "cpu", [line, gym_line]).endswith(", backends native, gymnasium, vector async")
    args.backend = "native"  # no Gymnasium line: the vector mode changed nothing, and is not named
    assert bench.switches_line(args, "cpu", [line]).endswith(", backend native")


# ------------------------------------------------------------------------------------ 4. --vector that no backend builds
def test_bench_notes_vector_async_on_the_native_backend_as_train_does(capsys):
    code, _, err = run_main([*BENCH, "--vector", "async"], capsys)
    assert code == 0, err
    assert ("proxima bench: note: --vector async: applies to the gymnasium backend only; --backend native ignores it"
            in err.splitlines())
    auto = ["bench", "CartPole-v1", "--num-envs", "4", "--backend", "auto", "--train-only", "--repeats", "1", "--seconds", "0.05"]
    code, _, err = run_main([*auto, "--vector", "async"], capsys)
    assert code == 0, err
    assert ("proxima bench: note: --vector async: applies to the gymnasium backend only; --backend auto (here: native) "
            "ignores it") in err.splitlines()


# ------------------------------------------------------------------------------------ 5. --threads 2 that pairs nothing
def test_train_threads_2_below_2048_rows_says_it_ran_as_one_thread(two_cpus, tmp_path, capsys):
    code, _, err = run_main([*TRAIN, "--threads", "2", "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 0, err
    assert err.splitlines().count(UNPAIRED_NOTE) == 1, err
    code, _, err = run_main(["resume", str(tmp_path / "run"), "--total-timesteps", "128"], capsys)
    assert code == 0, err
    assert err.splitlines().count(UNPAIRED_NOTE) == 1, err


def test_bench_and_train_say_unpaired_threads_in_one_wording():
    assert bench.threads_text([bench.Line("native", 4, intra_op=1, paired=False)], 2) == UNPAIRED[len("threads "):]
    assert bench.unpaired_threads(1, 2) == UNPAIRED[len("threads "):]
