"""A population member's policy acts for a native env in the layout training gave its _dynamics
(flat: (B, prod(shape))), as a single run's does: a member's checkpoint did not record env_backend,
so ``load(member).act(obs)`` gave a NativeEnv the action space's own shape ((3, 2, 2) for
MultiDiscrete([[2, 3], [4, 2]])) and an env indexing the flat (3, 4) raised IndexError. A member
checkpoint written without it is read through its meta.json's env_backend; a checkpoint of another
env, or one whose backend is unknown or Gymnasium's, acts in the space's own shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from proxima import load, make_env
from tests.cli_helpers import TINY_POP, TINY_RUN, module_written_in, run_main

#: tests/integration/test_native_review45.py's recording env, indexing the flat layout (action[:, 3])
MODULE = '''
import gymnasium as gym, numpy as np, torch
from proxima.envs import NativeEnv

SPACES = {
    "md2": lambda: gym.spaces.MultiDiscrete([[2, 3], [4, 2]]),
    "box22": lambda: gym.spaces.Box(-1, 1, (2, 2), np.float32),
}


class Rec(NativeEnv):
    max_episode_steps = 4

    def __init__(self, num_envs, device="cpu", seed=None, space="md2"):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.single_action_space = SPACES[space]()

    def _sample_initial_state(self, n):
        return {"x": self._uniform((n, 2), -1, 1)}

    def _observe(self):
        return self.state["x"].clone()

    def _dynamics(self, action):
        reward = action[:, 3].float()
        return reward, torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
'''

#: a Gymnasium env of Rec's box22 spaces: its step takes the space's own (2, 2)
GYM_MODULE = '''
import gymnasium as gym, numpy as np


class Box22(gym.Env):
    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1, 1, (2, 2), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        assert np.shape(action) == (2, 2), np.shape(action)
        return np.zeros(2, np.float32), float(action[1, 1]), False, False, {}


gym.register("Box22Gym45b-v0", entry_point=Box22, max_episode_steps=4)
'''


@pytest.fixture
def flat(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "flat45b", MODULE)


def _member_checkpoint(run: Path) -> Path:
    return sorted((run / "m000-seed1" / "checkpoints").glob("step_*.pt"))[-1]


def _without_backend(path) -> None:
    state = torch.load(path, weights_only=False)
    del state["env_backend"]
    torch.save(state, path)


def _population(capsys, run_dir="popf", space="md2"):
    code, _, err = run_main(["train", "flat45b:Rec", "--env-kwargs", f'{{"space": "{space}"}}', "--seeds", "1,2",
                             *TINY_POP, "--total-timesteps", "64", "--run-dir", run_dir], capsys)
    assert code == 0, err
    return Path(run_dir)


def test_a_population_members_policy_acts_flat_for_its_native_env(flat, capsys):
    run = _population(capsys)
    policy = load(run / "m000-seed1", env_id="flat45b:Rec")
    env = make_env("flat45b:Rec", 3, seed=0)
    actions = policy.act(env.reset(seed=0))
    assert tuple(actions.shape) == (3, 4) and actions.dtype == torch.int64  # was (3, 2, 2): IndexError in step
    obs, reward, *_ = env.step(actions)
    assert torch.equal(reward, actions[:, 3].float())
    assert policy.env_backend == "native"
    assert torch.load(_member_checkpoint(run), weights_only=False)["env_backend"] == "native"


def test_a_member_checkpoint_without_env_backend_acts_flat_through_its_meta_json(flat, capsys):
    run = _population(capsys)
    _without_backend(_member_checkpoint(run))
    assert json.loads((run / "m000-seed1" / "meta.json").read_text())["env_backend"] == "native"
    policy = load(run / "m000-seed1", env_id="flat45b:Rec")
    assert policy.env_backend == "native"
    actions = policy.act(torch.zeros(3, 2))
    assert tuple(actions.shape) == (3, 4) and actions.dtype == torch.int64


def test_a_member_checkpoint_without_env_backend_and_a_damaged_meta_json_acts_in_the_spaces_shape(flat, capsys):
    run = _population(capsys)
    _without_backend(_member_checkpoint(run))
    (run / "m000-seed1" / "meta.json").write_text("{not json")
    policy = load(run / "m000-seed1", env_id="flat45b:Rec")
    err = capsys.readouterr().err
    assert policy.env_backend is None
    assert tuple(policy.act(torch.zeros(3, 2)).shape) == (3, 2, 2)
    lines = [line for line in err.splitlines() if "meta.json" in line]
    assert len(lines) == 1 and "env_backend" in lines[0] and "not JSON" in lines[0], err


def _single_run(capsys, run_dir="one"):
    code, _, err = run_main(["train", "flat45b:Rec", "--env-kwargs", '{"space": "box22"}', *TINY_RUN,
                             "--total-timesteps", "64", "--run-dir", run_dir], capsys)
    assert code == 0, err
    return Path(run_dir)


@pytest.fixture
def gym_env(tmp_path):
    import gymnasium as gym

    from tests.cli_helpers import imports_taken_back

    (tmp_path / "gym45b.py").write_text(GYM_MODULE)
    back = imports_taken_back("gym45b")
    next(back)
    yield
    next(back, None)
    gym.registry.pop("Box22Gym45b-v0", None)


def test_a_native_run_loaded_for_a_gymnasium_env_of_the_same_spaces_acts_in_the_spaces_shape(flat, gym_env, capsys):
    run = _single_run(capsys)
    assert load(run, env_id="flat45b:Rec").env_backend == "native"
    policy = load(run, env_id="gym45b:Box22Gym45b-v0")
    assert policy.env_backend is None
    actions = policy.act(torch.zeros(3, 2))
    assert tuple(actions.shape) == (3, 2, 2)  # the Gymnasium env's step takes the space's own shape
    env = make_env("gym45b:Box22Gym45b-v0", 3, seed=0)
    env.reset(seed=0)
    env.step(actions)  # the env asserts (2, 2) per row


@pytest.mark.parametrize("meta", ["missing", "gymnasium"])
def test_a_checkpoint_without_env_backend_whose_run_says_none_or_gymnasium_acts_in_the_spaces_shape(flat, capsys, meta):
    run = _single_run(capsys)
    path = sorted((run / "checkpoints").glob("step_*.pt"))[-1]
    _without_backend(path)
    if meta == "missing":
        (run / "meta.json").unlink()
    else:
        record = json.loads((run / "meta.json").read_text())
        (run / "meta.json").write_text(json.dumps({**record, "env_backend": "gymnasium"}))
    policy = load(path, env_id="flat45b:Rec")
    assert policy.env_backend == (None if meta == "missing" else "gymnasium")
    actions = policy.act(torch.zeros(3, 2))
    assert tuple(actions.shape) == (3, 2, 2) and actions.dtype == torch.float32


def test_eval_of_a_native_run_refuses_num_envs_in_env_kwargs_naming_episodes(flat, capsys):
    run = _single_run(capsys)
    code, out, err = run_main(["eval", str(run), "--env", "flat45b:Rec", "--env-kwargs", '{"num_envs": 3}'], capsys)
    assert code == 2, out + err
    assert err.strip().splitlines()[-1] == ("proxima eval: error: --env-kwargs: 'num_envs' of env 'flat45b:Rec' is set "
                                            "by Proxima; drop it: eval builds one env per episode: use --episodes"), err


@pytest.mark.parametrize("damage", ["deep", "fifo"])
def test_a_hostile_meta_json_is_read_as_data(flat, capsys, damage):
    """The meta.json fallback reads the run file as other run files are read: nesting past JSON's depth limit
    (a RecursionError traceback) and a FIFO (a wait forever) are each one note, the policy loads."""
    import os

    run = _population(capsys)
    _without_backend(_member_checkpoint(run))
    meta = run / "m000-seed1" / "meta.json"
    meta.unlink()
    if damage == "deep":
        meta.write_text("[" * 100_000)
    else:
        os.mkfifo(meta)
    policy = load(run / "m000-seed1", env_id="flat45b:Rec")
    lines = [line for line in capsys.readouterr().err.splitlines() if "meta.json" in line]
    assert policy.env_backend is None and len(lines) == 1 and "records no env_backend" in lines[0], lines
