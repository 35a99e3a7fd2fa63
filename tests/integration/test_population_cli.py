"""`proxima train --seeds/--sweep`: one run directory, one single-run-shaped directory per member."""

from __future__ import annotations

import csv
import json
import os
import re

import pytest
import torch
import yaml

from proxima import cli, presets
from proxima.logger import CSV_COLUMNS

SMALL = ["--total-timesteps", "512", "--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "1",
         "--eval-episodes", "2", "--threads", "1", "--quiet", "--no-progress"]


@pytest.fixture(scope="module")
def population_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("pop") / "R"
    rc = cli.main(["train", "CartPole-v1", "--seeds", "1,5", "--sweep", "lr=1e-3,3e-4", "--run-dir", str(run_dir), *SMALL])
    return run_dir, rc


def test_population_writes_one_member_directory_per_seed_and_setting(population_run):
    run_dir, rc = population_run
    assert rc == 0
    doc = json.loads((run_dir / "population.json").read_text())
    assert doc["members"] == 4 and doc["seeds"] == [1, 5] and doc["sweep"] == {"lr": [1e-3, 3e-4]}
    got = [(m["seed"], m["settings"]["lr"]) for m in doc["member_dirs"]]
    assert got == [(1, 1e-3), (5, 1e-3), (1, 3e-4), (5, 3e-4)]
    assert doc["wall_seconds"] > 0
    for m in doc["member_dirs"]:
        d = run_dir / m["dir"]
        cfg = yaml.safe_load((d / "config.yaml").read_text())
        assert (cfg["seed"], cfg["lr"], cfg["num_envs"]) == (m["seed"], m["settings"]["lr"], 2)
        with open(d / "metrics.csv") as f:
            rows = list(csv.DictReader(f))
        assert list(rows[0].keys()) == CSV_COLUMNS
        assert [int(r["global_step"]) for r in rows] == [128, 256, 384, 512]  # the member's own steps
        ev = json.loads((d / "eval.json").read_text())
        assert ev["episodes"] == 2 and ev["mean_return"] == pytest.approx(m["eval_mean_return"])
        assert list(d.glob("events.out.tfevents.*"))
    # members with another lr anneal from another start
    lrs = []
    for m in doc["member_dirs"][:3:2]:
        with open(run_dir / m["dir"] / "metrics.csv") as f:
            lrs.append(float(next(csv.DictReader(f))["charts/learning_rate"]))
    assert lrs == pytest.approx([1e-3, 3e-4])


def test_member_directories_work_with_eval_and_plot_and_refuse_resume(population_run, capsys):
    run_dir, _ = population_run
    member = run_dir / json.loads((run_dir / "population.json").read_text())["member_dirs"][0]["dir"]
    assert cli.main(["eval", str(member), "--episodes", "2", "--json"]) == 0
    ev = json.loads(capsys.readouterr().out)
    assert ev["mean_return"] == pytest.approx(json.loads((member / "eval.json").read_text())["mean_return"])
    assert cli.main(["plot", str(member), "--out", str(member / "curve.png")]) == 0
    assert (member / "curve.png").stat().st_size > 0
    assert cli.main(["resume", str(member)]) == 2
    assert f"holds its weights only; resume the whole population: proxima resume {run_dir}" in capsys.readouterr().err
    assert cli.main(["eval", str(run_dir), "--episodes", "2", "--json"]) == 0  # the whole population (test_population_views.py)
    assert len(json.loads(capsys.readouterr().out)["members"]) == 4
    # --env-kwargs reaches every member's env: episodes cut at 5 steps score 5 each
    assert cli.main(["eval", str(run_dir), "--episodes", "2", "--env-kwargs", '{"max_episode_steps": 5}', "--json"]) == 0
    assert [m["mean_return"] for m in json.loads(capsys.readouterr().out)["members"]] == [5.0] * 4
    assert cli.main(["eval", str(run_dir), "--env-kwargs", '{"bogus": 1}']) == 2
    assert "--env-kwargs: env 'CartPole-v1' takes no argument 'bogus'" in capsys.readouterr().err
    members = [run_dir / m["dir"] for m in json.loads((run_dir / "population.json").read_text())["member_dirs"]]
    files = {p: p.stat().st_mtime_ns for d in members for p in d.iterdir() if p.is_file()}
    assert cli.main(["resume", str(run_dir), "--eval-episodes", "0"]) == 0  # finished: says so once, trains nothing
    err = capsys.readouterr().err
    assert err.count("the run is complete (512 steps); --total-timesteps N (more steps) extends it") == 1
    # the same evaluation is on disk: shown, not recomputed; nothing in a member's folder changes
    assert cli.main(["resume", str(run_dir)]) == 0
    assert "eval CartPole-v1 lr=0.001: 2 members, mean of means" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for d in members for p in d.iterdir() if p.is_file()} == files


@pytest.mark.parametrize("args, message", [
    (["--seeds", "1-2", "--sweep", "num_envs=4,8"], "--sweep num_envs: changes the shapes or the env"),
    (["--seeds", "1-2", "--sweep", "hidden_sizes=64,32"], "--sweep hidden_sizes: changes the shapes or the env"),
    (["--seeds", "1-2", "--seed", "3"], "--seed: give a population's seeds with --seeds"),
    (["--seeds", "3-1"], "--seeds '3-1'"),
    (["--seeds", "1-2", "--compile"], "--compile is not supported with --seeds"),
    # switches a population would otherwise ignore: no note, no best.pt, no curve.png
    (["--seeds", "1-2", "--eval-every", "128"], "proxima train: error: --eval-every is not supported with --seeds/--sweep (no "
     "periodic evaluation or best.pt for members yet; `proxima eval RUN` evaluates every member); drop it"),
    (["--seeds", "1-2", "--plot"], "proxima train: error: --plot is not supported with --seeds/--sweep (`proxima plot RUN` or "
     "`proxima report RUN` draws the members' curves); drop it"),
    (["--seeds", "1-2", "--plot", "--dry-run"], "--plot is not supported with --seeds/--sweep"),
    (["--seeds", "1-2", "--resume", "nowhere"], "nowhere: not a population run directory"),
    (["--seeds", "1-2", "--nproc", "2"], "--nproc: a population trains in one process"),  # before torchrun starts anything
    (["--seeds", "0-2147483647"], "2,147,483,648 seeds; a population holds at most 1,000,000"),  # no list of 2**31 ints
    (["--seeds", ""], "--seeds '': expected seeds like 1-16"),
    # a typed flag for a swept field would be dropped by the sweep: refused, naming both
    (["--seeds", "1-2", "--lr", "5e-3", "--sweep", "lr=1e-3,2e-3"],
     "proxima train: error: --lr 0.005 and --sweep lr=... both set lr; drop one"),
    (["--seeds", "1-2", "--target-kl", "0.02", "--sweep", "target_kl=0.01,none", "--dry-run"],
     "proxima train: error: --target-kl 0.02 and --sweep target_kl=... both set target_kl; drop one"),
])
def test_population_flag_errors_are_one_line_exit_2(tmp_path, capsys, args, message):
    rc = cli.main(["train", "CartPole-v1", "--run-dir", str(tmp_path / "R"), *SMALL, *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "R").exists()


def test_a_swept_field_set_by_a_preset_or_config_file_is_not_a_typed_flag(tmp_path, capsys):
    # the fast preset and a --config file set lr; only a flag typed on the command line conflicts with --sweep lr
    (tmp_path / "c.yaml").write_text("lr: 0.01\n")
    for extra in (["--preset", "fast"], ["--config", str(tmp_path / "c.yaml")]):
        assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "lr=1e-3,2e-3", "--dry-run", *extra]) == 0
        assert json.loads(capsys.readouterr().out)["sweep"] == {"lr": [1e-3, 2e-3]}


def test_a_population_too_large_for_free_memory_is_refused_before_allocating(tmp_path, capsys, monkeypatch):
    from proxima import sizing

    monkeypatch.setattr(sizing, "free_memory", lambda device: 10 * 1024**2)  # 10 MB free
    rc = cli.main(["train", "CartPole-v1", "--seeds", "1-64", "--num-envs", "64", "--num-steps", "128",
                   "--run-dir", str(tmp_path / "R"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "64 members x 64 envs x 128 steps needs ~" in err and "10.0 MiB free" in err
    assert not (tmp_path / "R").exists()


def test_memory_estimate_grows_with_members():
    from proxima.config import PPOConfig
    from proxima.population import estimate_bytes

    cfg = PPOConfig(num_envs=4, num_steps=128)
    one, eight = estimate_bytes(cfg, 1, 4, 1, True), estimate_bytes(cfg, 8, 4, 1, True)
    assert eight == pytest.approx(8 * one, rel=1e-9)
    assert torch.tensor(one).item() > 4 * 128 * 4 * 4  # at least the float32 observations


def test_train_closing_and_progress_lines_are_per_setting(tmp_path, capsys):
    small = [a for a in SMALL if a not in ("--quiet", "--no-progress")]  # the per-iteration lines are --progress's
    assert cli.main(["train", "CartPole-v1", "--seeds", "1,2", "--sweep", "lr=1e-3,3e-4", "--run-dir", str(tmp_path / "R"),
                     *small]) == 0
    out, err = capsys.readouterr()
    evals = {e["dir"]: json.load(open(tmp_path / "R" / e["dir"] / "eval.json"))["mean_return"]
             for e in json.loads((tmp_path / "R" / "population.json").read_text())["member_dirs"]}
    lines = [ln for ln in out.splitlines() if ln.startswith("eval ")]
    for line, lr in zip(lines, ("0.001", "0.0003")):
        mine = [v for d, v in evals.items() if d.endswith(f"-lr{lr}")]
        assert line.startswith(f"eval CartPole-v1 lr={lr}: 2 members, mean of means {sum(mine) / 2:.2f} "
                               f"(min {min(mine):.2f}, max {max(mine):.2f})")
    assert len(lines) == 2 and lines[-1].endswith("s of training")
    progress = [ln for ln in err.splitlines() if ln.startswith("population 4 members")]
    assert progress and all("mean rolling return lr=0.001: " in ln and "; lr=0.0003: " in ln for ln in progress)


def test_report_of_a_real_population_has_a_row_per_setting_and_a_curve(population_run, capsys):
    run_dir, _ = population_run
    assert cli.main(["report", str(run_dir), "--threshold", "10"]) == 0
    text = (run_dir / "report.md").read_text()
    assert "| lr=0.001 | 2 |" in text and "| lr=0.0003 | 2 |" in text
    assert "(report_curve.png)" in text and (run_dir / "report_curve.png").stat().st_size > 0


def test_a_nan_reward_from_a_members_env_freezes_that_member_and_ends_a_population_only_when_all_diverged(tmp_path, monkeypatch,
                                                                                                        capsys):
    from proxima import checkpoint as ckpt

    from tests.integration.test_guards import NAN_REWARD_ENV, one_error_line

    (tmp_path / "nan_reward_env.py").write_text(NAN_REWARD_ENV)  # env row 1 (member 0's env 1): NaN at its 20th step
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    common = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps",
              "128", "--no-progress", "--quiet", "--checkpoint-every", "1", "--eval-episodes", "0"]
    # a population of one: its only member diverged, so it stops as a single run does, naming the member and the checkpoint
    one = tmp_path / "one"
    assert cli.main(["train", "nan_reward_env:NaNReward", "--seeds", "0", "--run-dir", str(one), *common]) == 2
    message = one_error_line(capsys.readouterr().err)
    assert message == ("non-finite reward nan from env 1 of member 0 (m000-seed0) at step 40 of that member; check the env's "
                       f"step() with: proxima check-env nan_reward_env:NaNReward; last good checkpoint: {ckpt.checkpoint_path(one, 32)}")
    # two members: member 0 is frozen and recorded; member 1 trains to the end
    run_dir = tmp_path / "run"
    assert cli.main(["train", "nan_reward_env:NaNReward", "--seeds", "0-1", "--run-dir", str(run_dir), *common]) == 0
    assert "member 0 (m000-seed0) diverged at iteration 2 (non-finite reward nan from env 1" in capsys.readouterr().err
    entries = json.loads((run_dir / "population.json").read_text())["member_dirs"]
    assert entries[0]["diverged"]["iteration"] == 2 and entries[0]["diverged"]["global_step"] == 64
    assert "non-finite reward nan from env 1" in entries[0]["diverged"]["reason"] and "diverged" not in entries[1]
    assert json.loads((run_dir / "m000-seed0" / "diverged.json").read_text())["iteration"] == 2
    rows0 = list(csv.DictReader(open(run_dir / "m000-seed0" / "metrics.csv")))
    rows1 = list(csv.DictReader(open(run_dir / "m001-seed1" / "metrics.csv")))
    assert [int(r["global_step"]) for r in rows0] == [int(r["global_step"]) for r in rows1] == [32, 64, 96, 128]  # lockstep
    assert rows0[0]["losses/value_loss"] != "" and all(r["losses/value_loss"] == "" for r in rows0[1:])  # blank from divergence
    assert all(r["losses/value_loss"] != "" for r in rows1)
    state = ckpt.load_checkpoint(run_dir)
    assert state["global_step"] == 128 and all(torch.isfinite(v).all() for v in state["population"]["params"].values())
    assert state["population"]["diverged"].tolist() == [True, False]
    # the report leaves it out, saying why (this env's episodes never end: member 1 has no return either)
    assert cli.main(["report", str(run_dir), "--episodes", "0", "--threshold", "10"]) == 0
    text = (run_dir / "report.md").read_text()
    assert "| (seeds only) | 0 of 2 (1 diverged) |" in text and "left out: m000-seed0 (diverged at iteration 2), m001-seed1 (no result)" in text


# ------------------------------------------------------------------------------------ report: members without eval.json, progress
def test_report_evaluates_members_without_eval_json_with_episodes_and_device(population_run, tmp_path, capsys):
    import shutil

    run_dir = tmp_path / "R"
    shutil.copytree(population_run[0], run_dir)
    for ev in run_dir.glob("*/eval.json"):  # as trained with --eval-episodes 0
        ev.unlink()
    capsys.readouterr()
    assert cli.main(["report", str(run_dir), "--episodes", "0"]) == 0
    assert "Final return per member: last training return." in (run_dir / "report.md").read_text()
    assert cli.main(["report", str(run_dir), "--device", "nope"]) == 2  # checked before any member is evaluated
    assert capsys.readouterr().err == "proxima report: error: --device 'nope': not a torch device (cpu, cuda, cuda:1, auto)\n"
    assert cli.main(["report", str(run_dir), "--episodes", "2"]) == 0
    text = (run_dir / "report.md").read_text()
    assert "Final return per member: evaluated now from the latest checkpoint (no eval.json)." in text
    err = capsys.readouterr().err
    assert err.count("over 2 episodes (deterministic)") == 4 and err.count("evaluated ") == 4
    # the numbers of `proxima eval` of each member (the same seed: the member's + 1,000,000)
    doc = json.loads((run_dir / "population.json").read_text())
    ret = []
    for m in doc["member_dirs"][:2]:
        assert cli.main(["eval", str(run_dir / m["dir"]), "--episodes", "2", "--json"]) == 0
        ret.append(json.loads(capsys.readouterr().out)["mean_return"])
    assert f"| lr=0.001 | 2 | {sum(ret) / 2:.1f} |" in text
    assert not list(run_dir.glob("*/eval.json"))  # the report does not change the run


def test_report_of_a_stopped_or_running_population_gives_the_steps_done(tmp_path, capsys):
    import socket

    from proxima.config import PPOConfig
    from proxima.population import member_configs
    from proxima.population_run import train_population
    from proxima.signals import TrainingInterrupted

    cfg = PPOConfig(env_id="CartPole-v1", backend="native", num_envs=2, num_steps=32, total_timesteps=320, num_minibatches=2,
                    update_epochs=1, threads=1, progress=False, eval_episodes=0, checkpoint_every=0)
    run_dir = tmp_path / "R"
    with pytest.raises(TrainingInterrupted):  # SIGINT in iteration 2 of 5
        train_population(member_configs(cfg, [1, 2]), [1, 2], {}, run_dir=run_dir, quiet=True, stop_after=2)
    assert cli.main(["report", str(run_dir), "--episodes", "0"]) == 0
    line = (run_dir / "report.md").read_text().splitlines()[2]
    assert re.fullmatch(r"CartPole-v1: 2 members \(2 seeds x 1 setting\), 128 of 320 steps each so far \(stopped; "
                        rf"`proxima resume {re.escape(str(run_dir))}` continues it\), \d+\.\d s of training in one process\.", line), line
    (run_dir / ".proxima.lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": "then"}))
    assert cli.main(["report", str(run_dir), "--episodes", "0"]) == 0
    assert f"128 of 320 steps each so far (in progress: locked by pid {os.getpid()} since then), " in (run_dir / "report.md").read_text()
    # started, nothing logged yet: no number it does not have
    for metrics in run_dir.glob("*/metrics.csv"):
        metrics.write_text(metrics.read_text().splitlines()[0] + "\n")
    assert cli.main(["report", str(run_dir), "--episodes", "0"]) == 0
    text = (run_dir / "report.md").read_text()
    assert "0 of 320 steps each so far (in progress: " in text and "), \u2014 s of training in one process." in text
    assert "nan" not in text


def test_a_new_populations_dry_run_prints_the_config_its_members_share(tmp_path, capsys):
    # it printed members, seeds and sweep only: what a preset, a --config file and the flags resolved to was not shown
    (tmp_path / "c.yaml").write_text("num_envs: 8\n")
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "lr=1e-3,2e-3", "--preset", "fast",
                     "--config", str(tmp_path / "c.yaml"), "--gamma", "0.98", "--dry-run"]) == 0
    line = json.loads(capsys.readouterr().out)
    shared = line["config"]
    assert (shared["env_id"], shared["num_envs"], shared["gamma"]) == ("CartPole-v1", 8, 0.98)
    assert shared["update_epochs"] == presets.presets_for("CartPole-v1")["fast"]["config"]["update_epochs"] == 2
    assert "seed" not in shared and "lr" not in shared  # per member: line["seeds"], line["sweep"]
    assert line["seeds"] == [1, 2] and line["sweep"] == {"lr": [1e-3, 2e-3]}
    assert list(tmp_path.iterdir()) == [tmp_path / "c.yaml"]
