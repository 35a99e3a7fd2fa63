"""Review 35 (notes a run gave none of): extending an annealed run recomputed its learning rate schedule, so
the rate jumped up at the resume with only "resuming ... at global step N" said; --checkpoint-every (which
counts iterations) beyond the run's iterations wrote no periodic checkpoint without a word, where --eval-every
beyond the run's steps gets a note; and --stop-episodes without --stop-return did nothing, silently."""

import csv

import pytest

from proxima import PPOConfig, train
from tests.cli_helpers import TINY_RUN, run_main

# CartPole's default preset: lr 2.5e-4; TINY_RUN: 64-step iterations, so 128 steps are 2 iterations
LR_NOTE = ("proxima: note: --anneal-lr: the learning rate schedule is recomputed over the resume's total (320 steps) as "
           "if the run had been planned for it, reaching 0 after its last iteration, at step 320: iteration 3 trains at lr 0.00015, "
           "iteration 2 trained at 0.000125\n")
LR_WORDS = "proxima: note: --anneal-lr:"
STOP_EPISODES_NOTE = "proxima: note: --stop-episodes 5 has no effect without --stop-return\n"
STOP_EPISODES_WORDS = "--stop-episodes"


def _train(run_dir, capsys, *flags: str) -> str:
    """A finished 2-iteration CartPole run in ``run_dir`` (a checkpoint at each iteration); its stderr."""
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "128", "--run-dir", str(run_dir),
                             "--checkpoint-every", "1", "--quiet", *flags], capsys)
    assert code == 0, err
    return err


def _learning_rates(run_dir) -> dict:
    """{iteration: the learning rate metrics.csv logged for it}."""
    with open(run_dir / "metrics.csv", newline="") as f:
        return {int(row["iteration"]): float(row["charts/learning_rate"]) for row in csv.DictReader(f)}


# --- 1. the learning rate schedule a larger total recomputes --------------------------------------------------------
def test_extending_an_annealed_run_notes_the_learning_rate_it_jumps_to(tmp_path, capsys):
    run = tmp_path / "R"
    _train(run, capsys)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "320", "--quiet"], capsys)
    assert code == 0, err
    # was: nothing (under --quiet, not even the "resuming" line), the rate rising from 1.25e-4 to 1.5e-4
    assert LR_NOTE in err
    lrs = _learning_rates(run)
    assert lrs[2] == pytest.approx(1.25e-4) and lrs[3] == pytest.approx(1.5e-4)  # what the note says the run did


@pytest.mark.parametrize("case", ["no-anneal", "same total", "same iterations"])
def test_no_learning_rate_note_where_the_schedule_is_unchanged(tmp_path, capsys, case):
    run = tmp_path / "R"
    _train(run, capsys, *(["--no-anneal-lr"] if case == "no-anneal" else []))
    if case == "no-anneal":
        argv = ["resume", str(run), "--total-timesteps", "320", "--quiet"]
    else:  # from the first iteration's checkpoint: the resume trains iteration 2 of the same 2
        total = "128" if case == "same total" else "150"
        argv = ["train", "--resume", str(run / "checkpoints" / "step_000000000064.pt"), "--total-timesteps", total, "--quiet"]
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    assert LR_WORDS not in err
    assert max(_learning_rates(run)) == (5 if case == "no-anneal" else 2)  # the resume trained


# --- 2. --checkpoint-every beyond the run's iterations --------------------------------------------------------------
def test_checkpoint_every_beyond_the_run_is_noted_in_the_dry_run_and_the_run(tmp_path, capsys):
    run = tmp_path / "R"
    argv = ["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "128", "--run-dir", str(run), "--checkpoint-every", "5",
            "--quiet"]
    code, _, err = run_main([*argv, "--dry-run"], capsys)
    assert code == 0, err
    note = ("proxima: note: --checkpoint-every 5 is more than the run's 2 iterations (it counts iterations, not steps): "
            "only the final checkpoint is written")
    assert f"{note} (and one every 10 minutes: --checkpoint-minutes 10)\n" in err  # was: nothing
    assert not run.exists()
    code, _, err = run_main([*argv, "--checkpoint-minutes", "0"], capsys)
    assert code == 0, err
    assert f"{note}\n" in err  # under --quiet too, as --eval-every's note: the run writes other than asked
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step_000000000128.pt"]
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--checkpoint-every", "10", "--quiet"], capsys)
    assert code == 0, err
    assert ("proxima: note: --checkpoint-every 10 is more than the 4 iterations the run trains to (it counts iterations, "
            "not steps): only the final checkpoint is written in this resume\n") in err


def test_checkpoint_every_beyond_the_run_from_python_names_the_field(tmp_path, capsys):
    config = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, eval_episodes=0,
                       progress=False, threads=1, total_timesteps=64, checkpoint_every=3, checkpoint_minutes=0,
                       run_dir=str(tmp_path / "R"))
    train(config, quiet=True)
    assert ("proxima: note: PPOConfig.checkpoint_every = 3 is more than the run's 1 iteration (it counts iterations, not "
            "steps): only the final checkpoint is written\n") in capsys.readouterr().err


@pytest.mark.parametrize("every", ["2", None])  # as many as the run's iterations; the default (50), never asked for
def test_no_checkpoint_every_note_within_the_run(tmp_path, capsys, every):
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "128", "--run-dir", str(tmp_path / "R"),
                             *(["--checkpoint-every", every] if every else []), "--dry-run"], capsys)
    assert code == 0, err
    assert "--checkpoint-every" not in err and "PPOConfig.checkpoint_every" not in err


# --- 3. --stop-episodes without --stop-return -----------------------------------------------------------------------
def test_stop_episodes_without_stop_return_is_noted(tmp_path, capsys):
    argv = ["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "128", "--run-dir", str(tmp_path / "R"),
            "--stop-episodes", "5"]
    code, _, err = run_main([*argv, "--dry-run"], capsys)
    assert code == 0, err
    assert STOP_EPISODES_NOTE in err  # was: nothing
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    assert STOP_EPISODES_NOTE in err
    code, _, err = run_main(["resume", str(tmp_path / "R"), "--total-timesteps", "192", "--stop-episodes", "5"], capsys)
    assert code == 0, err
    assert STOP_EPISODES_NOTE in err  # a resume's typed flag: the run's recorded --stop-return is none too


@pytest.mark.parametrize("flags", [["--stop-episodes", "5", "--stop-return", "400"], ["--stop-episodes", "20"], [],
                                   ["--stop-episodes", "5", "--quiet"]])
def test_no_stop_episodes_note_where_it_applies_or_was_not_asked(tmp_path, capsys, flags):
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "128", "--run-dir", str(tmp_path / "R"),
                             *flags, "--dry-run"], capsys)
    assert code == 0, err
    assert STOP_EPISODES_WORDS not in err


def test_reliability_md_quotes_the_learning_rate_note_the_resume_prints(capsys):
    from pathlib import Path

    from proxima.trainer import _note_lr_schedule

    # docs/reliability.md's example: 3 of 3 iterations of 256 steps done at lr 2.5e-4, extended to 5
    config = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=64, total_timesteps=1280, lr=2.5e-4)
    _note_lr_schedule(config, 1, {"config": {**config.to_dict(), "total_timesteps": 768}, "iteration": 3})
    line = capsys.readouterr().err.strip()
    assert line.endswith("iteration 4 trains at lr 0.0001, iteration 3 trained at 8.33e-05"), line
    docs = " ".join((Path(__file__).resolve().parents[2] / "docs" / "reliability.md").read_text().split())
    assert f"`{line}`" in docs


def test_a_populations_stop_episodes_gets_its_own_note_alone_not_the_single_runs(tmp_path, capsys):
    from tests.cli_helpers import TINY_POP

    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1,2", *TINY_POP, "--total-timesteps", "64",
                             "--stop-episodes", "5", "--run-dir", str(tmp_path / "P"), "--dry-run"], capsys)
    assert code == 0, err
    assert ("proxima: note: --stop-episodes 5 applies to single runs; each member of the population trains for "
            "--total-timesteps\n") in err
    assert "has no effect without --stop-return" not in err  # a second note, telling another story


def test_the_learning_rate_note_counts_every_process_steps_and_none_before_an_iteration(capsys):
    from proxima.trainer import _note_lr_schedule

    # two processes: 512-step iterations (2 x 4 envs x 64 steps); 3 of 3 done, extended to 5
    config = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=64, total_timesteps=2560, lr=2.5e-4)
    recorded = {**config.to_dict(), "total_timesteps": 1536}
    _note_lr_schedule(config, 2, {"config": recorded, "iteration": 3})
    assert capsys.readouterr().err.strip().endswith(
        "reaching 0 after its last iteration, at step 2,560: iteration 4 trains at lr 0.0001, iteration 3 trained at 8.33e-05")
    _note_lr_schedule(config, 2, {"config": recorded, "iteration": 0})  # no iteration trained: no rate it trained at
    assert capsys.readouterr().err == ""
