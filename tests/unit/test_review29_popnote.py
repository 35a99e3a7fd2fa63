"""Review 29c: a population resumed with a --total-timesteps that is not a whole number of iterations
trained each member to the last whole one without a word (a single run's resume says so)."""

from __future__ import annotations

from cli_helpers import run_main

SMALL = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "1", "--update-epochs", "1", "--threads", "1",
         "--no-progress", "--eval-episodes", "0"]


def test_a_population_resume_notes_a_total_that_is_not_whole_iterations(tmp_path, capsys):
    run = tmp_path / "pop"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1,2", "--run-dir", str(run), "--total-timesteps", "64",
                             *SMALL], capsys)
    assert code == 0, err
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "100"], capsys)
    assert code == 0, err
    assert ("proxima: note: --total-timesteps 100 is not a multiple of the batch (32 steps = num_envs x num_steps): "
            "the run trains to step 96 (3 iterations)") in err, err
