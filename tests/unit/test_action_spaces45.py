"""The action spaces users of CleanRL and SB3 bring, once refused: a Box with infinite bounds (fully, on
one side, or gymnasium.wrappers.ClipAction's Box(-inf, inf) over a bounded env), whose clip is a
no-op on an infinite side, and a MultiBinary, which the agent acts in as MultiDiscrete([2] * n)
while the env gets int8 0/1 arrays of its own shape. The CLI's train, eval and resume of them:
tests/integration/test_action_spaces45.py."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima import ppo
from proxima.agent import Agent, action_dtype, action_shape
from proxima.bench import random_actions
from proxima.checkpoint import CheckpointError, check_finite_tensor, space_from_dict, space_to_dict
from proxima.envs import make_env
from proxima.envs.spaces import (ClippedBox, action_scale_note, bounded, check_action_space, index_space,
                                 proxima_action_space, space_actions, spaces_summary)
from proxima.rollout import Rollout
from tests.cli_helpers import module_written_in

F64_MAX = np.finfo(np.float64).max

ENVS = '''
import gymnasium as gym
import numpy as np

#: every action a Recorder env's step() got, in order, across its instances (a sync vector env's are in-process)
RECEIVED = []


class Recorder(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        RECEIVED.append(np.array(action, copy=True))
        return np.zeros(2, np.float32), 0.0, False, False, {}


class Bits(Recorder):
    action_space = gym.spaces.MultiBinary((2, 3))


class Unit(Recorder):
    action_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)


def clipped_unit():
    return gym.wrappers.ClipAction(Unit())
'''


@pytest.fixture
def envs(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "act45_envs", ENVS)


def rollout_received(env_id: str, logstd: float = 0.0, steps: int = 8, num_envs: int = 2):
    """(the rollout's actions (T, N, ...), what the envs' step() got (T, N, *space shape)) of one
    collect_rollout of a fresh Agent on ``env_id`` whose Normal log-std is ``logstd``."""
    import act45_envs

    act45_envs.RECEIVED.clear()
    env = make_env(env_id, num_envs, backend="gymnasium", seed=0)
    try:
        torch.manual_seed(0)
        space = env.single_action_space
        agent = Agent(env.single_observation_space, space, (8,))
        if hasattr(agent, "actor_logstd"):
            agent.actor_logstd.data.fill_(logstd)
        ro = Rollout(steps, num_envs, env.obs_shape, action_shape(space), action_dtype(space), "cpu")
        ppo.collect_rollout(env, agent.policy_step, ro, env.reset())
    finally:
        env.close()
    got = np.stack(act45_envs.RECEIVED).reshape(steps, num_envs, *np.shape(act45_envs.RECEIVED[0]))
    return ro.actions.numpy(), got


# ------------------------------------------------------------------------------ unbounded Box
def test_an_unbounded_box_env_gets_exactly_the_policys_unclipped_sample(envs):
    actions, got = rollout_received("act45_envs:Recorder", logstd=2.0)  # std e^2 = 7.4: many samples beyond +-3
    assert got.dtype == np.float32 and got.shape == (8, 2, 3)
    np.testing.assert_array_equal(got, actions)
    assert np.abs(got).max() > 3.0


def test_a_clip_action_env_gets_the_sample_and_its_clipaction_clips_it(envs):
    env = make_env("act45_envs:clipped_unit", 1, backend="gymnasium")
    try:
        space = env.single_action_space
        assert isinstance(space, ClippedBox) and space == gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        assert space.inner == gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    finally:
        env.close()
    actions, got = rollout_received("act45_envs:clipped_unit", logstd=1.0)
    np.testing.assert_array_equal(got, np.clip(actions, 0.0, 1.0))  # the ClipAction's clip, not Proxima's
    assert (actions < 0).any() and (actions > 1).any()


@pytest.mark.parametrize("space", [gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
                                   gym.spaces.Box(-F64_MAX, F64_MAX, (3,), np.float64)], ids=["inf", "float64-max"])
def test_a_truly_unbounded_box_is_taken_with_no_note_and_read_as_unbounded(space):
    check_action_space(space, "X")
    assert not bounded(space).any()
    assert action_scale_note(space) is None
    line = spaces_summary(gym.spaces.Box(-1, 1, (2,), np.float32), space)["action"]
    assert line.endswith("-> Gaussian, 3 dims, unbounded"), line
    a = np.array([[1e6, -1e6, 3.5]], np.float32)
    assert space_actions(a, space, 1).tolist() == [[1e6, -1e6, 3.5]]


def test_a_clip_action_note_judges_the_bounds_under_it():
    space = proxima_action_space(gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
                                 gym.wrappers.ClipAction(_Env(gym.spaces.Box(0.0, 1.0, (2,), np.float32))))
    assert action_scale_note(space) == (
        "action_space Box(0.0, 1.0, (2,), float32) (under gymnasium.wrappers.ClipAction): its range [0, 1] (all 2 "
        "entries) has 0 as a bound, and the policy's early actions are centred on 0, so half of them clip to that "
        "bound; ClipAction clips the actions to those bounds and nothing rescales them: wrap the env in "
        "gymnasium.wrappers.RescaleAction(env, np.float32(-1), np.float32(1)) under its gymnasium.wrappers.ClipAction")
    # ClipAction over Pendulum's [-2, 2]: on the policy's scale, no note; the run's line names the clip
    pendulum = gym.wrappers.ClipAction(gym.make("Pendulum-v1"))
    space = proxima_action_space(pendulum.action_space, pendulum)
    assert action_scale_note(space) is None
    assert spaces_summary(pendulum.observation_space, space)["action"] == (
        "Box(1,) float32 [-inf, inf] -> Gaussian, 1 dim, unclipped (gymnasium.wrappers.ClipAction clips to [-2, 2])")


def test_a_half_open_box_note_asks_for_a_shift_not_a_rescale():
    space = gym.spaces.Box(np.array([0.0, -np.inf], np.float32), np.array([np.inf, np.inf], np.float32))
    assert action_scale_note(space) == (
        "action_space Box([  0. -inf], inf, (2,), float32): its range entry 0 [0, inf] has 0 as a bound, and the "
        "policy's early actions are centred on 0, so half of them clip to that bound; Proxima clips Box actions to the "
        "bounds but does not rescale them: shift the actions in the env (or in a gymnasium.wrappers.TransformAction) so "
        "that 0 lies inside the range, away from its bound")


def test_bench_draws_finite_random_actions_within_partly_infinite_bounds():
    space = gym.spaces.Box(np.array([-1.0, 0.0, -np.inf, -F64_MAX]), np.array([1.0, np.inf, 5.0, F64_MAX]), dtype=np.float64)
    a = random_actions(space, 4, "cpu", count=256).reshape(-1, 4)
    assert bool(torch.isfinite(a).all())
    assert bool((a[:, 0].abs() <= 1).all()) and bool((a[:, 1] >= 0).all()) and bool((a[:, 2] <= 5).all())
    assert float(a[:, 1].max()) > 1.0 and float(a[:, 3].min()) < 0 < float(a[:, 3].max())  # not stuck on a bound


@pytest.mark.parametrize("low, high", [(-np.inf, np.inf), ([0.0, -np.inf], [np.inf, 2.0]), (-F64_MAX, F64_MAX)],
                         ids=["inf", "half-open", "float64-max"])
def test_infinite_bounds_round_trip_through_a_checkpoints_space_record(low, high):
    dtype = np.float64 if np.isscalar(low) and abs(low) == F64_MAX else np.float32
    space = gym.spaces.Box(np.broadcast_to(np.asarray(low, dtype), (2,)), np.broadcast_to(np.asarray(high, dtype), (2,)),
                           dtype=dtype)
    back = space_from_dict(space_to_dict(space))
    assert back == space and np.array_equal(back.low, space.low) and np.array_equal(back.high, space.high)


def test_a_non_finite_weight_in_a_checkpoint_is_still_refused():
    for bad in (float("nan"), float("inf")):
        with pytest.raises(CheckpointError, match=r"^F\.pt: agent\.actor_logstd holds 1 non-finite value\(s\) \(NaN or "
                                                  r"inf\) of 2; the checkpoint is damaged or was edited"):
            check_finite_tensor("F.pt", "agent.actor_logstd", torch.tensor([0.0, bad]))


# ------------------------------------------------------------------------------ MultiBinary
def test_a_multibinary_env_gets_int8_arrays_of_its_own_shape_holding_the_agents_bits(envs):
    actions, got = rollout_received("act45_envs:Bits")
    assert actions.dtype == np.int64 and actions.shape == (8, 2, 6)  # the agent's: MultiDiscrete([2] * 6)
    assert got.dtype == np.int8 and got.shape == (8, 2, 2, 3)
    np.testing.assert_array_equal(got.reshape(8, 2, 6), actions)
    assert set(np.unique(got)) == {0, 1}


def test_a_multibinary_is_the_agents_multidiscrete_of_2s_and_reads_so():
    space = gym.spaces.MultiBinary((2, 3))
    check_action_space(space, "X")
    assert index_space(space) == gym.spaces.MultiDiscrete([2] * 6)
    assert action_shape(space) == (6,) and action_dtype(space) == torch.int64
    agent = Agent(gym.spaces.Box(-1, 1, (2,), np.float32), space, (8,))
    assert agent.kind == "multidiscrete" and agent.nvec == [2] * 6
    assert spaces_summary(gym.spaces.Box(-1, 1, (2,), np.float32), space)["action"] == (
        "MultiBinary(2, 3) -> 6 categoricals over 0/1, as int8")
    out = space_actions(np.array([[1, 0, 1, 0, 0, 1]]), space, 1)
    assert out.dtype == np.int8 and out.tolist() == [[[1, 0, 1], [0, 0, 1]]]
    draws = random_actions(space, 3, "cpu", count=4)
    assert tuple(draws.shape) == (4, 3, 6) and set(draws.unique().tolist()) <= {0, 1}


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_a_multibinary_round_trips_through_a_checkpoints_space_record(shape):
    space = gym.spaces.MultiBinary(list(shape))
    assert space_to_dict(space) == {"type": "MultiBinary", "shape": list(shape)}
    back = space_from_dict(space_to_dict(space))
    assert isinstance(back, gym.spaces.MultiBinary) and back.shape == shape and back.dtype == np.int8


@pytest.mark.parametrize("shape", [None, [], [0], [2, -1], ["3"], [2**31], [2**16, 2**16], [2] * 64, [2**21] * 3])
def test_a_damaged_multibinary_record_is_one_line(shape):
    # [2] * 64 and [2**21] * 3 overflow int64 (np.prod made them 0 and -2**63 bits): refused as too many
    with pytest.raises(CheckpointError, match=r"^F\.pt: spaces\.action: not a recorded space \('shape' is .*, not a "
                                              r"list of sizes >= 1( of at most 1,048,576 bits in all)?\)$"):
        space_from_dict({"type": "MultiBinary", "shape": shape}, "F.pt: spaces.action")


class _Env(gym.Env):
    """An env that only declares spaces (the note's ClipAction wraps it)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, action_space):
        self.action_space = action_space
