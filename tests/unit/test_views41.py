"""Plot and report of the metrics columns that may hold no value (review 41): a population report of
charts/action_std of a discrete-action population is written, its curve section saying why there is
no curve, as a single run's report is; the "no values of" line says why for the new columns; an unknown
--metric suggests the column meant."""
import shutil

import pytest

from proxima import cli
from tests.cli_helpers import TINY_POP, TINY_RUN, error_line, run_main

WHY_DISCRETE = " (blank for discrete and multi-discrete actions)"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(a CartPole population of two seeds, a CartPole run trained with --no-clip-vloss)."""
    root = tmp_path_factory.mktemp("views41")
    pop, run = root / "cpop", root / "cp"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", *TINY_POP, "--total-timesteps", "64", "--eval-episodes", "1",
                     "--run-dir", str(pop), "--quiet"]) == 0
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--no-clip-vloss",
                     "--run-dir", str(run), "--quiet"]) == 0
    return pop, run


def test_population_report_of_a_metric_without_values_is_written_and_says_why_no_curve(runs, tmp_path, capsys):
    pop, _ = runs
    out = tmp_path / "r6.md"
    code, _, err = run_main(["report", str(pop), "--metric", "charts/action_std", "--out", str(out), "--episodes", "0"],
                            capsys)
    assert code == 0, err
    lines = out.read_text().splitlines()
    assert (f"No learning curve: {pop / 'm000-seed1' / 'metrics.csv'}: no values of charts/action_std{WHY_DISCRETE}"
            in lines)
    assert not (tmp_path / "r6_curve.png").exists()


def test_report_of_two_populations_of_a_metric_without_values_is_written(runs, tmp_path, capsys):
    pop, _ = runs
    other = tmp_path / "cpop2"
    shutil.copytree(pop, other)
    out = tmp_path / "both.md"
    code, _, err = run_main(["report", str(pop), str(other), "--metric", "charts/action_clip_frac", "--out", str(out),
                             "--episodes", "0"], capsys)
    assert code == 0, err
    assert "No learning curve: " in out.read_text() and not (tmp_path / "both_curve.png").exists()


def test_population_report_of_an_unknown_metric_is_still_refused(runs, tmp_path, capsys):
    pop, _ = runs
    out = tmp_path / "r.md"
    code, _, err = run_main(["report", str(pop), "--metric", "charts/action_sdt", "--out", str(out), "--episodes", "0"],
                            capsys)
    assert error_line(code, err).endswith("; did you mean 'charts/action_std'?")
    assert not out.exists()


@pytest.mark.parametrize("metric, why", [("charts/action_std", WHY_DISCRETE), ("charts/action_clip_frac", WHY_DISCRETE),
                                         ("losses/vf_clipfrac", " (blank under --no-clip-vloss)")])
def test_no_values_line_says_why_the_column_is_blank(runs, metric, why, capsys):
    _, run = runs
    code, _, err = run_main(["plot", str(run), "--metric", metric], capsys)
    assert error_line(code, err) == f"proxima plot: error: {run / 'metrics.csv'}: no values of {metric}{why}"


@pytest.mark.parametrize("command", [["plot", "--out", "x.png"], ["report", "--episodes", "0", "--out", "x.md"]])
@pytest.mark.parametrize("typed", ["losses/gradnorm", "gradnorm"])
def test_unknown_metric_suggests_the_column_meant(runs, tmp_path, command, typed, capsys):
    _, run = runs
    out = tmp_path / command[-1]
    code, _, err = run_main([command[0], str(run), *command[1:-1], str(out), "--metric", typed], capsys)
    line = error_line(code, err, f"unknown metric {typed!r}", "available: iteration, ")
    # every column the file has is listed (the newest appended last: eval/success_rate), then the one meant
    assert ", charts/action_clip_frac, eval/success_rate; did you mean 'losses/grad_norm'?" in line
    assert line.endswith("; did you mean 'losses/grad_norm'?")
    assert not out.exists()


def test_unknown_metric_of_several_runs_suggests_the_column_meant(runs, capsys):
    pop, run = runs
    code, _, err = run_main(["plot", str(run), str(pop), "--metric", "losses/grad_nrom"], capsys)
    assert error_line(code, err, "none of the 2 runs has it").endswith("; did you mean 'losses/grad_norm'?")


def test_unknown_metric_far_from_any_column_suggests_nothing(runs, capsys):
    _, run = runs
    code, _, err = run_main(["plot", str(run), "--metric", "zzzz"], capsys)
    assert "did you mean" not in error_line(code, err, "unknown metric 'zzzz'")


@pytest.mark.parametrize("two", [False, True])
def test_report_of_a_metric_builds_each_populations_curves_once(runs, tmp_path, monkeypatch, capsys, two):
    """The --metric check reads the name against the members' header only: the curves and their bootstrap
    CIs are built once, for the report, not first to catch a typo."""
    from proxima import plot

    pop, _ = runs
    pops = [pop]
    if two:
        pops.append(tmp_path / "cpop2")
        shutil.copytree(pop, pops[1])
    built = []
    real = plot.population_curves
    monkeypatch.setattr(plot, "population_curves", lambda *a, **k: built.append(a[0]) or real(*a, **k))
    out = tmp_path / "r.md"
    code, _, err = run_main(["report", *map(str, pops), "--metric", "losses/value_loss", "--out", str(out), "--episodes", "0"],
                            capsys)
    assert code == 0, err
    assert sorted(map(str, built)) == sorted(map(str, pops))
