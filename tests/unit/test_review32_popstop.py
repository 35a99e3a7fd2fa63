"""Review 32: a population stopped in its last iteration says, as a single run does, that training is
complete and that `proxima resume` trains nothing more and evaluates; the resume does exactly that.
And a config file's unquoted 0 and 1 for a boolean field."""

from __future__ import annotations

import csv
import json

import pytest

from proxima import checkpoint as ckpt
from proxima.config import PPOConfig
from proxima.population import member_configs
from proxima.population_run import train_population
from proxima.signals import TrainingInterrupted, say_stopped

from cli_helpers import run_main


def _cfg() -> PPOConfig:
    return PPOConfig(env_id="CartPole-v1", backend="native", num_envs=2, num_steps=16, total_timesteps=64,
                     num_minibatches=2, update_epochs=1, threads=1, progress=False, eval_episodes=2, checkpoint_every=0)


def test_a_population_stopped_in_its_last_iteration_says_training_is_complete_and_resume_only_evaluates(tmp_path, capsys):
    run = tmp_path / "P"
    seeds = [1, 2]
    with pytest.raises(TrainingInterrupted) as e:  # 2 iterations of 32 steps; the stop lands in the second
        train_population(member_configs(_cfg(), seeds, {}), seeds, {}, run_dir=run, quiet=True, stop_after=2)
    final = ckpt.list_checkpoints(run)[-1]
    say_stopped(e.value)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    # was: plain "checkpoint: ...; continue with: proxima resume P", as if there were training left
    assert line == (f"proxima: stopped by SIGINT; after the final checkpoint, before the end-of-run evaluation; training is "
                    f"complete; checkpoint: {final}; continue with: proxima resume {run} (it trains nothing more and "
                    "evaluates)")
    members = sorted(d for d in run.iterdir() if d.is_dir() and d.name.startswith("m0"))
    assert [d.name for d in members] == ["m000-seed1", "m001-seed2"]
    assert not any((d / "eval.json").exists() for d in members)

    code, _, err = run_main(["resume", str(run), "--no-progress"], capsys)
    assert code == 0, err
    for d in members:
        assert json.loads((d / "eval.json").read_text())["global_step"] == 64
        with open(d / "metrics.csv", newline="") as f:
            assert [int(r["global_step"]) for r in csv.DictReader(f)] == [32, 64]  # nothing more trained
    assert ckpt.list_checkpoints(run)[-1] == final


# ------------------------------------------------------------------ a YAML file's unquoted 0 and 1
def test_a_config_file_s_unquoted_one_and_zero_are_booleans_as_their_quoted_forms_are(tmp_path, capsys):
    """`anneal_lr: 1` was refused ("got 1, expected true or false") while `anneal_lr: '1'` was taken;
    other integers, and floats, are still refused."""
    import yaml

    for text, want in (("anneal_lr: 0\nnorm_obs: 1\n", {"anneal_lr": False, "norm_obs": True}),
                       ("anneal_lr: '0'\nnorm_obs: '1'\n", {"anneal_lr": False, "norm_obs": True})):
        path = tmp_path / "c.yaml"
        path.write_text(text)
        code, out, err = run_main(["train", "CartPole-v1", "--config", str(path), "--dry-run"], capsys)
        assert code == 0, err
        resolved = yaml.safe_load(out)
        assert {k: resolved[k] for k in want} == want and all(type(resolved[k]) is bool for k in want), text
    for bad in ("2", "1.0", "-1"):
        path.write_text(f"anneal_lr: {bad}\n")
        code, _, err = run_main(["train", "CartPole-v1", "--config", str(path), "--dry-run"], capsys)
        assert code == 2 and f"field 'anneal_lr' got {bad}, expected true or false" in err, (bad, err)
