"""Review 32: behaviour of proxima/population_run.py that no test held (mutants S1-S9, R24 of the review's
mutation run): a single run's checkpoint in a population's folder, a stale diverged.json, the evaluation
count a resume falls back to, --checkpoint-minutes, the time a checkpoint records, where a resumed member's
config.yaml says it is, the checkpoint a late stop names, --nproc, and `--seeds ... --resume auto` on a
single run."""

from __future__ import annotations

import json
import shutil
import signal
import types

import pytest
import torch
import yaml

from proxima import checkpoint as ckpt
from proxima import population_run
from proxima.config import ConfigError, PPOConfig
from proxima.population import member_configs
from proxima.population_run import refuse_processes, train_population
from proxima.signals import TrainingInterrupted, say_stopped

from tests.cli_helpers import TINY_RUN, edit_checkpoint, error_line, run_main, snapshot, tiny_cartpole_run

SEEDS = [1, 2]
MEMBERS = ["m000-seed1", "m001-seed2"]


def _cfg(**kw) -> PPOConfig:
    """2 members x 2 envs x 16 steps: 32 steps per member per iteration, 2 iterations by default."""
    values = dict(env_id="CartPole-v1", backend="native", num_envs=2, num_steps=16, total_timesteps=64, num_minibatches=2,
                  update_epochs=1, threads=1, progress=False, eval_episodes=0, checkpoint_every=0)
    values.update(kw)
    return PPOConfig(**values)


def _population(run, stop_after=None, **kw):
    """A trained 2-seed population in ``run``; with ``stop_after``, stopped (as by SIGINT) after that iteration."""
    try:
        train_population(member_configs(_cfg(**kw), SEEDS, {}), SEEDS, {}, run_dir=run, quiet=True, stop_after=stop_after)
    except TrainingInterrupted as e:
        assert stop_after is not None and e.checkpoint is not None, e
    return run


def _steps(run) -> list:
    """The steps of the run's population checkpoints, oldest first."""
    return [int(p.stem.removeprefix("step_")) for p in ckpt.list_checkpoints(run)]


# ---------------------------------------------------------------- S1: a single run's checkpoint in a population folder
def test_resume_refuses_a_single_run_checkpoint_in_a_population_folder_and_changes_nothing(tmp_path, tmp_path_factory,
                                                                                          capsys):
    run = _population(tmp_path / "P")
    # a single run's checkpoint, newer than the population's, copied into its checkpoints/: it loads, as a run's
    single = ckpt.list_checkpoints(tiny_cartpole_run(tmp_path_factory, "single"))[-1]
    planted = shutil.copy(single, run / "checkpoints" / single.name)
    assert ckpt.list_checkpoints(run)[-1] == planted
    before = snapshot(run)
    code, _, err = run_main(["resume", str(run), "--no-progress"], capsys)
    # was, without the kind check: "incomplete population checkpoint (missing 'configs')", as if damaged
    error_line(code, err, f"proxima resume: error: {planted}: not a population checkpoint")
    assert snapshot(run) == before


# ---------------------------------------------------------------- S2: a divergence the resumed timeline never had
def test_resume_removes_a_diverged_json_the_checkpoint_does_not_list_and_keeps_the_one_it_does(tmp_path, capsys):
    run = _population(tmp_path / "P")
    at = {"iteration": 1, "global_step": 32, "reason": "env m000-seed1 returned NaN"}

    def member0_diverged(state):  # the checkpoint records member 0 frozen at iteration 1, member 1 healthy
        state["population"]["diverged"][0] = True
        state["population"]["diverged_at"][0] = dict(at)

    edit_checkpoint(run, member0_diverged)
    for name in MEMBERS:  # member 1's: a divergence after the checkpoint, in a timeline the resume abandons
        (run / name / "diverged.json").write_text(json.dumps({"member": name, **at}))
    code, _, err = run_main(["resume", str(run), "--no-progress"], capsys)
    assert code == 0, err
    assert not (run / MEMBERS[1] / "diverged.json").exists()
    assert json.loads((run / MEMBERS[0] / "diverged.json").read_text())["reason"] == at["reason"]
    listed = json.loads((run / "population.json").read_text())["member_dirs"]
    assert [e.get("diverged") for e in listed] == [at, None]


# ---------------------------------------------------------------- S3: members' evaluations of different counts
def test_resume_of_members_evaluated_with_different_counts_evaluates_again_with_the_checkpoints_count(tmp_path, capsys):
    run = _population(tmp_path / "P", eval_episodes=2)
    for name, episodes in zip(MEMBERS, (7, 3)):  # each still current for its own count; no count is the run's
        path = run / name / "eval.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "episodes": episodes}))
    code, _, err = run_main(["resume", str(run), "--no-progress"], capsys)
    assert code == 0, err
    for name in MEMBERS:
        assert json.loads((run / name / "eval.json").read_text())["episodes"] == 2, name
        assert yaml.safe_load((run / name / "config.yaml").read_text())["eval_episodes"] == 2, name


# ---------------------------------------------------------------- S4: --checkpoint-minutes is minutes
def test_checkpoint_minutes_counts_minutes_of_the_monotonic_clock(tmp_path, monkeypatch):
    def clock(seconds_per_call):
        calls = []

        def monotonic():
            calls.append(1)
            return seconds_per_call * len(calls)
        return types.SimpleNamespace(monotonic=monotonic, perf_counter=population_run.time.perf_counter)

    six = dict(total_timesteps=192, checkpoint_minutes=1.0, keep_checkpoints=10)  # 6 iterations of 32 steps
    # 2 s a reading: the run ends well inside its first minute, so only the end's checkpoint is written
    monkeypatch.setattr(population_run, "time", clock(2.0))
    assert _steps(_population(tmp_path / "fast", **six)) == [192]
    # 61 s a reading: a minute has gone by at every iteration's end
    monkeypatch.setattr(population_run, "time", clock(61.0))
    assert _steps(_population(tmp_path / "slow", **six)) == [32, 64, 96, 128, 160, 192]


# ---------------------------------------------------------------- S5: a checkpoint keeps the time trained so far
def test_a_population_checkpoint_records_the_time_trained_and_the_resume_adds_to_it(tmp_path, capsys):
    run = _population(tmp_path / "P", stop_after=1)
    path = ckpt.list_checkpoints(run)[-1]
    elapsed = torch.load(path, weights_only=True)["elapsed"]
    assert path == ckpt.checkpoint_path(run, 32) and elapsed > 0
    code, _, err = run_main(["resume", str(run), "--no-progress"], capsys)
    assert code == 0, err
    assert json.loads((run / "population.json").read_text())["wall_seconds"] >= round(elapsed, 3)


# ---------------------------------------------------------------- S6: where a resumed member is, absolute
def test_a_resume_given_a_relative_path_records_each_members_absolute_folder(tmp_path, monkeypatch, capsys):
    _population(tmp_path / "P", stop_after=1)
    shutil.move(tmp_path / "P", tmp_path / "Q")  # the run moved: its config.yaml still names P
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["resume", "Q", "--no-progress"], capsys)
    assert code == 0, err
    for name in MEMBERS:
        recorded = yaml.safe_load((tmp_path / "Q" / name / "config.yaml").read_text())["run_dir"]
        assert recorded == str((tmp_path / "Q" / name).resolve()), recorded


# ---------------------------------------------------------------- S8: a stop after training names the newest checkpoint
def test_a_stop_outside_the_loop_after_training_names_the_newest_checkpoint(tmp_path, monkeypatch, capsys):
    real = population_run._close_loggers

    def close_then_interrupted(loggers):  # SIGINT as the loggers close, after the loop's guard: OutsideLoop's stop
        real(loggers)
        raise TrainingInterrupted(signal.SIGINT, None)

    monkeypatch.setattr(population_run, "_close_loggers", close_then_interrupted)
    run = tmp_path / "P"
    with pytest.raises(TrainingInterrupted) as e:
        train_population(member_configs(_cfg(checkpoint_every=1), SEEDS, {}), SEEDS, {}, run_dir=run, quiet=True)
    newest = ckpt.checkpoint_path(run, 64)
    assert ckpt.list_checkpoints(run) == [ckpt.checkpoint_path(run, 32), newest]
    assert e.value.checkpoint == newest
    say_stopped(e.value)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("proxima: stopped by SIGINT; outside an iteration; the population is as its last checkpoint "
                           f"left it; checkpoint: {newest};"), line


# ---------------------------------------------------------------- S9: --nproc 2 and a population
def test_a_population_refuses_two_processes_and_takes_one(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)  # under torchrun the ranks alone would be refused
    # cli.cmd_train refuses `--seeds ... --nproc 2` before cmd_train_population is reached; this is
    # the population's own refusal, which a caller of cmd_train_population meets
    with pytest.raises(ConfigError) as e:
        refuse_processes(2)
    assert str(e.value) == "--nproc: a population trains in one process; drop --nproc (or torchrun)"
    refuse_processes(1)
    refuse_processes(None)


# ---------------------------------------------------------------- R24: `--seeds ... --resume auto` on a single run
def test_train_seeds_resume_auto_on_a_single_run_is_refused_naming_it_and_changes_nothing(tmp_path_factory, capsys):
    run = tiny_cartpole_run(tmp_path_factory, "single")
    before = snapshot(run)
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", *TINY_RUN, "--resume", "auto", "--run-dir", str(run)],
                            capsys)
    error_line(code, err, f"--resume auto: {run} holds a single run, not a population; drop --seeds/--sweep to resume it")
    assert snapshot(run) == before
