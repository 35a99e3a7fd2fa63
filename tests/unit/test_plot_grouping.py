"""`proxima plot` / `report` review fixes: groups are exact settings with distinct labels, a row without
a step is noted, a band at one x is drawn, long panel titles are wrapped to the panel."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import fake_run_dir
from proxima.cli import main
from proxima.plot import TITLE_CHARS, group_runs
from proxima.report import build_report

pytest.importorskip("matplotlib")


_run = fake_run_dir


def _eval(run: Path, mean: float) -> Path:
    (run / "eval.json").write_text(json.dumps({"episodes": 2, "mean_return": mean, "std_return": 0.0,
                                               "returns": [mean, mean], "lengths": [5, 5], "deterministic": True}))
    return run


BASE = {"num_envs": 4, "lr": 0.001, "gamma": 0.99, "ent_coef": 0.0}


# ------------------------------------------------------------------------------------ grouping
def test_settings_differing_in_a_fourth_field_are_two_groups_with_distinct_labels(tmp_path):
    a1 = _run(tmp_path, "a1", **BASE)
    a2 = _run(tmp_path, "a2", **{**BASE, "seed": 2})
    b = _run(tmp_path, "b", **{**BASE, "ent_coef": 0.02})
    c = _run(tmp_path, "c", num_envs=8, lr=0.002, gamma=0.98, ent_coef=0.0)
    groups = group_runs([a1, b, a2, c])
    assert list(groups.values()) == [[a1, a2], [b], [c]]
    assert list(groups) == ["Fake-v0 (num_envs=4, lr=0.001, gamma=0.99, ent_coef=0)",
                            "Fake-v0 (num_envs=4, lr=0.001, gamma=0.99, ent_coef=0.02)",
                            "Fake-v0 (num_envs=8, lr=0.002, gamma=0.98, ...)"]


def test_values_alike_under_g_are_two_groups_labelled_with_their_exact_values(tmp_path):
    a = _run(tmp_path, "a", lr=0.001)
    b = _run(tmp_path, "b", lr=0.0010000001)
    unset = _run(tmp_path, "unset")  # no lr field at all: not the same as lr: null either
    null = _run(tmp_path, "null", lr=None)
    assert group_runs([a, b, unset, null]) == {"Fake-v0 (lr=0.001)": [a], "Fake-v0 (lr=0.0010000001)": [b],
                                               "Fake-v0 (lr=(unset))": [unset], "Fake-v0 (lr=none)": [null]}


def test_report_over_n_runs_statistic_is_per_setting(tmp_path):
    a1 = _eval(_run(tmp_path, "a1", **BASE), 10.0)
    a2 = _eval(_run(tmp_path, "a2", **{**BASE, "seed": 2}), 20.0)
    b = _eval(_run(tmp_path, "b", **{**BASE, "ent_coef": 0.02}), 500.0)
    c = _eval(_run(tmp_path, "c", num_envs=8, lr=0.002, gamma=0.98, ent_coef=0.0), 700.0)
    text = build_report([a1, a2, b, c], out=tmp_path / "r.md", episodes=0).read_text()
    assert ("Final eval of Fake-v0 (num_envs=4, lr=0.001, gamma=0.99, ent_coef=0) over 2 runs: "
            "mean 15.00, std (n-1) 7.07, min 10.00, max 20.00.") in text
    assert "over 3 runs" not in text and text.count("Final eval of ") == 1


# ------------------------------------------------------------------------------------ rows without a step
def test_rows_whose_global_step_is_no_step_are_skipped_with_a_note_naming_file_and_lines(tmp_path, capsys):
    run = _run(tmp_path, "bad", steps=(100, 200, 300, 400, 500, 600), returns=(1.0, 2.0, 3.0, 4.0, 5.0, 6.0))
    path = run / "metrics.csv"
    lines = path.read_text().splitlines()
    for n, step in ((3, "abc"), (4, ""), (5, "inf"), (6, "\x00400")):  # line n holds global step (n - 1) * 100
        cells = lines[n - 1].split(",")
        cells[1] = step
        lines[n - 1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    assert main(["plot", str(run), "--out", str(tmp_path / "c.png")]) == 0
    err = capsys.readouterr().err
    assert f"proxima: note: {path}: lines 3, 4, 5, 6 are not metrics rows Proxima wrote; skipped\n" in err
    from proxima.plot import load_curve

    xs, ys = load_curve(run, "charts/episodic_return")  # as logged (the default rebuilds the rolling return)
    assert xs.tolist() == [100.0, 600.0] and ys.tolist() == [1.0, 6.0]


def test_report_notes_a_row_without_a_step_with_its_reason(tmp_path, capsys):
    run = _eval(_run(tmp_path, "one", steps=(100, 200, 300), returns=(1.0, 99.0, 3.0)), 5.0)
    path = run / "metrics.csv"
    path.write_text(path.read_text().replace("\n2,200,", "\n2,,", 1))
    text = build_report([run], episodes=0).read_text()
    assert capsys.readouterr().err.count(f"proxima: note: {path}: line 3 (no global_step) is not a metrics row "
                                         "Proxima wrote; skipped\n") == 1
    # the skipped row's return is no "best" (the run's path, pytest-998/..., may hold the digits: left out)
    assert "99" not in text.split("## Learning curve")[0].replace(str(tmp_path), "TMP")


# ------------------------------------------------------------------------------------ a band at one x
def test_a_band_at_a_single_x_is_drawn_as_an_error_bar(tmp_path, drawn, capsys):
    from matplotlib.collections import LineCollection
    from matplotlib.container import ErrorbarContainer

    runs = [_run(tmp_path, f"s{i}", steps=(512,), returns=(r,), seed=i) for i, r in enumerate((10.0, 30.0))]
    assert main(["plot", *map(str, runs), "--out", str(tmp_path / "one.png")]) == 0
    ax = drawn[-1].axes[0]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 1 and bars[0].get_label() == "min-max over runs"
    (segment,) = [s for col in ax.collections if isinstance(col, LineCollection) for s in col.get_segments()]
    np.testing.assert_allclose(segment, [[512, 10.0], [512, 30.0]])  # min to max over the runs
    assert "min-max over runs" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert "drawn as a single point, its band as an error bar" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ long titles
def test_a_long_panel_title_is_wrapped_to_the_panel_and_cut_with_the_whole_label_in_the_legend(tmp_path, drawn):
    long = {f"option_{i}": "x" * 12 for i in range(12)}
    runs = [_run(tmp_path, "a", env_kwargs={"max_episode_steps": 200, "render_mode": "rgb_array"}),
            _run(tmp_path, "b", env_kwargs={"max_episode_steps": 500, "render_mode": "rgb_array"}),
            _run(tmp_path, "c", env_kwargs=long)]
    labels = list(group_runs(runs))
    assert main(["plot", *map(str, runs), "--out", str(tmp_path / "t.png"), "--panels", "per-setting"]) == 0
    fig = drawn[-1]
    renderer = fig.canvas.get_renderer()
    for ax, label in zip(fig.axes, labels):
        title = ax.get_title()
        assert "\n" in title and all(len(line) <= TITLE_CHARS for line in title.splitlines())
        assert ax.title.get_window_extent(renderer).width <= ax.get_window_extent(renderer).width  # not over the next panel
    cut = fig.axes[2]
    assert cut.get_title().endswith(" ...") and len(cut.get_title().splitlines()) == 3
    assert cut.get_legend().get_title().get_text().replace("\n", " ") == labels[2]
    assert fig.axes[0].get_legend().get_title().get_text() == ""  # wrapped whole: no repeat in the legend
