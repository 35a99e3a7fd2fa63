"""The BatchedEnv contract for the torch-native classic-control envs, on every available device."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from proxima.envs import EnvError, NATIVE_ENVS, make_env
from proxima.envs.classic import Pendulum

ENV_IDS = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"]
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")])]


def random_actions(env, gen: torch.Generator) -> torch.Tensor:
    """A batch of valid actions on the env's device, drawn from a CPU generator (reproducible)."""
    space = env.single_action_space
    n = env.num_envs
    if hasattr(space, "n"):
        a = torch.randint(int(space.n), (n,), generator=gen)
    else:
        low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        a = low + (high - low) * torch.rand((n, *space.shape), generator=gen)
    return a.to(env.device)


def rollout(env, steps: int, action_seed: int = 0):
    gen = torch.Generator().manual_seed(action_seed)
    out = []
    for _ in range(steps):
        obs, rew, term, trunc, info = env.step(random_actions(env, gen))
        out.append((obs, rew, term, trunc, info["final_obs"], info["episode_return"], info["episode_length"]))
    return out


def assert_same(a, b):
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x, y, strict=True):
            assert torch.equal(u, v)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_shapes_dtypes_devices(env_id, device):
    n = 5
    env = NATIVE_ENVS[env_id](n, device=device, seed=0)
    dev = torch.device(device)
    obs = env.reset()
    assert obs.shape == (n, *env.obs_shape) and obs.dtype == torch.float32 and obs.device.type == dev.type
    gen = torch.Generator().manual_seed(0)
    obs, rew, term, trunc, info = env.step(random_actions(env, gen))
    assert obs.shape == (n, *env.obs_shape) and obs.dtype == torch.float32
    assert rew.shape == (n,) and rew.dtype == torch.float32
    assert term.shape == (n,) and term.dtype == torch.bool
    assert trunc.shape == (n,) and trunc.dtype == torch.bool
    assert info["final_obs"].shape == obs.shape and info["final_obs"].dtype == torch.float32
    assert info["episode_return"].shape == (n,) and info["episode_return"].dtype == torch.float32
    assert info["episode_length"].shape == (n,) and not info["episode_length"].is_floating_point()
    for t in (obs, rew, term, trunc, info["final_obs"], info["episode_return"], info["episode_length"]):
        assert t.device.type == dev.type
    # float64 state still gives the float32 contract
    env64 = NATIVE_ENVS[env_id](n, device=device, dtype=torch.float64)
    assert env64.reset().dtype == torch.float32
    assert env64.step(random_actions(env64, gen))[1].dtype == torch.float32
    # Box envs also take (N,) actions
    if not hasattr(env.single_action_space, "n"):
        assert env.step(random_actions(env, gen).view(n))[0].shape == (n, *env.obs_shape)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_returned_observations_do_not_alias_the_state(env_id):
    """A caller that edits obs in place (e.g. a normalizer) must not change the env."""
    env = NATIVE_ENVS[env_id](2, seed=0)
    obs = env.reset()
    before = env.state_dict()
    obs.add_(1.0)
    gen = torch.Generator().manual_seed(0)
    obs, _, _, _, info = env.step(random_actions(env, gen))
    obs.mul_(2.0)
    info["final_obs"].sub_(3.0)
    other = NATIVE_ENVS[env_id](2, seed=5)
    other.load_state_dict(before)
    gen = torch.Generator().manual_seed(0)
    other.step(random_actions(other, gen))
    assert torch.equal(env._observe(), other._observe())


def test_bad_dtype_is_an_env_error():
    with pytest.raises(EnvError, match="dtype"):
        Pendulum(2, dtype=torch.float16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_step_autoreset_and_episode_stats(env_id, device):
    """Run past the time limit: every done row restarts in the same step, with its stats in info."""
    n = 4
    env = NATIVE_ENVS[env_id](n, device=device, seed=1)
    space = env.single_observation_space
    low = torch.as_tensor(space.low, device=env.device)
    high = torch.as_tensor(space.high, device=env.device)
    obs = env.reset()
    gen = torch.Generator().manual_seed(1)
    ret = torch.zeros(n, dtype=torch.float64, device=env.device)
    length = torch.zeros(n, dtype=torch.int64, device=env.device)
    dones = 0
    for _ in range(env.max_episode_steps + 2):
        before = env.state_dict()
        action = random_actions(env, gen)
        obs, rew, term, trunc, info = env.step(action)
        done = term | trunc
        assert not bool((term & trunc).any())
        ret += rew.double()
        length += 1
        # final_obs is the observation the dynamics reached from the state before the step
        shadow = NATIVE_ENVS[env_id](n, device=device)
        shadow.load_state_dict(before)
        shadow._dynamics(action)
        assert torch.equal(info["final_obs"], shadow._observe())
        # unfinished rows: obs == final_obs; finished rows: obs is the fresh state's observation
        assert torch.equal(obs[~done], info["final_obs"][~done])
        assert torch.equal(obs, env._observe())
        if bool(done.any()):
            dones += int(done.sum())
            assert bool((env.elapsed[done] == 0).all()) and bool((env.ep_return[done] == 0).all())
            assert not torch.equal(obs[done], info["final_obs"][done])
        # truncation exactly at the time limit, never before
        assert torch.equal(trunc, (length >= env.max_episode_steps) & ~term)
        # episode stats only where done
        zeros = torch.zeros_like(ret)
        torch.testing.assert_close(info["episode_return"].double(), torch.where(done, ret, zeros), rtol=1e-5, atol=1e-3)
        assert torch.equal(info["episode_length"], torch.where(done, length, torch.zeros_like(length)))
        ret = torch.where(done, zeros, ret)
        length = torch.where(done, torch.zeros_like(length), length)
        # observations stay within the observation space
        assert bool(((obs >= low - 1e-6) & (obs <= high + 1e-6)).all()), obs
    assert dones >= n  # everyone finished at least once (the time limit guarantees it)


@pytest.mark.parametrize("device", DEVICES)
def test_truncation_at_time_limit(device):
    """Pendulum never terminates: truncated (not terminated) exactly at step 200, then restarts."""
    n = 3
    env = Pendulum(n, device=device, seed=2)
    env.reset()
    action = torch.zeros(n, 1, device=env.device)
    for k in range(1, env.max_episode_steps + 1):
        _, rew, term, trunc, info = env.step(action)
        assert not bool(term.any())
        if k < env.max_episode_steps:
            assert not bool(trunc.any()), k
            assert bool((info["episode_length"] == 0).all())
        else:
            assert bool(trunc.all())
            assert bool((info["episode_length"] == env.max_episode_steps).all())
            assert bool((info["episode_return"] < 0).all())
    assert bool((env.elapsed == 0).all())
    _, _, term, trunc, _ = env.step(action)
    assert not bool((term | trunc).any())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_seeding(env_id, device):
    a = NATIVE_ENVS[env_id](4, device=device, seed=11)
    b = NATIVE_ENVS[env_id](4, device=device, seed=11)
    c = NATIVE_ENVS[env_id](4, device=device, seed=12)
    oa, ob, oc = a.reset(), b.reset(), c.reset()
    assert torch.equal(oa, ob) and not torch.equal(oa, oc)
    assert_same(rollout(a, 60), rollout(b, 60))
    # reset(seed=...) reseeds
    assert torch.equal(a.reset(seed=5), c.reset(seed=5))
    assert_same(rollout(a, 30, action_seed=3), rollout(c, 30, action_seed=3))
    assert not torch.equal(a.reset(seed=5), a.reset(seed=6))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_state_dict_round_trip_is_bit_identical(env_id, device):
    """Save near the end of the episodes, so the continuation includes autoresets (generator draws)."""
    env = NATIVE_ENVS[env_id](3, device=device, seed=4)
    env.reset()
    gen = torch.Generator().manual_seed(9)
    for _ in range(env.max_episode_steps - 15):
        env.step(random_actions(env, gen))
    buf = io.BytesIO()
    torch.save(env.state_dict(), buf)  # as a checkpoint stores it
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    expected = rollout(env, 40, action_seed=21)
    assert any(bool((x[2] | x[3]).any()) for x in expected)
    other = NATIVE_ENVS[env_id](3, device=device, seed=999)
    other.reset()
    other.load_state_dict(state)
    assert_same(rollout(other, 40, action_seed=21), expected)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_make_env_native(env_id):
    env = make_env(env_id, 3, backend="native", seed=0)
    assert isinstance(env, NATIVE_ENVS[env_id]) and env.backend == "native"
    assert env.num_envs == 3 and env.env_id == env_id and env.device == torch.device("cpu")
    assert env.reset().shape == (3, *env.obs_shape)
    assert isinstance(make_env(env_id, 2), NATIVE_ENVS[env_id])  # auto prefers native


def test_make_env_native_unknown_is_an_env_error():
    with pytest.raises(EnvError, match="no native env"):
        make_env("LunarLander-v3", 2, backend="native")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_render(env_id, device):
    env = NATIVE_ENVS[env_id](2, device=device, seed=3)
    with pytest.raises(EnvError, match="reset"):
        env.render()
    env.reset()
    frame = env.render()
    assert isinstance(frame, np.ndarray) and frame.dtype == np.uint8
    assert frame.ndim == 3 and frame.shape[2] == 3 and frame.shape[0] >= 100 and frame.shape[1] >= 100
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) > 1  # something is drawn
    # a different state draws a different frame (both for another row and after stepping)
    assert not np.array_equal(env.render(1), frame)
    gen = torch.Generator().manual_seed(0)
    for _ in range(10):
        env.step(random_actions(env, gen))
    assert not np.array_equal(env.render(0), frame)
    assert env.render(0).shape == frame.shape
    with pytest.raises(IndexError):
        env.render(2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_and_step_make_no_host_sync(env_id, device):
    from proxima import debug
    env = NATIVE_ENVS[env_id](4, device=device, seed=0)
    gen = torch.Generator().manual_seed(0)
    actions = [random_actions(env, gen) for _ in range(20)]
    env.reset()
    env.step(actions[0])  # warm-up outside the guard
    with debug.forbid_host_sync(device):
        env.reset()
        for a in actions:
            env.step(a)
