"""Review 31 (mutation testing): refusals and names that no test pinned down.

* --keep-checkpoints -1 gets "must be 0 (keep every checkpoint) or more" (0 keeps every checkpoint since
  review 45: test_rundir_review45);
* --eval-every N with --eval-episodes 0 is refused;
* sizing.check_fits counts --vector async workers for every one of --nproc K processes;
* sizing.most_minibatches divides the batch by the smallest prime factor of its two sides;
* a population's default folder spans its seeds, and its members' folders name every swept value.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from cli_helpers import run_main, snapshot
from proxima import sizing
from proxima.config import ConfigError, PPOConfig, validate


# ------------------------------------------------------------------------------ --keep-checkpoints
def test_keep_checkpoints_below_zero_is_refused_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["train", "CartPole-v1", "--keep-checkpoints", "-1", "--dry-run"], capsys)
    assert code == 2, out + err
    assert err.splitlines() == ["proxima train: error: --keep-checkpoints -1: must be 0 (keep every checkpoint) or more"]
    assert snapshot(tmp_path) == {}


def test_keep_checkpoints_below_zero_is_refused_in_python_too():
    with pytest.raises(ConfigError) as e:
        validate(PPOConfig(keep_checkpoints=-1), python=True)
    assert str(e.value) == "PPOConfig.keep_checkpoints = -1: must be 0 (keep every checkpoint) or more"


# ------------------------------------------------------------------------------ --eval-every without episodes
def test_eval_every_with_no_eval_episodes_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["train", "CartPole-v1", "--eval-every", "2", "--eval-episodes", "0", "--dry-run"], capsys)
    assert code == 2, out + err
    assert err.splitlines() == ["proxima train: error: --eval-every 2: needs --eval-episodes of 1 or more"]
    assert snapshot(tmp_path) == {}


# ------------------------------------------------------------------------------ sizing
def test_check_fits_counts_the_async_workers_of_every_process(monkeypatch):
    """3,000 workers a rank fit under a limit of 4,096 processes; 2 ranks' 6,000 do not."""
    monkeypatch.setattr(sizing, "free_memory", lambda device: 1 << 40)  # memory is not what is tested
    monkeypatch.setattr(sizing, "process_limit", lambda: (4096, "the RLIMIT_NPROC limit (ulimit -u)"))
    cfg = PPOConfig(env_id="Pendulum-v1", backend="gymnasium", vector="async", num_envs=3000, num_steps=8)
    probe = lambda: sizing.EnvSizes(3, 1, False)  # noqa: E731 (a Gymnasium env: a worker per env)
    sizing.check_fits(cfg, torch.device("cpu"), probe, processes=1)  # fits
    with pytest.raises(ConfigError) as e:
        sizing.check_fits(cfg, torch.device("cpu"), probe, processes=2)
    assert str(e.value) == ("--num-envs 3000 with --vector async (one worker process per env): 6,000 processes for "
                            "--nproc 2, more than the RLIMIT_NPROC limit (ulimit -u) allows (4,096); use --vector sync "
                            "(one process) or lower --num-envs")


def test_most_minibatches_divides_by_the_smallest_prime_factor():
    """4 envs x 9 steps: factors 2 and 3; 36 / 2 = 18 minibatches of 2 rows, the most --norm-adv allows."""
    cfg = PPOConfig(num_envs=4, num_steps=9)
    assert sizing.most_minibatches(cfg) == 18
    validate(dataclasses.replace(cfg, num_minibatches=18))  # accepted
    with pytest.raises(ConfigError, match="minibatches of 1 sample"):
        validate(dataclasses.replace(cfg, num_minibatches=36))
    assert sizing.most_minibatches(PPOConfig(num_envs=9, num_steps=4)) == 18  # either side's factor


# ------------------------------------------------------------------------------ population folder names
@pytest.fixture(scope="module")
def population(tmp_path_factory):
    """The folder of ``train --seeds 1-3 --sweep lr=... --sweep ent_coef=...`` with no --run-dir."""
    import contextlib
    import io

    from proxima import cli

    cwd = tmp_path_factory.mktemp("pop31")
    argv = ["train", "CartPole-v1", "--seeds", "1-3", "--sweep", "lr=0.001,0.0003", "--sweep", "ent_coef=0,0.01",
            "--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
            "--eval-episodes", "0", "--threads", "1", "--total-timesteps", "32", "--quiet"]
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.chdir(cwd)
        assert cli.main(argv) == 0, err.getvalue()
    runs = list((cwd / "runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def test_default_population_folder_spans_the_seeds(population):
    run = population
    assert re.fullmatch(r"CartPole-v1__seeds1-3__\d{8}-\d{6}", run.name), run.name


def test_member_folders_name_both_swept_values(population):
    run = population
    members = sorted(p.name for p in run.iterdir() if p.name.startswith("m"))
    grid = [(lr, ent, seed) for lr in ("0.001", "0.0003") for ent in ("0", "0.01") for seed in (1, 2, 3)]
    assert members == [f"m{i:03d}-seed{seed}-lr{lr}-ent_coef{ent}" for i, (lr, ent, seed) in enumerate(grid)]
