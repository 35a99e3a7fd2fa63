"""Review 45: which env kwargs an evaluation records with its numbers (evaluate.given_env_kwargs) and how
its line says them (evaluate.format_result)."""

from __future__ import annotations

from types import SimpleNamespace

from proxima.evaluate import format_result, given_env_kwargs

RESULT = {"env_id": "Pendulum-v1", "episodes": 2, "mean_return": -150.0, "std_return": 1.5, "deterministic": True}


def _policy(env_id="Pendulum-v1", env_kwargs=None, recorded=False, trained_on="Pendulum-v1"):
    return SimpleNamespace(env_id=env_id, env_kwargs=env_kwargs, env_kwargs_recorded=recorded,
                           config={"env_id": trained_on, "env_kwargs": {"g": 9.8}})


def test_the_line_names_the_env_kwargs_given_after_the_env_id():
    assert format_result({**RESULT, "env_kwargs": {"g": 50.0}}, step=2048) == (
        'Pendulum-v1 (env kwargs {"g": 50.0}): -150.00 +- 1.50 at step 2,048 over 2 episodes (deterministic)')
    assert format_result(RESULT).startswith("Pendulum-v1: -150.00")  # an eval.json's: the run's own env


def test_kwargs_given_are_recorded_the_runs_own_and_none_for_another_env_are_not():
    assert given_env_kwargs(_policy(env_kwargs={"g": 50.0})) == {"g": 50.0}
    assert given_env_kwargs(_policy(env_kwargs={})) == {}  # '{}' for the run's env: it ran without its recorded ones
    assert given_env_kwargs(_policy(env_kwargs={"g": 9.8}, recorded=True)) is None  # the recorded ones, as eval.json's
    assert given_env_kwargs(_policy(env_id="CartPole-v1", env_kwargs={})) is None  # another env, none given
    assert given_env_kwargs(SimpleNamespace(env_id="X", config={})) is None  # a policy of the caller's own making
