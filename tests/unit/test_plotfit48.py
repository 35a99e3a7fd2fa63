"""Session 48, fixer H: every text of `proxima plot`'s figure (and report's, which plot_runs draws) lies
inside the image. A population with diverged members had its legend run off the right edge ('... m015
diver') and cover the curves; a pool's legend was clipped on the left and its title cut ('2 populations
poole'); a 5,000-character env id went whole into the legend. Lines are now wrapped to the panel's real
width, a long legend goes below the axes, and text from the run's files is cut to LABEL_MAX_CHARS."""

from __future__ import annotations

import re

import pytest

from cli_helpers import fake_run_dir, run_main
from tests.unit.test_report_pool46 import ADDED, FIRST, _population

pytest.importorskip("matplotlib")

METRIC = "charts/episodic_return"
#: a module:Class env id of 200 characters, as `train --env my_pkg.envs...:Class` records it in config.yaml
LONG_ENV = ("my_pkg.envs." + "very_long_module_name_" * 7 + ":" + "SparseRewardGridWorldWithManyRooms" * 2)[:200]


def _texts(fig) -> list:
    """The figure's texts: visible, not empty, not in a hidden (unused) panel, not a tick's label (matplotlib
    keeps labels of ticks past the view limits that it never draws: those are checked by _outside's tight box)."""
    from matplotlib.text import Text

    ticks = {id(t) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis) for minor in (False, True)
             for tick in axis.get_major_ticks() + (axis.get_minor_ticks() if minor else []) for t in (tick.label1, tick.label2)}
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
            and (t.axes is None or t.axes.get_visible()) and id(t) not in ticks]


def _outside(fig) -> list:
    """(text, its extent) of every text that leaves the figure's area by a pixel or more, and ('drawn', extent)
    when what the figure draws (its tight box: tick labels, titles, legends) does."""
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    out = []
    for name, e in [*((t.get_text()[:60], t.get_window_extent(renderer)) for t in _texts(fig)),
                    ("drawn", fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans))]:
        if e.x0 < box.x0 - 1 or e.x1 > box.x1 + 1 or e.y0 < box.y0 - 1 or e.y1 > box.y1 + 1:
            out.append((name, tuple(round(v) for v in e.extents)))
    return out


def _panels(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible()]


def _legend_below(fig, ax) -> bool:
    """Whether ``ax``'s legend lies wholly under its data area and x-axis labels (covers no curve)."""
    renderer = fig.canvas.get_renderer()
    return ax.get_legend().get_window_extent(renderer).y1 <= ax.xaxis.get_tightbbox(renderer).y0 + 1


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    """The repro, smaller: 6 seeds x vf_coef 0.5 and 1e18, where seeds 4 and 5 diverge at 1e18."""
    import os

    from proxima.cli import main

    root = tmp_path_factory.mktemp("pop")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    assert main(["train", "CartPole-v1", "--seeds", "0-5", "--sweep", "vf_coef=0.5,1e18", "--total-timesteps", "1536",
                 "--num-envs", "4", "--backend", "native", "--run-dir", str(root / "popv")]) == 0
    return root / "popv"


def test_a_population_with_diverged_members_has_its_legend_below_the_axes_and_all_text_inside(population, drawn, capsys):
    code, _, err = run_main(["plot", str(population), "--out", str(population.parent / "curve.png")], capsys)
    assert code == 0, err
    fig = drawn[-1]
    (ax,) = _panels(fig)
    entries = [t.get_text() for t in ax.get_legend().get_texts()]
    assert re.search(r"m010\s+diverged at iteration \d; m011\s+diverged", " ".join(entries))  # whole, wrapped
    assert _outside(fig) == []  # was: '... m011 diver' past the right edge
    assert _legend_below(fig, ax)  # was: loc='best' inside the axes, over the curves


def test_the_report_curve_of_that_population_fits_too(population, drawn, capsys):
    code, _, err = run_main(["report", str(population), "--out", str(population.parent / "r.md")], capsys)
    assert code == 0, err
    fig = drawn[-1]
    assert (population.parent / "r_curve.png").stat().st_size > 0
    assert _outside(fig) == [] and _legend_below(fig, _panels(fig)[0])


def test_a_pool_with_diverged_members_keeps_its_title_and_legend_inside_the_figure(tmp_path, drawn, capsys):
    a = _population(tmp_path / "popv", FIRST, lrs=(0.5, 1e18), diverged=("m008-seed4-lr1e+18", "m009-seed5-lr1e+18"))
    a2 = _population(tmp_path / "popv-seeds10-19", ADDED, lrs=(0.5, 1e18), diverged=("m008-seed9-lr1e+18",))
    code, _, err = run_main(["plot", f"{a}+{a2}", "--out", str(tmp_path / "p.png")], capsys)
    assert code == 0, err
    fig = drawn[-1]
    (ax,) = _panels(fig)
    assert ax.get_title() == "Fake-v0: popv+popv-seeds10-19, 2 populations pooled"  # was cut: '... poole'
    assert _outside(fig) == []  # was: the legend clipped on the left, over the y label
    assert _legend_below(fig, ax)


def test_a_200_character_module_class_env_id_fits_in_the_title_and_legend(tmp_path, drawn, capsys, recwarn):
    runs = [fake_run_dir(tmp_path, f"lr{i}", env_id=LONG_ENV, lr=10.0 ** -i, returns=(1.0 + i, 3.0)) for i in range(3)]
    code, _, err = run_main(["plot", *map(str, runs), "--out", str(tmp_path / "long.png")], capsys)
    assert code == 0, err
    fig = drawn[-1]
    (ax,) = _panels(fig)
    title = ax.get_title()
    assert len(title.splitlines()) == 3 and title.endswith("...")
    heading = ax.get_legend().get_title().get_text()
    assert re.sub(r"\s", "", heading) == re.sub(r"\s", "", LONG_ENV)  # the whole id, above the curves it names
    assert _outside(fig) == [] and _legend_below(fig, ax)
    assert not [w for w in recwarn if "constrained_layout" in str(w.message)]


def test_a_200_character_env_id_fits_every_panel_of_a_per_setting_figure(tmp_path, drawn, capsys):
    runs = [fake_run_dir(tmp_path, f"lr{i}", env_id=LONG_ENV, lr=10.0 ** -i) for i in range(4)]
    code, _, err = run_main(["plot", *map(str, runs), "--panels", "per-setting", "--out", str(tmp_path / "p.png")], capsys)
    assert code == 0, err
    fig = drawn[-1]
    assert len(_panels(fig)) == 4 and _outside(fig) == []


def test_a_5000_character_env_id_is_cut_with_dots_in_the_title_and_legend(tmp_path, drawn, capsys, recwarn):
    from proxima import plot

    env = "Z" * 2500 + " " + "Q" * 2499
    runs = [fake_run_dir(tmp_path, f"v{i}", env_id=env, vf_coef=i, returns=(1.0, 2.0 + i)) for i in range(2)]
    code, _, err = run_main(["plot", *map(str, runs), "--out", str(tmp_path / "huge.png")], capsys)
    assert code == 0, err
    fig = drawn[-1]
    (ax,) = _panels(fig)
    heading = ax.get_legend().get_title().get_text()
    assert "Q" not in heading and heading.endswith("...")  # its start, then '...' (was: all 5,000 characters)
    assert len(heading.replace("\n", "")) <= plot.ENTRY_CHARS * plot.ENTRY_LINES  # 540: plot.LABEL_MAX_CHARS
    assert ax.get_title().endswith("...") and len(ax.get_title().splitlines()) <= 3
    assert _outside(fig) == []
    assert not [w for w in recwarn if "constrained_layout not applied" in str(w.message)]


def test_a_short_legend_stays_inside_the_axes(tmp_path, drawn, capsys):
    runs = [fake_run_dir(tmp_path, f"lr{i}", lr=10.0 ** -i) for i in range(2)]
    code, _, err = run_main(["plot", *map(str, runs), "--out", str(tmp_path / "s.png")], capsys)
    assert code == 0, err
    fig = drawn[-1]
    (ax,) = _panels(fig)
    renderer = fig.canvas.get_renderer()
    assert ax.bbox.contains(*ax.get_legend().get_window_extent(renderer).corners().mean(axis=0))  # two short entries: loc='best'
    assert _outside(fig) == []


def test_plot_help_says_the_rolling_return_is_over_100_or_more_episodes(capsys):
    code, out, _ = run_main(["plot", "--help"], capsys)
    assert code == 0
    text = " ".join(out.split())
    assert "100 or more" in text and "return (105 ep)" in text
    assert "of the last 100 episodes" not in text  # the window holds 100 to 100 + an iteration's episodes - 1
