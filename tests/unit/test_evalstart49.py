"""Evaluation and native env starts (round 49): evaluate's env reads no actions on the host (its
action check is off, as training's), every native env draws each env's start state together (env i's
start is the same for any num_envs), so a deterministic evaluate(episodes=k) plays the first k
episodes of episodes=10 on native envs as on Gymnasium's."""

from __future__ import annotations

import pytest
import torch

import proxima
from proxima import PPOConfig

#: one iteration of 4 envs x 16 steps, no evaluation
TINY = dict(num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, total_timesteps=64, eval_episodes=0,
            progress=False, threads=1)


@pytest.fixture(scope="module")
def cartpole_policy(tmp_path_factory):
    _, policy = proxima.train(PPOConfig(env_id="CartPole-v1", **TINY), run_dir=tmp_path_factory.mktemp("evalstart49") / "run",
                              quiet=True, evaluate_at_end=False)
    return policy


# --- 1: evaluate's env does not check its actions (a host read a step) --------------------------------------------
def test_evaluates_native_env_has_the_action_check_off_where_make_envs_has_it_on(cartpole_policy, monkeypatch):
    import proxima.evaluate as ev
    from proxima.envs import make_env

    built = []

    def spy(*args, **kwargs):
        built.append(make_eval_env(*args, **kwargs))
        return built[-1]

    make_eval_env = ev.make_eval_env
    monkeypatch.setattr(ev, "make_eval_env", spy)
    assert make_env("CartPole-v1", 2).check_actions is True
    result = ev.evaluate(cartpole_policy, episodes=2, seed=3, max_steps=20)
    assert [env.backend for env in built] == ["native"] and built[0].check_actions is False
    assert result["episodes"] == 2


def test_evaluate_never_runs_the_action_check(cartpole_policy, monkeypatch):
    from proxima.envs.base import NativeEnv

    def refuse(self, action):
        raise AssertionError("evaluate's env checked its actions")

    monkeypatch.setattr(NativeEnv, "_check_actions", refuse)
    assert len(proxima.evaluate(cartpole_policy, episodes=3, seed=3, max_steps=20)["returns"]) == 3
