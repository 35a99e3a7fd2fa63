"""The performance-profile plot of ``proxima report A B --normalize`` (rliable's plot_performance_profiles):
per setting, the fraction of (run, task) scores > tau over a grid of taus, with the stratified-bootstrap 95%
band of the table's intervals, checked against fractions counted by hand on tiny score arrays."""

from __future__ import annotations

import time

import numpy as np
import pytest

from proxima import aggregate as ag
from proxima.population_report import profile_figure, tasks_aggregate

# 2 tasks x 3 runs, as tests/unit/test_aggregate44.py scores them: pooled 0.2 0.2 0.5 0.5 0.8 1.0
TASKS = [np.array([1.0, 0.5, 0.2]), np.array([0.8, 0.2, 0.5])]


def test_the_fraction_above_each_tau_is_counted_as_by_hand():
    taus = [-1.0, 0.0, 0.2, 0.25, 0.5, 0.8, 0.99, 1.0, 3.0]
    # > -1, > 0: all 6; > 0.2: the two 0.2s out; > 0.5: 1.0 and 0.8; > 0.8 and > 0.99: 1.0 alone; > 1: none
    expected = [6, 6, 4, 4, 2, 1, 1, 0, 0]
    assert ag.profile_fractions(TASKS, taus).tolist() == pytest.approx([k / 6 for k in expected])


def test_a_stack_of_resamples_gives_a_curve_per_resample():
    stack = [np.array([[1.0, 1.0, 1.0], [0.2, 0.2, 0.5]]), np.array([[0.8, 0.8, 0.2], [0.5, 0.5, 0.5]])]
    curves = ag.profile_fractions(stack, [0.3, 0.9])
    # resample 0: 1 1 1 .8 .8 .2 -> 5/6 above 0.3, 3/6 above 0.9; resample 1: .2 .2 .5 .5 .5 .5 -> 4/6, 0
    assert curves.shape == (2, 2)
    np.testing.assert_allclose(curves, [[5 / 6, 3 / 6], [4 / 6, 0.0]])


def test_the_grid_spans_zero_to_1_25_and_holds_the_tables_taus():
    taus = ag.profile_grid([TASKS])
    assert taus[0] == 0.0 and taus[-1] == 1.25 and np.all(np.diff(taus) > 0)
    assert set(ag.PROFILE_TAUS) <= set(taus.tolist())
    assert ag.PROFILE_GRID_POINTS <= taus.size <= ag.PROFILE_GRID_POINTS + len(ag.PROFILE_TAUS)


def test_the_grid_covers_the_highest_and_lowest_scores_of_every_setting():
    other = [np.array([2.0, 0.5]), np.array([-0.5, 0.1])]  # a run at twice the reference, one below random
    taus = ag.profile_grid([TASKS, other])
    # 151 even taus from -0.5 to 2, 1/60 apart, and one more below -0.5: the curve starts at 1, not at 3/4
    assert taus[0] == pytest.approx(-0.5 - 2.5 / 150) and -0.5 in taus and taus[-1] == 2.0
    curve = ag.profile_curve(other, taus)
    # below the lowest score every run is above tau, in every resample; from the highest on, none
    assert curve["fraction"][0] == curve["ci_low"][0] == 1.0 and curve["fraction"][-1] == 0.0
    assert curve["fraction"][list(taus).index(-0.5)] == 3 / 4


def test_the_curve_at_the_tables_taus_is_the_tables_fraction_and_interval_bit_for_bit():
    tasks = [np.array([1.0, 0.5, 0.2, 0.9, 0.3]), np.array([0.8, 0.2, 0.5, 1.1])]
    taus = ag.profile_grid([tasks])
    curve = ag.profile_curve(tasks, taus)
    table = ag.aggregate_statistics(tasks)["profile"]
    for p in table:
        i = int(np.flatnonzero(taus == p["tau"])[0])
        assert curve["fraction"][i] == p["fraction"]
        assert (curve["ci_low"][i], curve["ci_high"][i]) == p["ci"]


def test_the_curve_and_its_band_never_rise_and_the_band_holds_the_curve():
    tasks = [np.array([1.0, 0.5, 0.2, 0.9, 0.3]), np.array([0.8, 0.2, 0.5, 1.1])]
    curve = ag.profile_curve(tasks, ag.profile_grid([tasks]))
    for k in ("fraction", "ci_low", "ci_high"):
        assert np.all(np.diff(curve[k]) <= 0), k
    assert np.all(curve["ci_low"] <= curve["fraction"]) and np.all(curve["fraction"] <= curve["ci_high"])
    assert curve["ci_low"][0] == curve["ci_high"][0] == 1.0  # above tau 0: every run in every resample
    assert curve["ci_high"][-1] == 0.0


def test_tasks_of_uneven_runs_weigh_each_by_its_runs():
    # 5 runs and 2: pooled 0 .1 .2 .5 .8 .8 1; above 0.3: .5 .8 .8 1 -> 4 of 7 (not the mean of 2/5 and 2/2)
    tasks = [np.array([1.0, 0.8, 0.2, 0.1, 0.0]), np.array([0.8, 0.5])]
    assert ag.profile_fractions(tasks, [0.3])[0] == pytest.approx(4 / 7)


def test_a_task_of_one_run_gives_a_curve_without_a_band():
    curve = ag.profile_curve([np.array([0.4]), np.array([0.6, 0.9])], [0.5])
    assert curve["fraction"].tolist() == pytest.approx([2 / 3]) and curve["ci_low"] is None and curve["ci_high"] is None


def test_ten_tasks_of_ten_runs_take_well_under_two_seconds():
    rng = np.random.default_rng(1)
    tasks = [rng.normal(0.7, 0.4, 10) for _ in range(10)]
    taus = ag.profile_grid([tasks])
    start = time.process_time()  # CPU time: another process on the machine does not count
    curve = ag.profile_curve(tasks, taus)
    assert time.process_time() - start < 2.0
    assert curve["ci_low"].shape == taus.shape


def _aggregated(tmp_rows, labels=("lr=0.1", "lr=0.2")):
    """tasks_aggregate of settings ``labels`` over one task per row, from summarize_settings-like rows of returns
    (every task scored on 0..1)."""
    tables = [[{"settings": {"lr": lr}, "returns": r, "n": len(r), "members": len(r)} for lr, r in t.items()] for t in tmp_rows]
    return tasks_aggregate(list(labels), [(0.0, 1.0, "--score-range")] * len(tmp_rows), tables)


def test_every_aggregated_setting_gets_a_curve_on_one_shared_grid():
    aggs = _aggregated([{0.1: [0.2, 0.4], 0.2: [0.9, 3.0]}, {0.1: [0.1, 0.3], 0.2: [0.8, 1.0]}])
    a, b = (g["profile_curve"] for g in aggs)
    assert np.array_equal(a["tau"], b["tau"]) and a["tau"][-1] == 3.0  # lr=0.2's 3.0 ends lr=0.1's grid too
    assert a["fraction"][-1] == b["fraction"][-1] == 0.0


def test_a_setting_not_aggregated_has_no_curve():
    aggs = _aggregated([{0.1: [0.2, 0.4], 0.2: [0.9, 1.0]}, {0.1: [0.1, 0.3], 0.2: []}])
    assert "profile_curve" in aggs[0] and aggs[1]["missing"] == [1] and "profile_curve" not in aggs[1]


def test_the_figure_draws_a_step_curve_and_band_per_setting_and_the_reference_at_1():
    aggs = _aggregated([{0.1: [0.2, 0.4], 0.2: [0.9, 1.0]}, {0.1: [0.1, 0.3], 0.2: []}])
    ax = profile_figure(aggs, ["CartPole-v1", "Acrobot-v1"]).axes[0]
    assert ax.get_xlabel() == "normalized score tau" and ax.get_ylabel() == "fraction of runs with score > tau"
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["lr=0.1", "tau = 1 (reference)"]  # lr=0.2 is not aggregated: not drawn
    curve, reference = ax.get_lines()
    assert curve.get_drawstyle() == "steps-post" and curve.get_xdata()[-1] == 1.25
    assert reference.get_linestyle() == "--" and list(reference.get_xdata()) == [1.0, 1.0]
    assert len(ax.collections) == 1  # lr=0.1's band
    assert "2 tasks: CartPole-v1, Acrobot-v1" in ax.get_title().replace("\n", " ")


def test_the_band_at_the_tables_taus_is_stratified_ci_bit_for_bit_at_any_resample_count():
    # 13 scores, 37 resamples, seed 5: a curve drawn from other resamples than the table's would differ here
    rng = np.random.default_rng(3)
    tasks = [rng.normal(0.6, 0.3, 7), rng.normal(0.5, 0.3, 6)]
    taus = ag.profile_grid([tasks])
    curve = ag.profile_curve(tasks, taus, resamples=37, seed=5)
    for tau in ag.PROFILE_TAUS:
        i = int(np.flatnonzero(taus == tau)[0])
        ci = ag.stratified_ci(tasks, lambda d: ag.profile_fraction(d, tau), resamples=37, seed=5)
        assert (curve["ci_low"][i], curve["ci_high"][i]) == ci


def test_the_tables_taus_are_on_a_grid_of_any_range():
    taus = ag.profile_grid([[np.array([0.1, 3.0]), np.array([0.4, 0.6])]])  # 0 to 3: 0.02 apart, 0.25 off it
    assert set(ag.PROFILE_TAUS) <= set(taus.tolist())
    assert np.all(np.diff(taus) > 1e-9)


def test_a_setting_not_aggregated_does_not_stretch_the_grid():
    # lr=0.2's 3.0 on task 0 is no score of an aggregated setting (task 1 has none of lr=0.2)
    aggs = _aggregated([{0.1: [0.2, 0.4], 0.2: [0.9, 3.0]}, {0.1: [0.1, 0.3], 0.2: []}])
    assert aggs[0]["profile_curve"]["tau"][-1] == 1.25


def test_the_band_is_a_post_step_between_ci_low_and_ci_high():
    aggs = _aggregated([{0.1: [0.2, 0.4, 0.7], 0.2: [0.9, 1.0]}, {0.1: [0.1, 0.3, 0.8], 0.2: []}])
    ax = profile_figure(aggs, ["A-v0", "B-v0"]).axes[0]
    c = aggs[0]["profile_curve"]
    vertices = {(round(x, 9), round(y, 9)) for x, y in ax.collections[0].get_paths()[0].vertices}
    # held from tau[i] to tau[i + 1] (as the curve): the corner at tau[i + 1] is still step i's, on both edges
    for i in range(len(c["tau"]) - 1):
        assert (round(c["tau"][i + 1], 9), round(c["ci_high"][i], 9)) in vertices
        assert (round(c["tau"][i + 1], 9), round(c["ci_low"][i], 9)) in vertices


def test_two_settings_get_two_colours_a_title_counting_tasks_and_a_fixed_fraction_axis():
    aggs = _aggregated([{0.1: [0.2, 0.4], 0.2: [0.9, 1.0]}, {0.1: [0.1, 0.3], 0.2: [0.5, 0.6]},
                        {0.1: [0.1, 0.3], 0.2: [0.5, 0.6]}])  # 2 settings over 3 tasks
    ax = profile_figure(aggs, ["A-v0", "B-v0", "C-v0"]).axes[0]
    a, b, _ = ax.get_lines()
    assert a.get_color() != b.get_color()
    assert "Performance profile over 3 tasks: A-v0, B-v0, C-v0" in ax.get_title().replace("\n", " ")
    assert ax.get_ylim() == (-0.02, 1.02)


def test_a_label_with_a_control_character_is_drawn_without_it():
    aggs = _aggregated([{0.1: [0.2, 0.4]}, {0.1: [0.1, 0.3]}], labels=("lr=0.1",))
    aggs[0]["label"] = "lr=\x1b[31m0.1"
    ax = profile_figure(aggs, ["A-v0", "B-v0"]).axes[0]
    assert ax.get_lines()[0].get_label() == "lr=[31m0.1"
    assert [t.get_text() for t in ax.get_legend().get_texts()][0] == "lr=[31m0.1"


def test_more_settings_than_the_colour_cycle_each_get_a_look_of_their_own():
    lrs = [0.1 * k for k in range(1, 12)]  # 11 settings: past matplotlib's 10 colours
    aggs = _aggregated([{lr: [0.2, 0.4] for lr in lrs}, {lr: [0.1, 0.3] for lr in lrs}],
                       labels=[f"lr={lr:g}" for lr in lrs])
    lines = profile_figure(aggs, ["A-v0", "B-v0"]).axes[0].get_lines()[:-1]  # the last: tau = 1
    assert len(lines) == 11
    assert len({(str(line.get_color()), line.get_linestyle()) for line in lines}) == 11


@pytest.mark.parametrize("lowest", [-0.5, 0.0])
def test_a_lowest_score_at_or_below_0_gets_a_step_of_margin_so_the_curve_starts_at_1(lowest):
    # a score of exactly 0 is a run at the random policy's return (MountainCar-v0's failed runs all are)
    tasks = [np.array([lowest, 0.5, 1.0]), np.array([0.2, 0.7])]
    taus = ag.profile_grid([tasks])
    step = (1.25 - lowest) / 150
    assert taus[0] == pytest.approx(lowest - step) and taus[1] == lowest
    curve = ag.profile_curve(tasks, taus)
    assert curve["fraction"][0] == curve["ci_low"][0] == 1.0 and curve["fraction"][1] == 4 / 5


def test_a_lowest_score_above_0_needs_no_margin():
    assert ag.profile_grid([TASKS])[0] == 0.0  # 0.2 is the lowest: every run is above 0


def test_every_score_is_a_tau_so_the_post_step_curve_and_band_are_exact_between_outliers():
    # one run below random and one 300 times the reference: 151 even taus 2 apart, none of them between 0 and 1.25
    tasks = [np.array([-0.5, 0.3, 0.6, 0.9]), np.array([1.1, 0.45, 300.0])]
    taus = ag.profile_grid([tasks])
    assert {-0.5, 0.3, 0.45, 0.6, 0.9, 1.1, 300.0} <= set(taus.tolist())
    assert [t for t in taus if 0 <= t <= 1.25] == [0.25, 0.3, 0.45, 0.5, 0.6, 0.75, 0.9, 1.0, 1.1]
    curve = ag.profile_curve(tasks, taus, resamples=200)
    # the plot reads the curve at tau as its value at the last grid tau at or below it (steps-post): the profile there
    between = np.linspace(-0.55, 301.0, 2001)
    drawn_at = np.searchsorted(taus, between, side="right") - 1
    exact = ag.profile_curve(tasks, between, resamples=200)
    for k in ("fraction", "ci_low", "ci_high"):
        np.testing.assert_array_equal(curve[k][drawn_at], exact[k], err_msg=k)


@pytest.mark.parametrize("low, high", [(-0.3, 3.0), (-0.3, 1.3), (-0.1, 1.9), (-0.3, 2.2), (-0.1, 5.0), (0.1, 2.5)])
def test_no_even_tau_is_kept_a_rounding_error_beside_a_table_tau(low, high):
    # linspace(-0.1, 1.9, 151) puts a tau 1.1e-16 off 0.5, and so on: the table's own tau stands for it
    taus = ag.profile_grid([[np.array([low, high])]])
    assert set(ag.PROFILE_TAUS) <= set(taus.tolist()) and np.all(np.diff(taus) > 1e-9)


def test_a_nan_score_is_above_no_tau_as_profile_fraction_counts_it():
    tasks = [np.array([0.2, np.nan, 0.8])]
    assert ag.profile_fractions(tasks, [-1.0, 0.5, np.inf]).tolist() == [2 / 3, 1 / 3, 0.0]
    assert [ag.profile_fraction(tasks, tau) for tau in (-1.0, 0.5, np.inf)] == [2 / 3, 1 / 3, 0.0]
