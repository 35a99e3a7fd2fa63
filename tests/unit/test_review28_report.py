"""Review 28 of `proxima report` and `proxima plot`: the report's own image name, a run in progress
or stopped short, `.` as a run, colliding names, image links with spaces, inf cells, repeated
steps in metrics.csv, the --x time legend and a --metric no run has."""

from __future__ import annotations

import csv
import json
import os
import shlex
import socket
from pathlib import Path

import numpy as np
import pytest

from proxima.logger import CSV_COLUMNS
from proxima.plot import collect_panels, read_metrics
from proxima.report import summarize
from tests.cli_helpers import one_error_line, run_main

STEPS = [512, 1024, 1536, 2048, 2560, 3072, 3584, 4096]


def _write_run(d: Path, returns=None, steps=STEPS, times=None, episodes=None, **config) -> Path:
    """A run directory by hand: config.yaml (a batch of 512 steps, 4,096 in all unless given) and
    metrics.csv, one row per step."""
    returns = returns if returns is not None else [20.0 + 10 * i for i in range(len(steps))]
    times = times if times is not None else [0.1 * (i + 1) for i in range(len(steps))]
    episodes = episodes if episodes is not None else [1] * len(steps)
    d.mkdir(parents=True)
    cfg = {"env_id": "Fake-v0", "seed": 1, "num_envs": 4, "num_steps": 128, "total_timesteps": 4096, **config}
    (d / "config.yaml").write_text("".join(f"{k}: {v}\n" for k, v in cfg.items()))
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i, (s, r, t, e) in enumerate(zip(steps, returns, times, episodes)):
            w.writerow({"iteration": i + 1, "global_step": s, "time": t, "episodes": e,
                        "charts/episodic_return": r, "losses/value_loss": 1.0 + i})
    return d


def _write_population(run: Path, steps=STEPS, total=4096) -> Path:
    entries = []
    for i in range(2):
        name = f"m{i:03d}-seed{i + 1}"
        _write_run(run / name, steps=steps, seed=i + 1)
        entries.append({"dir": name, "seed": i + 1, "settings": {}})
    (run / "population.json").write_text(json.dumps({"kind": "ppo-population", "env_id": "Fake-v0", "members": 2,
                                                     "seeds": [1, 2], "member_dirs": entries,
                                                     "total_timesteps_per_member": total, "wall_seconds": 1.0}))
    return run


def _table_row(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {name} |"))


# ------------------------------------------------------------------------------------ 1: the report's own image
def test_a_reports_image_is_named_after_it_and_a_later_plot_leaves_it_alone(tmp_path, capsys):
    run = _write_run(tmp_path / "R")
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    assert "](report_curve.png)" in (run / "report.md").read_text()
    picture = (run / "report_curve.png").read_bytes()
    assert not (run / "curve.png").exists()
    code, out, err = run_main(["plot", str(run), "--metric", "value_loss"], capsys)  # plot's own name, as before
    assert (code, out.strip()) == (0, f"wrote {run / 'curve.png'}"), err
    assert (run / "report_curve.png").read_bytes() == picture  # the report still shows what it reported
    code, _, err = run_main(["report", str(run), "--episodes", "0", "--out", str(run / "other.md")], capsys)
    assert code == 0 and "](other_curve.png)" in (run / "other.md").read_text(), err
    assert (run / "report_curve.png").read_bytes() == picture

    pop = _write_population(tmp_path / "P")
    code, _, err = run_main(["report", str(pop), "--episodes", "0"], capsys)
    assert code == 0, err
    assert "](report_curve.png)" in (pop / "report.md").read_text()
    assert (pop / "report_curve.png").is_file() and not (pop / "curve.png").exists()


# ------------------------------------------------------------------------------------ 2: in progress, stopped short
def test_a_single_run_short_of_its_total_says_it_is_stopped_or_in_progress(tmp_path, capsys):
    run = _write_run(tmp_path / "R", total_timesteps=8300)  # 16 whole iterations of 512: 8,192 steps
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "step_000000004096.pt").write_bytes(b"not read")
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    resume = f"proxima resume {shlex.quote(str(run))}"
    assert _table_row((run / "report.md").read_text(), "steps") == \
        f"| steps | 4,096 of 8,192 steps so far (stopped; `{resume}` continues it) |"

    (run / ".proxima.lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": "T"}))
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    assert _table_row((run / "report.md").read_text(), "steps") == \
        f"| steps | 4,096 of 8,192 steps so far (in progress: locked by pid {os.getpid()} since T) |"

    done = _write_run(tmp_path / "D")  # 4,096 of 4,096: no note
    code, _, err = run_main(["report", str(done), "--episodes", "0"], capsys)
    assert code == 0 and _table_row((done / "report.md").read_text(), "steps") == "| steps | 4,096 |", err


def test_a_population_members_report_says_its_population_stopped_short(tmp_path, capsys):
    pop = _write_population(tmp_path / "P", total=8192)
    code, _, err = run_main(["report", str(pop / "m000-seed1"), "--episodes", "0"], capsys)
    assert code == 0, err
    assert _table_row((pop / "m000-seed1" / "report.md").read_text(), "steps") == \
        "| steps | 4,096 of 8,192 steps so far (stopped before its first checkpoint) |"
    code, _, err = run_main(["report", str(pop), "--episodes", "0"], capsys)  # the population's own words
    assert code == 0 and "4,096 of 8,192 steps each so far (stopped before its first checkpoint)" in \
        (pop / "report.md").read_text(), err


def test_the_step_of_the_policy_evaluated_is_shown_next_to_the_final_eval(tmp_path, capsys, monkeypatch):
    from types import SimpleNamespace

    from proxima import checkpoint, evaluate

    run = _write_run(tmp_path / "R")
    (run / "checkpoints").mkdir()
    newest = run / "checkpoints" / "step_000000004608.pt"  # training went on past metrics.csv's last row
    newest.write_bytes(b"not read")
    monkeypatch.setattr(checkpoint, "load_policy", lambda *a, **k: SimpleNamespace(path=str(newest), config={},
                                                                                   env_id="CartPole-v1"))
    monkeypatch.setattr(evaluate, "evaluate", lambda *a, **k: {"mean_return": 391.0, "std_return": 109.0, "episodes": 2,
                                                               "deterministic": True, "returns": [500.0, 282.0]})
    code, _, err = run_main(["report", str(run), "--episodes", "2"], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert _table_row(text, "final eval return") == \
        "| final eval return | 391.00 \u00b1 109.00 over 2 episodes (deterministic) of the policy at step 4,608 |"
    assert "deterministic policy at step 4,608; source: evaluated now from step_000000004608.pt (no eval.json)" in text
    (run / "eval.json").write_text(json.dumps({"mean_return": 5.0, "episodes": 1, "global_step": 4608}))
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0 and "(deterministic) of the policy at step 4,608 |" in (run / "report.md").read_text(), err


# ------------------------------------------------------------------------------------ 3, 4: names
def test_dot_and_dotdot_are_named_by_the_directory_they_are(tmp_path, capsys, monkeypatch):
    one, two = _write_run(tmp_path / "runs" / "cp1"), _write_run(tmp_path / "runs" / "cp2", seed=2)
    monkeypatch.chdir(two)
    code, _, err = run_main(["report", ".", "../cp1", "--episodes", "0", "--out", str(tmp_path / "dot.md")], capsys)
    assert code == 0, err
    text = (tmp_path / "dot.md").read_text()
    assert "|  | cp2 | cp1 |" in text and "****" not in text
    ((_, _, (curve,)),) = collect_panels(["."])
    assert curve.label == "cp2"
    (one / "sub").mkdir()
    monkeypatch.chdir(one / "sub")
    ((_, _, (curve,)),) = collect_panels([".."])
    assert curve.label == "cp1"


def test_colliding_names_are_told_apart_by_their_paths_in_legends_and_panel_titles(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write_run(Path("a/run"), lr=0.001)
    _write_run(Path("b/run"), lr=0.002)
    assert sorted(c.label for _, _, (c,) in collect_panels(["a/run", "b/run"], panels="per-setting")) == ["a/run", "b/run"]
    _write_population(Path("x/pop"))
    _write_population(Path("y/pop"))
    assert [t for t, *_ in collect_panels(["x/pop", "y/pop"], panels="per-setting")] == ["Fake-v0: population x/pop",
                                                                                         "Fake-v0: population y/pop"]
    (merged,) = collect_panels(["x/pop", "y/pop"])  # per-env: one panel, each population's curve named by its path
    assert [c.label.split(": ")[0] for c in merged[2]] == ["x/pop", "y/pop"]
    assert [t for t, *_ in collect_panels(["x/pop", "a/run"], panels="per-setting")] == ["Fake-v0", "Fake-v0: population pop"]


# ------------------------------------------------------------------------------------ 5: links CommonMark reads
def test_an_image_link_with_spaces_and_parentheses_is_percent_encoded(tmp_path, capsys):
    run = _write_run(tmp_path / "R")
    out = tmp_path / "out" / "my report (1).md"
    code, _, err = run_main(["report", str(run), "--episodes", "0", "--out", str(out)], capsys)
    assert code == 0, err
    assert "](my%20report%20%281%29_curve.png)" in out.read_text()
    assert (out.parent / "my report (1)_curve.png").is_file()
    pop = _write_population(tmp_path / "P")
    code, _, err = run_main(["report", str(pop), "--episodes", "0", "--out", str(out)], capsys)
    assert code == 0 and "](my%20report%20%281%29_curve.png)" in out.read_text(), err


# ------------------------------------------------------------------------------------ 6: inf cells
def test_an_inf_episodes_cell_is_left_out_of_the_count_and_said(tmp_path, capsys):
    run = _write_run(tmp_path / "R", episodes=[22, 22, "1e999", 20, 20, 20, 20, 20])
    assert summarize(read_metrics(run))["episodes"] == 144  # was int(inf): OverflowError
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert _table_row(text, "episodes finished") == "| episodes finished | 144 |"
    assert ("- metrics.csv's episodes is not finite in 1 row(s) (inf at step 1,536): left out, the rows above are of "
            "its finite values.") in text


def test_a_final_return_of_inf_is_named_not_silently_replaced(tmp_path, capsys):
    run = _write_run(tmp_path / "R", returns=[20.0, "inf", 30.0, 40.0, 50.0, 60.0, 70.0, "-inf"])
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert _table_row(text, "final charts/episodic_return") == "| final charts/episodic_return | 70.00 at step 3,584 (1 episode) |"
    assert ("- metrics.csv's charts/episodic_return is not finite in 2 row(s) (inf at step 1,024, -inf at step 4,096): "
            "left out, the rows above are of its finite values.") in text


# ------------------------------------------------------------------------------------ 7: repeated steps
def test_rows_appended_again_are_read_once_per_step_with_a_note(tmp_path, capsys):
    run = _write_run(tmp_path / "R", episodes=[10] * 8)
    with open(run / "metrics.csv", "a", newline="") as f:  # steps 2,560..4,096 logged a second time
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        for i, s in enumerate(STEPS[4:]):
            w.writerow({"iteration": 5 + i, "global_step": s, "time": 0.5 + 0.1 * i, "episodes": 1,
                        "charts/episodic_return": 100.0 + i, "losses/value_loss": 1.0})
    capsys.readouterr()
    m = read_metrics(run)
    np.testing.assert_array_equal(m["global_step"], STEPS)
    np.testing.assert_array_equal(m["charts/episodic_return"], [20.0, 30.0, 40.0, 50.0, 100.0, 101.0, 102.0, 103.0])
    assert capsys.readouterr().err == (f"proxima: note: {run / 'metrics.csv'}: 4 global_step value(s) logged more than "
                                       "once (2,560 to 4,096); the last row of each is read, lines 6, 7, 8, 9 skipped\n")
    assert summarize(m)["episodes"] == 44  # 4 x 10 before the repeat, 4 x 1 of the rows kept: not 84


# ------------------------------------------------------------------------------------ 8: --x time legend
def test_the_time_legend_says_where_fewer_runs_are_averaged(tmp_path):
    # as `plot runs/cp1 runs/cp2 --x time`: cp2's first iteration ended first, cp1's run ended last
    a = _write_run(tmp_path / "cp1", times=[0.176 + 0.15 * i for i in range(8)])
    b = _write_run(tmp_path / "cp2", seed=2, times=[0.132 + 0.13 * i for i in range(8)])
    ((_, _, (curve,)),) = collect_panels([a, b], x="time")
    assert curve.label == "mean of 2 runs (fewer where the runs' ranges do not overlap)"
    c = _write_run(tmp_path / "cp3", seed=3, times=[0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])  # starts later, ends together
    d = _write_run(tmp_path / "cp4", seed=4, times=[0.1, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0])
    ((_, _, (curve,)),) = collect_panels([c, d], x="time")
    assert curve.label == "mean of 2 runs (fewer before the later runs' start)"
    ((_, _, (curve,)),) = collect_panels([a, _write_run(tmp_path / "short", seed=5, steps=STEPS[:4])])
    assert curve.label == "mean of 2 runs (fewer past the shorter runs' end)"


# ------------------------------------------------------------------------------------ 9: a --metric no run has
@pytest.mark.parametrize("command", ["report", "plot"])
def test_a_metric_no_run_has_is_one_error_line(tmp_path, capsys, command):
    a, b = _write_run(tmp_path / "a"), _write_run(tmp_path / "b", seed=2)
    out = ["--out", str(tmp_path / ("x.md" if command == "report" else "x.png"))]
    code, _, err = run_main([command, str(a), str(b), "--metric", "nosuch", *out], capsys)
    assert code == 2
    line = one_error_line(err, f"proxima {command}")
    assert line.startswith(f"unknown metric 'nosuch': none of the 2 runs has it; available in {a / 'metrics.csv'}: iteration, ")
    assert not (tmp_path / "x.md").exists() and not (tmp_path / "x.png").exists()
    if command == "plot":  # with a population among them too
        pop = _write_population(tmp_path / "P")
        code, _, err = run_main([command, str(a), str(pop), "--metric", "nosuch", *out], capsys)
        assert code == 2 and one_error_line(err, "proxima plot").startswith("unknown metric 'nosuch': none of the 2 runs")
        code, _, err = run_main([command, str(a), str(b), str(pop), "--metric", "value_loss", *out], capsys)
        assert code == 0, err  # every one has it: drawn, as before
