"""A 2-process CartPole run learns (slow: ~45 s for three seeds on 2 free cores, several minutes on a busy machine)."""

from __future__ import annotations

import json

import pytest
from distributed_helpers import run, train_cmd


@pytest.mark.slow
def test_two_processes_solve_cartpole(tmp_path):
    # the `fast` preset's batch (96 envs x 16 steps) split over two ranks of 48 envs; 500k steps
    # overall. Three seeds, two of which must solve: one seed's outcome can hang on rounding (with the
    # earlier 256-env preset, seed 1 evaluated 500 with one CPU tanh and 359.8 with another that
    # differs by 1e-7), while a 2-process run that does not learn fails on every seed.
    returns = {}
    for seed in (1, 2, 3):
        res = run(train_cmd("--preset", "fast", "--num-envs", "48", "--total-timesteps", "500000", "--eval-episodes", "10",
                            "--threads", "1", "--quiet", "--seed", str(seed), "--run-dir", f"run{seed}"), tmp_path, timeout=1800)
        assert res.returncode == 0, res.stderr[-4000:]
        returns[seed] = json.loads((tmp_path / f"run{seed}" / "eval.json").read_text())["mean_return"]
    assert sum(r >= 450 for r in returns.values()) >= 2, returns
    assert min(returns.values()) >= 150, returns  # every seed learned (a random policy: ~20)
