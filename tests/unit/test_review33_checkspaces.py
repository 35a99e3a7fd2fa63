"""Review 33, check-env and spaces: the checks and conversions no other test pinned down. A NaN the
env returns the same way every time is no determinism fault; an env that refills its own buffer
in place is still caught resetting at random; --steps stops at MAX_CHECK_STEPS exactly; an empty
observation Box or Dict and a Tuple action space are refused in one line (a Box action bound infinite
on one side only, once refused too, is taken and clipped on its finite side); pixel advice holds every entry's bounds; an empty Tuple gets no
FlattenObservation fix; a value beyond float32 names its env, entry and key."""

from __future__ import annotations

import argparse
import textwrap

import gymnasium as gym
import numpy as np
import pytest

from proxima.envs import EnvError, checker
from proxima.envs.checker import _difference, check_env
from proxima.envs.spaces import box_range, check_action_space, image_note, obs_layout, pack_numpy, space_actions

ENVS = textwrap.dedent('''
    import gymnasium as gym
    import numpy as np
    from gymnasium import spaces


    class _Base(gym.Env):
        def __init__(self):
            self.observation_space = spaces.Box(-1, 1, (2,), np.float32)
            self.action_space = spaces.Discrete(2)

        def obs(self):
            return np.zeros(2, np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self.obs(), {}

        def step(self, action):
            self.t += 1
            return self.obs(), 0.0, False, self.t >= 5, {}


    class SameNaN(_Base):
        """The same NaN at every reset and step: not finite, but deterministic."""

        def obs(self):
            return np.array([np.nan, 0.0], np.float32)


    class RefilledBuffer(_Base):
        """Hands back its own buffer, refilled in place from unseeded randomness at each reset."""

        def __init__(self):
            super().__init__()
            self.observation_space = spaces.Box(0, 1, (4,), np.float32)
            self.buf = np.zeros(4, np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            self.buf[:] = np.random.default_rng().random(4)
            return self.buf, {}

        def step(self, action):
            self.t += 1
            return self.buf, 0.0, False, self.t >= 5, {}


    class EmptyObs(_Base):
        def __init__(self):
            super().__init__()
            self.observation_space = spaces.Box(-1.0, 1.0, (0,), np.float32)

        def obs(self):
            return np.zeros(0, np.float32)


    class EmptyDict(_Base):
        def __init__(self):
            super().__init__()
            self.observation_space = spaces.Dict({})

        def obs(self):
            return {}


    class TupleAction(_Base):
        def __init__(self):
            super().__init__()
            self.action_space = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))


    class HalfOpenAction(_Base):
        def __init__(self):
            super().__init__()
            self.action_space = spaces.Box(np.zeros(2, np.float32), np.array([1.0, np.inf], np.float32))
''')


@pytest.fixture
def envs(tmp_path, monkeypatch):
    (tmp_path / "rev33_envs.py").write_text(ENVS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def checks(violations) -> dict:
    return {v.check: v.actual for v in violations}


# ------------------------------------------------------------------ 1. check-env's determinism checks
def test_a_nan_returned_the_same_way_each_time_is_not_a_determinism_fault(envs):
    # NaN != NaN: compared without equal_nan, a deterministic env was also told its reset is random
    found = checks(check_env("rev33_envs:SameNaN", steps=5))
    assert found.get("obs finite", "").startswith("obs[0] = nan at reset(seed=0)")
    assert "reset determinism" not in found and "step determinism" not in found


def test_an_env_that_refills_its_own_buffer_at_random_fails_reset_determinism(envs):
    # both resets return the same array object: unless the first is copied, it compares equal to itself
    found = checks(check_env("rev33_envs:RefilledBuffer", steps=0))
    assert list(found) == ["reset determinism"]
    assert found["reset determinism"].startswith("first [")


def test_a_numeric_obs_then_a_non_numeric_one_is_described_by_type():
    assert _difference(np.zeros(2), None) == "first ndarray of shape (2,) dtype float64, then NoneType None"
    assert _difference(None, np.zeros(2)) == "first NoneType None, then ndarray of shape (2,) dtype float64"


# ------------------------------------------------------------------ 2. --steps bound
def test_check_env_takes_max_check_steps_and_refuses_one_more(monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(checker, "check_env", lambda target, steps, **kw: ran.append(steps) or [])

    def run(steps):
        return checker.run(argparse.Namespace(target="CartPole-v1", steps=steps, seed=0, env_kwargs=None))

    assert run(checker.MAX_CHECK_STEPS + 1) == 2
    assert capsys.readouterr().err == ("proxima check-env: error: --steps 1000001: must be at most 1,000,000 "
                                       "(random steps of the check)\n")
    assert ran == []
    assert run(checker.MAX_CHECK_STEPS) == 0
    assert ran == [1_000_000]


# ------------------------------------------------------------------ 3. spaces refused in one line
def test_an_empty_observation_box_is_refused_in_one_line(envs):
    with pytest.raises(EnvError, match=r"^env 'X': observation space Box\(\[\], \[\], \(0,\), float32\) is empty "
                                       r"\(shape \(0,\)\); declare one value or more$"):
        obs_layout(gym.spaces.Box(-1.0, 1.0, (0,), np.float32), "X")
    assert checks(check_env("rev33_envs:EmptyObs", steps=0)).get("spaces supported") == (
        "observation space Box([], [], (0,), float32) is empty (shape (0,)); declare one value or more")


@pytest.mark.parametrize("low, high, clipped", [([0.0, 0.0], [1.0, np.inf], [[1.0, 5.0], [0.0, 0.0]]),
                                                ([-np.inf, 0.0], [1.0, 1.0], [[1.0, 1.0], [-5.0, 0.0]])],
                         ids=["high-infinite", "low-infinite"])
def test_a_box_action_bound_infinite_on_one_side_is_taken_and_clips_only_its_finite_sides(low, high, clipped):
    # was refused ("Box action space needs finite bounds"): the clip to an infinite bound is a no-op
    space = gym.spaces.Box(np.array(low, np.float32), np.array(high, np.float32))
    check_action_space(space, "X")
    actions = np.array([[5.0, 5.0], [-5.0, -5.0]], np.float32)
    assert space_actions(actions, space, 2).tolist() == clipped


def test_check_env_passes_a_half_open_box_action_space(envs):
    assert list(check_env("rev33_envs:HalfOpenAction", steps=5)) == []


def test_a_tuple_action_space_is_refused_in_one_line(envs):
    # accepted here, train met it as a ValueError traceback from the Agent, not a one-line refusal
    line = ("not supported yet: action space Tuple(Discrete(2), Discrete(3)) (Discrete, MultiDiscrete, MultiBinary, Box); "
            "a Tuple of Discrete parts is MultiDiscrete([2, 3]) (one categorical per part): declare that and read action[i] "
            "as part i in step(), or put def multi(**kw): return gymnasium.wrappers.TransformAction({env}, tuple, "
            "gymnasium.spaces.MultiDiscrete([2, 3])) in a module of yours and use MODULE:multi as the env")
    with pytest.raises(EnvError) as e:
        check_action_space(gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3))), "X")
    assert str(e.value) == f"env 'X': {line.format(env='YourEnv(**kw)')}"
    assert (checks(check_env("rev33_envs:TupleAction", steps=0)).get("spaces supported")
            == line.format(env="rev33_envs.TupleAction(**kw)"))


# ------------------------------------------------------------------ 4. advice on pixels and refused spaces
def test_pixel_advice_takes_the_smallest_low_and_the_largest_high_of_per_entry_bounds():
    # a frame stack whose frames declare different bounds: the suggested Box has to hold every one of them
    # (2-channel frames: a stack of 1, 3 or 4-channel frames is an image since review 34)
    low, high = np.zeros((4, 84, 84, 2), np.uint8), np.full((4, 84, 84, 2), 255, np.uint8)
    low[1], high[0] = 10, 200
    space = gym.spaces.Box(low, high, dtype=np.uint8)
    assert box_range(space) == (0.0, 255.0)
    how, fix = image_note(space)
    assert how.endswith("flattened and unscaled (0..255)")
    assert fix.endswith("merge the frame stack into channels: declare Box(0, 255, (84, 84, 8), np.uint8) and return "
                        "obs.transpose(1, 2, 0, 3).reshape(84, 84, 8)")


def test_an_empty_tuple_observation_is_refused_without_a_flatten_fix():
    # gymnasium.spaces.flatten_space raises ValueError on it: offering that fix made the refusal a traceback
    with pytest.raises(EnvError, match=r"^env 'X': not supported: Tuple observation space Tuple\(\) \(supported: Box, "
                                       r"images as uint8 Box, and Dict of Box\)$"):
        obs_layout(gym.spaces.Tuple(()), "X")


def test_an_empty_dict_observation_is_refused_in_one_line(envs):
    with pytest.raises(EnvError, match=r"^env 'X': Dict observation space has no keys$"):
        obs_layout(gym.spaces.Dict({}), "X")
    assert checks(check_env("rev33_envs:EmptyDict", steps=0)).get("spaces supported") == "Dict observation space has no keys"


# ------------------------------------------------------------------ 5. an observation beyond float32
@pytest.mark.parametrize("dict_obs", [False, True], ids=["box", "dict"])
def test_an_observation_beyond_float32_names_its_env_row_entry_and_key(dict_obs):
    # env 1, entry 2 of a (2, 3) batch: row and column told apart (swapped, they index past the batch)
    box = gym.spaces.Box(-np.inf, np.inf, (3,), np.float64)
    pos = np.zeros((2, 3))
    pos[1, 2] = -1e300
    if dict_obs:
        layout = obs_layout(gym.spaces.Dict({"cam": gym.spaces.Box(0, 255, (2,), np.uint8), "pos": box}))
        obs, at = {"cam": np.zeros((2, 2), np.uint8), "pos": pos}, " at key 'pos'"
    else:
        layout, obs, at = obs_layout(box), pos, ""
    with pytest.raises(EnvError) as e:
        pack_numpy(obs, layout, 2)
    assert str(e.value) == (f"observation value -1e+300{at} (entry 2) of env 1 is beyond float32's range (+-3.4e+38), "
                            "the precision Proxima trains in; scale it down in the env")
