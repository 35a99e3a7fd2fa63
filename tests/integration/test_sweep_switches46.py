"""`proxima train --seeds ... --sweep norm_adv=true,false` (and anneal_lr, clip_vloss): CleanRL's ablations as
one population, its member directories, logs, population.json, resume and report settings in the
--sweep spelling (true, false)."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from proxima import checkpoint as ckpt
from proxima import cli
from proxima.population import member_configs
from proxima.population_report import read_settings, setting_label
from proxima.population_run import resume_population, train_population
from proxima.signals import TrainingInterrupted

SMALL = ["--total-timesteps", "384", "--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "1",
         "--eval-episodes", "0", "--threads", "1", "--quiet", "--no-progress"]


def _rows(member_dir) -> list:
    with open(member_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def switch_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("switches") / "R"
    rc = cli.main(["train", "CartPole-v1", "--seeds", "1", "--sweep", "anneal_lr=True,False", "--sweep", "clip_vloss=1,0",
                   "--run-dir", str(run_dir), *SMALL])
    return run_dir, rc


def test_a_switch_sweep_names_members_and_settings_as_sweep_spells_them(switch_run):
    run_dir, rc = switch_run
    assert rc == 0
    doc = json.loads((run_dir / "population.json").read_text())
    assert doc["sweep"] == {"anneal_lr": [True, False], "clip_vloss": [True, False]}  # JSON true/false
    assert [m["dir"] for m in doc["member_dirs"]] == [
        "m000-seed1-anneal_lrtrue-clip_vlosstrue", "m001-seed1-anneal_lrtrue-clip_vlossfalse",
        "m002-seed1-anneal_lrfalse-clip_vlosstrue", "m003-seed1-anneal_lrfalse-clip_vlossfalse"]
    # the report's and eval's settings read them back, labelled as --sweep takes them
    labels = [setting_label(s.settings) for s in read_settings(run_dir)]
    assert labels == ["anneal_lr=true, clip_vloss=true", "anneal_lr=true, clip_vloss=false",
                      "anneal_lr=false, clip_vloss=true", "anneal_lr=false, clip_vloss=false"]


def test_each_members_log_shows_its_own_switches(switch_run):
    run_dir, _ = switch_run
    doc = json.loads((run_dir / "population.json").read_text())
    for m in doc["member_dirs"]:
        rows = _rows(run_dir / m["dir"])
        lrs = [float(r["charts/learning_rate"]) for r in rows]
        want = [2.5e-4 * f for f in (1.0, 2 / 3, 1 / 3)] if m["settings"]["anneal_lr"] else [2.5e-4] * 3
        assert lrs == pytest.approx(want, rel=1e-12), m["dir"]
        clipfrac = [r["losses/vf_clipfrac"] for r in rows]
        if m["settings"]["clip_vloss"]:
            assert all(math.isfinite(float(v)) for v in clipfrac), m["dir"]
        else:  # blank, as a single run with --no-clip-vloss logs it
            assert clipfrac == [""] * 3, m["dir"]


def test_a_swept_switch_cannot_be_given_on_resume(switch_run, capsys):
    run_dir, _ = switch_run
    assert cli.main(["resume", str(run_dir), "--no-anneal-lr", "--total-timesteps", "512"]) == 2
    assert "--no-anneal-lr is swept in this population (true, false); it cannot be given on resume" in capsys.readouterr().err


def test_a_switch_sweep_resumes_bit_identically(tmp_path):
    base = dict(env_id="CartPole-v1", backend="native", num_envs=2, num_steps=32, total_timesteps=256, num_minibatches=2,
                update_epochs=2, threads=1, progress=False, eval_episodes=0, checkpoint_every=0)
    from proxima.config import PPOConfig

    sweep = {"norm_adv": [True, False], "anneal_lr": [False, True], "clip_vloss": [False, True]}
    straight = train_population(member_configs(PPOConfig(**base), [1], sweep), [1], sweep, run_dir=tmp_path / "A", quiet=True,
                                evaluate_at_end=False)
    with pytest.raises(TrainingInterrupted):
        train_population(member_configs(PPOConfig(**base), [1], sweep), [1], sweep, run_dir=tmp_path / "B", quiet=True,
                         stop_after=2)
    resume_population(tmp_path / "B", quiet=True, evaluate_at_end=False)
    a = ckpt.load_checkpoint(ckpt.list_checkpoints(straight)[-1])
    b = ckpt.load_checkpoint(ckpt.list_checkpoints(tmp_path / "B")[-1])
    assert a["global_step"] == b["global_step"] == 256
    assert torch.equal(a["population"]["lr_now"], b["population"]["lr_now"])
    for name, value in a["population"]["params"].items():
        assert torch.equal(value, b["population"]["params"][name]), name
    doc = json.loads((tmp_path / "A" / "population.json").read_text())
    for m in doc["member_dirs"]:
        strip = lambda rows: [{k: v for k, v in r.items() if k not in ("time", "charts/SPS")} for r in rows]  # noqa: E731
        assert strip(_rows(tmp_path / "A" / m["dir"])) == strip(_rows(tmp_path / "B" / m["dir"])), m["dir"]
