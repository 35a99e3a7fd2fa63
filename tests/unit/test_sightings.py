"""Sightings: what deep code reports while a caller watches (train --dry-run's encoder and action range)."""
import pytest

from proxima.sightings import Sightings


def test_nested_watches_each_see_reports_made_while_open_and_close_on_error():
    s = Sightings()
    s.report("before")  # nobody watching: dropped
    with s.watch() as outer:
        s.report(1)
        with pytest.raises(RuntimeError):
            with s.watch() as inner:
                s.report(2)
                raise RuntimeError("the env failed")
        s.report(3)
    s.report("after")
    assert outer == [1, 2, 3]
    assert inner == [2]
    assert s._open == []  # the failed watch was closed, so later reports do not pile up anywhere


def test_dry_run_sources_report_through_sightings():
    from proxima import nets
    from proxima.envs import gym_adapter
    from proxima.envs.spaces import obs_layout
    import gymnasium as gym
    import numpy as np

    layout = obs_layout(gym.spaces.Box(-1, 1, (4,), np.float32), "X")
    with nets.encoders_resolved() as seen:
        nets.resolve_encoder("auto", layout)
    assert seen == [("mlp", layout)]
    env = None
    with gym_adapter.action_spaces_built() as spaces:
        env = gym_adapter.GymnasiumEnv("Pendulum-v1", 1, seed=0)
    env.close()
    assert len(spaces) == 1 and spaces[0].shape == (1,) and float(spaces[0].high[0]) == 2.0
