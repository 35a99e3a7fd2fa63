"""Mutations of the run-safety code that no test caught (review 31): a link to a sibling folder of the
same prefix, a run reached through a symlink, a lock that is not ours, a live lock met while taking
over a stale one, a writer racing claim_fresh, --debug-checks' action checks, a module env in the
stop line, `--nproc=K`, and a temp name cut on bytes."""

from __future__ import annotations

import json
import math
import os
import socket

import pytest
from cli_helpers import FIXTURES, bad_action_at_call_5

from proxima import rundir
from proxima.atomic import leads_outside, write_atomic
from proxima.config import PPOConfig
from proxima.envs import gym_adapter
from proxima.signals import checkpoint_line, resume_advice, started_by_torchrun
from proxima.trainer import DebugCheckError, train


def _live_foreign_lock() -> dict:
    """A lock held by pid 1: a process that runs on this machine and is not this one."""
    return {"pid": 1, "host": socket.gethostname(), "start": rundir._process_start(1), "since": "x"}


# ------------------------------------------------------------------------------------- atomic
def test_a_link_to_a_sibling_folder_sharing_the_runs_prefix_leads_outside(tmp_path):
    """run-secrets/ starts with "run" as a string, yet is not inside run/."""
    run, secrets = tmp_path / "run", tmp_path / "run-secrets"
    run.mkdir()
    secrets.mkdir()
    (secrets / "creds.yaml").write_text("token: hunter2\n")
    os.symlink("../run-secrets/creds.yaml", run / "config.yaml")
    assert leads_outside(run / "config.yaml", run)
    with pytest.raises(OSError):
        rundir.read_run_text(run / "config.yaml")


def test_a_temp_name_is_cut_on_bytes_for_a_long_multibyte_name(tmp_path):
    """120 "é" are 240 bytes: cut on characters alone, the temp name passes the 255-byte limit."""
    target = tmp_path / ("é" * 120 + ".md")
    write_atomic(target, "x")
    assert target.read_text() == "x"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


# ------------------------------------------------------------------------------------- env modules
def test_a_run_given_through_a_symlink_is_data_under_its_real_path(tmp_path, monkeypatch):
    monkeypatch.setattr(gym_adapter, "_DATA_DIRS", [])
    run = tmp_path / "run"
    run.mkdir()
    link = tmp_path / "run-link"
    os.symlink(run, link)
    gym_adapter.treat_as_data(str(link))
    # sys.path entries and the cwd are compared by real path: the link's own name would never match
    assert gym_adapter._inside_data_dir(str(run))
    assert gym_adapter._inside_data_dir(str(run / "sub"))


# ------------------------------------------------------------------------------------- locks
def test_release_keeps_a_lock_that_another_process_put_in_place_of_ours(tmp_path):
    lock = rundir.RunLock(tmp_path / "run")
    lock.acquire()
    other = _live_foreign_lock()
    (tmp_path / "run" / rundir.LOCK_NAME).write_text(json.dumps(other))
    lock.release()
    assert rundir.read_lock(tmp_path / "run") == other


def test_taking_over_a_stale_lock_puts_back_a_live_one_found_at_the_name(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    live = _live_foreign_lock()
    (run / rundir.LOCK_NAME).write_text(json.dumps(live))
    rundir.RunLock(run)._take_over({"pid": 999999, "host": socket.gethostname(), "since": "old"})
    assert rundir.read_lock(run) == live
    assert "took over" not in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == [rundir.LOCK_NAME]  # the moved copy is gone


def test_claim_fresh_refuses_a_folder_another_writer_filled_before_its_lock(tmp_path, monkeypatch):
    run = tmp_path / "run"
    real = rundir.RunLock.acquire

    def racing(self):  # another trainer writes its run between the empty check and our lock
        run.mkdir(exist_ok=True)
        (run / "metrics.csv").write_text("step,return\n1,5\n")
        real(self)

    monkeypatch.setattr(rundir.RunLock, "acquire", racing)
    session = rundir.RunSession()
    with pytest.raises(rundir.RunDirError) as e:
        session.claim_fresh(run)
    assert "is not empty" in str(e.value), str(e.value)
    assert rundir.read_lock(run) is None  # our lock released
    assert (run / "metrics.csv").read_text() == "step,return\n1,5\n"


# ------------------------------------------------------------------------------------- --debug-checks


def _cfg(env_id, **kw):
    return PPOConfig(env_id=env_id, num_envs=4, num_steps=16, total_timesteps=64, debug_checks=True, progress=False,
                     eval_episodes=0, checkpoint_every=0, threads=1, **kw)


def test_debug_checks_name_a_nan_box_action_before_the_env_sees_it(tmp_path, monkeypatch):
    bad_action_at_call_5(monkeypatch, math.nan)
    with pytest.raises(DebugCheckError) as e:
        train(_cfg("Pendulum-v1"), run_dir=tmp_path / "run", quiet=True, evaluate_at_end=False)
    assert str(e.value).startswith("--debug-checks: action [nan] of env 3 at global step 20 (env step 5) is not finite"), str(e.value)


def test_debug_checks_name_an_action_one_above_a_started_discretes_top(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    bad_action_at_call_5(monkeypatch, 3)  # the agent's index 3 is the env's 4: Discrete(3, start=1) takes 1..3
    with pytest.raises(DebugCheckError) as e:
        train(_cfg("user_envs:DiscreteFrom1", backend="gymnasium"), run_dir=tmp_path / "run", quiet=True,
              evaluate_at_end=False)
    assert str(e.value).startswith("--debug-checks: action 4 of env 3 at global step 20 (env step 5) is outside the action "
                                   "space Discrete(3, start=1)"), str(e.value)


# ------------------------------------------------------------------------------------- stop lines
def test_the_checkpoint_line_of_a_module_env_run_names_the_env(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("env_id: my_envs:Tiny\n")
    line = checkpoint_line(run / "checkpoints" / "step_1.pt")
    assert line.endswith(f"continue with: proxima resume --env my_envs:Tiny {run}"), line


def test_a_run_started_with_nproc_equals_k_is_not_taken_for_torchrun(tmp_path):
    from proxima.cpuinfo import usable_cpus

    world = usable_cpus() + 1  # more processes than CPUs: only the recorded command tells the launch
    (tmp_path / "meta.json").write_text(json.dumps({"kind": "ppo", "world_size": world,
                                                    "command": ["proxima", "train", "CartPole-v1", f"--nproc={world}"]}))
    assert not started_by_torchrun(tmp_path)
    assert resume_advice(tmp_path)[0] == f"proxima train --resume {tmp_path} --nproc {world}"
