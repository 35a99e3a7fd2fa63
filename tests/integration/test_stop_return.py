"""--stop-return: a run stops once its recent training episodes reach a mean return, and ends as a
run that reached --total-timesteps does (final checkpoint, evaluation); trainer.ReturnTarget's window."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from cli_helpers import run_main
from proxima import checkpoint as ckpt
from proxima.trainer import ReturnTarget


def test_the_window_is_the_fewest_recent_iterations_holding_enough_episodes():
    target = ReturnTarget(100.0, episodes=10)
    assert target.add(4 * 50.0, 4) is None    # 4 episodes: too few to judge
    assert target.add(0.0, 0) is None         # an iteration in which no episode ended changes nothing
    assert target.add(5 * 90.0, 5) is None    # 9 episodes
    assert target.add(2 * 120.0, 2) is None   # 11 episodes, mean 80.9
    # the oldest iteration stays while the newer ones hold fewer than 10 episodes (7)
    assert target.window == [(200.0, 4), (450.0, 5), (240.0, 2)]
    assert target.add(10 * 95.0, 10) is None  # the 10 newest episodes alone suffice: mean 95 < 100
    assert target.window == [(950.0, 10)]
    assert target.add(3 * 120.0, 3) == pytest.approx((950 + 360) / 13)  # 100.8 >= 100


def _stopping_run(run_dir, eval_episodes: int) -> list:
    """CartPole at 512 steps an iteration, up to 100 iterations, stopping once 16 episodes average 30."""
    return ["train", "CartPole-v1", "--backend", "native", "--num-envs", "8", "--num-steps", "64", "--total-timesteps", "51200",
            "--stop-return", "30", "--stop-episodes", "16", "--eval-episodes", str(eval_episodes), "--checkpoint-every", "0",
            "--no-progress", "--run-dir", str(run_dir)]


def test_train_stops_at_the_target_and_finishes_the_run(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, out, err = run_main(_stopping_run(run_dir, eval_episodes=2), capsys)
    assert code == 0, err
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    last = int(rows[-1]["global_step"])
    assert last < 51200  # 100 iterations allowed; a random policy's episodes already last ~22 steps
    assert f"proxima: stopped at global step {last:,} (iteration {len(rows)})" in err and ">= --stop-return 30" in err
    # the run ends as a finished one: a final checkpoint at that step, then the evaluation
    state = ckpt.load_checkpoint(run_dir)
    assert state["global_step"] == last and all(torch.isfinite(p).all() for p in state["agent"].values())
    assert json.loads((run_dir / "eval.json").read_text())["episodes"] == 2
    # the logged episodes agree: the window reached 30 at the last iteration and not before
    replay = ReturnTarget(30.0, episodes=16)
    hits = [replay.add(float(r["charts/episodic_return"]) * int(r["episodes"]) if int(r["episodes"]) else 0.0,
                       int(r["episodes"])) for r in rows]
    assert hits[-1] is not None and hits[-1] >= 30 and all(h is None for h in hits[:-1])


def test_without_it_the_run_trains_to_total_timesteps(tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = ["train", "CartPole-v1", "--backend", "native", "--num-envs", "8", "--num-steps", "64", "--total-timesteps", "2048",
            "--eval-episodes", "0", "--no-progress", "--run-dir", str(run_dir)]
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    assert "stopped at" not in err
    assert int(list(csv.DictReader(open(run_dir / "metrics.csv")))[-1]["global_step"]) == 2048


def test_a_resumed_run_fills_its_window_afresh(tmp_path, capsys):
    """As documented (docs/reliability.md): resuming a run that stopped at its target trains on
    until the window of new episodes reaches it again; --stop-return none trains to the total."""
    run_dir = tmp_path / "run"
    code, _, err = run_main(_stopping_run(run_dir, eval_episodes=0), capsys)
    assert code == 0, err
    first = len(list(csv.DictReader(open(run_dir / "metrics.csv"))))
    code, _, err = run_main(["resume", str(run_dir), "--no-progress"], capsys)
    assert code == 0, err
    second = len(list(csv.DictReader(open(run_dir / "metrics.csv"))))
    assert first < second < 100 and f"(iteration {second}): the last 16+ training episodes averaged" in err
    code, _, err = run_main(["resume", str(run_dir), "--no-progress", "--stop-return", "none", "--total-timesteps",
                             str(512 * (second + 3))], capsys)
    assert code == 0, err
    assert "stopped at" not in err and len(list(csv.DictReader(open(run_dir / "metrics.csv")))) == second + 3
