"""Mutation survivors of review 45 (commits f162dd6, ad64c65), unit level: claim_direction at exactly the
corrected level and on a tie, compare_rows's Bonferroni family, the verdict's advice and its two-way
parts, shared_config's swept, absent and middle configs, the dry run's estimate (host memory off the
CPU, observation normalization, --keep-checkpoints 0, one member)."""

from __future__ import annotations

import pytest
import torch

from proxima import population
from proxima import population_report as pr
from proxima.config import PPOConfig
from proxima.sizing import EnvSizes
from tests.unit.test_verdict45 import STRONG, WEAK, _row


# ---------------------------------------------------------------- claim_direction, compare_rows
def test_a_p_exactly_at_the_corrected_level_is_told_apart_in_either_direction():
    # "at most CLAIM_ALPHA / pairs": 0.05 / 2 == 0.025 exactly in floating point
    assert pr.claim_direction(0.025, 0.98, 2) == ("Y", "Y > X", 0.025)
    assert pr.claim_direction(0.98, 0.025, 2) == ("X", "X > Y", 0.025)


def test_two_equal_one_sided_p_values_read_y_over_x():
    assert pr.claim_direction(0.6, 0.6, 2) == (None, "Y > X", 0.6)
    tied = pr.compare_rows(_row([500.0] * 5), _row([500.0] * 5))
    assert (tied["better"], tied["direction"], tied["perm_p"]) == (None, "Y > X", 1.0)


def test_compare_rows_tests_at_the_level_of_its_family_of_settings():
    x, y = [5.0, 7.0, 8.0, 9.0, 10.0], [1.0, 2.0, 3.0, 4.0, 6.0]  # X's rank sum 39 of 40: p = 2/252 = 0.0079
    two = pr.compare_rows(_row(x), _row(y), settings=2)  # at 0.05/2
    assert (two["better"], two["direction"], two["perm_p"]) == ("X", "X > Y", 2 / 252)
    four = pr.compare_rows(_row(x), _row(y), settings=4)  # at 0.05/12 = 0.0042: not told apart
    assert (four["better"], four["direction"], four["perm_p"]) == (None, "X > Y", 2 / 252)
    line = pr.verdict("Y", [("X", four)], settings=4)
    assert "not distinguishable from X (P(X > Y) 0.96, p = 0.0079, above 0.05/12) at these seeds" in line


# ---------------------------------------------------------------- the verdict
def test_a_tie_not_told_apart_beside_a_setting_told_apart_says_the_returns_are_identical():
    cap = [500.0] * 5
    below = pr.compare_rows(_row(WEAK), _row(cap), 3)
    tied = pr.compare_rows(_row(cap), _row(cap), 3)
    line = pr.verdict("Y", [("B", below), ("C", tied)], settings=3)
    assert line == ("Y = Y: the highest IQM; better than B (p = 0.004); not distinguishable from C (P(X > Y) 0.50, p = 1, "
                    "above 0.05/6) at these seeds. The settings' returns are identical, which more seeds cannot tell "
                    f"apart. ({pr.CLAIM_METHOD}.)")


def test_a_y_between_a_better_and_a_worse_setting_says_both():
    mid = [50.0, 51.0, 52.0, 53.0, 54.0]
    compared = [("strong", pr.compare_rows(_row(STRONG), _row(mid), 3)), ("weak", pr.compare_rows(_row(WEAK), _row(mid), 3))]
    assert pr.verdict("mid", compared, settings=3) == (
        "Y = mid: the highest IQM; strong is better than Y (P(X > Y) 1.00, p = 0.004, at most 0.05/6); Y is better than weak "
        f"(p = 0.004). ({pr.CLAIM_METHOD}.)")


# ---------------------------------------------------------------- shared_config
def test_shared_config_leaves_out_the_swept_fields():
    configs = {"a": {"lr": 0.1, "gamma": 0.9}, "b": {"lr": 0.2, "gamma": 0.9}}
    assert pr.shared_config(configs, {"lr": [0.1, 0.2]}) == ([("gamma", 0.9)], [])


def test_shared_config_leaves_out_a_member_with_no_config():
    configs = {"a": {"gamma": 0.9, "num_envs": 4}, "b": {}, "c": {"gamma": 0.9, "num_envs": 4}}
    assert pr.shared_config(configs, {}) == ([("gamma", 0.9), ("num_envs", 4)], [])


def test_shared_config_compares_every_member_not_only_the_first_and_last():
    configs = {"a": {"gamma": 0.9, "num_envs": 4}, "b": {"gamma": 0.99, "num_envs": 4}, "c": {"gamma": 0.9, "num_envs": 4}}
    assert pr.shared_config(configs, {}) == ([("num_envs", 4)], [("gamma", 0.9)])


# ---------------------------------------------------------------- the dry run's estimate
def _cfg(**kw) -> PPOConfig:
    return PPOConfig(env_id="CartPole-v1", num_envs=2, num_steps=16, **kw)


def test_the_gpu_memory_estimate_holds_no_host_bytes_the_cpu_one_does(monkeypatch):
    monkeypatch.setattr("proxima.sizing.free_memory", lambda device: None)
    probe = lambda: EnvSizes(4, 1, True)  # noqa: E731
    cpu = population.population_estimate(_cfg(), 4, torch.device("cpu"), probe)
    gpu = population.population_estimate(_cfg(), 4, torch.device("cuda"), probe)
    assert gpu["host_memory_bytes"] == 4 * population.MEMBER_HOST_BYTES
    assert gpu["memory_bytes"] == cpu["memory_bytes"] - 4 * population.MEMBER_HOST_BYTES


def test_observation_normalization_adds_its_running_statistics_to_each_checkpoint():
    # float64 mean and var of 4 observations, in the population's checkpoint and in each member's own
    on = population.checkpoint_bytes(_cfg(norm_obs=True), 3, 4, 1)
    off = population.checkpoint_bytes(_cfg(norm_obs=False), 3, 4, 1)
    assert on - off == 3 * 2 * (2 * 8 * 4)


_ESTIMATE = {"device": "cpu", "memory_bytes": 3 << 20, "memory_free_bytes": None, "checkpoint_bytes": 2 << 20,
             "checkpoints_kept": 5, "kept_checkpoint_bytes": 10 << 20, "disk_free_bytes": None}


def test_the_estimate_note_of_keep_checkpoints_0_says_every_one_is_kept():
    line = population.estimate_line(_ESTIMATE, 8, 0)
    assert line.endswith("up to ~10.0 MiB for the 5 kept (--keep-checkpoints 0 keeps every one)")


def test_the_estimate_note_of_one_member_says_member():
    assert population.estimate_line(_ESTIMATE, 1, 3).startswith("proxima: estimate: 1 member need at least ~3.0 MiB ")


@pytest.mark.parametrize("members", [1, 8])
def test_the_estimate_note_has_no_disk_clause_where_the_disk_is_unknown(members):
    assert "free there" not in population.estimate_line(_ESTIMATE, members, 3)
