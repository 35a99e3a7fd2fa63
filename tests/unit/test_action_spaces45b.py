"""The action spaces of tests/unit/test_action_spaces45.py at their edges: a ClipAction anywhere in
CleanRL's wrapper stack or over a half-open Box, check-env's words for a ClipAction env, a Box whose
bounds are float32's or float64's "unbounded" largest value, a MultiBinary of one bit, a MultiBinary
record whose size overflows int64, --debug-checks and Policy's repr naming a MultiBinary as the env
declares it."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.cli_helpers import bad_action_at_call_5, module_written_in
from proxima.bench import random_actions
from proxima.checkpoint import CheckpointError, Policy, space_from_dict
from proxima.config import PPOConfig
from proxima.envs import EnvError
from proxima.envs.checker import check_env
from proxima.envs.spaces import ClippedBox, action_scale_note, bounded, proxima_action_space, spaces_summary
from proxima.trainer import DebugCheckError, train

F32_MAX = float(np.finfo(np.float32).max)
F64_MAX = float(np.finfo(np.float64).max)
OBS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

ENVS = '''
import gymnasium as gym
import numpy as np


class Unit(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 0.0, False, self.t >= 8, {}


class Bits(Unit):
    action_space = gym.spaces.MultiBinary((2, 3))


def clipped_unit():
    return gym.wrappers.ClipAction(Unit())
'''


@pytest.fixture
def envs(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "act45b_envs", ENVS)


class _Env(gym.Env):
    """An env that only declares spaces (the wrappers wrap it)."""

    observation_space = OBS

    def __init__(self, action_space):
        self.action_space = action_space


def as_proxima(env: gym.Env) -> gym.spaces.Space:
    return proxima_action_space(env.action_space, env)


# ------------------------------------------------------------------------------ ClipAction
def test_a_clip_action_deep_in_cleanrls_wrapper_stack_is_found():
    # CleanRL's continuous make_env: RecordEpisodeStatistics under ClipAction, NormalizeObservation and more over it
    env = gym.make("Pendulum-v1")
    env = gym.wrappers.RecordEpisodeStatistics(gym.wrappers.FlattenObservation(env))
    env = gym.wrappers.NormalizeObservation(gym.wrappers.ClipAction(env))
    env = gym.wrappers.NormalizeReward(env, gamma=0.99)
    space = as_proxima(env)
    assert isinstance(space, ClippedBox) and space.inner == gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    assert spaces_summary(env.observation_space, space)["action"].endswith(
        "unclipped (gymnasium.wrappers.ClipAction clips to [-2, 2])")


def test_check_env_of_a_clip_action_env_names_the_box_it_clips_to(envs):
    found = check_env("act45b_envs:clipped_unit", steps=10)
    assert list(found) == []
    (note,) = [n for n in found.notes if n.startswith("action_space")]
    assert note.startswith("action_space Box(0.0, 1.0, (2,), float32) (under gymnasium.wrappers.ClipAction): its range "
                           "[0, 1] (all 2 entries) has 0 as a bound"), note
    assert found.spaces.endswith("; action Box(2,) float32 [-inf, inf] -> Gaussian, 2 dims, unclipped "
                                 "(gymnasium.wrappers.ClipAction clips to [0, 1])"), found.spaces


def test_a_clip_action_over_a_half_open_box_is_read_by_the_box_under_it():
    inner = gym.spaces.Box(np.array([0.0, -np.inf], np.float32), np.array([np.inf, 2.0], np.float32))
    space = as_proxima(gym.wrappers.ClipAction(_Env(inner)))
    assert isinstance(space, ClippedBox) and space.inner == inner
    assert action_scale_note(space) == (
        "action_space Box([  0. -inf], [inf  2.], (2,), float32) (under gymnasium.wrappers.ClipAction): its range entry 0 "
        "[0, inf] has 0 as a bound, and the policy's early actions are centred on 0, so half of them clip to that bound; "
        "ClipAction clips the actions to those bounds and nothing rescales them: shift the actions in the env (or in a "
        "gymnasium.wrappers.TransformAction) so that 0 lies inside the range, away from its bound")
    assert spaces_summary(OBS, space)["action"] == (
        "Box(2,) float32 [-inf, inf] -> Gaussian, 2 dims, unclipped (gymnasium.wrappers.ClipAction clips to "
        "[0, inf] [-inf, 2])")


def test_a_clip_action_over_an_unbounded_box_clips_nothing_and_stays_a_plain_box():
    space = as_proxima(gym.wrappers.ClipAction(_Env(gym.spaces.Box(-np.inf, np.inf, (2,), np.float32))))
    assert not isinstance(space, ClippedBox)
    assert spaces_summary(OBS, space)["action"] == "Box(2,) float32 [-inf, inf] -> Gaussian, 2 dims, unbounded"


# ------------------------------------------------------------------------------ half-open and "unbounded" bounds
def test_a_box_of_one_bound_away_from_0_is_told_to_shift_not_to_rescale():
    assert action_scale_note(gym.spaces.Box(1.0, np.inf, (2,), np.float32)) == (
        "action_space Box(1.0, inf, (2,), float32): 0 lies outside its range [1, inf] (all 2 entries), so the early "
        "actions all clip to one bound and the policy may never learn; Proxima clips Box actions to the bounds but does "
        "not rescale them: shift the actions in the env (or in a gymnasium.wrappers.TransformAction) so that 0 lies "
        "inside the range, away from its bound")


def test_a_half_open_box_reads_as_clipped_where_bounded():
    act = gym.spaces.Box(np.array([0.0, -np.inf], np.float32), np.array([np.inf, 2.0], np.float32))
    assert spaces_summary(OBS, act)["action"] == (
        "Box(2,) float32 [0, inf] [-inf, 2] -> Gaussian, 2 dims, clipped to bounds where bounded")


def test_a_float64_box_of_its_largest_value_reads_as_infinite_without_a_warning():
    act = gym.spaces.Box(np.array([0.0, -F64_MAX]), np.array([F64_MAX, F64_MAX]), dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow in the float32 cast of the bounds would be a RuntimeWarning
        note = action_scale_note(act)
        line = spaces_summary(OBS, act)["action"]
    assert "its range entry 0 [0, inf] has 0 as a bound" in note, note
    assert line == "Box(2,) float64 [0, inf] [-inf, inf] -> Gaussian, 2 dims, clipped to bounds where bounded"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float32s_largest_value_is_no_bound(dtype):
    # as float64's max is: a bound there has an infinite width, RescaleAction of which divides by inf
    act = gym.spaces.Box(-F32_MAX, F32_MAX, (2,), dtype)
    assert not bounded(act).any()
    assert action_scale_note(act) is None
    assert spaces_summary(OBS, act)["action"] == f"Box(2,) {np.dtype(dtype).name} [-inf, inf] -> Gaussian, 2 dims, unbounded"
    just_below = np.nextafter(np.float32(F32_MAX), np.float32(0))
    assert bounded(gym.spaces.Box(-just_below, just_below, (2,), np.float32)).all()


@pytest.mark.parametrize("low, high", [(-F32_MAX, F32_MAX), (-1e38, 3e38)], ids=["float32-max", "width-beyond-float32"])
def test_benchs_random_actions_are_finite_and_spread_over_the_widest_float32_box(low, high):
    torch.manual_seed(0)
    a = random_actions(gym.spaces.Box(low, high, (2,), np.float32), 4, "cpu", count=64)
    assert bool(torch.isfinite(a).all())
    if abs(high) < F32_MAX:  # a bounded Box: the uniform draw stays within the bounds and reaches far into them
        assert float(a.min()) >= np.float32(low) and float(a.max()) <= np.float32(high)
        assert float(a.min()) < -1e37 and float(a.max()) > 2e38


# ------------------------------------------------------------------------------ MultiBinary
def test_a_multibinary_of_one_bit_reads_as_one_categorical():
    assert spaces_summary(OBS, gym.spaces.MultiBinary(1))["action"] == "MultiBinary(1,) -> 1 categorical over 0/1, as int8"


@pytest.mark.parametrize("shape", [[2**31], [2**16, 2**16], [2] * 64, [2**21] * 3, [2**30], [2**28 - 1], [2**20 + 1]],
                         ids=["2^31", "2^16x2^16", "2x64", "2^21x3", "2^30", "2^28-1", "2^20+1"])
def test_a_multibinary_record_whose_size_overflows_or_is_too_big_is_refused(shape):
    # np.prod wrapped [2] * 64 to 0 and [2**21] * 3 to -2**63, both accepted; [2**30] built an 8 GiB index space
    with pytest.raises(CheckpointError) as info:
        space_from_dict({"type": "MultiBinary", "shape": shape}, "F.pt: spaces.action")
    shown = repr(shape) if len(repr(shape)) <= 60 else repr(shape)[:57] + "..."  # the record, cut to 60 characters
    assert str(info.value) == (f"F.pt: spaces.action: not a recorded space ('shape' is {shown}, not a list of sizes >= 1 "
                               f"of at most 1,048,576 bits in all)")


def test_a_box_record_whose_declared_shape_wraps_int64_is_refused_for_that_field():
    record = {"type": "Box", "shape": [4], "low": torch.zeros(4, dtype=torch.float64),
              "high": torch.ones(4, dtype=torch.float64), "dtype": "float32", "declared_shape": [2**62 + 1, 4]}
    with pytest.raises(CheckpointError) as info:  # (2**62 + 1) * 4 wraps to 4 in int64
        space_from_dict(record, "F.pt: spaces.observation")
    assert str(info.value) == (f"F.pt: spaces.observation: not a recorded space ('declared_shape' is [{2**62 + 1}, 4], "
                               f"not the shape of 4 values)")


def test_debug_checks_name_the_multibinary_the_env_declares(envs, tmp_path, monkeypatch):
    bad_action_at_call_5(monkeypatch, 2)  # env 3's bits all 2
    cfg = PPOConfig(env_id="act45b_envs:Bits", num_envs=4, num_steps=16, total_timesteps=64, num_minibatches=2,
                    update_epochs=1, progress=False, eval_episodes=0, threads=1, debug_checks=True, backend="gymnasium")
    with pytest.raises(DebugCheckError) as info:
        train(cfg, run_dir=tmp_path / "run", quiet=True, evaluate_at_end=False)
    assert isinstance(info.value, EnvError)  # the CLI's exit-2 family
    assert str(info.value).startswith(
        "--debug-checks: action [2, 2, 2, 2, 2, 2] of env 3 at global step 20 (env step 5) is outside the action space "
        "MultiBinary((2, 3)) (its 6 bits flat, each 0 or 1);"), str(info.value)


@pytest.mark.parametrize("space, shown", [(gym.spaces.MultiBinary((2, 3)), "MultiBinary((2, 3))"),
                                          (gym.spaces.MultiBinary(6), "MultiBinary(6)"),
                                          (gym.spaces.MultiDiscrete([2, 3]), "MultiDiscrete([2, 3])")])
def test_a_policys_repr_shows_its_action_space_shape(space, shown):
    policy = Policy.__new__(Policy)
    policy.__dict__.update(action_space=space, env_id="X", device="cpu", global_step=64, config={"encoder": "mlp"})
    assert repr(policy) == f"Policy(env_id='X', actions={shown}, encoder='mlp', device='cpu', step=64)"


def test_a_multibinary_record_of_the_most_bits_an_env_may_declare_is_read():
    from proxima.envs.spaces import MAX_MULTIBINARY_BITS

    space = space_from_dict({"type": "MultiBinary", "shape": [MAX_MULTIBINARY_BITS]}, "F.pt")
    assert isinstance(space, gym.spaces.MultiBinary) and space.shape == (2**20,)


def test_an_env_declaring_more_multibinary_bits_than_proxima_takes_is_refused_in_one_line():
    from proxima.envs.base import EnvError
    from proxima.envs.spaces import check_action_space

    check_action_space(gym.spaces.MultiBinary([1024, 1024]), "E")  # 2**20 bits: taken
    with pytest.raises(EnvError) as info:
        check_action_space(gym.spaces.MultiBinary([1024, 1025]), "E")
    space = gym.spaces.MultiBinary([1024, 1025])
    assert str(info.value) == (f"env 'E': action space {space} has 1,049,600 bits, more than the 1,048,576 "
                               "Proxima takes (one 2-way categorical per bit)")
