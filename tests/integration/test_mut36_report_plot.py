"""report and plot behaviours a mutation review found unguarded: a finished run's cut metrics.csv is
not called stopped; a loose checkpoint resumed into a new --run-dir names its source run for the rows
before the resume; the gap and tail notes of missing rows; --label, --dpi and folder expansion in
plot; eval's top-level eval_seed; where_started without a working directory."""

from __future__ import annotations

import csv
import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.cli_helpers import error_line, fake_run_dir, run_main, tiny_cartpole_run
from tests.integration.test_eval_report36 import _keep_rows  # noqa: E402 - one metrics.csv row filter for both files

from proxima.plot import PlotError, aggregate, collect_panels, parse_labels, plot_runs  # noqa: E402
from proxima.report import STD_OVER_EPISODES, build_report, missing_rows  # noqa: E402


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 128-step run (2 iterations of 64) with no eval.json (--eval-episodes 0)."""
    return tiny_cartpole_run(tmp_path_factory, "mut36")


def _cell(text: str, field: str) -> str:
    [row] = [line for line in text.splitlines() if line.startswith(f"| {field} |")]
    return row.split(" | ")[1].rstrip(" |")


def _fake_with_checkpoint(root, name, iterations, per=64, reached=None):
    """A fake run whose metrics.csv logs ``iterations`` (of ``per`` steps each) and whose checkpoints/
    holds a file named for step ``reached``: report reads the step from the name alone."""
    d = fake_run_dir(root, name, [i * per for i in iterations], [float(i) for i in iterations])
    rows = list(csv.reader(open(d / "metrics.csv", newline="")))
    for row, i in zip(rows[1:], iterations):  # fake_run_dir numbers its rows 1, 2, ...: the iterations kept instead
        row[0] = str(i)
    with open(d / "metrics.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    if reached is not None:
        (d / "checkpoints").mkdir()
        (d / "checkpoints" / f"step_{reached:012d}.pt").write_bytes(b"")
    return d


# ------------------------------------------------------------------------------------ report: real bugs
def test_a_finished_runs_cut_metrics_csv_is_not_called_stopped(finished, tmp_path):
    cut = shutil.copytree(finished, tmp_path / "cut")
    _keep_rows(cut, lambda i: i <= 1)
    text = build_report([cut], episodes=0).read_text()
    # its checkpoint is of step 128, the total: finished, whatever metrics.csv's last row says
    assert _cell(text, "steps") == "128 (64 in metrics.csv: rows missing)"
    assert "so far" not in text and "proxima resume" not in text


def test_a_loose_checkpoint_resumed_into_a_new_run_dir_names_its_source_for_earlier_rows(finished, tmp_path, capsys,
                                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(finished / "checkpoints" / "step_000000000128.pt", "loose.pt")
    argv = ["resume", "loose.pt", "--run-dir", "second", "--total-timesteps", "256", "--quiet"]
    monkeypatch.setattr("sys.argv", ["/venv/bin/proxima", *argv])  # what meta.json records: the command typed
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    text = build_report([Path("second")], episodes=0).read_text()
    assert "rows missing" not in text and "an edit" not in text
    assert ("- metrics.csv starts at step 192 (iteration 3): this run was resumed from the checkpoint `loose.pt` at step "
            "128 into a new directory, and the rows of iterations 1-2 are in the metrics.csv of the run it came from") in text
    assert _cell(text, "episodes finished").endswith(" since step 128 (resumed from `loose.pt`)")
    # a cut head of a run that started here is still rows missing
    shutil.copytree("second", "edited")
    meta = json.loads(Path("edited/meta.json").read_text())
    meta["command"] = ["proxima", "train", "CartPole-v1"]
    Path("edited/meta.json").write_text(json.dumps(meta))
    text = build_report([Path("edited")], episodes=0).read_text()
    assert "- metrics.csv has no rows of iterations 1-2 (between step 0 and step 192): rows missing" in text


# ------------------------------------------------------------------------------------ report: missing rows
def test_a_gap_of_one_iteration_is_named_in_the_singular(tmp_path):
    d = _fake_with_checkpoint(tmp_path, "gap", [1, 2, 4, 5], reached=320)
    text = build_report([d], out=tmp_path / "r.md", episodes=0).read_text()
    assert "- metrics.csv has no rows of iteration 3 (between step 128 and step 256): rows missing" in text
    assert _cell(text, "episodes finished") == "at least 4 (rows missing)"


def test_a_metrics_csv_that_lost_its_first_rows_says_so(tmp_path):
    d = _fake_with_checkpoint(tmp_path, "head", [3, 4, 5], reached=320)
    text = build_report([d], out=tmp_path / "r.md", episodes=0).read_text()
    assert "- metrics.csv has no rows of iterations 1-2 (between step 0 and step 192): rows missing" in text


def test_a_cut_files_last_row_values_are_marked_where_they_are_read(tmp_path):
    d = _fake_with_checkpoint(tmp_path, "tail", [1, 2], reached=320)
    text = build_report([d], out=tmp_path / "r.md", episodes=0).read_text()
    assert _cell(text, "wall time") == "0.2 s (rows missing)"
    assert _cell(text, "final charts/episodic_return") == "2.00 (1 episode) (rows missing)"


def test_a_step_off_the_batch_gives_no_made_up_last_iteration():
    tail = missing_rows({"iteration": np.array([1.0, 2.0]), "global_step": np.array([64.0, 128.0])}, 300)["tail"]
    assert tail[:4] == (2, 128, 300, 3) and tail[4] is None
    assert missing_rows({"iteration": np.array([1.0, 2.0]), "global_step": np.array([64.0, 128.0])}, 320)["tail"][4] == 5


# ------------------------------------------------------------------------------------ report: final evaluation
def test_an_older_eval_json_gets_no_empty_setup_bullet(tmp_path):
    d = fake_run_dir(tmp_path, "old")
    (d / "eval.json").write_text(json.dumps({"env_id": "Fake-v0", "episodes": 2, "mean_return": 3.0, "std_return": 1.0,
                                             "returns": [2.0, 4.0], "deterministic": True}))
    lines = build_report([d], out=tmp_path / "r.md", episodes=0).read_text().splitlines()
    assert "  - returns: 2, 4" in lines
    assert not [ln for ln in lines if ln.strip() == "-"]


def test_a_report_without_an_evaluation_does_not_explain_its_plus_minus(tmp_path):
    text = build_report([fake_run_dir(tmp_path, "none")], out=tmp_path / "r.md", episodes=0).read_text()
    assert "- no eval.json and --episodes 0" in text
    assert STD_OVER_EPISODES not in text


# ------------------------------------------------------------------------------------ plot
def test_plot_of_runs_without_any_value_exits_2_and_writes_nothing(tmp_path, capsys):
    e1 = fake_run_dir(tmp_path, "e1", returns=(None, None))
    e2 = fake_run_dir(tmp_path, "e2", returns=(None, None), seed=2)
    out = tmp_path / "c.svg"
    code, _, err = run_main(["plot", str(e1), str(e2), "--out", str(out)], capsys)
    error_line(code, err, "no values of charts/episodic_return")
    assert not out.exists()


def test_a_relative_label_dir_labels_its_run(tmp_path, monkeypatch):
    fake_run_dir(tmp_path / "runs", "a")
    monkeypatch.chdir(tmp_path)
    dirs = [Path("runs/a")]
    [(_, _, [curve])] = collect_panels(dirs, labels=parse_labels(["runs/a=X"], dirs))
    assert curve.label.startswith("X")


def test_an_empty_or_repeated_label_is_refused(tmp_path):
    a = fake_run_dir(tmp_path, "a")
    with pytest.raises(PlotError, match="NAME is empty"):
        parse_labels([f"{a}="], [a])
    with pytest.raises(PlotError, match="labelled twice"):
        parse_labels([f"{a}=X", f"{a}/=Y"], [a])


def test_plot_runs_checks_its_labels_and_dpi(tmp_path):
    a, other = fake_run_dir(tmp_path, "a"), fake_run_dir(tmp_path, "other")
    with pytest.raises(PlotError, match="is not one of the directories plotted"):
        plot_runs([a], tmp_path / "l.svg", labels={other: "X"})
    with pytest.raises(PlotError, match="--dpi True"):
        plot_runs([a], tmp_path / "t.png", dpi=True)
    with pytest.raises(PlotError, match="from 1 to 1200"):
        plot_runs([a], tmp_path / "big.svg", dpi=1201)
    assert plot_runs([a], tmp_path / "max.svg", dpi=1200).is_file()  # the bound the message promises
    assert not any((tmp_path / n).exists() for n in ("l.svg", "t.png", "big.svg"))


def test_plot_x_is_checked_from_the_python_api(tmp_path):
    with pytest.raises(PlotError, match="--x 'steps'"):
        collect_panels([fake_run_dir(tmp_path, "a")], x="steps")


def test_a_folder_holding_an_rlhf_run_counts_and_names_it(tmp_path, capsys):
    runs = tmp_path / "runs"
    fake_run_dir(runs, "ppo")
    (runs / "rl").mkdir()
    (runs / "rl" / "meta.json").write_text(json.dumps({"kind": "rlhf"}))
    code, _, err = run_main(["plot", str(runs), "--out", str(tmp_path / "c.svg")], capsys)
    assert code == 0, err
    assert "plotting the 2 run directories" in err
    assert "rl" in err and "RLHF" in err


def test_a_population_member_one_point_behind_is_named_in_the_legend(tmp_path):
    short = fake_run_dir(tmp_path, "short", (100, 200, 300), (1.0, 2.0, 3.0))
    full = fake_run_dir(tmp_path, "full", (100, 200, 300, 400), (1.0, 2.0, 3.0, 4.0), seed=2)
    pop = tmp_path / "pop"
    pop.mkdir()
    entries = []
    for i, run in enumerate((short, full)):
        name = f"m{i:03d}-seed{i + 1}"
        shutil.copytree(run, pop / name)
        entries.append({"dir": name, "seed": i + 1, "settings": {}})
    (pop / "population.json").write_text(json.dumps({"kind": "ppo-population", "env_id": "Fake-v0", "members": 2,
                                                     "member_dirs": entries}))
    [(_, _, [setting])] = collect_panels([pop], stat="mean", band="minmax")
    assert "fewer past step 300" in setting.label


def test_a_std_band_over_runs_of_unequal_length_warns_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        agg = aggregate([(np.array([1.0, 2.0]), np.array([1.0, 3.0])),
                         (np.array([1.0, 2.0, 3.0]), np.array([3.0, 5.0, 7.0]))], band="std")
    np.testing.assert_allclose(agg["hi"] - agg["lo"], [2 * np.sqrt(2), 2 * np.sqrt(2), 0.0])


# ------------------------------------------------------------------------------------ eval, train_state
def test_population_eval_with_a_seed_records_it_at_the_top(tmp_path_factory, capsys):
    from tests.cli_helpers import tiny_population

    pop = tiny_population(tmp_path_factory, "pop36seed", 32)
    capsys.readouterr()
    code, out, err = run_main(["eval", str(pop), "--json", "--episodes", "1", "--seed", "7"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["eval_seed"] == 7 and [m["eval_seed"] for m in result["members"]] == [7, 7]


def test_where_started_without_a_working_directory_records_cwd_none(monkeypatch):
    from proxima.train_state import where_started

    def gone():
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(os, "getcwd", gone)
    assert where_started()["cwd"] is None
