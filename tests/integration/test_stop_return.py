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


def _rows(run_dir) -> list:
    return list(csv.DictReader(open(run_dir / "metrics.csv")))


def test_a_run_that_stopped_stays_stopped_on_resume(tmp_path, capsys):
    """The window is in the checkpoint: resuming a run that stopped at its target trains no
    iteration and says why; --stop-return none (or a higher target) trains on."""
    run_dir = tmp_path / "run"
    code, _, err = run_main(_stopping_run(run_dir, eval_episodes=0), capsys)
    assert code == 0, err
    first = len(_rows(run_dir))
    state = ckpt.load_checkpoint(run_dir)
    window = ReturnTarget(30.0, 16, state["return_window"])
    assert sum(c for _, c in window.window) >= 16 and window.reached() is not None
    events = sorted(run_dir.glob("events.out.tfevents.*"))
    code, _, err = run_main(["resume", str(run_dir), "--no-progress"], capsys)
    assert code == 0, err
    assert sorted(run_dir.glob("events.out.tfevents.*")) == events  # nothing to log: no new, empty events file
    assert len(_rows(run_dir)) == first and "the run stopped at --stop-return 30 (its last 16+ training episodes" in err
    assert f"(iteration {first}): the last 16+ training episodes averaged" in err
    assert ckpt.load_checkpoint(run_dir)["global_step"] == state["global_step"]  # nothing new written
    code, _, err = run_main(["resume", str(run_dir), "--no-progress", "--stop-return", "none", "--total-timesteps",
                             str(512 * (first + 3))], capsys)
    assert code == 0, err
    assert "stopped at" not in err and len(_rows(run_dir)) == first + 3


def test_a_resumed_run_stops_where_an_uninterrupted_one_does(tmp_path, capsys):
    """Exact resume: a run stopped as SIGINT stops it during iteration 2, then resumed, ends at the
    same iteration, with the same window and parameters, as the run that was never stopped."""
    from proxima.config import PPOConfig
    from proxima.signals import TrainingInterrupted
    from proxima.trainer import Trainer, train

    cfg = PPOConfig(env_id="CartPole-v1", backend="native", num_envs=8, num_steps=64, total_timesteps=51200,
                    stop_return=30.0, stop_episodes=16, eval_episodes=0, checkpoint_every=0, progress=False)
    whole, split = tmp_path / "whole", tmp_path / "split"
    train(cfg, run_dir=whole, quiet=True, evaluate_at_end=False)
    stopped = len(_rows(whole))
    assert stopped > 2
    trainer = Trainer(cfg, run_dir=split, quiet=True)
    try:
        with pytest.raises(TrainingInterrupted):
            trainer.run(stop_after=2)  # ~46 episodes of mean ~22 so far: not stopped by the target
    finally:
        trainer.close()
    assert len(_rows(split)) == 2
    code, _, err = run_main(["resume", str(split), "--no-progress"], capsys)
    assert code == 0, err
    assert len(_rows(split)) == stopped and f"(iteration {stopped})" in err
    a, b = ckpt.load_checkpoint(whole), ckpt.load_checkpoint(split)
    assert a["global_step"] == b["global_step"] and a["return_window"] == b["return_window"]
    assert all(torch.equal(a["agent"][k], b["agent"][k]) for k in a["agent"])


def test_a_malformed_window_in_a_checkpoint_is_refused(tmp_path):
    from proxima.train_state import return_window

    assert return_window({}) == []  # checkpoints from before it was recorded
    assert return_window({"return_window": [[44.0, 2], [90.5, 3]]}) == [(44.0, 2), (90.5, 3)]
    for bad in ([["x", 1]], [[1.0]], 5, [[1.0, -2]]):
        with pytest.raises(ckpt.CheckpointError, match="return_window"):
            return_window({"return_window": bad, "path": "step_1.pt"})
