"""Review 29: a resume of a complete run with a new --stop-return the restored window reaches printed
"stopped at ... >= --stop-return" after the note that the run is complete: a stop that never was. A run
that --stop-return did end still says where it stopped (test_journey_mends, test_stop_return)."""

from __future__ import annotations

from cli_helpers import run_main

TINY = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "1", "--update-epochs", "1", "--threads", "1",
        "--no-progress", "--eval-episodes", "0", "--total-timesteps", "128"]


def test_a_complete_run_resumed_with_a_reached_stop_return_prints_no_stop_line(tmp_path, capsys):
    run = tmp_path / "r"
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run), *TINY], capsys)
    assert code == 0, err
    code, _, err = run_main(["resume", str(run), "--stop-return", "1", "--stop-episodes", "1"], capsys)
    assert code == 0, err
    assert "the run is complete" in err and "proxima: stopped at" not in err, err
