"""Mutation-testing survivors of review 47's deploy work (commit 3c2ab65): ``policy.as_module()`` acting as
``policy.act`` for the spaces test_deploy47 did not reach (a native env's flat actions, a start other than 1, a
MultiDiscrete start with a 0, a bool Box, a float64 Box whose bounds float32 cannot hold, a declared observation
shape, float64 and uint8 inputs, the sigmoid and numpy tanh modes, outputs that need no grad); the
(obs, info) / list-of-dicts lines for the cases beside the reset pair; ``policy.save`` of a policy without a
file; check_env_spaces naming the env in its start and frame-stack lines and through a wrapper; as_module
without spaces; ``load(..., best=True)`` of a missing path, a "~" path and a run whose --eval-every wrote no
best.pt."""

from __future__ import annotations

import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import proxima
from proxima import PPOConfig, tanh_cpu
from proxima.agent import Agent
from proxima.checkpoint import CheckpointError, EnvMismatchError, Policy
from proxima.envs.spaces import obs_layout, tensor_space

VEC = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
DICT = gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float64),
                        "vel": gym.spaces.Box(-5.0, 5.0, (3,), np.float32)})


def make_policy(obs_space, action_space, backend=None, scale=300.0, path=None) -> Policy:
    """An untrained policy; its last actor layer scaled so that Box means pass the bounds and argmaxes spread."""
    torch.manual_seed(0)
    policy = Policy(Agent(obs_space, action_space), None, {"env_id": "Mut-v0"}, obs_space, action_space, "cpu",
                    path=path, env_backend=backend)
    with torch.no_grad():
        policy.agent.actor[-1].weight.mul_(scale)
    return policy


def rows(n: int = 256, dim: int = 3) -> np.ndarray:
    return np.random.default_rng(47).normal(0, 2, (n, dim)).astype(np.float32)


def module_matches_act(policy, obs: np.ndarray, module_in=None) -> torch.Tensor:
    """The module's actions (and a trace's) for ``obs``, held bit for bit to policy.act's; returned."""
    want = torch.as_tensor(policy.act(obs))
    x = torch.as_tensor(obs) if module_in is None else module_in
    module = policy.as_module()
    got = module(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.equal(got, want)
    traced = torch.jit.trace(module, x[:2])
    assert torch.equal(traced(x), want)
    return got


# --- as_module as policy.act -----------------------------------------------------------------------------------------
def test_a_native_policys_module_gives_its_flat_clamped_actions():
    box = make_policy(VEC, gym.spaces.Box(-0.3, 0.3, (2, 2), np.float64), backend="native")
    got = module_matches_act(box, rows())
    assert got.shape == (256, 4) and got.dtype == torch.float32  # flat float32, as the NativeEnv's _dynamics takes
    assert float(got.max()) == pytest.approx(0.3) and float(got.min()) == pytest.approx(-0.3)  # clamped
    md = make_policy(VEC, gym.spaces.MultiDiscrete([[2, 3], [4, 5]], start=[[1, -1], [0, 2]]), backend="native")
    got = module_matches_act(md, rows())
    assert got.shape == (256, 4) and got.dtype == torch.int64


def test_the_module_adds_any_start_and_a_multidiscrete_start_with_a_zero():
    got = module_matches_act(make_policy(VEC, gym.spaces.Discrete(4, start=-2)), rows())
    assert set(got.tolist()) <= {-2, -1, 0, 1} and int(got.min()) < 0
    got = module_matches_act(make_policy(VEC, gym.spaces.MultiDiscrete([3, 4], start=[2, 0])), rows())
    assert set(got[:, 0].tolist()) <= {2, 3, 4} and set(got[:, 1].tolist()) <= {0, 1, 2, 3}


def test_a_bool_box_module_rounds_as_act():
    got = module_matches_act(make_policy(VEC, gym.spaces.Box(0, 1, (2,), np.bool_)), rows())
    assert got.dtype == torch.bool and got.any() and not got.all()


def test_a_float64_box_whose_bounds_float32_cannot_hold_stays_inside_them():
    space = gym.spaces.Box(-0.3, 0.3, (2,), np.float64)
    got = module_matches_act(make_policy(VEC, space), rows())
    assert got.dtype == torch.float64 and float(got.max()) == 0.3 and float(got.min()) == -0.3
    assert all(space.contains(a) for a in got.numpy())  # float32(0.3) would be outside the env's space


def test_the_module_takes_the_declared_shape_float64_and_uint8_images():
    declared = gym.spaces.Box(-1.0, 1.0, (3, 1), np.float64)
    policy = make_policy(tensor_space(declared, obs_layout(declared)), gym.spaces.Discrete(3))
    obs = rows().reshape(256, 3, 1)
    module_matches_act(policy, obs)  # (B, 3, 1), as the env gives them
    module_matches_act(policy, obs, module_in=torch.as_tensor(obs, dtype=torch.float64))  # cast as act casts
    image = make_policy(gym.spaces.Box(0, 255, (3, 16, 16), np.uint8), gym.spaces.Discrete(4), scale=1.0)
    frames = np.random.default_rng(3).integers(0, 256, (16, 3, 16, 16)).astype(np.uint8)
    module_matches_act(image, frames)
    assert image.as_module().obs_dtype == torch.uint8


def test_the_modules_actions_need_no_grad():
    out = make_policy(VEC, gym.spaces.Box(-10.0, 10.0, (2,), np.float32), scale=1.0).as_module()(torch.as_tensor(rows()))
    assert not out.requires_grad
    assert out.numpy().shape == (256, 2)  # what a deployment does with them


def test_sigmoid_mode_gives_acts_bits(monkeypatch):
    monkeypatch.setattr(tanh_cpu, "MODE", "sigmoid")
    module_matches_act(make_policy(VEC, gym.spaces.Box(-10.0, 10.0, (2,), np.float32), scale=1.0), rows())


def test_numpy_mode_traces_to_a_module_that_follows_its_input(monkeypatch):
    monkeypatch.setattr(tanh_cpu, "MODE", "numpy")
    policy = make_policy(VEC, gym.spaces.Box(-10.0, 10.0, (2,), np.float32), scale=1.0)
    obs = torch.as_tensor(rows())
    traced = torch.jit.trace(policy.as_module(), obs[:2])  # a numpy tanh would be recorded as a constant
    torch.testing.assert_close(traced(obs), policy.act(obs), rtol=1e-6, atol=1e-6)


def test_as_module_without_spaces_is_one_line():
    torch.manual_seed(0)
    policy = Policy(Agent(VEC, gym.spaces.Discrete(2)), None, {"env_id": "Mut-v0"}, None, None, "cpu")
    with pytest.raises(ValueError) as e:
        policy.as_module()
    assert str(e.value).startswith("Policy.as_module: this policy was built without its observation and action spaces")


# --- (obs, info) pairs and containers beside them --------------------------------------------------------------------
def message(policy, obs) -> str:
    with pytest.raises(ValueError) as e:
        policy.act(obs)
    return str(e.value)


PAIR = "Policy.act: obs is a (obs, info) pair as env.reset() returns it: pass obs (obs, info = env.reset())"


def test_container_lines_beside_the_reset_pair():
    d = make_policy(DICT, gym.spaces.Discrete(3))
    one = {"pos": np.zeros(2), "vel": np.ones(3)}
    assert message(d, (one, {"pos": 1.0, "steps": 0})) == PAIR  # an info sharing one key is still an info
    assert message(d, (one, dict(one))) == ("Policy.act: obs is a tuple of 2 dicts: give one dict of stacked arrays "
                                            "({key: (B, ...)}), {k: np.stack([o[k] for o in obs]) for k in obs[0]}")
    assert message(d, [one, 1]) == "Policy.act: obs is a list holding dicts; this policy takes one dict of arrays ({key: (B, ...)})"
    box = make_policy(VEC, gym.spaces.Discrete(2))
    array_line = "Policy.act: obs is a {} holding dicts; this policy takes an array or tensor of observations"
    assert message(box, [np.zeros(3, np.float32), {}]) == array_line.format("list")
    assert message(box, [{}, {}]) == array_line.format("list")
    step = (np.zeros(3, np.float32), 1.0, False, False, {})  # env.step's five
    assert message(box, step) == array_line.format("tuple")
    assert box.act((np.zeros(3, np.float32), np.ones(3, np.float32))).shape == (2,)  # a tuple of arrays is a batch


# --- save, check_env_spaces ------------------------------------------------------------------------------------------
def test_save_of_a_policy_without_a_file_names_the_runs_checkpoints():
    with pytest.raises(AttributeError) as e:
        make_policy(VEC, gym.spaces.Discrete(2)).save("x")
    assert str(e.value).startswith("Policy.save(): a policy is saved by its run as it trains: the run's "
                                   "checkpoints/step_*.pt (or best.pt) is the saved model, and load(path) reloads it")


class _Shifted(gym.Env):
    observation_space = VEC
    action_space = gym.spaces.Discrete(2, start=1)


class _Stack(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (2, 8, 8, 1), np.uint8)
    action_space = gym.spaces.Discrete(2)


class _Other(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
    action_space = gym.spaces.Discrete(2)


def mismatch(policy, env) -> str:
    with pytest.raises(EnvMismatchError) as e:
        policy.check_env_spaces(env)
    return str(e.value)


def test_check_env_spaces_names_the_env_given_in_every_line():
    line = mismatch(make_policy(VEC, gym.spaces.Discrete(2)), _Shifted())
    assert line.startswith("policy: env '_Shifted' takes actions ")
    flat = make_policy(gym.spaces.Box(-np.inf, np.inf, (128,), np.float32), gym.spaces.Discrete(2))
    line = mismatch(flat, _Stack())
    assert line.startswith("policy: trained before Proxima read a uint8 frame stack as an image: its MLP read the "
                           "(2, 8, 8, 1) stack of env '_Stack' as 128 values")
    line = mismatch(make_policy(VEC, gym.spaces.Discrete(2)), gym.wrappers.TimeLimit(_Other(), 10))
    assert line.endswith("; env '_Other' has Box(..., (5,), float32) and Discrete(2)")  # not the wrapper's name


# --- load(..., best=True) --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("deploy_mut47")
    proxima.train(PPOConfig(env_id="CartPole-v1", total_timesteps=128, eval_every=64, eval_episodes=1, num_envs=4,
                            num_steps=16, num_minibatches=2, update_epochs=1, threads=1, progress=False),
                  run_dir=root / "cartpole", quiet=True, evaluate_at_end=False)
    return root / "cartpole"


def test_load_best_of_a_missing_path_is_loads_own_line(tmp_path):
    missing = tmp_path / "no_such_run"
    with pytest.raises(CheckpointError) as plain:
        proxima.load(missing)
    with pytest.raises(CheckpointError) as best:
        proxima.load(missing, best=True)
    assert str(best.value) == str(plain.value)


def test_load_best_expands_home(run, monkeypatch):
    monkeypatch.setenv("HOME", str(run.parent))
    policy = proxima.load(f"~/{run.name}", best=True)
    assert Path(policy.path) == run / "checkpoints" / "best.pt"


def test_load_best_of_a_run_whose_evaluations_wrote_no_best_says_drop_best_true(run, tmp_path):
    copy = tmp_path / "cartpole"
    shutil.copytree(run, copy)
    (copy / "checkpoints" / "best.pt").unlink()
    with pytest.raises(CheckpointError) as e:
        proxima.load(copy, best=True)
    assert str(e.value).startswith(f"{copy}: no checkpoints/best.pt: the run records --eval-every 64 but no evaluation wrote one")
    assert str(e.value).endswith("; drop best=True to load its newest checkpoint")
