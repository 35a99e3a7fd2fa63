"""Population checkpoints, SIGINT and resume work as for a single run: bit-identical on CPU."""

from __future__ import annotations

import csv
import json
import re

import pytest
import torch

from proxima import checkpoint as ckpt
from proxima import cli
from proxima.config import PPOConfig
from proxima.population import member_configs
from proxima.population_run import resume_population, train_population
from proxima.signals import TrainingInterrupted

#: measured every iteration, so they differ between an interrupted and an uninterrupted run
CLOCK_COLUMNS = ("time", "charts/SPS")


def _cfg(**kw) -> PPOConfig:
    base = dict(env_id="CartPole-v1", backend="native", num_envs=2, num_steps=32, total_timesteps=320, num_minibatches=2,
                update_epochs=2, threads=1, progress=False, eval_episodes=0, checkpoint_every=0)
    base.update(kw)
    return PPOConfig(**base)


def _members(cfg):
    return member_configs(cfg, [1, 2], {"lr": [1e-3, 3e-4]})


def _rows(member_dir) -> list:
    with open(member_dir / "metrics.csv") as f:
        return [{k: v for k, v in r.items() if k not in CLOCK_COLUMNS} for r in csv.DictReader(f)]


def _final(run_dir) -> dict:
    return ckpt.load_checkpoint(ckpt.list_checkpoints(run_dir)[-1])


def test_sigint_checkpoints_and_resume_continues_bit_identically(tmp_path):
    members = _members(_cfg())
    straight = train_population(members, [1, 2], {"lr": [1e-3, 3e-4]}, run_dir=tmp_path / "A", quiet=True, evaluate_at_end=False)
    with pytest.raises(TrainingInterrupted) as e:  # SIGINT during iteration 2 of 5
        train_population(_members(_cfg()), [1, 2], {"lr": [1e-3, 3e-4]}, run_dir=tmp_path / "B", quiet=True, stop_after=2)
    assert e.value.exit_code == 130
    assert e.value.checkpoint == tmp_path / "B" / "checkpoints" / "step_000000000128.pt"  # 2 x 2 envs x 32 steps per member
    assert not (tmp_path / "B" / ".proxima.lock").exists()
    resume_population(tmp_path / "B", quiet=True, evaluate_at_end=False)

    a, b = _final(straight), _final(tmp_path / "B")
    assert a["global_step"] == b["global_step"] == 320
    for name, value in a["population"]["params"].items():
        assert torch.equal(value, b["population"]["params"][name]), name
    oa, ob = a["population"]["optimizer"], b["population"]["optimizer"]
    assert torch.equal(oa["step"], ob["step"])
    for key in ("exp_avg", "exp_avg_sq"):
        for x, y in zip(oa[key], ob[key]):
            assert torch.equal(x, y)
    doc = json.loads((tmp_path / "A" / "population.json").read_text())
    for m in doc["member_dirs"]:
        rows_a, rows_b = _rows(tmp_path / "A" / m["dir"]), _rows(tmp_path / "B" / m["dir"])
        assert len(rows_a) == 5 and rows_a == rows_b  # every logged number, in order, without duplicates
        # each member's own checkpoint (what `proxima eval` of a member loads) holds its final weights
        member = ckpt.load_checkpoint(ckpt.list_checkpoints(tmp_path / "B" / m["dir"])[-1])
        assert member["global_step"] == 320 and member["population_member"]
        # each member's meta.json records the resume, as a single run's does (train_state.record_resume)
        first = json.loads((tmp_path / "A" / m["dir"] / "meta.json").read_text())
        meta = json.loads((tmp_path / "B" / m["dir"] / "meta.json").read_text())
        assert "resumes" not in first and [r["step"] for r in meta["resumes"]] == [128]
        assert set(meta["resumes"][0]) == {"started", "step", "command", "versions", "cpu_tanh", "git_commit", "git_dirty", "device",
                                "host", "cwd"}


def test_resume_drops_what_was_logged_after_the_checkpoint_and_falls_back_past_a_corrupt_one(tmp_path, capsys):
    members = _members(_cfg(checkpoint_every=1))
    with pytest.raises(TrainingInterrupted):
        train_population(members, [1, 2], {"lr": [1e-3, 3e-4]}, run_dir=tmp_path / "R", quiet=True, stop_after=3)
    newest = ckpt.list_checkpoints(tmp_path / "R")[-1]
    newest.write_bytes(b"cut short")  # a checkpoint the machine died writing
    resume_population(tmp_path / "R", evaluate_at_end=False)
    err = capsys.readouterr().err
    assert "is unusable" in err and "resuming population" in err and "at step 128 per member (iteration 2)" in err
    straight = train_population(_members(_cfg()), [1, 2], {"lr": [1e-3, 3e-4]}, run_dir=tmp_path / "S", quiet=True,
                                evaluate_at_end=False)
    doc = json.loads((tmp_path / "S" / "population.json").read_text())
    for m in doc["member_dirs"]:
        assert _rows(tmp_path / "R" / m["dir"]) == _rows(straight / m["dir"])  # iteration 3's first rows were dropped


def test_cli_resume_extends_a_finished_population_and_refuses_other_changes(tmp_path, capsys):
    small = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
             "--eval-episodes", "1", "--quiet", "--no-progress"]
    run = tmp_path / "R"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "128", "--run-dir", str(run), *small]) == 0
    capsys.readouterr()
    assert cli.main(["resume", str(run), "--lr", "0.1"]) == 2
    assert "--lr 0.1: cannot change when resuming" in capsys.readouterr().err
    assert cli.main(["resume", str(run), "--total-timesteps", "256"]) == 0
    m = json.loads((run / "population.json").read_text())["member_dirs"][0]["dir"]
    assert [int(r["global_step"]) for r in _rows(run / m)] == [64, 128, 192, 256]
    # a population checkpoint is not a single run's: one line each that says what to do
    step = ckpt.list_checkpoints(run)[-1]
    capsys.readouterr()
    assert cli.main(["eval", str(step)]) == 2
    assert "a population checkpoint (--seeds/--sweep); evaluate the members" in capsys.readouterr().err
    assert cli.main(["train", "CartPole-v1", "--resume", str(step)]) == 2
    assert f"resume the whole population: proxima resume {run.resolve()}" in capsys.readouterr().err


def test_train_seeds_resume_auto_continues_the_same_population_only(tmp_path, capsys):
    run = tmp_path / "R"
    with pytest.raises(TrainingInterrupted):
        train_population(member_configs(_cfg(), [1, 2]), [1, 2], {}, run_dir=run, quiet=True, stop_after=1)
    small = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "2", "--threads", "1",
             "--total-timesteps", "320", "--eval-episodes", "0", "--checkpoint-every", "0", "--quiet", "--no-progress"]
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-3", "--resume", "auto", "--run-dir", str(run), *small]) == 2
    assert "--seeds: " in capsys.readouterr().err
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--resume", "auto", "--run-dir", str(run), *small]) == 0
    m = json.loads((run / "population.json").read_text())["member_dirs"][1]["dir"]
    assert [int(r["global_step"]) for r in _rows(run / m)] == [64, 128, 192, 256, 320]
    # --resume auto on an empty --run-dir starts the population afresh
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--resume", "auto", "--run-dir", str(tmp_path / "new"), *small]) == 0
    assert (tmp_path / "new" / "population.json").is_file()


def test_resume_refuses_swept_fields_unsupported_switches_and_another_run_dir_with_one_line(tmp_path, capsys):
    small = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
             "--eval-episodes", "0", "--quiet", "--no-progress"]
    run = tmp_path / "R"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "lr=1e-3,3e-4", "--total-timesteps", "128",
                     "--run-dir", str(run), *small]) == 0
    capsys.readouterr()
    m = json.loads((run / "population.json").read_text())["member_dirs"][0]["dir"]
    elsewhere = tmp_path / "elsewhere"
    swept = "proxima resume: error: --lr is swept in this population (0.001, 0.0003); it cannot be given on resume"
    refused = {
        ("--lr", "0.01"): swept,
        ("--lr", "0.001"): swept,  # one member's own value is still not every member's
        ("--eval-every", "64"): "proxima resume: error: --eval-every is not supported for a population (no periodic evaluation "
                                "or best.pt for members yet; `proxima eval RUN` evaluates every member); drop it",
        ("--plot",): "proxima resume: error: --plot is not supported for a population (`proxima plot RUN` or `proxima report "
                     "RUN` draws the members' curves); drop it",
        ("--run-dir", str(elsewhere)): f"proxima resume: error: --run-dir {elsewhere}: a run resumes in its own directory "
                                       f"({run.resolve()}); drop --run-dir (to continue a copy elsewhere, copy the run "
                                       "directory and resume the copy)",
    }
    for flags, line in refused.items():
        assert cli.main(["resume", str(run), "--total-timesteps", "256", *flags]) == 2, flags
        assert capsys.readouterr().err == line + "\n"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "lr=1e-3,3e-4", "--resume", str(run),
                     "--run-dir", str(elsewhere), "--total-timesteps", "256", *small]) == 2
    assert capsys.readouterr().err.startswith(f"proxima train: error: --run-dir {elsewhere}: a run resumes in its own directory")
    assert not elsewhere.exists() and len(_rows(run / m)) == 2  # nothing trained
    # the flags safe to change are listed without those a population refuses
    assert cli.main(["resume", str(run), "--clip-coef", "0.3"]) == 2
    safe = capsys.readouterr().err.split("safe to change on resume: ")[1]
    assert "--total-timesteps" in safe and not {"--eval-every", "--plot", "--debug-checks", "--compile"} & set(safe.strip().split(", "))
    # a population recorded with a switch populations ignored (trained before it was refused): resume says how to drop it
    newest = ckpt.list_checkpoints(run)[-1]
    state = torch.load(newest, weights_only=True)
    for c in state["configs"]:
        c["plot"] = True
    torch.save(state, newest)
    assert cli.main(["resume", str(run), "--total-timesteps", "256"]) == 2
    assert capsys.readouterr().err == (f"proxima resume: error: {newest}: the population records --plot True, which populations "
                                       "do not support (`proxima plot RUN` or `proxima report RUN` draws the members' curves); "
                                       "resume with --no-plot\n")
    assert cli.main(["resume", str(run), "--total-timesteps", "256", "--no-plot", "--run-dir", str(run)]) == 0  # its own directory
    assert [int(r["global_step"]) for r in _rows(run / m)] == [64, 128, 192, 256]


SMALL = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1", "--quiet",
         "--no-progress"]


def _member_dirs(run) -> list:
    return [run / m["dir"] for m in json.loads((run / "population.json").read_text())["member_dirs"]]


def test_a_resume_drops_the_members_earlier_evaluations_and_the_report_says_how_far_it_got(tmp_path, capsys):
    import re
    import shutil

    first = tmp_path / "P"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "128", "--eval-episodes", "1",
                     "--run-dir", str(first), *SMALL]) == 0
    for d in _member_dirs(first):  # the step it evaluated, for a reader to tell it from a later one
        assert json.loads((d / "eval.json").read_text())["global_step"] == 128
    # extended with --eval-episodes 0: the step-128 evaluations are gone, from the members and population.json
    quiet = tmp_path / "Q"
    shutil.copytree(first, quiet)
    assert cli.main(["resume", str(quiet), "--total-timesteps", "256", "--eval-episodes", "0"]) == 0
    assert not list(quiet.glob("*/eval.json"))
    doc = json.loads((quiet / "population.json").read_text())
    assert doc["total_timesteps_per_member"] == 256 and not any("eval_mean_return" in m for m in doc["member_dirs"])
    assert cli.main(["report", str(quiet), "--episodes", "0"]) == 0
    assert "Final return per member: last training return." in (quiet / "report.md").read_text()
    # extended, then stopped (as by SIGTERM) before its new end: the report gives the steps done of the new target
    stopped = tmp_path / "S"
    shutil.copytree(first, stopped)
    with pytest.raises(TrainingInterrupted):
        resume_population(stopped, overrides={"total_timesteps": 320}, quiet=True, stop_after=3)
    assert not list(stopped.glob("*/eval.json"))
    assert json.loads((stopped / "population.json").read_text())["total_timesteps_per_member"] == 320
    capsys.readouterr()
    assert cli.main(["report", str(stopped), "--episodes", "0"]) == 0
    line = (stopped / "report.md").read_text().splitlines()[2]
    assert re.search(r", 192 of 320 steps each so far \(stopped; `proxima resume .*` continues it\)", line), line
    # an eval.json of an earlier step than the member's newest checkpoint (one a resume could not remove) is not used
    member = _member_dirs(stopped)[0]
    (member / "eval.json").write_text(json.dumps({"mean_return": 9999.0, "global_step": 128}))
    assert cli.main(["report", str(stopped), "--episodes", "0"]) == 0
    assert "9999" not in (stopped / "report.md").read_text()
    (member / "eval.json").unlink()
    # resumed to its end: new evaluations, of the new step
    resume_population(stopped, quiet=True)
    for d in _member_dirs(stopped):
        assert json.loads((d / "eval.json").read_text())["global_step"] == 320


def test_train_seeds_resume_from_a_named_checkpoint_sets_the_newer_ones_aside(tmp_path, capsys):
    run = tmp_path / "R"
    flags = ["--total-timesteps", "256", "--eval-episodes", "0", "--checkpoint-every", "1", "--keep-checkpoints", "10", *SMALL]
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), *flags]) == 0
    straight = _final(run)
    capsys.readouterr()
    older = ckpt.checkpoint_path(run, 128)
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--resume", str(older), *flags]) == 0
    err = capsys.readouterr().err
    assert "resuming from step_000000000128.pt, older than the run's newest checkpoint: moved the 2 newer one(s)" in err
    for folder in (run, *_member_dirs(run)):  # the abandoned timeline: kept, out of the way, in each checkpoints/
        aside = list((folder / "checkpoints").glob("abandoned-*"))
        assert len(aside) == 1 and sorted(p.name for p in aside[0].iterdir() if p.suffix == ".pt") == [
            "step_000000000192.pt", "step_000000000256.pt"], folder
        if folder != run:  # a member's rows of the abandoned timeline go with its checkpoints
            rows = csv.DictReader((aside[0] / "metrics.csv").read_text().splitlines())
            assert [int(r["global_step"]) for r in rows] == [192, 256]
        assert [p.name for p in ckpt.list_checkpoints(folder)][-1] == "step_000000000256.pt"
    again = _final(run)  # retrained from 128: the same numbers, on CPU
    for name, value in straight["population"]["params"].items():
        assert torch.equal(value, again["population"]["params"][name]), name
    assert [int(r["global_step"]) for r in _rows(_member_dirs(run)[0])] == [64, 128, 192, 256]
    # `proxima resume RUN/checkpoints/step_N.pt` does the same
    assert cli.main(["resume", str(ckpt.checkpoint_path(run, 192)), "--quiet"]) == 0
    assert "resuming from step_000000000192.pt, older than the run's newest checkpoint" in capsys.readouterr().err
    assert len(list((run / "checkpoints").glob("abandoned-*"))) == 2
    for name, value in straight["population"]["params"].items():
        assert torch.equal(value, _final(run)["population"]["params"][name]), name


def test_a_file_in_the_populations_checkpoints_that_is_not_one_of_its_checkpoints_is_named_without_a_flag(tmp_path, capsys):
    import shutil

    from cli_helpers import snapshot

    run = tmp_path / "R"
    flags = ["--total-timesteps", "128", "--eval-episodes", "0", "--checkpoint-every", "1", *SMALL]
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), *flags]) == 0
    foo = run / "checkpoints" / "foo.pt"
    shutil.copy(ckpt.list_checkpoints(run)[-1], foo)  # a population checkpoint, under a name no save gives
    before = snapshot(run)
    capsys.readouterr()
    line = f"{foo}: not one of {run}'s checkpoints (checkpoints/step_N.pt)\n"
    # the file is named as typed, with no flag: `proxima resume` takes no --resume
    assert cli.main(["resume", str(foo), "--quiet"]) == 2
    assert capsys.readouterr().err == f"proxima resume: error: {line}"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--resume", str(foo), *flags]) == 2
    assert capsys.readouterr().err == f"proxima train: error: {line}"
    assert snapshot(run) == before  # refused before anything was set aside or rewritten


def test_member_checkpoints_newer_than_the_resumed_population_checkpoint_are_set_aside(tmp_path, capsys):
    from proxima.population_eval import evaluate_population

    run = tmp_path / "R"
    cfg = _cfg(total_timesteps=512, checkpoint_every=2, keep_checkpoints=2)  # population and members: steps 384 and 512
    train_population(member_configs(cfg, [1, 2]), [1, 2], {}, run_dir=run, quiet=True, evaluate_at_end=False)
    newest = ckpt.list_checkpoints(run)[-1]
    with open(newest, "r+b") as f:  # cut short: the population resumes from 384, its members hold 512
        f.truncate(1000)
    with pytest.raises(TrainingInterrupted):
        resume_population(run, quiet=True, stop_after=1)  # stops after the first iteration: step 448
    assert re.search(r"\d+ members? held checkpoints newer than step 384", capsys.readouterr().err)
    for d in _member_dirs(run):
        assert [p.name for p in ckpt.list_checkpoints(d)] == ["step_000000000384.pt", "step_000000000448.pt"]
        assert [p.name for p in next((d / "checkpoints").glob("abandoned-*")).iterdir() if p.suffix == ".pt"] == [
            "step_000000000512.pt"]
    evaluated = evaluate_population(run, episodes=1)
    assert all(m["checkpoint"].endswith("step_000000000448.pt") for m in evaluated["members"])


def test_a_gymnasium_population_resumes_restarting_episodes_and_says_so(tmp_path, capsys):
    run = tmp_path / "G"
    cfg = _cfg(backend="gymnasium", total_timesteps=192, checkpoint_every=1)
    with pytest.raises(TrainingInterrupted):
        train_population(member_configs(cfg, [1, 2]), [1, 2], {}, run_dir=run, quiet=True, evaluate_at_end=False,
                         stop_after=1)
    capsys.readouterr()
    resume_population(run, quiet=True, evaluate_at_end=False)
    assert ("proxima: note: gymnasium envs cannot restore their state; the resumed population restarts episodes"
            in capsys.readouterr().err)
    assert ckpt.load_checkpoint(ckpt.list_checkpoints(run)[-1])["global_step"] == 192
