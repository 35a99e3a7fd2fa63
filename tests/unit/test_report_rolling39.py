"""Issue 39, the report's rolling return (charts/episodic_return_100): an explicit --metric is summarized as
asked; the best is over the rows whose window held 100 or more episodes where any did; the blank cells of an
older run resumed under the column are rebuilt from its rows, so best/final cover the whole run."""

import csv
import json

from proxima.logger import CSV_COLUMNS, ROLLING_RETURN, RollingReturn
from proxima.plot import read_metrics
from proxima.report import build_report, summarize


def _run(tmp_path, rows, columns=CSV_COLUMNS, logged_from=0):
    """A run directory whose metrics.csv has one row per (episodes, mean return[, eval return]), 512 steps
    each; its rolling cells as the logger writes them, blank before row ``logged_from`` (an older run's)."""
    d = tmp_path / "R"
    d.mkdir()
    (d / "config.yaml").write_text("env_id: Fake-v0\nseed: 1\nnum_envs: 4\nnum_steps: 128\ntotal_timesteps: 4096\n")
    window = RollingReturn()
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for i, (n, ret, *ev) in enumerate(rows):
            mean = window.add(n, ret)
            w.writerow({"iteration": i + 1, "global_step": 512 * (i + 1), "time": 0.1 * (i + 1), "episodes": n,
                        "charts/episodic_return": ret, ROLLING_RETURN: mean if i >= logged_from else "",
                        "eval/mean_return": ev[0] if ev else ""})
    return d


def _report(d, tmp_path, **kw):
    return build_report([d], out=tmp_path / "r.md", episodes=0, **kw).read_text()


def _cell(text, name):
    line = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
    return line.split(" | ")[1].rstrip(" |")


def test_metric_eval_mean_return_is_summarized_as_asked_not_replaced_by_the_rolling_return(tmp_path):
    d = _run(tmp_path, [(120, 20.0, 450.0), (10, 90.0, 300.0), (10, 95.0)])
    text = _report(d, tmp_path, metric="eval/mean_return")
    assert _cell(text, "best eval/mean_return") == "450.00 at step 512"
    assert _cell(text, "final eval/mean_return") == "300.00 at step 1,024"
    assert summarize(read_metrics(d), "eval/mean_return")["metric"] == "eval/mean_return"


def test_an_explicit_rolling_return_metric_is_a_return_with_a_best_not_max_and_min(tmp_path):
    d = _run(tmp_path, [(120, 20.0), (10, 90.0)])
    text = _report(d, tmp_path, metric=ROLLING_RETURN)
    assert _cell(text, f"best {ROLLING_RETURN}") == "25.38 at step 1,024 (last 130 episodes)"  # (2400 + 900) / 130
    assert f"| max {ROLLING_RETURN} |" not in text and f"| min {ROLLING_RETURN} |" not in text
    assert summarize(read_metrics(d), ROLLING_RETURN)["best"] == (2400 + 900) / 130


def test_a_rolling_column_without_an_episodes_column_is_summarized_without_window_counts(tmp_path):
    d = _run(tmp_path, [(120, 20.0), (10, 90.0)], columns=[c for c in CSV_COLUMNS if c != "episodes"])
    text = _report(d, tmp_path)
    assert _cell(text, f"best {ROLLING_RETURN}") == "25.38 at step 1,024"
    assert _cell(text, f"final {ROLLING_RETURN}") == "25.38"


def test_the_best_rolling_return_is_over_windows_of_100_episodes_not_a_lucky_first_few(tmp_path):
    # 3 episodes at 300 first: a window of 3 is no best once windows of 100 or more exist
    d = _run(tmp_path, [(3, 300.0), (120, 20.0), (10, 30.0)])
    text = _report(d, tmp_path, json_out=tmp_path / "r.json")
    assert _cell(text, f"best {ROLLING_RETURN}") == "20.77 at step 1,536 (last 130 episodes)"  # (2400 + 300) / 130
    assert "its best is over the rows whose window held 100 or more, of a run with none over every row" in text
    best = json.loads((tmp_path / "r.json").read_text())["runs"][0]["best"]
    assert best == {"value": 2700 / 130, "step": 1536.0, "episodes": 130}


def test_a_run_with_no_window_of_100_episodes_takes_its_best_over_every_row_and_names_the_window(tmp_path):
    d = _run(tmp_path, [(3, 300.0), (5, 10.0)])
    text = _report(d, tmp_path)
    assert _cell(text, f"best {ROLLING_RETURN}") == "300.00 at step 512 (last 3 episodes)"
    assert _cell(text, f"final {ROLLING_RETURN}") == "118.75 (last 8 episodes)"  # (900 + 50) / 8


def test_an_older_run_resumed_under_the_column_has_its_blank_rows_rebuilt_so_best_covers_the_whole_run(tmp_path):
    # rows 1-3 logged before the column (blank there); the resume logged rows 4-5 from the window it rebuilt
    d = _run(tmp_path, [(120, 50.0), (110, 80.0), (100, 90.0), (5, 10.0), (5, 12.0)], logged_from=3)
    text = _report(d, tmp_path)
    assert _cell(text, f"best {ROLLING_RETURN}") == "90.00 at step 1,536 (last 100 episodes)"  # not row 4's 86.19
    assert _cell(text, f"final {ROLLING_RETURN}") == "82.82 (last 110 episodes)"  # (9000 + 50 + 60) / 110
    assert ("charts/episodic_return_100 of rows logged without it (a run resumed under a newer Proxima) is rebuilt "
            "from their episodes and charts/episodic_return, as the resume rebuilt its window (rows: 3).") in text
    s = summarize(read_metrics(d))
    assert (s["metric"], s["rolling_rebuilt"], s["best"], s["best_step"]) == (ROLLING_RETURN, 3, 90.0, 1536.0)
