"""A member whose update goes non-finite is frozen and recorded; the others train on (population_run._diverged)."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from proxima import checkpoint as ckpt
from proxima import cli
from proxima.config import PPOConfig
from proxima.population import member_configs, parse_sweep
from proxima.population_run import resume_population, train_population
from proxima.signals import TrainingInterrupted

SMALL = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
         "--eval-episodes", "2", "--checkpoint-every", "2", "--quiet", "--no-progress"]


def test_an_lr_sweep_that_diverges_finishes_with_the_diverged_setting_left_out(tmp_path, capsys):
    # `proxima train CartPole-v1 --seeds 1-2 --sweep lr=1e-3,1e38`: lr 1e38 overflows the first Adam step
    run = tmp_path / "R"
    cfg = PPOConfig(env_id="CartPole-v1", num_envs=2, num_steps=32, num_minibatches=2, update_epochs=1, threads=1,
                    total_timesteps=192, eval_episodes=2, checkpoint_every=2, progress=False)
    sweep = parse_sweep(["lr=1e-3,1e38"])
    with pytest.raises(TrainingInterrupted):  # stopped, then resumed: a divergence is part of the checkpoint
        train_population(member_configs(cfg, [1, 2], sweep), [1, 2], sweep, run_dir=run, quiet=True, stop_after=2)
    err = capsys.readouterr().err
    assert err.count("diverged at iteration 1 (non-finite loss, gradient or weights in its update; try a lower --lr") == 2
    resume_population(run, quiet=True)
    entries = json.loads((run / "population.json").read_text())["member_dirs"]
    assert [e.get("diverged", {}).get("iteration") for e in entries] == [None, None, 1, 1]
    assert [e["eval_mean_return"] is None for e in entries] == [False, False, True, True]
    dirs = [run / e["dir"] for e in entries]
    assert [(d / "eval.json").is_file() for d in dirs] == [True, True, False, False]
    assert [(d / "diverged.json").is_file() for d in dirs] == [False, False, True, True]
    for d in dirs:  # every member logs every iteration (lockstep); a diverged one's losses are blank
        rows = list(csv.DictReader(open(d / "metrics.csv")))
        assert [int(r["global_step"]) for r in rows] == [64, 128, 192]
        assert all((r["losses/value_loss"] == "") == (d in dirs[2:]) for r in rows), d
    # the report and eval leave the diverged setting's members out, saying why
    assert cli.main(["report", str(run), "--threshold", "10"]) == 0
    text = (run / "report.md").read_text()
    assert "| lr=1e+38 | 0 of 2 (2 diverged) |" in text
    assert f"left out: {dirs[2].name} (diverged at iteration 1), {dirs[3].name} (diverged at iteration 1)" in text
    assert "| lr=0.001 | 2 |" in text
    capsys.readouterr()
    assert cli.main(["eval", str(run), "--episodes", "1", "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert [s["n"] for s in settings] == [2, 0]
    assert settings[1]["left_out"] == [[dirs[2].name, "diverged at iteration 1"], [dirs[3].name, "diverged at iteration 1"]]
    # the weights in every checkpoint are finite (a non-finite step is never applied)
    state = ckpt.load_checkpoint(run)
    assert state["population"]["diverged"].tolist() == [False, False, True, True]
    assert all(bool(v.isfinite().all()) for v in state["population"]["params"].values())
    # resumed from a checkpoint of before the divergence (made so by hand): the record is of the new timeline
    older = ckpt.checkpoint_path(run, 128)
    state = torch.load(older, weights_only=True)
    state["population"]["diverged"].fill_(False)
    state["population"]["diverged_at"] = [None] * 4
    torch.save(state, older)
    resume_population(run, quiet=True, checkpoint=older)
    entries = json.loads((run / "population.json").read_text())["member_dirs"]
    assert [e.get("diverged", {}).get("iteration") for e in entries] == [None, None, 3, 3]  # diverged again, in iteration 3
    assert json.loads((dirs[2] / "diverged.json").read_text())["iteration"] == 3


def test_a_population_whose_every_member_diverged_stops_with_one_line(tmp_path, capsys):
    run = tmp_path / "R"
    argv = ["train", "CartPole-v1", "--seeds", "1-2", "--lr", "1e38", "--total-timesteps", "128", "--run-dir", str(run), *SMALL]
    assert cli.main(argv) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("proxima train: error: ")]
    assert lines == ["proxima train: error: non-finite loss or gradient in the update of member 0 (m000-seed1) at iteration 1; "
                     f"every member has now diverged (each one's iteration and cause: {run / 'population.json'}); no checkpoint "
                     "was written yet; try a lower --lr or --max-grad-norm"]
