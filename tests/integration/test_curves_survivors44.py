"""Mutation survivors of the rolling-return default curve and the report's --stop-return row: the row of a
multi-run report, the runs that get none, the window words at exactly 100 episodes, the footnote the rolling
return does not get, the fallback metric for runs logged before the column."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tests.cli_helpers import run_main
from tests.integration.test_curves44 import PER_ITERATION, _run_with_columns

pytest.importorskip("matplotlib")

from proxima import population_report, report  # noqa: E402
from proxima.logger import ROLLING_RETURN  # noqa: E402
from proxima.plot import default_metric, load_curve  # noqa: E402
from proxima.report import _stop_cell, build_report  # noqa: E402
from proxima.trainer import stop_return_line  # noqa: E402

STOP = {"step": 200, "iteration": 2, "stop_return": 1.5, "stop_episodes": 20, "mean_return": 1.75}
CELL = ("at step 200 (iteration 2): the last 20+ training episodes averaged 1.8, reaching 1.5; "
        f"{ROLLING_RETURN} averages the last 100, older episodes too")


def _runs(tmp_path, *names):
    return [_run_with_columns(tmp_path, n, {PER_ITERATION: [1.0, 2.0], ROLLING_RETURN: [1.0, 1.5]}, seed=i)
            for i, n in enumerate(names, 1)]


def _stop_rows(path) -> list:
    return [ln for ln in path.read_text().splitlines() if ln.startswith("| ended by --stop-return |")]


# ------------------------------------------------------------------------------------ the report's stop row
def test_a_report_of_two_runs_gives_the_stop_row_with_the_other_runs_cell_blank(tmp_path, monkeypatch):
    a, b = _runs(tmp_path, "a", "b")
    monkeypatch.setattr(report, "return_stop", lambda d, config: STOP if d == a else None)  # as its checkpoint says
    text = build_report([a, b], out=tmp_path / "r.md", episodes=0).read_text()
    assert _stop_rows(tmp_path / "r.md") == [f"| ended by --stop-return | {CELL} | — |"]
    # the rolling return's own footnote is the table's; no per-iteration one beside it
    assert "one value per iteration" not in text and f"{ROLLING_RETURN} (metrics.csv): the mean return" in text
    build_report([b, a], out=tmp_path / "r2.md", episodes=0)
    assert _stop_rows(tmp_path / "r2.md") == [f"| ended by --stop-return | — | {CELL} |"]


@pytest.mark.parametrize("why", ["diverged", "member", "live"])
def test_a_diverged_member_a_population_member_or_a_run_in_progress_gets_no_stop_row(why, tmp_path, monkeypatch):
    [run] = _runs(tmp_path, "run")
    monkeypatch.setattr(report, "return_stop", lambda d, config: STOP)  # a window that reached the target
    build_report([run], episodes=0)
    assert _stop_rows(run / "report.md") != []  # the row this run gets alone
    if why == "diverged":
        monkeypatch.setattr(population_report, "member_divergence",
                            lambda d: "diverged at iteration 2 (non-finite loss)")
    elif why == "member":
        monkeypatch.setattr(population_report, "member_population", lambda d: (tmp_path, {}))  # (lock dir, its doc)
        monkeypatch.setattr(report, "run_progress", lambda *a, **k: (None, 400))  # its population's to say
    else:
        monkeypatch.setattr(report, "run_progress", lambda *a, **k: ("in progress (its lock is held)", 400))
    build_report([run], episodes=0)
    assert _stop_rows(run / "report.md") == []


def test_the_stop_words_at_exactly_the_rolling_window_claim_no_difference():
    def cell(n):
        return _stop_cell({**STOP, "stop_episodes": n})

    assert cell(99).endswith(f"; {ROLLING_RETURN} averages the last 100, older episodes too")
    assert cell(100) == "at step 200 (iteration 2): the last 100+ training episodes averaged 1.8, reaching 1.5"
    assert cell(101).endswith(f"reaching 1.5; {ROLLING_RETURN} averages only the last 100")

    def line(n, progress=False):
        return stop_return_line(SimpleNamespace(stop_return=5.0, stop_episodes=n, progress=progress), 512, 4, 6.0)

    head = "proxima: stopped at global step 512 (iteration 4): the last {}+ training episodes averaged 6.0 >= --stop-return 5"
    assert line(99) == head.format(99) + (f" (`proxima report`'s {ROLLING_RETURN} averages the last 100, older "
                                          "episodes too, so it can read lower)")
    assert line(100) == head.format(100)
    assert line(101, progress=True) == head.format(101) + (" (the progress bar's and `proxima report`'s return "
                                                           "averages only the last 100)")


# ------------------------------------------------------------------------------------ runs logged before the column
def test_a_report_of_a_run_logged_before_the_rolling_column_summarizes_and_draws_its_per_iteration_return(
        tmp_path, capsys):
    old = _run_with_columns(tmp_path, "old", {PER_ITERATION: [10.0, 30.0]})
    text = build_report([old], episodes=0).read_text()
    assert f"![{PER_ITERATION} against global step](report_curve.png)" in text
    assert f"| final {PER_ITERATION} |" in text and f"{PER_ITERATION} per iteration (metrics.csv)" in text
    assert f"no {ROLLING_RETURN} column (logged before Proxima kept the rolling return)" in capsys.readouterr().err


def test_without_either_return_column_the_default_is_named_in_the_error_with_no_fallback_note(tmp_path, capsys):
    run = _run_with_columns(tmp_path, "losses", {"losses/value_loss": [1.0, 0.5]})
    assert default_metric([run]) == ROLLING_RETURN
    assert capsys.readouterr().err == ""
    code, _, err = run_main(["plot", str(run)], capsys)
    assert code != 0 and ROLLING_RETURN in err and "note" not in err


def test_an_unreadable_first_directory_does_not_stop_the_scan_for_an_older_run(tmp_path, capsys):
    broken = tmp_path / "broken"
    broken.mkdir()  # no metrics.csv: its own error comes where it is plotted
    old = _run_with_columns(tmp_path, "old", {PER_ITERATION: [10.0, 30.0]})
    assert default_metric([broken, old]) == PER_ITERATION
    assert capsys.readouterr().err.startswith(f"proxima: note: {old}: no {ROLLING_RETURN} column")


def test_load_curve_of_an_older_run_draws_its_per_iteration_return(tmp_path):
    old = _run_with_columns(tmp_path, "old", {PER_ITERATION: [10.0, 30.0]})
    xs, ys = load_curve(old)
    np.testing.assert_array_equal(xs, [100, 200])
    np.testing.assert_array_equal(ys, [10.0, 30.0])


def test_a_resumed_older_run_draws_its_rolling_return_from_the_first_row_not_the_resume(tmp_path):
    run = _run_with_columns(tmp_path, "resumed", {PER_ITERATION: [10.0, 20.0, 30.0, 40.0],
                                                   ROLLING_RETURN: ["", "", 25.0, 30.0]})
    xs, ys = load_curve(run)
    np.testing.assert_array_equal(xs, [100, 200, 300, 400])
    np.testing.assert_array_equal(ys, [10.0, 15.0, 25.0, 30.0])  # rows 1-2 rebuilt from their episodes


def test_runs_that_record_no_seed_are_counted_as_seeds_not_recorded(tmp_path):
    import yaml

    from proxima.plot import _repeated_seeds

    runs = _runs(tmp_path, "a", "b")
    for r in runs:
        (r / "config.yaml").write_text(yaml.safe_dump({"env_id": "Fake-v0"}))
    problem, count = _repeated_seeds(runs)
    assert count == "seeds not recorded" and problem
