"""Two notes of one run do not pull against each other: a factory whose own NormalizeObservation/NormalizeReward
the wrapper note says to drop for --norm-obs/--norm-reward gets the Box-action note's flags as their replacement,
never as flags to add on top (which would normalize twice)."""

from __future__ import annotations

import pytest

from cli_helpers import module_written_in, run_main

FACTORY = '''
import gymnasium as gym


def make_cont(**kw):  # CleanRL's continuous stack, shortened
    env = gym.make("Pendulum-v1", **kw)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = gym.wrappers.ClipAction(env)
    env = gym.wrappers.NormalizeObservation(env)
    return gym.wrappers.NormalizeReward(env)


def make_plain(**kw):
    return gym.wrappers.RecordEpisodeStatistics(gym.make("Pendulum-v1", **kw))
'''


@pytest.fixture
def factories(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "notes45_envs", FACTORY)


def _box_note(err: str) -> str:
    [line] = [x for x in err.splitlines() if "has Box actions and no preset" in x]
    return line


def test_the_box_note_offers_the_flags_in_place_of_the_envs_own_wrappers(factories, capsys):
    code, _, err = run_main(["train", "notes45_envs:make_cont", "--dry-run"], capsys)
    assert code == 0, err
    assert "drop the wrapper and use --norm-reward and --norm-obs" in err
    assert "--norm-obs --norm-reward (in place of the env's own normalization wrappers" in _box_note(err)
    code, _, err = run_main(["train", "notes45_envs:make_plain", "--dry-run"], capsys)
    assert code == 0, err
    assert "in place of" not in _box_note(err) and "--ent-coef 0 --norm-obs --norm-reward (`proxima presets" in _box_note(err)
