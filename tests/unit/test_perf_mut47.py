"""Mutation survivors of review 47 (commit 2937001): the CPU speed notes of --compile / --amp bf16 (not without
--compile, not for fp16, not under --quiet, not for a resume that trains nothing), reduce-overhead off CUDA, the
vector note's backend wording, the unpaired --threads note, bench's line above its table and its --out file.
Nothing compiles for real: accel.accelerate is stubbed (test_accel43's recorded_compile)."""

from __future__ import annotations

import argparse
import types

import torch

from proxima import bench, trainer
from proxima.config import PPOConfig
from tests.cli_helpers import run_main
from tests.unit import test_accel43 as accel43
from tests.unit.test_perf47 import TRAIN

cache, recorded_compile = accel43.cache, accel43.recorded_compile  # fixtures
CPU = torch.device("cpu")
SPEED = "compiled small MLPs trained slower than eager in our runs"  # --compile's speed clause, in whichever note


def _args(*argv):
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(list(argv))


LINE = [bench.Line("native", 4, intra_op=1, paired=False)]


# ------------------------------------------------------------------------------------ cpu_switch_notes, compile_mode_run
def test_reduce_overhead_compiles_in_the_default_mode_on_any_device_but_cuda():
    cfg = PPOConfig(compile=True, compile_mode="reduce-overhead")
    assert trainer.compile_mode_run(cfg, torch.device("mps")) == "default"
    assert trainer.compile_mode_run(cfg, CPU) == "default"
    assert trainer.compile_mode_run(PPOConfig(compile=True, compile_mode="max-autotune"), CPU) == "max-autotune"


def test_a_compile_mode_without_compile_draws_no_default_mode_note():
    assert trainer.cpu_switch_notes(PPOConfig(compile=False, compile_mode="reduce-overhead"), CPU) == []


def test_amp_fp16_is_not_called_bf16():
    assert trainer.cpu_switch_notes(PPOConfig(amp="fp16"), CPU) == []
    assert [n.split(":")[0] for n in trainer.cpu_switch_notes(PPOConfig(amp="bf16", compile=True), CPU)] == [
        "--compile", "--amp bf16"]


def test_the_measure_command_quotes_an_env_id_for_the_shell():
    notes = trainer.cpu_switch_notes(PPOConfig(env_id="my env", compile=True), CPU)
    assert notes[-1].endswith("; measure with proxima bench 'my env' --compile"), notes


# ------------------------------------------------------------------------------------ vector_note
def test_vector_note_wording_by_backend():
    assert trainer.vector_note("async", "both", bench.backends_for("CartPole-v1", "both")) == ""
    assert trainer.vector_note("async", "both", ["native", "gymnasium"]) == ""
    assert trainer.vector_note("async", "native,envpool", ["native", "envpool"]) == (
        "--vector async: applies to the gymnasium backend only; --backend native,envpool ignores it")
    assert trainer.vector_note("async", "both", ["native"]) == (
        "--vector async: applies to the gymnasium backend only; --backend both (here: native) ignores it")


# ------------------------------------------------------------------------------------ note_switches: --threads
def _fake(threads, num_envs, side=True, **switches):
    cfg = PPOConfig(env_id="CartPole-v1", threads=threads, num_envs=num_envs, num_steps=16, **switches)
    return types.SimpleNamespace(cfg=cfg, device=CPU, side=object() if side else None)


def test_unpaired_threads_note_names_the_halved_threads_and_not_a_paired_run(capsys):
    trainer.note_switches(_fake(4, 4))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("proxima: note: --threads 4: no batch reaches 2,048 rows, so the paired side thread is not used (2 intra-op threads)"), err
    trainer.note_switches(_fake(2, 2048))  # the rollout's 2,048 rows pair actor and critic: nothing to note
    assert capsys.readouterr().err == ""
    trainer.note_switches(_fake(2, 4, side=False))  # no side thread: only 2 intra-op threads' note (test_benchcli50)
    assert [line.split(": ")[3] for line in capsys.readouterr().err.splitlines()] == [
        "2 intra-op threads on every batch below 2,048 rows, which is every batch here (actor and critic are paired "
        "only for a discrete-action MLP agent without --compile or --amp); on small batches several threads can be "
        "tens of times slower than one when other processes share the cores"]
    trainer.note_switches(_fake(1, 4, side=False, amp="bf16"))
    assert [line.split(":")[2] for line in capsys.readouterr().err.splitlines()] == [" --amp bf16"]


# ------------------------------------------------------------------------------------ train: --quiet, a finished resume
def test_compile_note_is_not_printed_under_quiet(recorded_compile, tmp_path, capsys):
    code, _, err = run_main([*TRAIN, "--compile", "--quiet", "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 0, err
    assert "on a CPU" not in err and SPEED not in err, err


def test_a_resume_of_a_finished_run_trains_nothing_and_notes_no_compile_speed(recorded_compile, tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = run_main([*TRAIN, "--compile", "--run-dir", str(run)], capsys)
    assert code == 0 and err.count(SPEED) == 1, err
    code, _, err = run_main(["resume", str(run)], capsys)
    assert code == 0, err
    assert SPEED not in err, err


# ------------------------------------------------------------------------------------ bench: the line above the table
def test_switches_line_names_neither_the_default_preset_nor_its_shape():
    assert bench.switches_line(_args("CartPole-v1", "--preset", "default", "--backend", "native"), "cpu", LINE) == (
        "CartPole-v1 on cpu: threads 1, amp none, compile off, cudagraphs off, backend native")
    # Pendulum's default preset is not PPOConfig's (T 128, 10 epochs x 16 minibatches): still not named
    assert bench.switches_line(_args("Pendulum-v1", "--backend", "native"), "cpu", LINE).startswith(
        "Pendulum-v1 on cpu: threads 1, ")
    # --preset none: PPOConfig's 4 epochs x 4 minibatches at the same T 128 as Pendulum's default
    assert bench.switches_line(_args("Pendulum-v1", "--preset", "none", "--backend", "native"), "cpu", LINE).startswith(
        "Pendulum-v1 on cpu: preset none, T 128, 4 epochs x 4 minibatches, threads 1, ")


def test_switches_line_names_minibatches_alone_that_differ(monkeypatch):
    real = bench.base_config

    def eight(args):
        cfg = real(args)
        cfg.num_minibatches = 8
        return cfg

    monkeypatch.setattr(bench, "base_config", eight)
    assert bench.switches_line(_args("CartPole-v1", "--backend", "native"), "cpu", LINE).startswith(
        "CartPole-v1 on cpu: T 128, 4 epochs x 8 minibatches, threads 1, ")


def test_switches_line_names_no_sync_vector():
    both = [*LINE, bench.Line("gymnasium", 4, intra_op=1, paired=False)]  # the lines --backend both runs: each named
    assert bench.switches_line(_args("CartPole-v1"), "cpu", both).endswith(", backends native, gymnasium")
    assert bench.switches_line(_args("CartPole-v1", "--vector", "sync"), "cpu", both).endswith(", backends native, gymnasium")


def test_bench_out_file_names_the_mode_that_ran(recorded_compile, tmp_path, capsys):
    out = tmp_path / "bench.md"
    code, _, err = run_main([*accel43.BENCH, "--compile", "--compile-mode", "reduce-overhead", "--out", str(out)], capsys)
    assert code == 0, err
    assert "--vector" not in err, err  # no --vector typed: no note on it
    assert "compile True (mode default: reduce-overhead has only CUDA graphs), cudagraphs False" in out.read_text()
