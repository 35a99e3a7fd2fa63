"""A CleanRL user's make_env trained as it is (review 45): the end-of-run eval, eval.json, `proxima eval` and
`proxima resume` say that the env's own NormalizeObservation restarted its statistics; an async run of a factory
with TransformObservation's lambdas reads its time limit without pickling the spec (no worker traceback); and
docs/migrating.md's LunarLander entry trains SB3's step count."""

import json
import re
from pathlib import Path

import pytest

from tests.cli_helpers import module_written_in, run_main

ROOT = Path(__file__).resolve().parents[2]

FACTORIES = '''
import gymnasium as gym
import numpy as np


def make_cont(**kwargs):  # CleanRL's ppo_continuous_action.py stack
    env = gym.make("Pendulum-v1", **kwargs)
    env = gym.wrappers.FlattenObservation(env)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = gym.wrappers.ClipAction(env)
    env = gym.wrappers.NormalizeObservation(env)
    env = gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10), env.observation_space)
    env = gym.wrappers.NormalizeReward(env, gamma=0.99)
    env = gym.wrappers.TransformReward(env, lambda reward: np.clip(reward, -10, 10))
    return env


def make_plain(**kwargs):
    return gym.wrappers.RecordEpisodeStatistics(gym.make("Pendulum-v1", **kwargs))
'''

TINY = ["--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
        "--no-progress", "--eval-episodes", "2"]
NOTE = "(the env's own NormalizeObservation restarted its statistics: see docs/migrating.md#bring-your-make_env)"


@pytest.fixture
def factories(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "cleanrl_mig45i", FACTORIES)


def _eval_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("eval "))


def test_eval_of_an_env_with_its_own_normalize_observation_says_it_restarted(factories, tmp_path, capsys):
    run = tmp_path / "r"
    code, out, err = run_main(["train", "cleanrl_mig45i:make_cont", *TINY, "--total-timesteps", "128", "--run-dir", str(run)],
                              capsys)
    assert code == 0, err
    assert _eval_line(out).endswith(f"over 2 episodes (deterministic) {NOTE}")
    assert json.loads((run / "eval.json").read_text())["env_normalizer_restarted"] is True
    code, out, err = run_main(["eval", str(run), "--env", "cleanrl_mig45i:make_cont", "--episodes", "2"], capsys)
    assert code == 0, err
    assert out.splitlines()[0].endswith(NOTE)
    code, out, err = run_main(["eval", str(run), "--env", "cleanrl_mig45i:make_cont", "--episodes", "2", "--json"], capsys)
    assert code == 0 and json.loads(out)["env_normalizer_restarted"] is True
    code, out, err = run_main(["resume", "--env", "cleanrl_mig45i:make_cont", str(run), "--total-timesteps", "256"], capsys)
    assert code == 0, err
    assert ("proxima: note: the statistics of the env's own gymnasium.wrappers.NormalizeReward and "
            "gymnasium.wrappers.NormalizeObservation restart with this resume (no checkpoint holds them): the run meets "
            "observations normalized and rewards scaled otherwise than before the stop until they settle\n") in err
    assert _eval_line(out).endswith(NOTE)


def test_eval_of_an_env_without_normalize_wrappers_says_nothing(factories, tmp_path, capsys):
    run = tmp_path / "r"
    code, out, err = run_main(["train", "cleanrl_mig45i:make_plain", *TINY, "--total-timesteps", "128", "--run-dir", str(run)],
                              capsys)
    assert code == 0, err
    assert _eval_line(out).endswith("over 2 episodes (deterministic)")
    assert "env_normalizer_restarted" not in json.loads((run / "eval.json").read_text())
    code, out, err = run_main(["resume", "--env", "cleanrl_mig45i:make_plain", str(run), "--total-timesteps", "256"], capsys)
    assert code == 0 and "restart with this resume" not in err, err


def test_an_async_run_of_a_factory_with_lambdas_reads_its_time_limit_without_a_worker_traceback(factories, tmp_path, capfd):
    import warnings

    from proxima.envs.gym_adapter import GymnasiumEnv
    from proxima.trainer import _built_env_limit

    env = GymnasiumEnv("cleanrl_mig45i:make_cont", 2, vector="async")
    try:
        with warnings.catch_warnings(record=True) as caught:  # Gymnasium reports a worker's error as a UserWarning
            warnings.simplefilter("always")
            limit = _built_env_limit(env)
    finally:
        env.close()
    said = [str(w.message) for w in caught] + [capfd.readouterr().err]
    assert not any("Traceback" in text or "pickle" in text for text in said), said
    assert limit == 200  # Pendulum-v1's TimeLimit, read in this process
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = run_main(["train", "cleanrl_mig45i:make_cont", *TINY, "--vector", "async", "--norm-obs", "--total-timesteps",
                         "128", "--run-dir", str(tmp_path / "r")], capfd)[0]
    said = [str(w.message) for w in caught] + [capfd.readouterr().err]
    assert code == 0 and not any("Traceback" in text or "pickle" in text for text in said), said


def test_migrating_mds_lunarlander_entry_trains_sb3s_step_count(tmp_path, capsys):
    pytest.importorskip("Box2D")  # the dry run builds LunarLander-v3 to read its spaces (the box2d extra)
    text = (ROOT / "docs" / "migrating.md").read_text()
    entry = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    (tmp_path / "ll.yml").write_text(entry)
    code, out, err = run_main(["train", "--preset", "none", "--config", str(tmp_path / "ll.yml"), "--dry-run"], capsys)
    assert code == 0, err
    assert "\ntotal_timesteps: 1015808\n" in out
    assert "rounds" not in err and "999,424" not in err + out, err  # 62 whole rollouts of 16,384, as SB3 trains
