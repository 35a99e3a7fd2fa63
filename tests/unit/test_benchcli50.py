"""Review 50's findings on bench and the CPU speed wording: --compile's and --amp bf16's speed on a CPU is
said without a figure that no recorded table holds, in one wording (--help, train's and bench's notes,
doctor's hints); --threads N that became N intra-op threads on only small batches draws a note (train and
bench); bench's threads line and rows say which sizes were paired; bench --json still prints its progress
and warm-up lines on stderr. Nothing is timed: the tests assert lines, files and notes at tiny sizes."""

from __future__ import annotations

import json
import re

import pytest
import torch

from proxima import bench, cpuinfo, doctor, trainer
from proxima.config import PPOConfig
from tests.cli_helpers import run_main
from tests.unit import test_accel43 as accel43

cache = accel43.cache  # fixture: a fresh compile cache folder
CPU = torch.device("cpu")
FIGURE = re.compile(r"\d\.\d+x")  # 0.80x, 0.43x-0.58x: a speed ratio
COMPILE_WORDS = "compiled small MLPs trained slower than eager in our runs (docs/performance.md)"
BF16_WORDS = "small MLPs trained slower in bf16 than in fp32 in our runs (docs/performance.md)"
TINY = ["--backend", "native", "--train-only", "--repeats", "1", "--seconds", "0.01"]
SMALL_NOTE = ("--threads 2: 2 intra-op threads on every batch below 2,048 rows, which is every batch {where} (actor "
              "and critic are paired only for a discrete-action MLP agent without --compile or --amp); on small "
              "batches several threads can be tens of times slower than one when other processes share the cores: {then}")


@pytest.fixture
def two_cpus(monkeypatch):
    """A 2-CPU machine: --threads 2 draws no note on more threads than CPUs."""
    monkeypatch.setattr(cpuinfo, "usable_cpus", lambda root=None: 2)


@pytest.fixture
def untimed(monkeypatch):
    """bench builds its real Trainers (threads, pairing) but calls nothing in them: no training is timed."""
    def calls(trainer, cfg, num_envs):
        return {name: (lambda: None, num_envs) for name in bench.MEASURES}

    monkeypatch.setattr(bench, "measured_calls", calls)


# ------------------------------------------------------------------------------------ 3. no figure outside a table
def test_compile_and_bf16_help_say_slower_in_our_runs_without_a_figure(capsys):
    code, out, _ = run_main(["train", "--help"], capsys)
    text = " ".join(out.split())
    assert code == 0
    assert f"On a CPU {COMPILE_WORDS}, and the first launch compiles for about a minute" in text
    assert f"On a CPU {BF16_WORDS}." in text
    assert "0.80x" not in text and "0.61x" not in text


def test_train_and_bench_notes_say_it_in_the_same_words_without_a_figure():
    cfg = PPOConfig(env_id="CartPole-v1", compile=True, amp="bf16")
    assert trainer.cpu_switch_notes(cfg, CPU) == [
        f"--compile: on a CPU, {COMPILE_WORDS}; measure with proxima bench CartPole-v1 --compile",
        f"--amp bf16: on a CPU, {BF16_WORDS}; measure with proxima bench CartPole-v1 --amp bf16"]
    assert trainer.cpu_switch_notes(cfg, CPU, bench=True) == [
        f"--compile: on a CPU, {COMPILE_WORDS}; compare with the same bench without --compile",
        f"--amp bf16: on a CPU, {BF16_WORDS}; compare with the same bench without --amp bf16"]


def test_doctor_hints_on_compile_and_native_bf16_quote_no_figure(cache, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(doctor, "inductor_cxx", lambda: ("/usr/bin/g++", ""))
    monkeypatch.setattr(doctor, "python_headers", lambda: ("/usr/include/python3/Python.h", ""))
    monkeypatch.setattr(doctor, "cpuinfo", lambda key: "fpu avx2 avx512f avx512_bf16" if key == "flags" else "")
    hints = doctor.collect(device=CPU, test_build=False)["hints"]
    speed = [h for h in hints if "our runs" in h]
    assert speed == [
        f"bf16 on this CPU is native (avx512_bf16), but on such CPUs too {BF16_WORDS}: measure first with proxima "
        "bench ENV_ID --amp bf16",
        f"torch.compile works on this CPU, but on CPUs {COMPILE_WORDS}, plus about a minute of compiling on a cold "
        "cache: measure first with proxima bench ENV_ID --compile"], hints
    assert not [h for h in hints if FIGURE.search(h)], hints


# ------------------------------------------------------------------------------------ 5. intra-op threads, small batches
def test_train_with_threads_2_on_an_unpaired_agent_notes_small_batches_can_be_far_slower(two_cpus, tmp_path, capsys):
    code, _, err = run_main(["train", "Pendulum-v1", "--num-envs", "2", "--num-steps", "16", "--total-timesteps", "32",
                             "--update-epochs", "1", "--num-minibatches", "2", "--threads", "2", "--eval-episodes", "0",
                             "--no-plot", "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 0, err
    then = "compare with proxima bench Pendulum-v1 --num-envs 2 --num-steps 16 --threads 2 and --threads 1"
    assert [line for line in err.splitlines() if "--threads" in line] == [
        "proxima: note: " + SMALL_NOTE.format(where="here", then=then)], err


def test_no_small_batch_note_for_one_thread_a_paired_agent_a_large_batch_or_a_gpu():
    note = bench.small_batch_threads_note
    assert note(PPOConfig(threads=1, num_envs=4), 1, CPU) == ""
    assert note(PPOConfig(threads=2, num_envs=4), 1, CPU) == ""  # paired CartPole: one thread each, side by side
    assert note(PPOConfig(threads=4, num_envs=4), 2, CPU) == ""  # halved for a side thread: unpaired_threads_note's
    assert note(PPOConfig(threads=2, num_envs=2048, num_steps=16), 2, CPU) == ""  # a 2,048-row rollout
    assert note(PPOConfig(threads=2, num_envs=64, num_steps=128, num_minibatches=4), 2, CPU) == ""  # 2,048-row minibatch
    assert note(PPOConfig(threads=2, num_envs=4), 2, torch.device("cuda")) == ""
    assert note(PPOConfig(threads=2, num_envs=4), 2, CPU, python=True).startswith(
        "PPOConfig.threads=2: 2 intra-op threads on every batch below 2,048 rows, which is every batch here (actor and "
        "critic are paired only for a discrete-action MLP agent without compile or amp); ")


def test_bench_notes_small_batches_once_at_the_first_size(two_cpus, untimed, capsys):
    code, _, err = run_main(["bench", "Pendulum-v1", "--num-envs", "2,4", "--num-steps", "16", "--threads", "2", *TINY],
                            capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "intra-op" in line]
    assert notes == ["proxima bench: note: " + SMALL_NOTE.format(where="at 2 envs",
                                                                then="compare with the same bench at --threads 1")], err


# ------------------------------------------------------------------------------------ 6. which sizes were paired
def test_bench_threads_line_and_rows_say_which_sizes_were_paired(two_cpus, untimed, tmp_path, capsys):
    out = tmp_path / "bench.md"
    # default preset: 128 steps, 4 minibatches; 64 envs make 2,048-row minibatches (paired), 4 envs do not
    code, stdout, err = run_main(["bench", "CartPole-v1", "--num-envs", "4,64", "--threads", "2", *TINY, "--out", str(out)],
                                 capsys)
    assert code == 0, err
    threads = ("1 (--threads 2: not paired, every batch below 2,048 rows: the same as --threads 1) at 4 envs; "
               "1 each on two threads, actor and critic side by side for batches of 2,048+ rows (--threads 2) at 64 envs")
    text = out.read_text()
    assert f"- torch intra-op threads: {threads}; OMP_NUM_THREADS=" in text
    assert [row.split(" | ")[1] for row in text.splitlines() if row.startswith("| native |")] == ["4 (not paired)",
                                                                                               "64 (paired)"]
    assert f"CartPole-v1 on cpu: threads {threads}, amp none" in stdout
    assert [row.split()[1:3] for row in stdout.splitlines() if row.startswith("native ")] == [["4", "(not"], ["64", "(paired)"]]


def test_bench_rows_that_ran_alike_carry_no_mark():
    lines = [bench.Line("native", n, intra_op=1, paired=False) for n in (4, 8)]
    assert bench.threads_text(lines, 2) == "1 (--threads 2: not paired, every batch below 2,048 rows: the same as --threads 1)"
    assert [row[1] for row in bench.table_rows(lines)] == ["4", "8"]
    mixed = [bench.Line("native", 4, intra_op=1, paired=False), bench.Line("gymnasium", 4, intra_op=1, paired=False),
             *(bench.Line("native", n, intra_op=1, paired=True) for n in (64, 1024, 4096))]
    assert bench.threads_text(mixed, 2).endswith("(--threads 2) at 64, 1,024 and 4,096 envs")
    assert "the same as --threads 1) at 4 envs; " in bench.threads_text(mixed, 2)


# ------------------------------------------------------------------------------------ 8. --json's stderr
def test_bench_json_prints_progress_and_warm_up_on_stderr_and_only_json_on_stdout(two_cpus, capsys):
    code, out, err = run_main(["bench", "CartPole-v1", "--num-envs", "4,8", "--num-steps", "16", *TINY, "--json"], capsys)
    assert code == 0, err
    assert [json.loads(row)["num_envs"] for row in out.splitlines()] == [4, 8]
    lines = err.splitlines()
    assert [line for line in lines if line.endswith(" ...")] == ["proxima bench: native x 4 envs ...",
                                                                  "proxima bench: native x 8 envs ..."], err
    assert len([line for line in lines if re.fullmatch(r"proxima bench: native x [48] envs: warm-up \d+\.\d s, not timed",
                                                       line)]) == 2, err
