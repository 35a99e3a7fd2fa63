"""--eval-every under torchrun (2 processes, gloo): rank 0's evaluation may outlast the hang timeout
(PROXIMA_DIST_TIMEOUT) while the other rank waits for it, and best.pt holds every rank's state."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from distributed_helpers import SMALL, STEPS_PER_ITER, pythonpath, run

HERE = Path(__file__).resolve().parent
ENV_ID = "slow_eval_env:SlowEval"


@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory):
    """2 iterations, one evaluation (at the last), which sleeps longer than the hang timeout."""
    cwd = tmp_path_factory.mktemp("dist-eval")
    cmd = [sys.executable, "-m", "proxima", "train", ENV_ID, "--nproc", "2", *SMALL, "--eval-episodes", "2", "--seed", "0",  # the last --eval-episodes counts
           "--total-timesteps", str(2 * STEPS_PER_ITER), "--eval-every", str(2 * STEPS_PER_ITER), "--run-dir", "run"]
    # the evaluation (slow_eval_env.py) sleeps 3.5 s, outlasting the 2 s hang timeout by a margin (the timeout
    # still has to let the ranks' first collectives through on a loaded machine)
    res = run(cmd, cwd, PROXIMA_DIST_TIMEOUT=2, SLOW_EVAL_SLEEP=3.5, PYTHONPATH=pythonpath(HERE))
    return cwd, res


def test_evaluation_longer_than_the_hang_timeout_keeps_the_job(evaluated_run):
    cwd, res = evaluated_run
    assert res.returncode == 0, res.stderr[-4000:]
    assert "lost contact" not in res.stderr
    header, *rows = (cwd / "run" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 2
    col = header.split(",").index("eval/mean_return")
    assert rows[0].split(",")[col] == "" and float(rows[1].split(",")[col]) >= 0.0  # evaluated at the last iteration only


def test_best_checkpoint_holds_every_rank(evaluated_run):
    from proxima.checkpoint import load_checkpoint

    cwd, res = evaluated_run
    assert res.returncode == 0, res.stderr[-4000:]
    best = load_checkpoint(cwd / "run" / "checkpoints" / "best.pt")
    assert best["world_size"] == 2 and best["global_step"] == 2 * STEPS_PER_ITER
    ranks = best["ranks"]
    assert len(ranks) == 2
    assert torch.equal(ranks[0]["next_obs"], best["next_obs"])  # rank 0's at the top level, as a periodic checkpoint
    assert not torch.equal(ranks[0]["next_obs"], ranks[1]["next_obs"])  # each rank its own envs


def test_best_checkpoint_without_ranks_is_refused_for_resume_and_still_evaluates(evaluated_run):
    """A best.pt written before best.pt gathered every rank (rank 0's pieces only): `proxima resume`
    would give every rank rank 0's envs; it refuses with one line, and `proxima eval --best` works."""
    cwd, res = evaluated_run
    assert res.returncode == 0, res.stderr[-4000:]
    path = cwd / "run" / "checkpoints" / "best.pt"
    state = torch.load(path, weights_only=True)
    del state["ranks"]
    torch.save(state, path)
    out = run([sys.executable, "-m", "proxima", "resume", str(path)], cwd, PYTHONPATH=pythonpath(HERE), timeout=120)
    assert out.returncode == 2, out.stderr[-3000:]
    lines = [line for line in out.stderr.splitlines() if "cannot be resumed" in line]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"proxima eval {cwd / 'run'} --best" in lines[0] and "checkpoints/step_N.pt" in lines[0]
    ev = run([sys.executable, "-m", "proxima", "eval", "run", "--best", "--episodes", "2", "--seed", "3", "--env", ENV_ID], cwd,
             PYTHONPATH=pythonpath(HERE), timeout=120)
    assert ev.returncode == 0, ev.stderr[-3000:]
