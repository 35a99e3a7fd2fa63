"""Statistics over several tasks (rliable's, Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice").

A setting run on T tasks (env ids) has, per task t, the final returns of its n_t runs (members). Each
task's returns are first put on one scale, ``normalize``: (R - low) / (high - low), 0 at the task's
``low`` (a random policy's return) and 1 at its ``high`` (a reference return: SCORE_RANGES, or the user's).
A score is never clipped: a run above the reference scores above 1 (as human-normalized Atari scores do in
rliable), below random under 0. Over the normalized scores, as rliable's ``metrics`` defines them:

- IQM: the interquartile mean of all (run, task) scores pooled (floor(N/4) of the N dropped at each end);
- mean: the mean over tasks of each task's mean score; median: the median over tasks of those means;
- optimality gap: the mean over all scores of gamma - min(x, gamma), gamma = 1: how far runs fall short of 1
  (the one statistic that caps a score: a run above 1 counts as 1, not as making up for another's shortfall);
- performance profile: the fraction of all scores above tau (the report's table at four taus, its plot over
  a grid of taus: profile_curve).

Each with a 95% stratified-bootstrap interval (``stratified_ci``): every resample draws each task's
runs with replacement, within that task (the tasks are fixed, the runs are the sample). rliable's
score matrix has as many runs on every task; here a task may have fewer (a member left out), so the
pooled IQM, gap and profile weigh a task by its runs, while mean and median weigh every task alike.

Scores are given as a list of T arrays, task t's (..., n_t): the functions reduce the last axis of
each, so one call takes the scores themselves (-> a float) or a stack of resamples (R, n_t) (-> (R,)).
Pure numpy; the single-task statistics are population_report's, so with one task the IQM and its
interval are the population report's, bit for bit.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from .population_report import (BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CI_LEVEL, FEW_CI_MEMBERS, MIN_CI_MEMBERS, iqm_along,
                                 mean_along)

#: rliable's default gamma of the optimality gap: a normalized score of 1 is "optimal"
OPTIMALITY_GAMMA = 1.0
#: the taus of the report's performance profile table
PROFILE_TAUS = (0.25, 0.5, 0.75, 1.0)
#: the evenly spaced taus of the performance-profile plot (rliable's plot_performance_profiles draws ~100-200),
#: the scores and the table's taus added to them (profile_grid)
PROFILE_GRID_POINTS = 151
#: the plot's taus reach at least this far: past 1, so a curve's drop at the reference is seen whole
PROFILE_GRID_TOP = 1.25

#: where a built-in range's low and high come from, as the report says it
BUILT_IN_SOURCE = "built in: low a uniformly random policy's mean return, high Gymnasium's reward_threshold"
#: built-in score ranges {env id: (low, high)}, rliable's normalization (Agarwal et al. 2021): score 0 is a uniformly
#: random policy's mean return, measured by benchmarks/random_scores.py (1,000 Gymnasium episodes, episode i seeded
#: i), and score 1 Gymnasium's registered reward_threshold (gymnasium.spec(env).reward_threshold), the return
#: at which the env counts as solved. An env without a reward_threshold (Pendulum-v1) has none built in: it,
#: and any other env, needs --score-range ENV=LOW:HIGH
SCORE_RANGES = {
    "CartPole-v1": (22.65, 475.0),
    "Acrobot-v1": (-498.59, -100.0),
    "MountainCar-v0": (-200.0, -110.0),
}


def normalize(returns, low: float, high: float) -> np.ndarray:
    """(R - low) / (high - low) of returns (n,) float: 0 at ``low``, 1 at ``high``."""
    return (np.asarray(returns, dtype=np.float64) - low) / (high - low)


def _pooled(tasks: Sequence[np.ndarray]) -> np.ndarray:
    """All (run, task) scores of ``tasks`` [(..., n_t)] side by side: (..., sum n_t)."""
    return np.concatenate([np.asarray(t, dtype=np.float64) for t in tasks], axis=-1)


def _task_means(tasks: Sequence[np.ndarray]) -> np.ndarray:
    """Each task's mean score, (..., T)."""
    return np.stack([mean_along(t, axis=-1) for t in tasks], axis=-1)


def aggregate_iqm(tasks: Sequence[np.ndarray]):
    """Interquartile mean of all (run, task) scores pooled: floor(N/4) of the N dropped at each end."""
    return iqm_along(_pooled(tasks), axis=-1)


def aggregate_mean(tasks: Sequence[np.ndarray]):
    """Mean over tasks of each task's mean score (rliable's; every task weighs alike)."""
    return mean_along(_task_means(tasks), axis=-1)


def aggregate_median(tasks: Sequence[np.ndarray]):
    """Median over tasks of each task's mean score (rliable's)."""
    return np.median(_task_means(tasks), axis=-1)


def optimality_gap(tasks: Sequence[np.ndarray], gamma: float = OPTIMALITY_GAMMA):
    """Mean over all (run, task) scores of max(0, gamma - x): 0 when every run reaches gamma; lower is better."""
    return mean_along(np.maximum(0.0, gamma - _pooled(tasks)), axis=-1)


def profile_fraction(tasks: Sequence[np.ndarray], tau: float):
    """The performance profile at ``tau``: the fraction of all (run, task) scores > tau."""
    return mean_along((_pooled(tasks) > tau).astype(np.float64), axis=-1)


def profile_fractions(tasks: Sequence[np.ndarray], taus) -> np.ndarray:
    """The performance profile at every tau of ``taus`` (K,): (..., K), at each tau profile_fraction's number
    bit for bit. Vectorized for a stack of resamples: a resample holds the scores' own values, so it is
    counted, per distinct score, how often it was drawn (..., M), and the count above a tau is the sum of
    those counts from the first distinct score above it on (a suffix sum); the counts and sums are whole
    numbers, exact, so each fraction is the same division profile_fraction makes (10,000 resamples of 100
    scores at 250 taus: ~0.07 s, where a comparison of every draw with every tau would hold 250 M values)."""
    pooled = _pooled(tasks)
    taus = np.asarray(taus, dtype=np.float64).reshape(-1)
    values = np.unique(pooled)  # ascending; NaN (none expected: a task's scores are finite) last
    lead, n = pooled.shape[:-1], pooled.shape[-1]
    rows = int(np.prod(lead))
    which = np.searchsorted(values, pooled).reshape(rows, n) + (np.arange(rows) * values.size)[:, None]
    counts = np.bincount(which.ravel(), minlength=rows * values.size).reshape(rows, values.size)
    counts[:, np.isnan(values)] = 0  # a NaN is above no tau
    # at_or_above[:, j]: the draws of values[j:]; one more column of 0 for a tau at or past the highest
    at_or_above = np.zeros((rows, values.size + 1), dtype=np.int64)
    at_or_above[:, :-1] = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1]
    first_above = np.searchsorted(values, taus, side="right")  # values[first_above:] > tau
    return (at_or_above[:, first_above] / n).reshape(*lead, taus.size)


def profile_grid(tasks_of_settings: Sequence[Sequence[np.ndarray]], points: int = PROFILE_GRID_POINTS) -> np.ndarray:
    """The taus of the performance-profile plot, one grid for every setting so their curves compare: (K,)
    ascending, of every distinct score of every setting, the table's PROFILE_TAUS, and ``points`` even taus
    from min(0, the lowest score) to max(PROFILE_GRID_TOP, the highest) (an even tau within 1e-9 of a score or
    a table tau dropped for it), one more even step below the lowest score when it is at or below 0.

    A profile, and each resample's, changes value only at a score, so the post-step curve and band through
    these taus are exact between them too, however far apart the scores (an outlier at 300 left the even
    taus 2 apart, no tau between the table's); the even taus keep the plot's steps short where no score is.
    The first tau is below every score, so the curve starts at 1 (the margin step: a lowest score of 0 or
    below, as MountainCar's failed runs score exactly 0, would start it lower), and is 0 from the highest
    score on. Scores that are not finite are no taus and do not move the ends."""
    scores = np.concatenate([_pooled(tasks) for tasks in tasks_of_settings] or [np.zeros(0)])
    scores = np.unique(scores[np.isfinite(scores)])
    low = min(0.0, float(scores[0])) if scores.size else 0.0
    high = max(PROFILE_GRID_TOP, float(scores[-1])) if scores.size else PROFILE_GRID_TOP
    even = np.linspace(low, high, points)
    if scores.size and scores[0] <= 0.0:
        even = np.concatenate([[low - (even[1] - even[0])], even])
    exact = np.union1d(scores, np.asarray(PROFILE_TAUS, dtype=np.float64))
    even = even[~np.isclose(even[:, None], exact[None, :], rtol=0.0, atol=1e-9).any(axis=1)]
    return np.union1d(even, exact)


def profile_curve(tasks: Sequence[np.ndarray], taus, resamples: int = BOOTSTRAP_RESAMPLES,
                  seed: int = BOOTSTRAP_SEED, level: float = CI_LEVEL) -> dict:
    """The performance-profile plot's numbers of a setting's scores ``tasks`` [(n_t,)] at ``taus`` (K,):
    {tau, fraction, ci_low, ci_high}, each (K,) float; at a tau of the table, its fraction and interval bit
    for bit (the same resamples: stratified_band's). ci_low and ci_high None as stratified_ci gives None."""
    taus = np.asarray(taus, dtype=np.float64).reshape(-1)
    band = stratified_band(tasks, lambda d: profile_fractions(d, taus), resamples, seed, level)
    return {"tau": taus, "fraction": profile_fractions(tasks, taus),
            "ci_low": None if band is None else band[0], "ci_high": None if band is None else band[1]}


#: the report's aggregate statistics, in its column order
AGGREGATES = {"iqm": aggregate_iqm, "mean": aggregate_mean, "median": aggregate_median, "optimality_gap": optimality_gap}


def stratified_ci(tasks: Sequence[np.ndarray], stat: Callable, resamples: int = BOOTSTRAP_RESAMPLES,
                  seed: int = BOOTSTRAP_SEED, level: float = CI_LEVEL) -> Optional[tuple]:
    """(low, high) percentile interval of ``stat`` (one of AGGREGATES, or any function of the task list)
    over a stratified bootstrap: from one numpy default_rng(seed), task by task, rng.integers(0, n_t,
    (resamples, n_t)) draws each task's runs within that task. With one task this is
    population_report.bootstrap_ci's draw exactly. None when a task has fewer than MIN_CI_MEMBERS runs
    (one run resampled is itself: that task's spread would be unseen, the interval too narrow)."""
    band = stratified_band(tasks, stat, resamples, seed, level)
    return None if band is None else (float(band[0]), float(band[1]))


def stratified_band(tasks: Sequence[np.ndarray], stat: Callable, resamples: int = BOOTSTRAP_RESAMPLES,
                    seed: int = BOOTSTRAP_SEED, level: float = CI_LEVEL) -> Optional[tuple]:
    """stratified_ci of a ``stat`` of several numbers at once: (low, high), each of the shape of one
    resample's stat (stat of the (resamples, n_t) draws gives (resamples, ...)), every number from the
    same resamples as stratified_ci draws them; None as stratified_ci."""
    tasks = [np.asarray(t, dtype=np.float64).reshape(-1) for t in tasks]
    if not tasks or min(t.size for t in tasks) < MIN_CI_MEMBERS:
        return None
    rng = np.random.default_rng(seed)
    draws = [t[rng.integers(0, t.size, size=(resamples, t.size))] for t in tasks]  # each (resamples, n_t)
    stats = stat(draws)
    alpha = (1 - level) / 2
    return np.quantile(stats, alpha, axis=0), np.quantile(stats, 1 - alpha, axis=0)


def few_runs(tasks: Sequence[np.ndarray]) -> bool:
    """Whether a task has fewer than FEW_CI_MEMBERS runs: its intervals cover well under 95% (flagged †)."""
    return min(np.asarray(t).size for t in tasks) < FEW_CI_MEMBERS


def aggregate_statistics(tasks: Sequence[np.ndarray], taus: Sequence[float] = PROFILE_TAUS) -> dict:
    """Every statistic of a setting's normalized scores ``tasks`` [(n_t,)] with its interval (stratified_ci):
    {iqm, iqm_ci, mean, mean_ci, median, median_ci, optimality_gap, optimality_gap_ci, few,
    profile: [{tau, fraction, ci}]}; intervals None as stratified_ci gives them."""
    tasks = [np.asarray(t, dtype=np.float64).reshape(-1) for t in tasks]
    out: dict = {}
    for name, stat in AGGREGATES.items():
        out[name] = float(stat(tasks))
        out[f"{name}_ci"] = stratified_ci(tasks, stat)
    out["few"] = few_runs(tasks)
    out["profile"] = [{"tau": float(tau), "fraction": float(profile_fraction(tasks, tau)),
                       "ci": stratified_ci(tasks, lambda d, tau=tau: profile_fraction(d, tau))} for tau in taus]
    return out
