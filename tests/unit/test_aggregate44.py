"""aggregate.py: rliable's statistics over several tasks, checked against numbers computed by hand and
against the single-task statistics of the population report."""

from __future__ import annotations

import numpy as np
import pytest

from proxima import aggregate as ag
from proxima.population_report import BOOTSTRAP_RESAMPLES, bootstrap_ci, iqm

# 2 tasks x 3 runs. A range 0..500: 500, 250, 100 -> 1.0, 0.5, 0.2; a range -500..0: -100, -400, -250 -> 0.8, 0.2, 0.5
CARTPOLE = ag.normalize([500.0, 250.0, 100.0], 0.0, 500.0)
ACROBOT = ag.normalize([-100.0, -400.0, -250.0], -500.0, 0.0)
TASKS = [CARTPOLE, ACROBOT]


def test_normalize_scores_each_task_on_its_range():
    np.testing.assert_allclose(CARTPOLE, [1.0, 0.5, 0.2])
    np.testing.assert_allclose(ACROBOT, [0.8, 0.2, 0.5])


def test_the_aggregates_of_a_2_task_3_run_matrix_by_hand():
    # pooled, sorted: 0.2 0.2 0.5 0.5 0.8 1.0; floor(6/4) = 1 dropped at each end: (0.2 + 0.5 + 0.5 + 0.8) / 4
    assert ag.aggregate_iqm(TASKS) == pytest.approx(0.5)
    # task means 1.7/3 and 1.5/3: their mean, and (two tasks) their median, is 3.2/6
    assert ag.aggregate_mean(TASKS) == pytest.approx(3.2 / 6)
    assert ag.aggregate_median(TASKS) == pytest.approx(3.2 / 6)
    # max(0, 1 - x): 0, 0.5, 0.8, 0.2, 0.8, 0.5 -> 2.8 / 6
    assert ag.optimality_gap(TASKS) == pytest.approx(2.8 / 6)
    # scores > tau: 4 of 6 above 0.25; 1.0 and 0.8 above 0.5 and 0.75; none above 1 (strictly)
    assert [ag.profile_fraction(TASKS, t) for t in (0.25, 0.5, 0.75, 1.0)] == pytest.approx([4 / 6, 2 / 6, 2 / 6, 0.0])


def test_the_median_is_of_task_means_not_of_all_scores():
    # task means 0.1, 0.5, 0.9 -> median 0.5; the pooled median of these 6 scores would be (0.1 + 0.5) / 2 = 0.3
    tasks = [np.array([0.0, 0.2]), np.array([0.5, 0.5]), np.array([0.8, 1.0])]
    assert ag.aggregate_median(tasks) == pytest.approx(0.5)
    # the mean weighs each task alike whatever its runs: (0.0 + 1.0) / 2, not 3/4 of the pooled scores
    assert ag.aggregate_mean([np.array([0.0]), np.array([1.0, 1.0, 1.0])]) == pytest.approx(0.5)


def test_scores_above_one_count_as_one_in_the_gap():
    assert ag.optimality_gap([np.array([1.5, 0.5])]) == pytest.approx(0.25)


def test_one_task_gives_the_population_reports_iqm_mean_and_intervals_bit_for_bit():
    x = np.array([412.0, 500.0, 37.5, 260.0, 499.0, 128.0, 300.0])
    assert ag.aggregate_iqm([x]) == iqm(x)
    assert ag.stratified_ci([x], ag.aggregate_iqm) == bootstrap_ci(x, iqm)
    assert ag.stratified_ci([x], ag.aggregate_mean) == bootstrap_ci(x, np.mean)


def test_the_bootstrap_resamples_runs_within_each_task():
    # every resample holds three 1s (task 1) and three 0s (task 2): the mean is 0.5 in all of them. A bootstrap of
    # the six pooled scores would draw any mix, an interval around 0.5 of width ~0.8
    tasks = [np.ones(3), np.zeros(3)]
    assert ag.stratified_ci(tasks, ag.aggregate_mean) == (0.5, 0.5)
    assert ag.stratified_ci(tasks, ag.optimality_gap) == (0.5, 0.5)


def test_the_stratified_draws_are_task_by_task_from_one_seeded_rng():
    rng = np.random.default_rng(0)
    draws = [t[rng.integers(0, 3, size=(BOOTSTRAP_RESAMPLES, 3))] for t in TASKS]
    stats = ag.aggregate_iqm(draws)
    assert ag.stratified_ci(TASKS, ag.aggregate_iqm) == (float(np.quantile(stats, 0.025)), float(np.quantile(stats, 0.975)))


def test_no_interval_when_a_task_has_one_run():
    assert ag.stratified_ci([np.array([0.1, 0.9]), np.array([0.4])], ag.aggregate_iqm) is None
    stats = ag.aggregate_statistics([np.array([0.1, 0.9]), np.array([0.4])])
    assert stats["iqm"] == pytest.approx(0.4 / 3 + 1.0 / 3) and stats["iqm_ci"] is None and stats["few"]


def test_the_built_in_ranges_are_a_random_policys_mean_to_gymnasiums_reward_threshold():
    # lows: benchmarks/random_scores.py, 1,000 episodes each (CartPole-v1 22.65, Acrobot-v1 -498.59, MountainCar-v0
    # -200.00: a random policy never reaches its flag); highs: gymnasium.spec(env).reward_threshold
    assert ag.SCORE_RANGES == {"CartPole-v1": (22.65, 475.0), "Acrobot-v1": (-498.59, -100.0),
                               "MountainCar-v0": (-200.0, -110.0)}
    gym = pytest.importorskip("gymnasium")
    assert {env: gym.spec(env).reward_threshold for env in ag.SCORE_RANGES} == {env: hi for env, (_, hi) in ag.SCORE_RANGES.items()}
    # Pendulum-v1 registers no reward_threshold: no built-in range, the user gives one
    assert gym.spec("Pendulum-v1").reward_threshold is None and "Pendulum-v1" not in ag.SCORE_RANGES


def test_a_random_policy_scores_0_and_the_reward_threshold_1():
    assert ag.normalize([22.65, 475.0, 248.825], *ag.SCORE_RANGES["CartPole-v1"]) == pytest.approx([0.0, 1.0, 0.5])
    assert ag.normalize([-200.0, -110.0, -80.0], *ag.SCORE_RANGES["MountainCar-v0"]) == pytest.approx([0.0, 1.0, 4 / 3])


def test_a_3_task_pool_by_hand():
    tasks = [np.array([0.0, 0.4]), np.array([0.2, 0.9]), np.array([1.2, 0.6])]
    # pooled, sorted: 0.0 0.2 0.4 0.6 0.9 1.2; one dropped at each end: (0.2 + 0.4 + 0.6 + 0.9) / 4. Two tasks
    # alone would give (0.2 + 0.4) / 2 = 0.3
    assert ag.aggregate_iqm(tasks) == pytest.approx(2.1 / 4)
    # 1 - min(x, 1): 1, 0.6, 0.8, 0.1, 0, 0.4 -> 2.9 / 6
    assert ag.optimality_gap(tasks) == pytest.approx(2.9 / 6)
    # > 0.5: 0.9, 1.2, 0.6; > 1: 1.2 alone
    assert [ag.profile_fraction(tasks, t) for t in (0.5, 1.0)] == pytest.approx([3 / 6, 1 / 6])


def test_scores_above_one_are_not_clipped_outside_the_gap():
    # rliable clips nothing but the gap's min(x, gamma): clipped at 1, IQM, mean and median would all be 0.75
    tasks = [np.array([1.5, 1.5]), np.array([0.5, 0.5])]
    assert ag.aggregate_iqm(tasks) == pytest.approx(1.0)
    assert ag.aggregate_mean(tasks) == pytest.approx(1.0) and ag.aggregate_median(tasks) == pytest.approx(1.0)
    assert ag.profile_fraction(tasks, 1.0) == pytest.approx(0.5)
    assert ag.optimality_gap(tasks) == pytest.approx(0.25)


def test_the_median_of_skewed_task_means_is_the_middle_one_not_the_mean():
    tasks = [np.array([0.0, 0.0]), np.array([0.1, 0.1]), np.array([1.0, 1.0])]
    assert ag.aggregate_median(tasks) == pytest.approx(0.1)
    assert ag.aggregate_mean(tasks) == pytest.approx(1.1 / 3)


def test_few_is_flagged_by_the_task_with_the_fewest_runs():
    assert ag.few_runs([np.linspace(0, 1, 3), np.linspace(0, 1, 10)])  # 3 runs on one task: under 5
    assert not ag.few_runs([np.linspace(0, 1, 5), np.linspace(0, 1, 10)])
    assert ag.aggregate_statistics([np.linspace(0, 1, 10), np.linspace(0, 1, 3)])["few"]


def test_every_interval_is_its_own_statistics():
    # three tasks: with two, the median of the task means is their mean
    tasks = [np.array([0.0, 0.3, 0.55, 0.9, 1.4]), np.array([0.2, 0.6, 0.8, 0.1, 0.7, 1.0]), np.array([0.05, 0.15, 0.4])]
    stats = ag.aggregate_statistics(tasks)
    for name, stat in ag.AGGREGATES.items():
        assert stats[f"{name}_ci"] == ag.stratified_ci(tasks, stat), name
    cis = [p["ci"] for p in stats["profile"]]
    for p, tau in zip(stats["profile"], ag.PROFILE_TAUS):
        assert p["ci"] == ag.stratified_ci(tasks, lambda d, tau=tau: ag.profile_fraction(d, tau)), tau
    assert len(set(cis)) == len(cis)  # four taus, four intervals: none is another tau's
    assert len({stats[f"{n}_ci"] for n in ag.AGGREGATES}) == len(ag.AGGREGATES)
