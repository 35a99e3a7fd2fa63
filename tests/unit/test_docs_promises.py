"""Promises of the docs kept by the commands: `proxima plot` of several runs skips one with no value
of the metric (plot.py's docstring); `train --resume --dry-run` refuses what the resume refuses, a
checkpoint of another process count included (docs/distributed.md); a finished run resumed without
a larger total shows the evaluation in eval.json and writes nothing (docs/reliability.md, Resume)."""

from __future__ import annotations

import csv
import json
import sys

import pytest
import yaml

from cli_helpers import edit_checkpoint, one_error_line, run_main, snapshot
from proxima.logger import CSV_COLUMNS

TINY = ["--num-envs", "4", "--num-steps", "16", "--total-timesteps", "128", "--threads", "1", "--no-progress"]


def fake_run(root, name: str, returns: list) -> object:
    """A run directory whose metrics.csv holds ``returns`` (None: no episode finished that iteration)."""
    d = root / name
    d.mkdir()
    (d / "config.yaml").write_text("env_id: Fake-v0\nseed: 1\n")
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i, r in enumerate(returns):
            w.writerow({"iteration": i + 1, "global_step": 100 * (i + 1), "time": 0.1 * (i + 1), "episodes": 0 if r is None else 1,
                        "charts/episodic_return": "" if r is None else r})
    return d


def test_plot_of_several_runs_skips_one_with_no_finished_episode_and_draws_the_others(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    drawn = fake_run(tmp_path, "a", [1.0, 2.0])
    empty = fake_run(tmp_path, "b", [None, None])  # its column is there, no value in it yet
    out = tmp_path / "curves.png"
    code, stdout, err = run_main(["plot", str(drawn), str(empty), "--out", str(out)], capsys)
    assert code == 0, err
    assert err.strip().splitlines() == [f"proxima: note: skipping {empty}: {empty / 'metrics.csv'}: no values of "
                                        "charts/episodic_return_100 (no episode finished yet?)"]
    assert out.is_file() and out.stat().st_size > 0

    code, _, err = run_main(["plot", str(empty), "--out", str(tmp_path / "alone.png")], capsys)  # alone: the error line
    assert code == 2
    assert one_error_line(err, "proxima plot") == f"{empty / 'metrics.csv'}: no values of charts/episodic_return_100 (no episode finished yet?)"
    assert not (tmp_path / "alone.png").exists()


@pytest.fixture
def finished_run(tmp_path, monkeypatch, capsys):
    """A finished 128-step CartPole run R (cwd: tmp_path), its end-of-run evaluation over 2 episodes."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", "R", "--eval-episodes", "2", *TINY], capsys)
    assert code == 0, err
    return tmp_path / "R"


def as_two_processes(state: dict) -> None:
    """The checkpoint as a 2-process run writes it: world_size 2, a piece per rank, half the iterations."""
    state["world_size"], state["iteration"], state["ranks"] = 2, state["iteration"] // 2, [{}, {}]


def test_a_dry_run_resume_refuses_a_checkpoint_of_another_process_count_as_the_resume_does(finished_run, capsys, monkeypatch):
    edit_checkpoint(finished_run, as_two_processes)
    resume = ["train", "--resume", "R", "--total-timesteps", "256", "--quiet"]
    code, out, dry = run_main([*resume, "--dry-run"], capsys)
    assert (code, out) == (2, "")
    code, _, real = run_main(resume, capsys)
    assert code == 2
    assert one_error_line(dry, "proxima train") == one_error_line(real, "proxima train") == (
        "R/checkpoints/step_000000000128.pt: written by 2 process(es), resumed with 1; use the same --nproc "
        "(proxima resume R starts 2; or proxima train --resume R --nproc 2); to continue with another count, start a new "
        "run from its weights: proxima train CartPole-v1 --init-from R --nproc K (its weights and --norm-obs statistics "
        "only: a fresh optimizer, learning-rate schedule and counters)")
    code, out, err = run_main([*resume, "--nproc", "2", "--dry-run"], capsys)  # the same count: the config it continues with
    assert code == 0, err
    assert yaml.safe_load(out)["total_timesteps"] == 256

    # --nproc 3: the launcher's own line, before it starts any process
    monkeypatch.setattr(sys, "argv", ["proxima", *resume, "--nproc", "3"])
    code, _, real = run_main([*resume, "--nproc", "3"], capsys)
    code_dry, _, dry = run_main([*resume, "--nproc", "3", "--dry-run"], capsys)
    assert code == code_dry == 2
    assert one_error_line(dry, "proxima train") == one_error_line(real, "proxima train") == (
        "R/checkpoints/step_000000000128.pt: written by 2 process(es), resumed with --nproc 3; use the same count "
        "(proxima resume R starts 2); to continue with another count, start a new run from its weights: proxima train "
        "CartPole-v1 --init-from R --nproc 3 (its weights and --norm-obs statistics only: a fresh optimizer, "
        "learning-rate schedule and counters)")


def test_a_finished_run_resumed_without_flags_shows_its_recorded_evaluation_and_writes_nothing(finished_run, capsys):
    run = finished_run
    code, out, err = run_main(["resume", "R", "--eval-episodes", "3"], capsys)  # another count: evaluated, written
    assert code == 0, err
    assert json.loads((run / "eval.json").read_text())["episodes"] == 3
    assert yaml.safe_load((run / "config.yaml").read_text())["eval_episodes"] == 3
    before = snapshot(run)

    # the checkpoint still records 2 episodes: neither evaluated again with them nor written
    code, out, err = run_main(["resume", "R"], capsys)
    assert code == 0 and "the run is complete (128 steps)" in err
    assert "at step 128 over 3 episodes (deterministic) (eval.json)" in out
    assert snapshot(run) == before
    code, out, err = run_main(["train", "--resume", "R", "--dry-run"], capsys)  # the config the resume runs with
    assert code == 0 and yaml.safe_load(out)["eval_episodes"] == 3
    code, out, err = run_main(["resume", "R", "--eval-episodes", "3"], capsys)  # typed, the same: shown too
    assert code == 0 and "at step 128 over 3 episodes (deterministic) (eval.json)" in out
    assert snapshot(run) == before

    code, out, err = run_main(["resume", "R", "--eval-episodes", "2"], capsys)  # typed, another: evaluated again
    assert code == 0 and "(eval.json" not in out and "over 2 episodes" in out
    assert json.loads((run / "eval.json").read_text())["episodes"] == 2
    assert yaml.safe_load((run / "config.yaml").read_text())["eval_episodes"] == 2
