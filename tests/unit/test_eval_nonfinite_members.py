"""A NaN an env returns while members or a run are evaluated: the line names the member and its env
(not the batched env's row), and a report says it could not evaluate instead of failing."""

from __future__ import annotations

import pytest

from proxima.guards import NonFiniteError
from proxima.population import Population, member_configs


def _nan_reward_from_row(env, row: int, at_step: int) -> None:
    """Make the batched env's ``row`` return a NaN reward at its ``at_step``-th step (1-based)."""
    step, count = env.step, [0]

    def step_with_nan(action):
        obs, reward, terminated, truncated, info = step(action)
        count[0] += 1
        if count[0] == at_step:
            reward = reward.clone()
            reward[row] = float("nan")
        return obs, reward, terminated, truncated, info

    env.step = step_with_nan


def test_a_nan_in_a_members_evaluation_names_the_member_and_its_env(small_config, monkeypatch):
    from proxima import population

    pop = Population(member_configs(small_config(), [3, 5, 8]))
    make_env = population.make_env

    def make_env_with_nan(*args, **kwargs):
        env = make_env(*args, **kwargs)
        if kwargs.get("training") is False:  # the evaluation's envs: 3 members x 4 episodes
            _nan_reward_from_row(env, row=6, at_step=3)  # member 1, its env 2
        return env

    monkeypatch.setattr(population, "make_env", make_env_with_nan)
    with pytest.raises(NonFiniteError) as e:
        pop.evaluate_members(4, [1_000_003, 1_000_005, 1_000_008])
    assert "member 1 env 2" in str(e.value), str(e.value)
    assert "CartPole-v1" in str(e.value), str(e.value)  # the check-env hint names the env


def test_a_report_of_a_run_whose_env_returns_nan_says_it_could_not_evaluate(small_config, tmp_path, monkeypatch):
    from proxima import evaluate as evaluate_module
    from proxima import train
    from proxima.report import evaluate_latest

    run_dir, _ = train(small_config(run_dir=str(tmp_path / "run"), checkpoint_every=1))
    make_env = evaluate_module.make_env

    def make_env_with_nan(*args, **kwargs):
        env = make_env(*args, **kwargs)
        _nan_reward_from_row(env, row=0, at_step=2)
        return env

    monkeypatch.setattr(evaluate_module, "make_env", make_env_with_nan)
    out = evaluate_latest(run_dir, episodes=2)
    assert set(out) == {"error"}, out
    assert out["error"].startswith("could not evaluate: non-finite reward"), out
