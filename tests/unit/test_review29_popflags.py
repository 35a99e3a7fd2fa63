"""Review 29 (CPU accel flags): a population's --dry-run passed --cudagraphs on the CPU, which the real
run refuses; --compile-mode with --seeds and no --compile was dropped without the note a single run gets."""

from __future__ import annotations

from cli_helpers import one_error_line, run_main

ARGS = ["train", "CartPole-v1", "--num-envs", "4", "--num-steps", "32", "--total-timesteps", "384", "--threads", "1",
        "--seeds", "1-2", "--dry-run"]


def test_a_population_dry_run_refuses_cudagraphs_on_the_cpu_as_the_run_does(capsys):
    code, out, err = run_main([*ARGS, "--cudagraphs"], capsys)
    assert (code, out) == (2, "")
    assert one_error_line(err, "proxima train") == "--cudagraphs needs a CUDA device (got --device cpu)"


def test_a_population_notes_a_compile_mode_that_does_nothing(capsys):
    code, _, err = run_main([*ARGS, "--compile-mode", "max-autotune"], capsys)
    assert code == 0, err
    assert "proxima: note: --compile-mode max-autotune has no effect: a population (--seeds/--sweep) does not compile" in err
    code, _, err = run_main([*ARGS, "--compile-mode", "max-autotune", "--quiet"], capsys)
    assert code == 0 and "--compile-mode" not in err, err


def test_a_population_resume_notes_a_compile_mode_that_does_nothing(capsys, tmp_path):
    """Review 31: `proxima resume POP --compile-mode M` recorded M in every member's config.yaml without a word."""
    run = tmp_path / "pop"
    code, _, err = run_main([*ARGS[:-1], "--run-dir", str(run), "--eval-episodes", "1", "--quiet"], capsys)
    assert code == 0, err
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "512", "--compile-mode", "max-autotune"], capsys)
    assert code == 0, err
    assert "proxima: note: --compile-mode max-autotune has no effect: a population (--seeds/--sweep) does not compile" in err
