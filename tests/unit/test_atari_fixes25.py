"""Atari wrapper defects a review found: FireReset lost the statistics of a game that ended during
its FIRE/RIGHT presses (a lost last life, or the time limit cutting the game on a press)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
import torch

from proxima.envs import atari

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def fake_ale(monkeypatch):
    """pixel_edge_envs.FakeAle that records the env steps of each game it ends (its score is
    ``reward`` x those steps, whoever pressed)."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    from pixel_edge_envs import FakeAle

    class Recorded(FakeAle):
        ended: list = []

        def step(self, action):
            out = super().step(action)
            if out[2] or out[3]:
                self.ended.append(self.t)
            return out

    return Recorded


def _play(monkeypatch, game_cls, steps: int, **game):
    """(vector step, return, length) of each game AleAtari reports in ``steps`` NOOP steps of training."""
    game_cls.ended = []

    def env_fn(name, render_mode, training):
        return lambda: gym.wrappers.FrameStackObservation(atari.game_wrappers(game_cls(**game), training), atari.STACK)

    monkeypatch.setattr(atari, "ale_env_fn", env_fn)
    env = atari.AleAtari("Fake-v5", "Fake", 1, "cpu", seed=0, training=True)
    reports = []
    try:
        env.reset(seed=0)
        for step in range(1, steps + 1):
            _, _, _, _, info = env.step(torch.zeros(1, dtype=torch.int64))
            if int(info["episode_length"][0]) > 0:
                reports.append((step, float(info["episode_return"][0]), int(info["episode_length"][0])))
    finally:
        env.close()
    return reports


@pytest.mark.parametrize("game", [
    dict(per_life=2),  # the last life is lost on a FIRE/RIGHT press after the lost life before
    dict(per_life=5, max_frames=12),  # the time limit cuts the game on the FIRE press after its 2nd lost life
    dict(per_life=5),  # the game ends on an agent step (reported before the fix too)
    dict(per_life=5, max_frames=11),  # cut in EpisodicLife's no-op (reported before the fix too)
])
def test_every_game_is_reported_even_when_it_ends_in_the_fire_presses(game, fake_ale, monkeypatch):
    reports = _play(monkeypatch, fake_ale, 60, **game)
    ended = fake_ale.ended
    assert len(ended) >= 4  # (2, None): 20 games; (5, 12): 6
    assert [r for _, r, _ in reports] == [5.0 * t for t in ended]  # 5 points per env step, in order
    # every agent step is in one game's length, none twice: at each report the lengths so far add up to the steps
    total = 0
    for step, _, length in reports:
        total += length
        assert total == step
