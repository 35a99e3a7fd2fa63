"""Advice lines for runs of several processes: the command that trains a run again from the start
keeps its --nproc, a refused process count names --init-from as the way to another count, and the
refusal of a count above the CPUs names the user's own command with --nproc K added."""
import json
from argparse import Namespace

import pytest

from proxima import checkpoint as ckpt
from proxima import cli, cpuinfo
from proxima.config import ConfigError
from proxima.launch import other_count_advice, with_nproc
from proxima.run_setup import check_processes


def _run_files(run, world: int, env_id: str = "CartPole-v1"):
    """A run directory as `train --nproc K` leaves it before its first checkpoint: its start-up files."""
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(f"env_id: {env_id}\n")
    (run / "meta.json").write_text(json.dumps({"kind": "ppo", "world_size": world}))
    (run / "metrics.csv").write_text("")
    return run


def test_stopped_before_first_checkpoint_trains_again_with_its_process_count(tmp_path):
    run = _run_files(tmp_path / "ekw7", world=2)
    line = str(ckpt.no_checkpoint_error(run))
    assert line.endswith(f"train it again from the start: proxima train --config {run}/config.yaml --resume auto "
                         "--nproc 2 (its files are moved aside)")


def test_stopped_before_first_checkpoint_of_one_process_adds_no_nproc(tmp_path):
    run = _run_files(tmp_path / "one", world=1)
    line = str(ckpt.no_checkpoint_error(run))
    assert line.endswith("--resume auto (its files are moved aside)")
    assert "--nproc" not in line


def test_start_over_keeps_the_runs_process_count(tmp_path):
    run = _run_files(tmp_path / "d2", world=2)
    assert ckpt.start_over(run, best_tried=True) == (
        f"restore a copy of {run}/checkpoints if you have one, or start over with proxima train --config "
        f"{run}/config.yaml --run-dir {run} --overwrite --nproc 2 (the old run is moved aside)")
    (run / "meta.json").write_text(json.dumps({"world_size": 1}))
    assert "--nproc" not in ckpt.start_over(run, best_tried=True)


def _state(run, world: int) -> dict:
    return {"path": str(run / "checkpoints" / "step_000000002048.pt"), "world_size": world,
            "config": {"env_id": "CartPole-v1"}}


def test_resume_with_another_count_names_init_from(tmp_path):
    run = tmp_path / "a"
    with pytest.raises(ckpt.CheckpointError) as e:
        check_processes(_state(run, 2), 1, launcher=False)  # proxima train --resume RUN (one process)
    assert "use the same --nproc" in str(e.value)
    assert str(e.value).endswith(f"; to continue with another count, start a new run from its weights: proxima train "
                                 f"CartPole-v1 --init-from {run} --nproc K (its weights and --norm-obs statistics only: "
                                 "a fresh optimizer, learning-rate schedule and counters)")
    with pytest.raises(ckpt.CheckpointError) as e:
        check_processes(_state(run, 2), 3, launcher=True)  # proxima train --resume RUN --nproc 3
    assert f"proxima train CartPole-v1 --init-from {run} --nproc 3 (its weights" in str(e.value)


def test_resume_nproc_of_another_count_names_init_from(tmp_path, monkeypatch):
    run = _run_files(tmp_path / "a", world=2)
    monkeypatch.setattr(cli, "_checkpoint_processes", lambda path: 2)
    args = Namespace(resume_nproc=("1", "runs/a"))
    with pytest.raises(ConfigError) as e:
        cli._resume_nproc(args, run)
    assert str(e.value) == (
        f"--nproc 1: {run} was written by 2 process(es), and its resume needs as many; give --nproc 2, or drop "
        "--nproc (proxima resume reads the count from the checkpoint); to continue with another count, start a new "
        "run from its weights: proxima train CartPole-v1 --init-from runs/a (its weights and --norm-obs statistics "
        "only: a fresh optimizer, learning-rate schedule and counters)")


def test_other_count_advice_reads_the_env_and_quotes_it(tmp_path):
    run = _run_files(tmp_path / "m", world=2, env_id="my_envs:Grid")
    assert other_count_advice("runs/m", run_dir=run, nproc=4).startswith(
        "to continue with another count, start a new run from its weights: proxima train my_envs:Grid "
        "--init-from runs/m --nproc 4 (")
    assert " proxima train ENV_ID --init-from 'my run' --nproc K (" in other_count_advice("'my run'")


def test_more_processes_than_cpus_names_the_users_own_command(tmp_path, monkeypatch):
    run = _run_files(tmp_path / "p3", world=3)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "_checkpoint_processes", lambda path: 3)
    monkeypatch.setattr(cpuinfo, "usable_cpus", lambda root=None: 2)
    with pytest.raises(ConfigError) as e:
        cli._written_by(run.relative_to(tmp_path), None, ["resume", "p3", "--total-timesteps", "3840"])
    assert str(e.value) == ("p3: written by 3 processes, more than this machine's 2 CPUs (proxima resume starts no more); "
                            "to run 3 here anyway: proxima resume p3 --total-timesteps 3840 --nproc 3")


def test_with_nproc_keeps_every_flag_and_replaces_a_typed_count():
    assert with_nproc(["resume", "my run", "--lr", "1e-4", "--nproc=5", "--quiet"], 3) == (
        "proxima resume 'my run' --lr 1e-4 --quiet --nproc 3")


def test_with_nproc_names_a_module_env_the_command_leaves_out():
    assert with_nproc(["resume", "R"], 4, "my_envs:Walker") == "proxima resume R --env my_envs:Walker --nproc 4"
    assert with_nproc(["resume", "R", "--trust-run"], 4, "my_envs:Walker") == "proxima resume R --trust-run --nproc 4"
    assert with_nproc(["resume", "R", "--env=my_envs:Walker"], 4, "my_envs:Walker") == (
        "proxima resume R --env=my_envs:Walker --nproc 4")
