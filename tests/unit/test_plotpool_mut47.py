"""Mutation-found gaps in `proxima plot A+A2` (pooled populations) and its report/train companions: the pool named
as spelled in its own error lines, the rolling-return fallback metric for a pool, ``A+A`` and a pool named twice,
names told apart among every argument, a typo'd --metric among pools in one line, plot_runs(Pool), the config cap
of plot's own reader, the earliest of a pool's divergences, backend ``auto (native)`` only where the first
population wrote ``auto`` and built another, and train_population's Python-worded line for a single run's dir."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest

import proxima
import proxima.config
from proxima.plot import FALLBACK_METRIC, PlotError, collect_panels, plot_runs, population_curves, run_config
from proxima.population_report import read_pool
from proxima.rundir import RunDirError
from tests.cli_helpers import one_error_line, run_main
from tests.unit.test_papi_mut46 import _config
from tests.unit.test_report_pool46 import ADDED, FIRST, _population

METRIC = "charts/episodic_return"  # what _population's metrics.csv holds
UNION = np.mean(list(FIRST.values()) + list(ADDED.values()))  # 75.2: the mean over A's and A2's ten members


def _rewrite_metrics(pop: Path, edit) -> Path:
    """Each member's metrics.csv of ``pop`` rewritten with ``edit(rows, fieldnames) -> fieldnames``."""
    for m in sorted(pop.glob("m*")):
        with open(m / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        names = edit(rows, list(rows[0]))
        with open(m / "metrics.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=names, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
    return pop


def _panels(figure) -> list:
    return [ax for ax in figure.axes if ax.get_lines()]


# --- the pool named as the command line spelled it in its own lines --------------------------------------------
def test_a_pool_without_any_metrics_csv_is_named_as_spelled(tmp_path):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    for m in [*a.glob("m*"), *a2.glob("m*")]:
        (m / "metrics.csv").unlink()
    with pytest.raises(PlotError) as info:
        collect_panels([f"{a}+{a2}"], METRIC)
    assert str(info.value) == f"{a}+{a2}: no member has a metrics.csv yet (was the population started?)"


def test_a_pool_without_values_beside_a_population_is_skipped_in_a_note_naming_it_and_its_members(tmp_path, monkeypatch,
                                                                                                  capsys, drawn):
    blank = lambda rows, names: [r.update({METRIC: ""}) for r in rows] and names  # noqa: E731
    _rewrite_metrics(_population(tmp_path / "A", FIRST), blank)
    _rewrite_metrics(_population(tmp_path / "A2", ADDED), blank)
    _population(tmp_path / "B", {11: 3.0})
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["plot", "A+A2", "B", "--metric", METRIC, "--out", "o.png"], capsys)
    assert code == 0, err
    assert ("proxima: note: skipping A+A2: A+A2: no member to draw (A/m000, A/m001, A/m002 and 7 more no values)"
            in err.splitlines())
    assert [ax.get_title() for ax in _panels(drawn[-1])] == ["Fake-v0: population B"]


# --- a pool logged before the rolling return: the per-iteration return, as a population's ------------------------
def test_a_pool_without_the_rolling_return_column_draws_the_per_iteration_return(tmp_path, monkeypatch, capsys, drawn):
    drop = lambda rows, names: [n for n in names if n != "charts/episodic_return_100"]  # noqa: E731
    a = _rewrite_metrics(_population(tmp_path / "A", FIRST), drop)
    a2 = _rewrite_metrics(_population(tmp_path / "A2", ADDED), drop)
    pool = read_pool([a, a2], ["A", "A2"])
    env, name, (curve,) = population_curves(pool, None, stat="mean", band="minmax")
    assert (env, name, curve.y[-1]) == ("Fake-v0", FALLBACK_METRIC, pytest.approx(UNION))
    ((title, metric, _),) = collect_panels([f"{a}+{a2}"], None, stat="mean", band="minmax")
    assert (title, metric) == ("Fake-v0: A+A2, 2 populations pooled", FALLBACK_METRIC)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["plot", "A+A2", "--stat", "mean", "--out", "p.png"], capsys)
    assert code == 0, err
    assert f"drawing {FALLBACK_METRIC}, the per-iteration return" in err
    (ax,) = _panels(drawn[-1])
    assert ax.get_lines()[0].get_ydata()[-1] == pytest.approx(UNION)


# --- left-out members: a population's by m<index>, a pool's by population/m<index> -------------------------------
def test_a_single_populations_diverged_member_is_named_without_a_pool_prefix(tmp_path):
    a = _population(tmp_path / "A", FIRST, diverged=("m000-seed1",))
    ((_, _, (curve,)),) = collect_panels([a], METRIC, stat="mean", band="minmax")
    assert curve.label == "mean, min-max (4 of 5 members; m000 diverged at iteration 3)"
    assert curve.y[-1] == pytest.approx(np.mean([20.0, 30.0, 40.0, 500.0]))


def test_populations_of_one_name_in_a_pool_are_told_apart_by_their_paths(tmp_path):
    x = _population(tmp_path / "x" / "A", FIRST)
    y = _population(tmp_path / "y" / "A", ADDED, diverged=("m000-seed6",))
    ((title, _, (curve,)),) = collect_panels([f"{x}+{y}"], METRIC, stat="mean", band="minmax")
    assert title == f"Fake-v0: {x}+{y}, 2 populations pooled"  # not "A+A"
    assert curve.label == f"mean, min-max (9 of 10 members; {y}/m000 diverged at iteration 3)"


def test_a_pools_refusal_names_its_populations_among_every_argument_as_report_does(tmp_path, monkeypatch, capsys):
    _population(tmp_path / "B", FIRST)
    _population(tmp_path / "z" / "A", ADDED, total_timesteps=5)
    _population(tmp_path / "x" / "A", ADDED)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["report", "B+z/A", "x/A", "--out", "o.md"], capsys)
    line = one_error_line(err, "proxima report")
    assert code == 2 and line.startswith("total_timesteps: 4096 in B, 5 in z/A; ")  # z/A: x/A is an A too
    code, _, err = run_main(["plot", "B+z/A", "x/A", "--out", "o.png"], capsys)
    assert code == 2 and one_error_line(err, "proxima plot") == line


@pytest.mark.parametrize("part, line", [("nonexist", "nonexist: no such directory"),
                                        ("f", "f: a file, not a run directory")])
def test_a_pools_part_that_is_no_directory_is_refused_with_reports_line(tmp_path, monkeypatch, capsys, part, line):
    _population(tmp_path / "B", FIRST)
    (tmp_path / "f").write_text("x")
    monkeypatch.chdir(tmp_path)
    for command, prog in (("report", "proxima report"), ("plot", "proxima plot")):
        code, _, err = run_main([command, f"B+{part}", "--out", "o.png"], capsys)
        assert code == 2 and one_error_line(err, prog) == line, command
    assert not (tmp_path / "o.png").exists()


# --- A+A is A; a pool named twice is one panel -----------------------------------------------------------------
def test_a_population_pooled_with_itself_is_that_population(tmp_path, monkeypatch, capsys, drawn):
    a = _population(tmp_path / "A", FIRST)
    ((title, _, (curve,)),) = collect_panels([f"{a}+{a}"], METRIC, stat="mean", band="minmax")
    assert (title, curve.label) == ("Fake-v0: population A", "mean, min-max (5 members)")
    os.symlink("A", tmp_path / "A2")  # a link to A is A too, as report reads it
    monkeypatch.chdir(tmp_path)
    for arg in ("A+A", "A+A2"):
        code, out, err = run_main(["plot", arg, "--metric", METRIC, "--stat", "mean"], capsys)
        assert (code, out.strip()) == (0, "wrote A/curve.png"), err
        (ax,) = _panels(drawn[-1])
        assert ax.get_title() == "Fake-v0: population A"
        assert ax.get_lines()[0].get_ydata()[-1] == pytest.approx(np.mean(list(FIRST.values())))


def test_a_pool_named_twice_is_one_panel_with_its_short_name(tmp_path):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    panels = collect_panels([f"{a}+{a2}", f"{a}+{a2}"], METRIC, stat="mean", band="minmax")
    assert [(p[0], p[2][0].label) for p in panels] == [("Fake-v0: A+A2, 2 populations pooled", "mean, min-max (10 members)")]


def test_a_metric_typo_among_a_pool_and_a_population_is_one_line(tmp_path, monkeypatch, capsys):
    _population(tmp_path / "C", FIRST)
    _population(tmp_path / "C2", ADDED)
    _population(tmp_path / "B", {11: 3.0})
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["plot", "C+C2", "B", "--metric", "charts/typo", "--out", "o.png"], capsys)
    assert code == 2
    assert one_error_line(err, "proxima plot").startswith(
        "unknown metric 'charts/typo': none of the 3 runs has it; available in C/m000-seed1/metrics.csv: ")
    assert not (tmp_path / "o.png").exists()


def test_plot_runs_takes_a_pool_object_alone(tmp_path, drawn):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    out = plot_runs(read_pool([a, a2], ["A", "A2"]), tmp_path / "pool.png", metric=METRIC, stat="mean")
    assert out == tmp_path / "pool.png" and out.is_file()
    (ax,) = _panels(drawn[-1])
    assert ax.get_title() == "Fake-v0: A+A2, 2 populations pooled"
    assert ax.get_lines()[0].get_ydata()[-1] == pytest.approx(UNION)


# --- plot's own config reader: report's 1 MiB cap, never parsed past it -----------------------------------------
def test_run_config_does_not_parse_a_config_over_reports_cap(tmp_path, monkeypatch, capsys):
    parsed, load = [], proxima.config.load_yaml
    monkeypatch.setattr(proxima.config, "load_yaml", lambda text: parsed.append(len(text)) or load(text))
    run = tmp_path / "run"
    run.mkdir()
    text = "env_id: CartPole-v1\n"
    (run / "config.yaml").write_text(text + "#" * ((1 << 20) + 1 - len(text) - 1) + "\n")
    assert run_config(run) == {}
    assert parsed == []
    assert "its config is not read (env 'unknown')" in capsys.readouterr().err


# --- every member of a pool diverged: the earliest, by population then member on a tie -----------------------------
@pytest.mark.parametrize("a_first", [5, True])  # a later iteration, or no whole number (a hand-edited file)
def test_the_first_of_a_pool_whose_every_member_diverged_is_the_earliest_then_the_first_population(tmp_path, capsys,
                                                                                                 a_first):
    a = _population(tmp_path / "A", FIRST, diverged=tuple(f"m{i:03d}-seed{s}" for i, s in enumerate(FIRST)))
    a2 = _population(tmp_path / "A2", ADDED, diverged=tuple(f"m{i:03d}-seed{s}" for i, s in enumerate(ADDED)))
    doc = json.loads((a / "population.json").read_text())
    doc["member_dirs"][0]["diverged"] = {"iteration": a_first, "reason": "late"}
    (a / "population.json").write_text(json.dumps(doc))
    code, _, err = run_main(["plot", f"{a}+{a2}", "--metric", METRIC, "--out", str(tmp_path / "p.png")], capsys)
    assert code == 2
    # every other member at iteration 3: A's m001 before A2's m000 (A is named first)
    assert one_error_line(err, "proxima plot") == (
        f"{a}+{a2}: no curve to draw: every member diverged (each one's iteration and cause: {a / 'population.json'}, "
        f"{a2 / 'population.json'}; the first, A/m001-seed2, at iteration 3)")


def test_a_one_member_population_that_diverged_names_it_as_the_first(tmp_path, capsys):
    a = _population(tmp_path / "A", {1: 10.0}, diverged=("m000-seed1",))
    code, _, err = run_main(["plot", str(a), "--metric", METRIC, "--out", str(tmp_path / "p.png")], capsys)
    assert code == 2
    assert one_error_line(err, "proxima plot") == (
        f"{a}: no curve to draw: every member diverged (each one's iteration and cause: {a / 'population.json'}; "
        "the first, m000-seed1, at iteration 3)")


# --- a pool's shared config: backend auto shown with what it built only where the first population wrote auto -----
def _built(run: Path, backend: str) -> Path:
    for member in run.glob("m*"):
        (member / "meta.json").write_text(json.dumps({"kind": "ppo", "env_backend": backend}))
    return run


def _pooled_report(tmp_path, capsys, a: Path, a2: Path) -> str:
    out = tmp_path / "p.md"
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(out)], capsys)
    assert code == 0, err
    return out.read_text()


def test_a_pool_whose_first_population_wrote_native_shows_native(tmp_path, capsys):
    a = _built(_population(tmp_path / "A", FIRST, backend="native"), "native")
    a2 = _built(_population(tmp_path / "A2", ADDED, backend="auto"), "native")
    text = _pooled_report(tmp_path, capsys, a, a2)
    assert "| backend | native |" in text and "auto (native)" not in text


def test_a_pool_that_wrote_auto_in_both_shows_what_it_built_without_a_note(tmp_path, capsys):
    a = _built(_population(tmp_path / "A", FIRST, backend="auto"), "native")
    a2 = _built(_population(tmp_path / "A2", ADDED, backend="auto"), "native")
    text = _pooled_report(tmp_path, capsys, a, a2)
    assert "| backend | auto (native) |" in text
    assert "- note: backend:" not in text  # both spelled it alike: nothing to reconcile


def test_an_atari_pool_without_a_recorded_backend_stays_auto(tmp_path, capsys):
    a = _population(tmp_path / "A", FIRST, env_id="ALE/Pong-v5", backend="auto")
    a2 = _population(tmp_path / "A2", ADDED, env_id="ALE/Pong-v5", backend="auto")
    text = _pooled_report(tmp_path, capsys, a, a2)
    assert "| backend | auto |" in text and "auto (auto)" not in text


# --- train_population into a single run's directory, from Python: Python's words, not flags -----------------------
def test_train_population_into_a_single_runs_directory_names_its_python_arguments(tmp_path):
    single = tmp_path / "single"
    proxima.train(_config(), run_dir=single, quiet=True)
    with pytest.raises(RunDirError) as info:
        proxima.train_population(_config(), seeds=[1, 2], run_dir=single, quiet=True)
    line = str(info.value)
    assert "train_population(..., overwrite=True)" in line and "give train_population() another run_dir" in line
    assert "--overwrite" not in line and "--run-dir" not in line
    assert not list(single.glob("m0*"))
