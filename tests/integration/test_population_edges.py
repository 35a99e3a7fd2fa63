"""Population edges: a resume that would continue other members than the command describes, swept
values that print alike, a non-finite --threshold."""

from __future__ import annotations

import json

import pytest

from proxima import cli
from proxima.config import PPOConfig
from proxima.population import member_configs
from proxima.population_run import train_population
from proxima.signals import TrainingInterrupted

SMALL = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
         "--total-timesteps", "128", "--eval-episodes", "0", "--checkpoint-every", "0", "--quiet", "--no-progress"]


def _cfg(**kw) -> PPOConfig:
    base = dict(env_id="CartPole-v1", backend="native", num_envs=2, num_steps=32, total_timesteps=128, num_minibatches=2,
                update_epochs=1, threads=1, progress=False, eval_episodes=0, checkpoint_every=0)
    base.update(kw)
    return PPOConfig(**base)


def _stopped(run, seeds, sweep):
    """A population stopped after its first iteration: a checkpoint to resume."""
    with pytest.raises(TrainingInterrupted):
        train_population(member_configs(_cfg(), seeds, sweep), seeds, sweep, run_dir=run, quiet=True, stop_after=1)
    return json.loads((run / "population.json").read_text())


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_train_resume_without_seeds_or_sweep_compares_what_they_stand_for(tmp_path, capsys):
    run = tmp_path / "R"
    before = _stopped(run, [1, 2], {"lr": [1e-3, 2e-3]})
    # no --seeds: the population this command would start has the config's one seed, not the run's two
    assert cli.main(["train", "CartPole-v1", "--sweep", "lr=1e-3,2e-3", "--resume", "auto", "--run-dir", str(run), *SMALL]) == 2
    err = _one_line_error(capsys)
    assert f"--seeds: {run} trains seeds 1,2, and no --seeds was given (the config's one seed, 1)" in err
    assert "give --seeds 1,2" in err
    # no --sweep: a population of seeds only, not the run's sweep over lr
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--resume", "auto", "--run-dir", str(run), *SMALL]) == 2
    err = _one_line_error(capsys)
    assert f"--sweep: {run} was trained with --sweep lr=0.001,0.002, and no --sweep was given" in err
    assert "give --sweep lr=0.001,0.002" in err
    # a directory named with --resume is checked the same way
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--resume", str(run), *SMALL]) == 2
    assert "--sweep: " in _one_line_error(capsys)
    # nothing was resumed: the population is as it stopped
    assert json.loads((run / "population.json").read_text()) == before
    # without --seeds or --sweep, `train --resume auto` is a single run's: a population's checkpoint is refused there
    assert cli.main(["train", "CartPole-v1", "--resume", "auto", "--run-dir", str(run), *SMALL]) == 2
    assert f"resume the whole population: proxima resume {run.resolve()}" in _one_line_error(capsys)
    # the flags that describe it resume it; `proxima resume RUN` needs neither
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "lr=1e-3,2e-3", "--resume", "auto", "--run-dir",
                     str(run), *SMALL, "--total-timesteps", "192"]) == 0
    assert cli.main(["resume", str(run), "--total-timesteps", "256", "--quiet"]) == 0
    assert json.loads((run / "population.json").read_text())["total_timesteps_per_member"] == 256


def test_train_resume_without_seeds_continues_a_population_of_the_configs_seed(tmp_path, capsys):
    # --seeds absent stands for the config's seed: a population trained with that one seed resumes
    run = tmp_path / "R"
    _stopped(run, [1], {"lr": [1e-3, 2e-3]})
    assert cli.main(["train", "CartPole-v1", "--sweep", "lr=1e-3,2e-3", "--resume", "auto", "--run-dir", str(run), *SMALL]) == 0
    # and one of seeds only resumes without --sweep
    run2 = tmp_path / "S"
    _stopped(run2, [1, 2], {})
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--resume", "auto", "--run-dir", str(run2), *SMALL]) == 0
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "lr=1e-3,2e-3", "--resume", "auto", "--run-dir",
                     str(run2), *SMALL]) == 2
    assert (f"--sweep: {run2} was trained with no --sweep (seeds only), not --sweep lr=0.001,0.002; resume continues the "
            "same members: drop --sweep") in _one_line_error(capsys)


def test_swept_values_that_print_alike_are_refused_with_one_line(tmp_path, capsys):
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "gamma=0.9999995,1", "--run-dir",
                     str(tmp_path / "R"), *SMALL]) == 2
    assert _one_line_error(capsys) == ("proxima train: error: --sweep gamma: 0.9999995 and 1 print the same (gamma=1); "
                                       "give values that differ in 6 significant digits")
    assert not (tmp_path / "R").exists()


def test_the_closing_summary_never_pools_settings_whose_labels_print_alike(tmp_path, capsys):
    # built in Python, past --sweep's check: each setting still gets its own line, labelled exactly
    sweep = {"gamma": [0.9999995, 1.0]}
    members = member_configs(_cfg(eval_episodes=1, progress=True), [1, 2], sweep)  # the per-iteration lines: --progress's
    train_population(members, [1, 2], sweep, run_dir=tmp_path / "R", quiet=False)
    out, err = capsys.readouterr()
    lines = [ln for ln in out.splitlines() if ln.startswith("eval ")]
    assert [ln.split(":")[0] for ln in lines] == ["eval CartPole-v1 gamma=0.9999995", "eval CartPole-v1 gamma=1.0"]
    assert all(": 2 members, mean of means" in ln for ln in lines)
    progress = [ln for ln in err.splitlines() if ln.startswith("population 4 members")]
    assert progress and all("gamma=0.9999995: " in ln and "; gamma=1.0: " in ln and ln.count(" of 2 members") == 2
                            for ln in progress)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_report_refuses_a_threshold_that_is_not_finite(tmp_path, capsys, value):
    run = tmp_path / "R"
    _stopped(run, [1, 2], {})
    assert cli.main(["report", str(run), f"--threshold={value}", "--episodes", "0"]) == 2
    assert _one_line_error(capsys) == (f"proxima report: error: --threshold {float(value):g}: must be a finite return "
                                       "(e.g. --threshold 475)")
    assert not (run / "report.md").exists()
