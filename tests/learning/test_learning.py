"""Learning tests (slow): each env's default preset, one seed, must reach its target.

Run with ``make test-slow`` or ``pytest -m slow tests/learning``. The score is the end-of-training
evaluation: mean return of 10 deterministic episodes with the frozen observation statistics.
Measured times and the seeds' spread: benchmarks/results/learning.md.
"""

from __future__ import annotations

import json

import pytest

from proxima.presets import resolve
from proxima.trainer import train

pytestmark = pytest.mark.slow

TARGETS = {
    "Pendulum-v1": -250.0,
    "Acrobot-v1": -100.0,
    "CartPole-v1": 475.0,
    "MountainCarContinuous-v0": 90.0,
}


def train_preset(env_id: str, run_dir, seed: int = 1) -> dict:
    cfg = resolve(env_id)
    cfg.seed, cfg.run_dir, cfg.threads = seed, str(run_dir), 1
    cfg.progress, cfg.checkpoint_every, cfg.eval_episodes = False, 0, 10
    out_dir, _ = train(cfg, quiet=True)
    return json.loads((out_dir / "eval.json").read_text())


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("env_id", list(TARGETS))
def test_default_preset_reaches_target(env_id, tmp_path):
    result = train_preset(env_id, tmp_path / "run")
    assert result["episodes"] == 10 and result["deterministic"]
    assert result["mean_return"] >= TARGETS[env_id], (
        f"{env_id}: eval mean return {result['mean_return']:.1f} < {TARGETS[env_id]} "
        f"(returns {[round(r, 1) for r in result['returns']]})")
