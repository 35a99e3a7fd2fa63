"""Survivors of the mutation review of ae7f946 (bench --compile-mode, the switches line above the
table): the line names the --threads asked, a stopped bench's partial table starts with it, and the
--out file names the compile mode. Nothing compiles: accel.accelerate is stubbed as in test_accel43."""

from __future__ import annotations

from proxima import bench
from tests.cli_helpers import one_error_line, run_main
from tests.unit import test_bench_keep38 as keep38
from tests.unit import test_accel43 as accel43

BENCH = accel43.BENCH
cache, recorded_compile = accel43.cache, accel43.recorded_compile  # test_accel43's fixtures: compile stubbed


def test_switches_line_names_the_threads_asked(capsys):
    code, out, err = run_main([*BENCH, "--threads", "2"], capsys)
    assert code == 0, err
    # as they ran (test_dist_review45): at 4 envs every batch is below side_thread.MIN_ROWS
    assert out.splitlines()[0] == ("CartPole-v1 on cpu: threads 1 (--threads 2: not paired, every batch below 2,048 rows: "
                                   "the same as --threads 1), amp none, compile off, cudagraphs off, backend native, train only")


def test_a_stopped_bench_prints_the_switches_line_above_its_partial_table(monkeypatch, capsys):
    asked = keep38.cut_at_third_size(monkeypatch, KeyboardInterrupt)
    code, out, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "1,2,4", *keep38.FAST],
                              capsys)
    assert (code, asked) == (130, [1, 2, 4]), err
    # FAST's --num-steps 16 is not the preset's T (test_perf47)
    assert out.splitlines()[0] == ("CartPole-v1 on cpu: T 16, 4 epochs x 4 minibatches, threads 1, amp none, compile off, "
                                   "cudagraphs off, backend native, train only")
    assert out.splitlines()[1].split()[:2] == list(bench.HEADER[:2]) and keep38.rows(out) == [1, 2]


def test_out_file_names_the_compile_mode_of_a_compiled_bench(recorded_compile, tmp_path, capsys):
    path = tmp_path / "compiled.md"
    code, _, err = run_main([*BENCH, "--compile", "--compile-mode", "max-autotune", "--out", str(path)], capsys)
    assert code == 0, err
    desc = next(line for line in path.read_text().splitlines() if line.startswith("- preset `default`"))
    assert ", compile True (mode max-autotune), cudagraphs False," in desc


def test_bench_refuses_an_empty_compile_mode_in_trains_words(capsys):
    # options_problem's coerce of the typed flag: without it the PPOConfig field's check said
    # "PPOConfig.compile_mode = '': empty; ...", not the flag train names
    line = "--compile-mode '': empty; give one of default, reduce-overhead, max-autotune"
    for command in ([*BENCH, "--compile-mode", ""], ["train", "CartPole-v1", "--compile-mode", ""]):
        code, _, err = run_main(command, capsys)
        assert (code, one_error_line(err, f"proxima {command[0]}")) == (2, line), err
