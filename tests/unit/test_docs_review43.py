"""What a user review running the docs' commands found: `proxima resume MISSING --steps N` called a
missing path a PPO run; a module:function env built with a time limit got the no-time-limit note;
--learning-rate, taken by train and rlhf, was missing from their --help."""
import pytest

from tests.cli_helpers import TINY_RUN, error_line, module_written_in, run_main, tiny_cartpole_run
from tests.integration import test_endless_env_note as endless_note

no_evaluation = endless_note.no_evaluation  # evaluate() answers at once: the note comes before it, which counts
NOTE = "no training episode ended"

FACTORIES = '''
import gymnasium
from endless_env43 import Endless


def mountain_car(**kw):
    return gymnasium.make("MountainCar-v0", **kw)  # registered with max_episode_steps=200


def wrapped(**kw):
    return gymnasium.wrappers.TimeLimit(Endless(), max_episode_steps=1000)  # no spec: the wrapper alone limits it
'''


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "endless_env43.py").write_text(endless_note.ENDLESS)
    yield from module_written_in(tmp_path, monkeypatch, "factories43", FACTORIES)


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    return tiny_cartpole_run(tmp_path_factory, "review43")


def test_resume_steps_of_a_missing_path_says_it_is_missing(tmp_path, capsys):
    missing = tmp_path / "nonexist"
    code, _, err = run_main(["resume", str(missing), "--steps", "3"], capsys)
    assert error_line(code, err) == f"proxima resume: error: {missing}: no such file or directory"
    code, _, plain = run_main(["resume", str(missing)], capsys)  # the line it gets without --steps
    assert error_line(code, plain) == error_line(code, err)


def test_resume_steps_of_a_folder_with_no_run_says_it_is_no_run(tmp_path, capsys):
    code, _, err = run_main(["resume", str(tmp_path), "--steps", "3"], capsys)
    assert error_line(code, err) == (f"proxima resume: error: {tmp_path}: not a Proxima run directory "
                                     "(no checkpoints/step_*.pt inside)")


def test_resume_steps_of_a_ppo_run_still_points_to_total_timesteps(ppo_run, capsys):
    code, _, err = run_main(["resume", str(ppo_run), "--steps", "3"], capsys)
    assert error_line(code, err) == (f"proxima resume: error: --steps: {ppo_run} is a PPO run; --steps extends RLHF "
                                     "runs only (use --total-timesteps)")


@pytest.mark.parametrize("env, vector", [("factories43:mountain_car", "sync"), ("factories43:mountain_car", "async"),
                                         ("factories43:wrapped", "sync")])
def test_no_time_limit_note_for_a_factory_env_built_with_a_time_limit(factories, no_evaluation, tmp_path, capsys,
                                                                      env, vector):
    # 2 envs x 32 steps x 2 iterations: no episode of 200 (or 1,000) steps ends, as in the review's repro
    code, _, err = run_main(["train", env, *TINY_RUN, "--num-envs", "2", "--num-steps", "32", "--vector", vector,
                             "--total-timesteps", "128", "--eval-episodes", "1", "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 0, err
    assert NOTE not in err


def test_the_note_stays_for_a_factory_env_with_no_time_limit(factories, no_evaluation, tmp_path, capsys):
    code, _, err = run_main(["train", "endless_env43:Endless", *TINY_RUN, "--total-timesteps", "128", "--eval-episodes",
                             "1", "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 0, err
    assert [line for line in err.splitlines() if NOTE in line] == [
        "proxima: note: no training episode ended in the 128 steps trained; the end-of-run evaluation plays 1 episode "
        "of up to 100,000 steps each, which may take long (--eval-episodes 0 skips it; give the env a time limit)"]


@pytest.mark.parametrize("command", ["train", "rlhf", "resume"])
def test_help_names_learning_rate_next_to_lr(command, capsys):
    code, out, _ = run_main([command, "--help"], capsys)
    assert code == 0
    text = " ".join(out.split())  # argparse wraps the help at the terminal's width
    assert "Also --learning-rate (Stable-Baselines3's name; not with --lr)." in text
    assert "--learning-rate LR" not in text  # one entry, --lr's: the other name is not a second setting


@pytest.mark.parametrize("command", ["train", "rlhf"])
def test_both_names_of_the_learning_rate_still_refused(command, capsys):
    code, _, err = run_main([command, "--lr", "1e-3", "--learning-rate", "1e-3"], capsys)
    assert "both --learning-rate and --lr given (--learning-rate is --lr's other name); keep one" in error_line(code, err)
