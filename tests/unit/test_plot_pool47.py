"""``proxima plot A+A2`` draws populations of one setting trained on other seeds (the pool ``proxima report
A+A2`` reports) as one population: one panel, each setting's statistic and band over the union of A's and
A2's members, titled as pooled, the legend counting the union; a pool report refuses is refused with
report's line; ``plot A A2`` still draws them side by side."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import proxima
from proxima.config import PPOConfig
from proxima.plot import collect_panels, load_curve, plot_runs
from tests.cli_helpers import one_error_line, run_main
from tests.unit.test_report_pool46 import ADDED, FIRST, STEP, _population

METRIC = "charts/episodic_return"  # what _population's metrics.csv holds


def _pooled(a: Path, a2: Path, **kwargs):
    """The panels of ``plot A+A2`` (plot's own curves, as drawn), mean and min-max unless told otherwise."""
    return collect_panels([f"{a}+{a2}"], METRIC, **{"stat": "mean", "band": "minmax", **kwargs})


def _legend(ax) -> list:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_a_pool_is_one_panel_whose_setting_is_the_mean_and_band_over_the_union_of_members(tmp_path):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    (panel,) = _pooled(a, a2)
    title, metric, (curve,) = panel
    union = np.array(list(FIRST.values()) + list(ADDED.values()))
    assert title == "Fake-v0: A+A2, 2 populations pooled" and metric == METRIC
    assert curve.label == "mean, min-max (10 members)"
    assert list(curve.x) == [STEP // 2, STEP]
    assert curve.y[-1] == pytest.approx(union.mean())  # 75.2, not A's 120 nor A2's 30.4
    assert (curve.lo[-1], curve.hi[-1]) == (10.0, 500.0)  # min-max over all ten members


def test_a_pooled_sweep_counts_and_aggregates_each_setting_over_both_populations(tmp_path):
    a = _population(tmp_path / "A", FIRST, lrs=(0.1, 0.2))
    a2 = _population(tmp_path / "A2", ADDED, lrs=(0.1, 0.2))
    (panel,) = _pooled(a, a2, stat="iqm", band="ci")
    union = np.sort(list(FIRST.values()) + list(ADDED.values()))
    assert [c.label for c in panel[2]] == ["lr=0.1: IQM, 95% CI (10 members)", "lr=0.2: IQM, 95% CI (10 members)"]
    for c in panel[2]:  # floor(10/4) = 2 dropped at each end of the union
        assert c.y[-1] == pytest.approx(union[2:8].mean())


def test_plot_a_pool_on_the_command_line_draws_the_union_and_writes_curve_png_here(tmp_path, monkeypatch, capsys,
                                                                                 drawn):
    _population(tmp_path / "A", FIRST)
    _population(tmp_path / "A2", ADDED)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["plot", "A+A2", "--metric", METRIC, "--stat", "mean"], capsys)
    assert code == 0, err
    assert out.strip() == "wrote curve.png"  # the pool's curve is neither population's: not A+A2/curve.png
    assert (tmp_path / "curve.png").is_file() and not (tmp_path / "A+A2").exists()
    (ax,) = [ax for ax in drawn[-1].axes if ax.get_lines()]
    assert ax.get_title() == "Fake-v0: A+A2, 2 populations pooled"
    assert "mean, 95% CI (10 members)" in _legend(ax)
    (line,) = ax.get_lines()
    assert line.get_ydata()[-1] == pytest.approx(np.mean(list(FIRST.values()) + list(ADDED.values())))


def test_two_pools_are_two_pooled_panels_and_a_label_names_a_pool(tmp_path, monkeypatch, capsys, drawn):
    for name, returns in (("A", FIRST), ("A2", ADDED), ("B", {1: 1.0, 2: 2.0}), ("B2", {3: 3.0})):
        _population(tmp_path / name, returns)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["plot", "A+A2", "B+B2", "--metric", METRIC, "--stat", "mean", "--band", "minmax", "--label", "B+B2=small",
                             "--panels", "per-setting", "--out", "two.png"], capsys)
    assert code == 0, err
    axes = [ax for ax in drawn[-1].axes if ax.get_lines()]
    assert [ax.get_title() for ax in axes] == ["Fake-v0: A+A2, 2 populations pooled",
                                               "Fake-v0: small, 2 populations pooled"]
    assert "mean, min-max (3 members)" in _legend(axes[1])
    assert axes[1].get_lines()[0].get_ydata()[-1] == pytest.approx(2.0)  # mean of B's 1, 2 and B2's 3


def test_plot_a_a2_still_draws_each_population_in_a_panel_of_its_own(tmp_path):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    panels = collect_panels([a, a2], METRIC, stat="mean", band="minmax", panels="per-setting")
    assert [(p[0], p[2][0].label) for p in panels] == [("Fake-v0: population A", "mean, min-max (5 members)"),
                                                      ("Fake-v0: population A2", "mean, min-max (5 members)")]
    assert [p[2][0].y[-1] for p in panels] == pytest.approx([np.mean(list(FIRST.values())), np.mean(list(ADDED.values()))])


def test_plot_runs_takes_a_pool_from_python_as_the_command_line_spells_it(tmp_path, drawn):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    out = plot_runs(f"{a}+{a2}", tmp_path / "pool.png", metric=METRIC)
    assert out.is_file()
    (ax,) = [ax for ax in drawn[-1].axes if ax.get_lines()]
    assert "IQM, 95% CI (10 members)" in _legend(ax)


def test_a_diverged_member_of_a_pool_is_left_out_and_named_by_its_population(tmp_path):
    a = _population(tmp_path / "A", FIRST)
    a2 = _population(tmp_path / "A-seeds6-10", ADDED, diverged=("m000-seed6",))
    (panel,) = _pooled(a, a2)
    (curve,) = panel[2]
    assert curve.label == "mean, min-max (9 of 10 members; A-seeds6-10/m000 diverged at iteration 3)"
    assert curve.y[-1] == pytest.approx(np.mean([v for s, v in {**FIRST, **ADDED}.items() if s != 6]))


@pytest.mark.parametrize("second, config", [
    (ADDED, {"total_timesteps": 50000}),  # another setting: the first field that differs, both values
    ({5: 1.0, 6: 2.0}, {}),  # seed 5 in both
])
def test_a_pool_report_refuses_is_refused_by_plot_with_reports_line_and_no_image(tmp_path, monkeypatch, capsys,
                                                                                second, config):
    _population(tmp_path / "A", FIRST)
    _population(tmp_path / "A2", second, **config)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["report", "A+A2", "--out", "p.md"], capsys)
    assert code == 2
    line = one_error_line(err, "proxima report")
    code, _, err = run_main(["plot", "A+A2", "--metric", METRIC, "--out", "p.png"], capsys)
    assert code == 2
    assert one_error_line(err, "proxima plot") == line
    assert line.startswith(("total_timesteps: 4096 in A, 50000 in A2; ", "seed 5 twice in the pooled setting"))
    assert not (tmp_path / "p.png").exists()


def test_a_pool_among_runs_is_refused_before_the_others_are_drawn(tmp_path, monkeypatch, capsys):
    _population(tmp_path / "A", FIRST)
    _population(tmp_path / "B", ADDED)
    _population(tmp_path / "A2", ADDED, total_timesteps=50000)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["plot", "B", "A+A2", "--metric", METRIC, "--out", "p.png"], capsys)
    assert code == 2 and one_error_line(err, "proxima plot").startswith("total_timesteps: 4096 in A, 50000 in A2; ")
    assert not (tmp_path / "p.png").exists()


# --- trained populations: the same command on other seeds -----------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two tiny CartPole populations of one setting, seeds 1-2 and 3-4 (proxima train --seeds 1-2, then 3-4)."""
    root = tmp_path_factory.mktemp("pool47")
    for name, seeds in (("A", [1, 2]), ("A2", [3, 4])):
        config = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=32, total_timesteps=256, num_minibatches=4,
                           update_epochs=2, progress=False, checkpoint_every=0, eval_episodes=0, threads=1)
        proxima.train_population(config, seeds=seeds, run_dir=root / name, quiet=True)
    return root


def test_trained_populations_on_other_seeds_plot_as_one_of_their_four_members(trained, monkeypatch, capsys, drawn):
    monkeypatch.chdir(trained)
    code, _, err = run_main(["plot", "A+A2", "--stat", "mean", "--band", "minmax", "--out", "pool.png"], capsys)
    assert code == 0, err
    (ax,) = [ax for ax in drawn[-1].axes if ax.get_lines()]
    assert ax.get_title() == "CartPole-v1: A+A2, 2 populations pooled"
    assert "mean, min-max (4 members)" in _legend(ax)
    members = sorted(trained.glob("A*/m*-seed*"))
    assert [m.name.split("-")[1] for m in members] == ["seed1", "seed2", "seed3", "seed4"]
    # the last step: each member's rolling return there (or its last value, carried forward), averaged over all four
    last = [load_curve(m)[1][-1] for m in members]
    (line,) = ax.get_lines()
    assert line.get_xdata()[-1] == 256
    assert line.get_ydata()[-1] == pytest.approx(np.mean(last))
