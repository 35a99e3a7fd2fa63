"""Issue 39, the report's --metric: left out, the summary takes the rolling return (charts/episodic_return_100)
where the run logged it; typed, charts/episodic_return is summarized as typed (the per-iteration best an older
report gave), while the curve stays charts/episodic_return either way."""

import numpy as np

from cli_helpers import run_main

from proxima.logger import ROLLING_RETURN
from proxima.plot import read_metrics
from proxima.report import summarize
from tests.unit.test_report_rolling39 import _run  # a run directory whose metrics.csv holds both return columns


def _report(d, tmp_path, capsys, *metric):
    out = tmp_path / "r.md"
    code, _, err = run_main(["report", str(d), "--out", str(out), "--episodes", "0", *metric], capsys)
    assert code == 0, err
    return out.read_text()


def _row(text, name):
    return next(line for line in text.splitlines() if line.startswith(f"| {name} |"))


# 120 episodes at 20, then 10 at 90: the rolling best is (2400 + 900) / 130, the per-iteration best 90
ROWS = [(120, 20.0), (10, 90.0)]


def test_metric_left_out_summarizes_the_rolling_return(tmp_path, capsys):
    text = _report(_run(tmp_path, ROWS), tmp_path, capsys)
    assert _row(text, f"best {ROLLING_RETURN}") == f"| best {ROLLING_RETURN} | 25.38 at step 1,024 (last 130 episodes) |"
    assert f"![{ROLLING_RETURN} against" in text  # the curve: the rolling return, as the table's


def test_metric_typed_as_charts_episodic_return_summarizes_that_column_not_the_rolling_one(tmp_path, capsys):
    text = _report(_run(tmp_path, ROWS), tmp_path, capsys, "--metric", "charts/episodic_return")
    assert _row(text, "best charts/episodic_return") == "| best charts/episodic_return | 90.00 at step 1,024 (10 episodes) |"
    assert f"| best {ROLLING_RETURN} |" not in text
    assert "![charts/episodic_return against" in text


def test_summarize_takes_the_rolling_return_only_when_no_metric_is_given(tmp_path):
    m = read_metrics(_run(tmp_path, ROWS))
    assert (summarize(m)["metric"], summarize(m)["best"]) == (ROLLING_RETURN, 3300 / 130)
    typed = summarize(m, "charts/episodic_return")
    assert (typed["metric"], typed["rolling"], typed["best"]) == ("charts/episodic_return", False, 90.0)


def test_metric_left_out_of_a_run_without_the_rolling_column_summarizes_charts_episodic_return():
    s = summarize({"global_step": np.array([512.0, 1024.0]), "episodes": np.array([3.0, 4.0]),
                   "charts/episodic_return": np.array([5.0, 7.0])})
    assert (s["metric"], s["rolling"], s["best"]) == ("charts/episodic_return", False, 7.0)


def test_report_help_says_what_metric_left_out_summarizes(capsys):
    code, out, _ = run_main(["report", "--help"], capsys)
    assert code == 0
    flat = " ".join(out.split())
    assert f"{ROLLING_RETURN} where the run logged it" in flat and "typed, a name is used as typed" in flat
