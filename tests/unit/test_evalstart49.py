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


# --- 2: every native env draws each env's start together ----------------------------------------------------------
def native_ids():
    from proxima.envs import NATIVE_ENVS

    return sorted(NATIVE_ENVS)


@pytest.mark.parametrize("env_id", native_ids())
def test_a_native_envs_first_starts_are_the_same_for_2_and_5_envs(env_id):
    from proxima import make_env

    two, five = make_env(env_id, 2, seed=5).reset(), make_env(env_id, 5, seed=5).reset()
    assert torch.equal(two, five[:2])
    assert not torch.equal(two[0], two[1])  # two envs, two starts


@pytest.mark.parametrize("env_id", [i for i in native_ids() if i != "PixelQuadrant-v0"])  # no member streams
def test_a_population_members_first_starts_are_its_lone_envs_for_any_envs_per_member(env_id):
    from proxima.envs import NATIVE_ENVS

    lone = NATIVE_ENVS[env_id](2, seed=9).reset()
    for per_member in (2, 5):
        pop = NATIVE_ENVS[env_id](2 * per_member, seed=5)
        assert pop.use_member_streams([5, 9])
        assert torch.equal(pop.reset()[per_member:per_member + 2], lone)  # member 1's first two envs


def test_pixel_quadrant_draws_its_quadrants_places_and_noise_from_their_ranges():
    from proxima.envs.synthetic import PixelQuadrant

    env = PixelQuadrant(4000, seed=1)
    obs = env.reset()
    assert torch.bincount(env.state["quadrant"], minlength=4).tolist() == pytest.approx([1000] * 4, abs=120)
    bright = (obs == 255).all(-1)  # the square: 10x10 pixels of 255 (noise is 0..63)
    assert bright.sum((1, 2)).unique().tolist() == [100]
    tops, lefts = bright.any(2).float().argmax(1), bright.any(1).float().argmax(1)
    assert sorted(set(tops.tolist())) == sorted(set(lefts.tolist())) == [*range(9), *range(18, 27)]
    assert torch.equal(tops >= 18, env.state["quadrant"] >= 2) and torch.equal(lefts >= 18, env.state["quadrant"] % 2 == 1)
    noise = obs[~bright]
    assert noise.max() == 63 and torch.bincount(noise.reshape(-1).long(), minlength=64).min() > 0


# --- 3: a deterministic evaluation of k episodes plays the first k of 10 on every native env ---------------------
@pytest.fixture(scope="module")
def native_policies(tmp_path_factory):
    root = tmp_path_factory.mktemp("evalstart49_native")
    return {env_id: proxima.train(PPOConfig(env_id=env_id, **TINY), run_dir=root / env_id, quiet=True,
                                  evaluate_at_end=False)[1] for env_id in native_ids()}


@pytest.mark.parametrize("env_id", native_ids())
def test_evaluate_of_k_episodes_plays_the_first_k_of_10_on_a_native_env(env_id, native_policies, monkeypatch):
    import proxima.evaluate as ev

    starts = []

    def spy(env, obs, *args, **kwargs):
        starts.append(obs.clone())
        return first_episodes(env, obs, *args, **kwargs)

    first_episodes = ev.first_episodes
    monkeypatch.setattr(ev, "first_episodes", spy)
    policy = native_policies[env_id]
    ten = ev.evaluate(policy, episodes=10, seed=3, max_steps=200)
    assert ten["backend"] == "native"
    for k in (1, 3):
        some = ev.evaluate(policy, episodes=k, seed=3, max_steps=200)
        assert torch.equal(starts[-1], starts[0][:k])  # the same start states, bit for bit
        # the same episodes: a batch of 10 rounds the policy's matmuls apart from one of k in the last digits
        assert some["returns"] == pytest.approx(ten["returns"][:k], rel=1e-5)
        assert some["lengths"] == ten["lengths"][:k]


def test_eval_help_and_cli_doc_state_the_prefix_rule_for_native_envs(capsys, monkeypatch):
    from pathlib import Path

    from proxima import cli

    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit) as e:
        cli.main(["eval", "--help"])
    assert e.value.code == 0
    assert ("deterministic episodes are a prefix, on native envs as on Gymnasium's: --episodes 3 plays the first 3 of "
            "--episodes 10") in capsys.readouterr().out
    doc = " ".join(Path(__file__).resolve().parents[2].joinpath("docs", "cli.md").read_text().split())
    assert ("Deterministic episodes are a prefix, on the native envs as on Gymnasium's: `--episodes 3` plays the first 3 "
            "episodes of `--episodes 10`") in doc
