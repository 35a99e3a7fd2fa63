"""A NativeEnv's ``_dynamics`` gets its actions in one layout, the one training gives it (flat:
(N, prod(shape)), float32 for a Box, int64 for Discrete, MultiDiscrete and MultiBinary), from
check-env, train, eval and ``load(run).act(obs)`` then ``env.step``: check-env once gave the space's
own shape ((N, 2, 2) for MultiDiscrete([[2, 3], [4, 2]])) and dtype (float64), and Policy.act gave
(N, 2, 2), so check-env passed an env that indexed action[:, 1, 1] and crashed in training, and failed
one written for the flat layout that docs/native_envs.md describes."""

from __future__ import annotations

import sys

import pytest
import torch

from proxima import load, make_env
from tests.cli_helpers import TINY_RUN, run_main

MODULE = '''
import gymnasium as gym, numpy as np, torch
from proxima.envs import NativeEnv

SPACES = {
    "md2": lambda: gym.spaces.MultiDiscrete([[2, 3], [4, 2]]),
    "box22": lambda: gym.spaces.Box(-1, 1, (2, 2), np.float32),
    "box64": lambda: gym.spaces.Box(-1, 1, (2,), np.float64),
    "bits": lambda: gym.spaces.MultiBinary((2, 3)),
    "start": lambda: gym.spaces.Discrete(3, start=5),
}
SEEN = []  # (shape without N, dtype) of every batch _dynamics got


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
        SEEN.append((tuple(action.shape[1:]), str(action.dtype)))
        reward = action.reshape(self.num_envs, -1).float().sum(1)
        return reward, torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
'''

#: what training hands _dynamics for each space, per env: flat, int64 or float32
FLAT = {"md2": ((4,), "torch.int64"), "box22": ((4,), "torch.float32"), "box64": ((2,), "torch.float32"),
        "bits": ((6,), "torch.int64"), "start": ((), "torch.int64")}


@pytest.fixture
def rec(tmp_path, monkeypatch):
    (tmp_path / "rec45.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import rec45

    yield rec45
    sys.modules.pop("rec45", None)


def _seen(rec, clear=True) -> set:
    seen = set(rec.SEEN)
    if clear:
        rec.SEEN.clear()
    return seen


@pytest.mark.parametrize("space", list(FLAT))
def test_check_env_train_eval_and_policy_act_give_dynamics_one_layout(rec, tmp_path, capsys, space):
    kwargs = ["--env-kwargs", f'{{"space": "{space}"}}']
    code, out, err = run_main(["check-env", "rec45:Rec", *kwargs], capsys)
    assert code == 0 and "OK: rec45:Rec passes" in out, out + err
    assert _seen(rec) == {FLAT[space]}  # was (2, 2) int64 for md2, (2, 2) float32 for box22, float64, (2, 3) int8

    run = tmp_path / "run"
    code, _, err = run_main(["train", "rec45:Rec", *kwargs, *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run)],
                            capsys)
    assert code == 0, err
    assert _seen(rec) == {FLAT[space]}

    code, out, err = run_main(["eval", str(run), "--env", "rec45:Rec", "--episodes", "2"], capsys)
    assert code == 0, out + err
    assert _seen(rec) == {FLAT[space]}

    policy = load(run, env_id="rec45:Rec")
    env = make_env("rec45:Rec", 3, seed=0, env_kwargs={"space": space})
    actions = policy.act(env.reset(seed=0))
    assert (tuple(actions.shape[1:]), str(actions.dtype)) == FLAT[space]  # was (3, 2, 2) for md2 and box22
    env.step(actions)
    assert _seen(rec) == {FLAT[space]}
    if space == "start":  # the space's values, as training gives them: the start added
        assert set(actions.tolist()) <= {5, 6, 7}


def test_check_env_fails_an_env_that_indexes_the_spaces_own_shape(rec, capsys):
    """An env written for (N, 2, 2) fails check-env (it passed, then crashed in training), one written
    for the flat (N, 4) passes (it failed)."""
    nested = MODULE.replace("reward = action.reshape(self.num_envs, -1).float().sum(1)",
                            "reward = action[:, 1, 1].float()")
    flat = MODULE.replace("reward = action.reshape(self.num_envs, -1).float().sum(1)", "reward = action[:, 3].float()")
    from pathlib import Path

    Path("nested45.py").write_text(nested)
    Path("flat45.py").write_text(flat)
    try:
        code, out, err = run_main(["check-env", "nested45:Rec"], capsys)
        assert code == 1, out + err
        assert "FAIL step: expected step() does not raise; got IndexError: too many indices" in out, out
        code, out, err = run_main(["check-env", "flat45:Rec"], capsys)
        assert code == 0 and "OK: flat45:Rec passes" in out, out + err
    finally:
        sys.modules.pop("nested45", None)
        sys.modules.pop("flat45", None)


def test_trained_policy_acts_in_the_same_flat_layout(rec, tmp_path):
    from proxima import PPOConfig, train

    cfg = PPOConfig(env_id="rec45:Rec", env_kwargs={"space": "box22"}, total_timesteps=64, num_envs=4, num_steps=16,
                    num_minibatches=2, update_epochs=1, eval_episodes=0, progress=False, run_dir=str(tmp_path / "py"))
    _, trained = train(cfg)
    actions = trained.act(torch.zeros(3, 2))
    assert tuple(actions.shape) == (3, 4) and actions.dtype == torch.float32
    assert float(actions.abs().max()) <= 1.0
