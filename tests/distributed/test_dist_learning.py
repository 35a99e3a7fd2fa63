"""A 2-process CartPole run learns (slow: about a minute on 2 free cores, several on a busy machine)."""

from __future__ import annotations

import json

import pytest
from distributed_helpers import run, train_cmd


@pytest.mark.slow
def test_two_processes_solve_cartpole(tmp_path):
    # the `fast` preset's batch (256 envs x 16 steps) split over two ranks of 128 envs; 500k steps overall
    res = run(train_cmd("--preset", "fast", "--num-envs", "128", "--total-timesteps", "500000", "--eval-episodes", "10",
                        "--threads", "1", "--quiet", "--run-dir", "run"), tmp_path, timeout=1800)
    assert res.returncode == 0, res.stderr[-4000:]
    result = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert result["mean_return"] >= 450, result
