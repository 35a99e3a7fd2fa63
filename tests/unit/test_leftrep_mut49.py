"""Mutation tests of report leftovers 49: eval.json's success_rate and success_episodes (their bounds, the cell
without an episode count, the footnote), eval/success_rate's blank hint after evaluations logged on some rows
only, quiet=True in the population, populations and tasks reports, a killed population's steps line, the
command that evaluates a member of a module:Class env (a Pool's, with --episodes and --device), and the
performance profile's figure growing by a legend drawn below its axes. Nothing is trained."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from proxima import cli
from tests.cli_helpers import fake_run_dir
from tests.unit.test_leftrep49 import _killed_population, _row, _run_with_eval
from tests.unit.test_report_pool46 import ADDED, FIRST, _population

SINGLE = "drawn as a single point"


# --- eval.json's success fields ------------------------------------------------------------------------------
@pytest.mark.parametrize("rate, cell", [(0.0, "0.00"), (1.0, "1.00")])
def test_a_success_rate_of_0_or_1_is_a_rate_and_gets_its_cell(tmp_path, capsys, rate, cell):
    run = _run_with_eval(tmp_path, "a", success_rate=rate)
    assert cli.main(["report", str(run)]) == 0, capsys.readouterr().err
    assert _row((run / "report.md").read_text(), "final eval success rate") == [cell]


@pytest.mark.parametrize("count, shown", [(0, "0"), (True, "True")])
def test_a_success_episodes_that_is_no_count_of_episodes_is_refused_in_one_line(tmp_path, capsys, count, shown):
    run = _run_with_eval(tmp_path, "a", success_rate=0.5, success_episodes=count)
    assert cli.main(["report", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"proxima report: error: {run / 'eval.json'}: success_episodes is not a count of episodes ({shown})"]
    assert not (run / "report.md").exists()


def test_a_success_rate_over_some_episodes_of_an_eval_json_without_episodes_is_the_rate_alone(tmp_path, capsys):
    run = fake_run_dir(tmp_path, "a")
    (run / "eval.json").write_text(json.dumps({"mean_return": 2.0, "success_rate": 0.25, "success_episodes": 4}))
    assert cli.main(["report", str(run)]) == 0, capsys.readouterr().err
    assert _row((run / "report.md").read_text(), "final eval success rate") == ["0.25"]


def test_the_success_rate_row_is_explained_under_the_table(tmp_path, capsys):
    run = _run_with_eval(tmp_path, "a", success_rate=0.5)
    assert cli.main(["report", str(run)]) == 0
    assert ("final eval success rate: the share of the final evaluation's episodes whose last step's "
            "info['is_success'] was true, of those that reported it (eval.json's success_rate); blank for a run "
            "whose env reported none.") in (run / "report.md").read_text().splitlines()


# --- plot's hint for a blank eval column --------------------------------------------------------------------
def _run_evaluated_at(root, rows: list, name: str = "run"):
    """A fake run trained with --eval-every 100 whose metrics.csv rows (step, eval/mean_return or None) log an
    evaluation's eval/mean_return on some rows and eval/success_rate on none."""
    from proxima.logger import CSV_COLUMNS

    run = fake_run_dir(root, name, eval_every=100)
    with open(run / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i, (step, value) in enumerate(rows):
            w.writerow({"iteration": i + 1, "global_step": step, "time": 0.1 * (i + 1), "episodes": 1,
                        "charts/episodic_return": 1.0,
                        **({} if value is None else {"eval/mean_return": value, "eval/std_return": 0.0})})
    return run


def test_eval_success_rate_blank_after_an_evaluation_on_one_row_of_three_says_is_success_was_never_reported(
        tmp_path, capsys):
    run = _run_evaluated_at(tmp_path, [(50, None), (100, 5.0), (150, None)])
    assert cli.main(["plot", str(run), "--metric", "eval/success_rate"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"proxima plot: error: {run / 'metrics.csv'}: no values of eval/success_rate (the env never reported "
        "info['is_success'] at an evaluated episode's end; the run's evaluations are in eval/mean_return)"]


def test_another_blank_eval_column_never_blames_is_success(tmp_path, capsys):
    from proxima.logger import CSV_COLUMNS

    run = fake_run_dir(tmp_path, "run", eval_every=100)
    with open(run / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        w.writerow({"iteration": 1, "global_step": 100, "time": 0.1, "episodes": 1, "charts/episodic_return": 1.0,
                    "eval/mean_return": 5.0})
    assert cli.main(["plot", str(run), "--metric", "eval/std_return"]) == 2
    assert "is_success" not in capsys.readouterr().err


# --- quiet in the population reports --------------------------------------------------------------------------
def _one_row_each(run: Path) -> Path:
    """``run``'s members' metrics.csv cut to their last row: a curve of a single point."""
    for d in sorted(p for p in run.iterdir() if (p / "metrics.csv").is_file()):
        rows = (d / "metrics.csv").read_text().splitlines()
        (d / "metrics.csv").write_text("\n".join([rows[0], rows[-1]]) + "\n")
    return run


THREE = dict(list(FIRST.items())[:3])


def test_build_population_report_quiet_leaves_the_single_point_note_unsaid(tmp_path, capsys):
    from proxima.population_report import build_population_report

    run = _one_row_each(_population(tmp_path / "A", THREE))
    build_population_report(run, quiet=True)
    assert SINGLE not in capsys.readouterr().err
    assert (run / "report.md").is_file()
    assert cli.main(["report", str(run)]) == 0
    assert SINGLE in capsys.readouterr().err


def test_build_populations_report_quiet_leaves_the_single_point_note_unsaid(tmp_path, capsys):
    from proxima.population_report import build_populations_report

    a = _one_row_each(_population(tmp_path / "A", THREE))
    b = _one_row_each(_population(tmp_path / "B", THREE, lrs=(0.1,)))
    out = tmp_path / "both.md"
    build_populations_report([a, b], out=out, quiet=True)
    assert SINGLE not in capsys.readouterr().err
    assert out.is_file()
    assert cli.main(["report", str(a), str(b), "--out", str(tmp_path / "again.md")]) == 0
    assert SINGLE in capsys.readouterr().err


def test_build_tasks_report_quiet_leaves_the_single_point_note_unsaid(tmp_path, capsys):
    from proxima.population_report import build_tasks_report

    a = _one_row_each(_population(tmp_path / "A", THREE))
    b = _one_row_each(_population(tmp_path / "B", THREE, env_id="Other-v0"))
    ranges = ["Fake-v0=0:100", "Other-v0=0:100"]
    out = tmp_path / "agg.md"
    build_tasks_report([a, b], out=out, score_ranges=ranges, quiet=True)
    assert SINGLE not in capsys.readouterr().err
    assert out.is_file()
    flags = ["--normalize", "--score-range", ranges[0], "--score-range", ranges[1]]
    assert cli.main(["report", str(a), str(b), *flags, "--out", str(tmp_path / "again.md")]) == 0
    assert SINGLE in capsys.readouterr().err


# --- a killed population's steps ------------------------------------------------------------------------------
def test_a_population_stopped_before_its_first_checkpoint_says_so_in_its_steps(tmp_path):
    from proxima.population_report import training_progress

    run = _killed_population(tmp_path, logged=3584, checkpoint=3072)
    for ckpt in (run / "checkpoints").iterdir():
        ckpt.unlink()
    doc = json.loads((run / "population.json").read_text())
    assert training_progress(run, doc) == ("3,584 of 20,480 steps each so far (stopped before its first checkpoint), "
                                           "0.7 s of training")


def test_a_population_in_progress_past_its_checkpoint_says_it_is_in_progress_not_stopped(tmp_path):
    import os
    import socket

    from proxima.population_report import training_progress

    run = _killed_population(tmp_path, logged=3584, checkpoint=3072)
    (run / ".proxima.lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                   "run_dir": str(run)}))
    doc = json.loads((run / "population.json").read_text())
    text = training_progress(run, doc)
    assert text.startswith(f"3,584 of 20,480 steps each so far (in progress: locked by pid {os.getpid()}"), text
    assert "last checkpoint" not in text


# --- the command that evaluates a member of a module:Class env ------------------------------------------------
@pytest.fixture
def module_env(monkeypatch):
    """Every member's checkpoint loads as a run of the module:Class env pole49:Pole."""
    from proxima import checkpoint

    monkeypatch.setattr(checkpoint, "load_checkpoint", lambda *a, **k: {"config": {"env_id": "pole49:Pole"}})


def test_a_module_env_members_command_is_its_populations_report_with_env(tmp_path, module_env):
    from proxima.population_report import _not_evaluated

    member = tmp_path / "P" / "m001-seed2"
    why, command = _not_evaluated(member, f"could not evaluate: {member}/x", None, "cpu")
    assert why == "its env pole49:Pole is a module:Class, which the report does not import from a run's files"
    assert command == f"proxima report {tmp_path / 'P'} --env pole49:Pole"
    assert _not_evaluated(member, "could not evaluate: x", 5, "cuda:1")[1] == (
        f"proxima report {tmp_path / 'P'} --env pole49:Pole --episodes 5 --device cuda:1")


def test_a_registered_env_members_why_has_no_command(tmp_path, monkeypatch):
    from proxima import checkpoint
    from proxima.population_report import _not_evaluated

    monkeypatch.setattr(checkpoint, "load_checkpoint", lambda *a, **k: {"config": {"env_id": "CartPole-v1"}})
    member = tmp_path / "P" / "m001-seed2"
    assert _not_evaluated(member, f"could not evaluate: {member}/checkpoints/x.pt: bad", 3, "cpu") == (
        "checkpoints/x.pt: bad", None)


def test_a_pooled_members_command_reports_the_pool_with_out(tmp_path, capsys, module_env):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    (a2 / "m001-seed7" / "eval.json").unlink()
    out = tmp_path / "pooled.md"
    assert cli.main(["report", f"{a}+{a2}", "--out", str(out), "--episodes", "3"]) == 0
    note = [line for line in out.read_text().splitlines() if "pole49:Pole" in line]
    assert note and f"(`proxima report {a}+{a2} --env pole49:Pole --episodes 3 --out FILE.md` evaluates it, " \
                     "if you trust that module)" in note[0], note


def test_the_note_says_it_for_one_member_and_them_for_several():
    from proxima.population_report import _not_evaluated_note

    why = "its env m:C is a module:Class"
    one = {"eval_missing": ["m1"], "not_evaluated": {"m1": (why, "proxima report P --env m:C")}}
    assert _not_evaluated_note(one) == f"m1: {why} (`proxima report P --env m:C` evaluates it, if you trust that module)"
    two = {"eval_missing": ["m1", "m2"], "not_evaluated": {n: (why, "proxima report P --env m:C") for n in ("m1", "m2")}}
    assert _not_evaluated_note(two) == (f"m1, m2: {why} (`proxima report P --env m:C` evaluates them, if you trust "
                                        "that module)")


# --- the performance profile's legend below its axes ----------------------------------------------------------
def test_the_performance_profile_grows_by_a_legend_below_its_axes_and_not_otherwise():
    from tests.unit.test_aggregate_profile45 import _aggregated

    from proxima.population_report import profile_figure

    ids = ["A-v0", "B-v0"]
    short = profile_figure(_aggregated([{0.1: [0.2, 0.4], 0.2: [0.9, 1.0]}] * 2), ids)
    assert short.get_figheight() == pytest.approx(4.2)
    long_value = "0.1 " + "with a very long setting label " * 6
    aggs = _aggregated([{long_value: [0.2, 0.4], 0.2: [0.9, 1.0]}] * 2, labels=(f"lr={long_value}", "lr=0.2"))
    fig = profile_figure(aggs, ids)
    assert 4.2 + 0.3 < fig.get_figheight() < 4.2 + 4, fig.get_figheight()
    fig.canvas.draw()
    short.canvas.draw()
    # the axes keep their height: the figure grew by the legend
    assert fig.axes[0].bbox.height == pytest.approx(short.axes[0].bbox.height, rel=0.05)
    box = fig.axes[0].get_legend().get_window_extent(fig.canvas.get_renderer())
    assert box.y1 < fig.axes[0].bbox.y0  # below the axes, centred in the figure's one column, as wide as it allows
    assert (box.x0 + box.x1) / 2 == pytest.approx(fig.bbox.width / 2, abs=2)
    assert box.width > fig.bbox.width * 0.6


def test_the_performance_profile_title_is_wrapped_to_the_width_its_axes_are_drawn_at():
    from tests.unit.test_aggregate_profile45 import _aggregated

    from proxima.plot import TITLE_CHARS, TITLE_LINES, fit_lines
    from proxima.population_report import profile_figure

    ids = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "LunarLander-v3", "HalfCheetah-v4"]
    fig = profile_figure(_aggregated([{0.1: [0.2, 0.4], 0.2: [0.9, 1.0]}] * len(ids)), ids)
    fig.canvas.draw()
    renderer, ax = fig.canvas.get_renderer(), fig.axes[0]
    full = f"Performance profile over 6 tasks: {', '.join(ids)}"
    # as wide as the drawn axes allow (not as the axes were before the layout placed them: narrower lines)
    assert ax.title.get_text() == fit_lines(full, ax.bbox.width - 2, ax.title.get_fontproperties(), renderer,
                                            TITLE_CHARS, TITLE_LINES)
    assert len(ax.title.get_text().split("\n")) == 3
